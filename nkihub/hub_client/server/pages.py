"""The Hub in a browser: server-rendered HTML pages beside the API, at the Hugging Face Hub's URLs.

    /                                   every repo, with a search box (?q=, ?type=)
    /kernels  /models  /datasets        the repos of one type;  /{org}: one organization's
    /{prefix}{org}/{name}               a repo: card, versions, variants and signatures, benchmarks, tuned configs
    /{prefix}{org}/{name}/tree/{rev}/{path}   files at a revision
    /{prefix}{org}/{name}/blob/{rev}/{path}   one file (text shown, other files offered for download)
    /{prefix}{org}/{name}/commits/{rev}       the history of a branch;  .../commit/{oid}: one commit

``{prefix}`` is ``kernels/``, ``datasets/``, ``spaces/`` or nothing for models, as on the Hub, so the
``url`` huggingface_hub returns for a repo opens its page. None of these collide with the API
(``/api/...``, ``.../resolve/...``, ``....git/info/lfs/...``). Pages are GET only and need no token;
a private repo is shown only to a request carrying the server's token (on a server without a token,
which lets anyone write, to anyone). Every value is escaped by Jinja2's autoescape, the README is
sanitised (:mod:`card_html`), and the Content-Security-Policy allows no script at all.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import posixpath
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from .. import paths as P
from ..storage import EntryNotFound, RepoNotFound, StorageError
from . import card_html, overview as O

TEMPLATES = Path(__file__).parent / "templates"
PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/", "kernel": "kernels/"}
TYPE_INDEXES = {"models": "model", "datasets": "dataset", "spaces": "space", "kernels": "kernel"}
ACTIONS = ("tree", "blob", "commits", "commit")
TEXT_LIMIT = 1 << 20  # larger files are offered for download, not shown
IMAGES = (".png", ".jpg", ".jpeg", ".gif", ".webp")


# ---- routing ----------------------------------------------------------------------------------------
def route(segs: list[str], repo_type: str | None):
    """The page view for a GET path (segments after the type prefix), or None if it is no page.

    ``repo_type`` is the type the prefix named, or None when the path had no prefix."""
    while segs and segs[-1] == "":
        segs = segs[:-1]
    if not segs:
        return lambda cfg, req: index(cfg, req, repo_type, None)
    if len(segs) == 1:
        if repo_type is None and segs[0] in TYPE_INDEXES:
            return lambda cfg, req: index(cfg, req, TYPE_INDEXES[segs[0]], None)
        org = P.check_repo_id(f"{segs[0]}/x").split("/")[0]
        return lambda cfg, req: index(cfg, req, repo_type, org)
    kind = repo_type or "model"
    repo_id = P.check_repo_id(f"{segs[0]}/{segs[1]}")
    rest = segs[2:]
    if not rest:
        return lambda cfg, req: repo_page(cfg, req, kind, repo_id)
    if rest[0] not in ACTIONS or len(rest) < 2:
        return None
    rev = P.check_revision(rest[1])
    path = "/".join(rest[2:])
    if path:
        P.check_path(path)
    if rest[0] == "tree":
        return lambda cfg, req: tree_page(cfg, req, kind, repo_id, rev, path)
    if rest[0] == "blob" and path:
        return lambda cfg, req: blob_page(cfg, req, kind, repo_id, rev, path)
    if rest[0] == "commits" and not path:
        return lambda cfg, req: commits_page(cfg, req, kind, repo_id, rev)
    if rest[0] == "commit" and not path and P.COMMIT_RE.match(rev):
        return lambda cfg, req: commit_page(cfg, req, kind, repo_id, rev)
    return None


def respond(cfg, request: Request, segs: list[str], repo_type: str | None) -> Response | None:
    """The page for a GET path (see :func:`route`), or None when the path is no page. Name and storage
    errors become an HTML error page with their status."""
    try:
        view = route(segs, repo_type)
        return None if view is None else view(cfg, request)
    except StorageError as e:
        return _error(request, e.status, str(e))
    except ValueError as e:  # InvalidNameError among them, and a query parameter that is not a number
        return _error(request, 400, str(e))


# ---- rendering --------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _env():
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(size=human_size, date=short_date, q=lambda s: quote(str(s), safe=""),
                       qpath=lambda s: quote(str(s), safe="/"))
    env.globals.update(prefix=PREFIX)
    return env


@lru_cache(maxsize=1)
def _css() -> tuple[str, str]:
    css = (TEMPLATES / "hub.css").read_text()
    return css, "sha256-" + base64.b64encode(hashlib.sha256(css.encode()).digest()).decode()


def headers() -> dict:
    """Security headers of every page: no script may run, nothing may frame the page."""
    return {"Content-Security-Policy": f"default-src 'none'; style-src '{_css()[1]}'; img-src 'self' data:; "
                                       "form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
            "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}


def _html(request: Request, template: str, http_status: int = 200, **context) -> Response:
    from markupsafe import Markup

    root = request.scope.get("root_path", "").rstrip("/")
    text = _env().get_template(template).render(root=root, css=Markup(_css()[0]),
                                                q=request.query_params.get("q", ""), **context)
    return HTMLResponse(text, status_code=http_status, headers=headers())


def _error(request: Request, status: int, message: str) -> Response:
    return _html(request, "error.html.j2", status, code=status, message=message)


def human_size(n) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def short_date(iso: str) -> str:
    try:
        return datetime.fromisoformat(str(iso).replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return str(iso)


# ---- access ---------------------------------------------------------------------------------------
def authorized(cfg, request: Request) -> bool:
    """Does the request carry the server's token (always true on a server without one)?"""
    if cfg.token is None:
        return True
    got = request.headers.get("authorization", "").encode("latin-1", "replace")
    scheme, _, value = got.partition(b" ")
    return scheme.lower() == b"bearer" and hmac.compare_digest(value.strip(), cfg.token.encode("utf-8"))


