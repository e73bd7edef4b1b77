"""What the Hub's pages say about a repo, gathered from storage: versions, variants, files, signatures.

Data only (frozen dataclasses); :mod:`pages` renders it. A kernel repo is read in the Hugging Face
kernel layout (``build/<variant>/`` with its ``metadata.json``, ``signatures/<variant>.json``) without
importing anything of ``nkihub.kernels``: the digests and the signature are checked here, on the Hub's
records and on the bytes it stores, by the rules a load applies (``kernels.verify`` and
``kernels.signing``), so a page shows before anyone downloads what a load would refuse. Signatures are
read through :mod:`hub_client.signing`'s public functions only.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from .. import signing
from ..digest import hex_to_b64
from ..storage import Commit, FileEntry, Storage

VERSION_BRANCH = re.compile(r"^v(\d+)$")
VERSION_TAG = re.compile(r"^v(\d+)\.(\d+)\.(\d+)(.*)$")
# files of a variant that metadata.json does not list (kernels.verify: IGNORED and bytecode)
UNLISTED_OK = ("metadata.json", "metadata.json.sigstore")
MAX_JSON = 4 << 20  # a metadata, signature or tuned file larger than this is not parsed for a page

# levels, worst last: what a badge's colour says
GOOD, INFO, WARN, BAD = "good", "info", "warn", "bad"
_RANK = {GOOD: 0, INFO: 1, WARN: 2, BAD: 3}


def worst(levels, default: str = INFO) -> str:
    levels = list(levels)
    return max(levels, key=_RANK.__getitem__) if levels else default


@dataclass(frozen=True)
class Ref:
    kind: str  # "branch" or "tag"
    name: str
    commit: str
    date: str
    title: str
    message: str = ""  # a tag's own message


@dataclass(frozen=True)
class FileRow:
    path: str  # in the repo
    rel: str  # in the variant
    size: int
    sha256: str
    oid: str
    level: str
    note: str  # "" when the file is what metadata.json and the signature say


@dataclass(frozen=True)
class SignatureView:
    level: str
    summary: str  # one line for a person
    key_id: str = ""
    trusted: bool = False
    covers: str = ""  # what the statement names: repo, variant, how many files
    fields: tuple = ()  # other statement fields, (name, value) for display
    problems: tuple = ()
    files: tuple = ()  # (path in the variant, "altered" / "missing" / "not covered") where files and statement differ


@dataclass(frozen=True)
class VariantView:
    name: str
    backend: str
    version: str
    files: tuple  # FileRow
    signature: SignatureView
    problems: tuple  # what is wrong outside the signature (metadata.json digests, stored bytes)

    @property
    def level(self) -> str:
        return worst([self.signature.level] + [f.level for f in self.files], GOOD)


def read_small(st: Storage, e: FileEntry | None, limit: int = MAX_JSON) -> tuple[bytes | None, str]:
    """The stored bytes of ``e`` if they are what the record says: ``(data, "")``, else ``(None, why)``."""
    if e is None:
        return None, "absent"
    if e.size > limit:
        return None, f"{e.size} bytes, more than a page reads"
    with st.open_blob(e.sha256) as f:
        data = f.read(limit + 1)
    if hashlib.sha256(data).hexdigest() != e.sha256:
        return None, "its stored content is corrupt on the server"
    return data, ""


def read_json(st: Storage, e: FileEntry | None) -> tuple[object, str]:
    data, why = read_small(st, e)
    if data is None:
        return None, why
    try:
        return json.loads(data), ""
    except ValueError as err:
        return None, f"not valid JSON ({err})"


def compare(expected: dict, actual: dict, unlisted_ok=()) -> dict[str, str]:
    """Paths whose digest differs between two ``path -> base64 sha256`` maps: ``altered``, ``missing``
    (expected, absent) or ``unlisted`` (present, not expected)."""
    out = {}
    for rel in sorted(set(expected) | set(actual)):
        if rel not in actual:
            out[rel] = "missing"
        elif rel not in expected:
            if rel not in unlisted_ok:
                out[rel] = "unlisted"
        elif expected[rel] != actual[rel]:
            out[rel] = "altered"
    return out


def _bytecode(rel: str) -> bool:
    return "__pycache__" in rel.split("/") or rel.endswith((".pyc", ".pyo"))


# ---- versions -------------------------------------------------------------------------------------
def version_key(name: str) -> tuple:
    m = VERSION_TAG.match(name)
    return (int(m[1]), int(m[2]), int(m[3]), m[4]) if m else (-1, -1, -1, name)


def versions(st: Storage, repo_type: str, repo_id: str) -> tuple[list[Ref], list[Ref]]:
    """Branches (main first, then ``vN`` newest first, then the rest) and tags (newest version first)."""
    refs = st.refs(repo_type, repo_id)

    def ref(kind, name, oid, message=""):
        c = st.read_commit(repo_type, repo_id, oid)
        return Ref(kind, name, c.id, c.date, c.title, message)

    def branch_key(name):
        m = VERSION_BRANCH.match(name)
        return (0, 0, "") if name == "main" else (1, -int(m[1]), "") if m else (2, 0, name)

    branches = [ref("branch", n, o) for n, o in sorted(refs["branches"].items(), key=lambda kv: branch_key(kv[0]))]
    tags = [ref("tag", n, t["commit"], t.get("message", "")) for n, t in refs["tags"].items()]
    tags.sort(key=lambda r: version_key(r.name), reverse=True)
    return branches, tags


def default_revision(branches: list[Ref]) -> str:
    """What a page shows first: the newest ``vN`` branch where there is one (what a load without a version
    gets, Hugging Face kernels' rule), else ``main``. A Hub that moved ``v1`` alone is shown as loads see it."""
    vn = [b.name for b in branches if VERSION_BRANCH.match(b.name)]  # already newest first
    return vn[0] if vn else "main"


def latest_version(branches: list[Ref], tags: list[Ref], head: Commit) -> str:
    """The newest version tag on ``head``, else the newest ``vN`` branch there, else ``main``."""
    at_head = [t.name for t in tags if t.commit == head.id and VERSION_TAG.match(t.name)]
    if at_head:
        return max(at_head, key=version_key)
    vn = [b.name for b in branches if b.commit == head.id and VERSION_BRANCH.match(b.name)]
    return vn[0] if vn else "main"


# ---- variants and signatures -------------------------------------------------------------------------
def variant_names(commit: Commit) -> list[str]:
    return sorted({p.split("/")[1] for p in commit.files if p.startswith("build/") and p.count("/") >= 2})


def variant_view(st: Storage, commit: Commit, repo_id: str, variant: str, trusted_keys: dict) -> VariantView:
    prefix = f"build/{variant}/"
    entries = {p[len(prefix):]: e for p, e in commit.files.items() if p.startswith(prefix) and not _bytecode(p)}
    actual = {rel: hex_to_b64(e.sha256) for rel, e in entries.items()}
    meta, why = read_json(st, entries.get("metadata.json"))
    problems, notes = [], {}
    digest = meta.get("digest") if isinstance(meta, dict) else None
    if meta is None:
        problems.append(f"metadata.json: {why}")
    elif not (isinstance(digest, dict) and digest.get("algorithm") == "sha256" and isinstance(digest.get("files"), dict)):
        problems.append("metadata.json records no sha256 digests: its files cannot be checked")
    else:
        for rel, state in compare(digest["files"], actual, UNLISTED_OK).items():
            notes[rel] = [f"{state}: {'not in' if state == 'unlisted' else 'differs from'} metadata.json"
                          if state != "missing" else "missing: metadata.json lists it"]
        if notes:
            problems.append(f"{len(notes)} file(s) differ from metadata.json's digests")
    sig = signature_view(st, commit, repo_id, variant, actual, trusted_keys)
    for rel, state in sig.files:
        said = {"altered": f"altered since key {sig.key_id} signed it", "missing": f"missing: key {sig.key_id} signed it",
                "not covered": f"not covered by key {sig.key_id}'s signature"}[state]
        notes.setdefault(rel, []).append(said)
    rows = []
    for rel in sorted(set(entries) | {r for r in notes if r not in entries}):
        e = entries.get(rel)
        note = list(notes.get(rel, ()))
        damage = st.blob_damage(e) if e is not None else None
        if damage:
            note.append(f"corrupt on the server: {damage}")
        rows.append(FileRow(prefix + rel, rel, e.size if e else 0, e.sha256 if e else "", e.oid if e else "",
                            BAD if note else GOOD, "; ".join(note)))
    if any(r.note.startswith("corrupt") or "; corrupt" in r.note for r in rows):
        problems.append("stored content of some files is corrupt on the server (downloads of them fail)")
    backend = meta.get("backend", {}).get("type", "") if isinstance(meta, dict) and isinstance(meta.get("backend"), dict) else ""
    version = ""
    if isinstance(meta, dict):
        extra = meta.get("nkihub") if isinstance(meta.get("nkihub"), dict) else {}
        version = str(extra.get("package-version") or meta.get("version") or "")
    return VariantView(variant, str(backend), version, tuple(rows), sig, tuple(problems))


def signature_view(st: Storage, commit: Commit, repo_id: str, variant: str, actual: dict,
                   trusted_keys: dict) -> SignatureView:
    """What ``signatures/<variant>.json`` says about the variant's files (``actual``: path -> base64 sha256)."""
    org = repo_id.split("/", 1)[0]
    trusted = tuple(trusted_keys.get(org, ()))
    entry = commit.files.get(f"signatures/{variant}.json")
    if entry is None:
        return SignatureView(WARN, "not signed")
    data, why = read_small(st, entry)
    if data is None:
        return SignatureView(BAD, f"signature document unusable: {why}", problems=(why,))
    try:
        doc = signing.read_document(data)
        kid = signing.key_id(doc["key"])
    except (signing.SignatureError, ValueError) as e:
        return SignatureView(BAD, f"unreadable signature: {e}", problems=(str(e),))
    statement = doc["statement"]
    signed = statement["files"]
    problems = []
    try:
        signing.verify(doc)
    except signing.SignatureError as e:
        problems.append(str(e))
    if (statement.get("repo_id"), statement.get("variant")) != (repo_id, variant):
        problems.append(f"made for {statement.get('repo_id')} ({statement.get('variant')}), not for this repo")
    diff = {rel: "not covered" if s == "unlisted" else s for rel, s in compare(signed, actual).items()}
    if diff:
        problems.append(f"files differ from what key {kid} signed: " + ", ".join(f"{rel} ({s})" for rel, s in diff.items()))
    covers = f"{statement.get('repo_id')} ({statement.get('variant')}): {len(signed)} files, metadata.json included" \
        if "metadata.json" in signed else f"{statement.get('repo_id')} ({statement.get('variant')}): {len(signed)} files"
    fields = tuple((k, _short(v)) for k, v in sorted(statement.items()) if k not in ("repo_id", "variant", "files", "format"))
    is_trusted = doc["key"] in trusted
    expired = _expired(statement.get("expires"))
    if problems:
        summary, level = f"signature by {kid} INVALID", BAD
    elif is_trusted and expired:  # a frozen Hub may be serving an old build as current
        summary, level = f"signed by {kid}, a key trusted for {org!r}; expired {expired}", WARN
    elif is_trusted:
        summary, level = f"signed by {kid}, a key trusted for {org!r}", GOOD
    else:
        where = f"this Hub trusts {', '.join(signing.key_id(k) for k in trusted)} for {org!r}" if trusted \
            else f"this Hub trusts no key for {org!r}"
        summary, level = f"signed by {kid}, a key not trusted ({where})", WARN
    return SignatureView(level, summary, kid, is_trusted, covers, fields, tuple(problems), tuple(diff.items()))


def _short(value) -> str:
    """A statement field for a person: a map by its keys (a release by its variants), null as none."""
    if value is None:
        return "none"
    text = value if isinstance(value, str) else ", ".join(map(str, value)) if isinstance(value, dict) \
        else json.dumps(value, sort_keys=True)
    return text if len(text) <= 200 else text[:200] + "..."


def _expired(value) -> str:
    """The expiry time if a statement's ``expires`` is in the past, else ``""``."""
    from datetime import datetime, timezone

    if not isinstance(value, str):
        return ""
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return ""
    when = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    return value if when < datetime.now(timezone.utc) else ""


def trust_summary(variants: list[VariantView]) -> tuple[str, str]:
    """One badge for a repo: ``(level, text)`` over its variants' signatures and files."""
    if not variants:
        return INFO, ""
    sigs = [v.signature for v in variants]
    if any(v.level == BAD for v in variants):
        bad = [v.name for v in variants if v.level == BAD]
        return BAD, f"tampered or invalid ({', '.join(bad)})"
    if all(s.level == GOOD for s in sigs):
        return GOOD, "signed, trusted key"
    if all(s.summary == "not signed" for s in sigs):
        return WARN, "unsigned"
    if all(s.key_id for s in sigs):
        return WARN, "signed, key not trusted"
    return WARN, "partly signed"


# ---- tuned configs ------------------------------------------------------------------------------------
def tuned_configs(st: Storage, commit: Commit, variants: list[str]) -> dict[str, list[dict]]:
    """Target -> rows (kernel, shapes, config, estimate, default, speedup) from the first variant's
    ``<package>/tuned.json`` (``nki.autotune`` results; every variant carries the same file)."""
    for variant in variants:
        found = sorted(p for p in commit.files if p.startswith(f"build/{variant}/") and p.endswith("/tuned.json")
                       and p.count("/") == 3)
        if found:
            data, _ = read_json(st, commit.files[found[0]])
            return _tuned_rows(data) if isinstance(data, dict) else {}
    return {}


def _tuned_rows(data: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    kernels = data.get("kernels")
    for name, entries in (kernels.items() if isinstance(kernels, dict) else ()):
        for e in entries if isinstance(entries, list) else ():
            if not isinstance(e, dict):
                continue
            try:
                shapes = ", ".join("x".join(map(str, s)) + f" {d}" for s, d in e.get("tensors", []))
                est, default = float(e["estimate_us"]), e.get("default_us")
                config = ", ".join(f"{k}={v!r}" for k, v in dict(e.get("config", {})).items())
            except (KeyError, TypeError, ValueError):
                continue
            speed = f"{float(default) / est:.2f}x" if default and est else ""
            out.setdefault(str(e.get("target", "?")), []).append(
                {"kernel": str(name), "shapes": shapes, "config": config, "estimate_us": f"{est:g}",
                 "default_us": f"{float(default):g}" if default else "", "speedup": speed})
    return dict(sorted(out.items()))