def _readable(cfg, request: Request, repo_type: str, repo_id: str) -> dict:
    meta = cfg.storage.repo_meta(repo_type, repo_id)
    if meta.get("private") and not authorized(cfg, request):
        raise RepoNotFound(f"{repo_type} repository {repo_id} not found")  # as the Hub says it: no hint it exists
    return meta


# ---- views ----------------------------------------------------------------------------------------
def summary(cfg, repo_type: str, repo_id: str) -> dict:
    """One row of the index: org, latest version, variants, signature badge, description."""
    st = cfg.storage
    meta = st.repo_meta(repo_type, repo_id)
    branches, tags = O.versions(st, repo_type, repo_id)
    head = st.resolve(repo_type, repo_id, O.default_revision(branches))
    variants = [O.variant_view(st, head, repo_id, v, cfg.trusted_keys) for v in O.variant_names(head)]
    level, trust = O.trust_summary(variants)
    readme, _ = O.read_small(st, head.files.get("README.md"), TEXT_LIMIT)
    card = card_html.render(readme.decode("utf-8", "replace")) if readme else None
    return {"type": repo_type, "id": repo_id, "org": repo_id.split("/")[0], "private": meta.get("private", False),
            "latest": O.latest_version(branches, tags, head), "commit": head.id, "date": head.date,
            "variants": [v.name for v in variants], "trust_level": level, "trust": trust,
            "description": card.description if card else "", "title": card.title if card else ""}


def index(cfg, request: Request, repo_type: str | None, org: str | None) -> Response:
    q = request.query_params.get("q", "").strip()
    wanted = request.query_params.get("type") or repo_type
    if wanted and wanted not in PREFIX:
        wanted = TYPE_INDEXES.get(wanted)
    see_private = authorized(cfg, request)
    rows, total = [], 0
    for t, rid in cfg.storage.list_repos():
        try:
            if cfg.storage.repo_meta(t, rid).get("private") and not see_private:
                continue
            total += 1
            if (wanted and t != wanted) or (org and rid.split("/")[0] != org):
                continue
            row = summary(cfg, t, rid)
        except StorageError:  # a repo removed while listing
            continue
        text = f"{rid} {row['title']} {row['description']}".lower()
        if q and not all(word in text for word in q.lower().split()):
            continue
        rows.append(row)
    order = {t: i for i, t in enumerate(("kernel", "model", "dataset", "space"))}  # kernels first: what this Hub is for
    rows.sort(key=lambda r: (order[r["type"]], r["id"].lower()))
    return _html(request, "index.html.j2", rows=rows, type=wanted, org=org, query=q, total=total)


def repo_page(cfg, request: Request, repo_type: str, repo_id: str) -> Response:
    st = cfg.storage
    meta = _readable(cfg, request, repo_type, repo_id)
    branches, tags = O.versions(st, repo_type, repo_id)
    default = O.default_revision(branches)
    revision = P.check_revision(request.query_params.get("revision") or default)
    commit = st.resolve(repo_type, repo_id, revision)
    names = O.variant_names(commit)
    variants = [O.variant_view(st, commit, repo_id, v, cfg.trusted_keys) for v in names]
    level, trust = O.trust_summary(variants)
    url = f"/{PREFIX[repo_type]}{repo_id}"
    readme, why = O.read_small(st, commit.files.get("README.md"), TEXT_LIMIT)
    card = card_html.render(readme.decode("utf-8", "replace"), request.scope.get("root_path", "").rstrip("/"),
                            url, revision) if readme else None
    images = [p for p in sorted(commit.files) if p.lower().endswith(IMAGES) and not p.startswith("build/")]
    return _html(request, "repo.html.j2", type=repo_type, id=repo_id, url=url, meta=meta, revision=revision,
                 commit=commit, branches=branches, tags=tags, variants=variants, trust_level=level, trust=trust,
                 latest=O.latest_version(branches, tags, st.resolve(repo_type, repo_id, default)), default=default,
                 card=card, readme_problem=why if commit.files.get("README.md") and not readme else "",
                 tuned=O.tuned_configs(st, commit, names), images=images, n_files=len(commit.files))


def tree_page(cfg, request: Request, repo_type: str, repo_id: str, revision: str, path: str) -> Response:
    from .views import tree_entries

    _readable(cfg, request, repo_type, repo_id)
    commit = cfg.storage.resolve(repo_type, repo_id, revision)
    entries = tree_entries(commit, path, recursive=False)
    if path in commit.files:  # a file asked for as a folder: show the file
        return blob_page(cfg, request, repo_type, repo_id, revision, path)
    branches, tags = O.versions(cfg.storage, repo_type, repo_id)
    return _html(request, "tree.html.j2", type=repo_type, id=repo_id, url=f"/{PREFIX[repo_type]}{repo_id}",
                 revision=revision, commit=commit, path=path, entries=entries, crumbs=_crumbs(path),
                 branches=branches, tags=tags)


def blob_page(cfg, request: Request, repo_type: str, repo_id: str, revision: str, path: str) -> Response:
    st = cfg.storage
    _readable(cfg, request, repo_type, repo_id)
    commit = st.resolve(repo_type, repo_id, revision)
    e = commit.files.get(path)
    if e is None:
        raise EntryNotFound(f"{path} not found in {repo_id} at {revision}")
    damage = st.blob_damage(e)
    text, reason = None, ""
    if damage:
        reason = f"The stored content of this file is corrupt on the server: {damage}. Downloads of it fail."
    elif e.size > TEXT_LIMIT:
        reason = f"This file is {human_size(e.size)}, too large to show here."
    else:
        with st.open_blob(e.sha256) as f:
            data = f.read()
        try:
            text = data.decode("utf-8") if b"\x00" not in data else None
        except UnicodeDecodeError:
            text = None
        if text is None:
            reason = "This file is not UTF-8 text."
    file_status = None
    parts = path.split("/")
    if parts[0] == "build" and len(parts) > 2:
        variant = O.variant_view(st, commit, repo_id, parts[1], cfg.trusted_keys)
        row = next((r for r in variant.files if r.path == path), None)
        file_status = {"variant": variant, "row": row}
    return _html(request, "blob.html.j2", type=repo_type, id=repo_id, url=f"/{PREFIX[repo_type]}{repo_id}",
                 revision=revision, commit=commit, path=path, entry=e, text=text, reason=reason,
                 crumbs=_crumbs(path), file_status=file_status, image=path.lower().endswith(IMAGES) and not damage)


def commits_page(cfg, request: Request, repo_type: str, repo_id: str, revision: str) -> Response:
    st = cfg.storage
    _readable(cfg, request, repo_type, repo_id)
    start = max(0, int(request.query_params.get("p", "0") or 0))
    per_page = 50
    commits, more = [], False
    for i, c in enumerate(st.log(repo_type, repo_id, revision)):
        if i >= start + per_page:
            more = True
            break
        if i >= start:
            commits.append(c)
    branches, tags = O.versions(st, repo_type, repo_id)
    labels: dict[str, list] = {}
    for r in branches + tags:
        labels.setdefault(r.commit, []).append(r)
    return _html(request, "commits.html.j2", type=repo_type, id=repo_id, url=f"/{PREFIX[repo_type]}{repo_id}",
                 revision=revision, commits=commits, labels=labels, start=start, more=more, per_page=per_page,
                 branches=branches)


def commit_page(cfg, request: Request, repo_type: str, repo_id: str, oid: str) -> Response:
    st = cfg.storage
    _readable(cfg, request, repo_type, repo_id)
    c = st.read_commit(repo_type, repo_id, oid)
    before = st.read_commit(repo_type, repo_id, c.parents[0]).files if c.parents else {}
    changes = []
    for p in sorted(set(before) | set(c.files)):
        old, new = before.get(p), c.files.get(p)
        if old != new:
            kind = "added" if old is None else "deleted" if new is None else "modified"
            changes.append({"kind": kind, "path": p, "size": (new or old).size})
    return _html(request, "commit.html.j2", type=repo_type, id=repo_id, url=f"/{PREFIX[repo_type]}{repo_id}",
                 commit=c, changes=changes)


def _crumbs(path: str) -> list[tuple[str, str]]:
    parts = path.split("/") if path else []
    return [(p, posixpath.join(*parts[:i + 1])) for i, p in enumerate(parts)]
