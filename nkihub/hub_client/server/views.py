"""Hub API views: repos, refs, commits, tree, paths-info, preupload, commit, LFS, resolve.

Each view takes the parsed request pieces (already validated names) and returns a Response. The
JSON field names are the ones huggingface_hub 2.x reads (see docs/hub.md for the list).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from .. import paths as P
from ..storage import BadRequest, Commit, CorruptEntry, EntryNotFound, FileEntry, Storage
from .responses import error_response, file_response, json_response

log = logging.getLogger("nkihub.hub_client.server")
PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/", "kernel": "kernels/"}
LFS_POINTER_SIZE = 134


@dataclass
class Faults:
    """Test hooks: ``truncate[path] = n`` cuts the next n full downloads of that path in half."""

    truncate: dict = field(default_factory=dict)


@dataclass
class HubConfig:
    storage: Storage
    token: str | None = None
    lfs_threshold: int | None = None  # None: every file "regular" (clients with Xet cannot do LFS here)
    tree_page_size: int = 1000
    commits_page_size: int = 50
    faults: Faults = field(default_factory=Faults)
    trusted_publishers: tuple[str, ...] = ("neuron",)  # organizations marked trustedKernelPublisher
    # org -> publisher keys ("ed25519:<base64>") the pages call trusted; loads trust the user's own keys
    trusted_keys: dict = field(default_factory=dict)


def _bool(v: str | None) -> bool:
    return (v or "").lower() in ("1", "true", "yes")


def repo_url(base: str, repo_type: str, repo_id: str) -> str:
    return f"{base}{PREFIX[repo_type]}{repo_id}"


def file_json(path: str, e: FileEntry) -> dict:
    d = {"type": "file", "oid": e.oid, "size": e.size, "path": path}
    if e.lfs:
        d["lfs"] = {"oid": e.sha256, "size": e.size, "pointerSize": LFS_POINTER_SIZE}
    return d


def folder_json(path: str, files: dict) -> dict:
    h = hashlib.sha1()
    for p in sorted(f for f in files if f.startswith(path + "/")):
        h.update(f"{p} {files[p].oid}\n".encode())
    return {"type": "directory", "oid": h.hexdigest(), "path": path}


def tree_entries(commit: Commit, path: str, recursive: bool) -> list[dict]:
    files = commit.files
    if path and path in files:
        return [file_json(path, files[path])]
    prefix = path + "/" if path else ""
    under = [p for p in files if p.startswith(prefix)]
    if path and not under:
        raise EntryNotFound(f"{path} does not exist on {commit.id[:12]}", commit=commit.id)
    out, folders = [], set()
    for p in under:
        rest = p[len(prefix):].split("/")
        if len(rest) == 1:
            out.append(file_json(p, files[p]))
        elif recursive:
            out.append(file_json(p, files[p]))
            for i in range(1, len(rest)):
                folders.add(prefix + "/".join(rest[:i]))
        else:
            folders.add(prefix + rest[0])
    out.extend(folder_json(f, files) for f in folders)
    return sorted(out, key=lambda d: d["path"])


# ---- repos ---------------------------------------------------------------------------------------
async def create_repo(cfg: HubConfig, request: Request, base: str) -> Response:
    body = await request.json()
    repo_type = P.check_repo_type(body.get("type"))
    if not body.get("organization"):
        raise BadRequest("repo id must be namespace/name (no user namespace on this server)")
    repo_id = P.check_repo_id(f"{body['organization']}/{body.get('name', '')}")
    # huggingface_hub 1.x sends "visibility"; older clients "private"
    private = bool(body.get("private")) or body.get("visibility") == "private"
    created = await run_in_threadpool(cfg.storage.create_repo, repo_type, repo_id, private)
    url = repo_url(base, repo_type, repo_id)
    if not created:
        return json_response({"error": "You already created this repo", "url": url}, 409)
    return json_response({"url": url, "name": repo_id, "id": repo_id})


async def delete_repo(cfg: HubConfig, request: Request, base: str) -> Response:
    body = await request.json()
    repo_type = P.check_repo_type(body.get("type"))
    repo_id = P.check_repo_id(f"{body.get('organization')}/{body.get('name', '')}")
    await run_in_threadpool(cfg.storage.delete_repo, repo_type, repo_id)
    return json_response({})


def repo_info(cfg: HubConfig, repo_type: str, repo_id: str, revision: str, blobs: bool) -> Response:
    st = cfg.storage
    meta = st.repo_meta(repo_type, repo_id)
    c = st.resolve(repo_type, repo_id, revision)
    siblings = []
    for p, e in sorted(c.files.items()):
        s = {"rfilename": p}
        if blobs:
            s.update(size=e.size, blobId=e.oid)
            if e.lfs:
                s["lfs"] = {"sha256": e.sha256, "size": e.size, "pointerSize": LFS_POINTER_SIZE}
        siblings.append(s)
    return json_response({
        "_id": repo_id, "id": repo_id, "author": repo_id.split("/")[0], "sha": c.id,
        "lastModified": c.date, "createdAt": meta.get("createdAt"), "private": meta.get("private", False),
        "disabled": False, "gated": False, "downloads": 0, "likes": 0, "tags": [], "siblings": siblings,
    })


def organization_overview(cfg: HubConfig, org: str) -> Response:
    """``GET /api/organizations/{org}/overview``: what Hugging Face kernels' trust check reads
    (``trustedKernelPublisher``). An organization exists when it owns a repo or is trusted."""
    owns = any((cfg.storage.root / "repos" / t / org).is_dir() for t in P.REPO_TYPES)
    if not owns and org not in cfg.trusted_publishers:
        return error_response(404, f"organization {org} not found")
    return json_response({"name": org, "fullname": org, "avatarUrl": "", "isVerified": False,
                          "trustedKernelPublisher": org in cfg.trusted_publishers})


def list_refs(cfg: HubConfig, repo_type: str, repo_id: str) -> Response:
    refs = cfg.storage.refs(repo_type, repo_id)
    branches = [{"name": n, "ref": f"refs/heads/{n}", "targetCommit": o} for n, o in sorted(refs["branches"].items())]
    tags = [{"name": n, "ref": f"refs/tags/{n}", "targetCommit": t["commit"]} for n, t in sorted(refs["tags"].items())]
    return json_response({"branches": branches, "tags": tags, "converts": [], "pullRequests": []})


def _page(request: Request, items: list, size: int) -> Response:
    start = int(request.query_params.get("cursor", "0") or 0)
    page = items[start:start + size]
    headers = {}
    if start + size < len(items):
        q = dict(request.query_params)
        q["cursor"] = str(start + size)
        headers["Link"] = f'<{str(request.url.replace(query=urlencode(q)))}>; rel="next"'
    return json_response(page, headers=headers)


def list_commits(cfg: HubConfig, request: Request, repo_type: str, repo_id: str, revision: str) -> Response:
    items = [
        {"id": c.id, "title": c.title, "message": c.message, "date": c.date, "authors": [{"user": c.author}]}
        for c in cfg.storage.log(repo_type, repo_id, revision)
    ]
    return _page(request, items, cfg.commits_page_size)


def list_tree(cfg: HubConfig, request: Request, repo_type: str, repo_id: str, revision: str, path: str) -> Response:
    c = cfg.storage.resolve(repo_type, repo_id, revision)
    entries = tree_entries(c, path, _bool(request.query_params.get("recursive")))
    return _page(request, entries, cfg.tree_page_size)


async def paths_info(cfg: HubConfig, request: Request, repo_type: str, repo_id: str, revision: str) -> Response:
    raw = (await request.body()).decode()
    if request.headers.get("content-type", "").startswith("application/json"):
        wanted = json.loads(raw or "{}").get("paths", [])
    else:
        wanted = parse_qs(raw).get("paths", [])
    wanted = [P.check_path(p.strip("/")) for p in wanted]
    c = await run_in_threadpool(cfg.storage.resolve, repo_type, repo_id, revision)
    out = []
    for p in wanted:
        if p in c.files:
            out.append(file_json(p, c.files[p]))
        elif any(f.startswith(p + "/") for f in c.files):
            out.append(folder_json(p, c.files))
    return json_response(out)


# ---- uploads ---------------------------------------------------------------------------------------
async def preupload(cfg: HubConfig, request: Request, repo_type: str, repo_id: str, revision: str) -> Response:
    body = await request.json()
    c = await run_in_threadpool(cfg.storage.resolve, repo_type, repo_id, revision)
    files = []
    for f in body.get("files", []):
        path = P.check_path(f["path"])
        size = int(f.get("size", 0))
        lfs = cfg.lfs_threshold is not None and size >= cfg.lfs_threshold and size > 0
        existing = c.files.get(path)
        oid = None
        if existing is not None and existing.lfs == lfs:
            oid = existing.sha256 if lfs else existing.oid
        files.append({"path": path, "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid})
    return json_response({"files": files, "commitOid": c.id})


async def commit(cfg: HubConfig, request: Request, repo_type: str, repo_id: str, revision: str, base: str) -> Response:
    if _bool(request.query_params.get("create_pr")):
        raise BadRequest("pull requests are not supported by this server")
    try:
        raw = await request.body()
    except ClientDisconnect:
        return error_response(400, "client disconnected before the commit body was complete")
    header, ops = None, []
    for n, line in enumerate(raw.splitlines()):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            key, value = item["key"], item["value"]
        except (ValueError, KeyError, TypeError):
            raise BadRequest(f"line {n + 1} of the commit payload is not a {{key, value}} JSON object")
        if key == "header":
            header = value
        elif key == "file":
            path = P.check_path(value["path"])
            if value.get("encoding", "base64") != "base64":
                raise BadRequest(f"unsupported encoding {value.get('encoding')!r}")
            try:
                data = base64.b64decode(value["content"], validate=True)
            except (binascii.Error, ValueError):
                raise BadRequest(f"content of {path!r} is not valid base64")
            ops.append(("add", path, data))
        elif key == "lfsFile":
            path = P.check_path(value["path"])
            sha = str(value.get("oid", ""))
            if not cfg.storage.has_blob(sha):
                raise BadRequest(f"LFS object {sha} for {path!r} was not uploaded")
            size = cfg.storage.blob_path(sha).stat().st_size
            ops.append(("lfs", path, FileEntry(sha256=sha, oid=_git_oid_of_blob(cfg, sha), size=size, lfs=True)))
        elif key == "deletedFile":
            ops.append(("delete", P.check_path(value["path"])))
        elif key == "deletedFolder":
            ops.append(("delete_folder", P.check_path(value["path"].rstrip("/"))))
        else:
            raise BadRequest(f"unknown commit operation {key!r}")
    if header is None or not header.get("summary"):
        raise BadRequest("the commit payload has no header with a summary")

    def store_and_commit():
        final = []
        for op in ops:
            if op[0] == "add":  # blobs first; an interrupted commit leaves only unreferenced blobs
                final.append(("add", op[1], cfg.storage.put_bytes(op[2])))
            elif op[0] == "lfs":
                final.append(("add", op[1], op[2]))
            else:
                final.append(op)
        return cfg.storage.commit(repo_type, repo_id, revision, final, header["summary"],
                                  header.get("description", ""), parent=header.get("parentCommit"))

    oid, _ = await run_in_threadpool(store_and_commit)
    url = f"{repo_url(base, repo_type, repo_id)}/commit/{oid}"
    return json_response({"success": True, "commitOid": oid, "commitUrl": url, "hookOutput": "", "pullRequestUrl": None})


def _git_oid_of_blob(cfg: HubConfig, sha: str) -> str:
    from ..digest import file_digests

    return file_digests(cfg.storage.blob_path(sha))[1]


def lfs_signature(cfg: HubConfig, oid: str) -> str:
    key = (cfg.token or "open").encode()
    return hmac.new(key, oid.encode(), hashlib.sha256).hexdigest()


async def lfs_batch(cfg: HubConfig, request: Request, repo_type: str, repo_id: str, base: str) -> Response:
    body = await request.json()
    if body.get("operation") != "upload":
        raise BadRequest("only the upload operation is supported; download through /resolve")
    cfg.storage.repo_meta(repo_type, repo_id)
    objects = []
    for o in body.get("objects", []):
        oid, size = str(o.get("oid", "")), int(o.get("size", 0))
        cfg.storage.blob_path(oid)  # validates the oid shape
        entry = {"oid": oid, "size": size, "authenticated": True}
        if not cfg.storage.has_blob(oid, size):
            api = f"{base}api/lfs/{repo_type}s/{repo_id}"
            entry["actions"] = {
                "upload": {"href": f"{api}/objects/{oid}?size={size}&sig={lfs_signature(cfg, oid)}", "header": {}},
                "verify": {"href": f"{api}/verify", "header": {}},
            }
        objects.append(entry)
    return json_response({"transfer": "basic", "objects": objects, "hash_algo": "sha256"},
                         headers={"Content-Type": "application/vnd.git-lfs+json"})


async def lfs_upload(cfg: HubConfig, request: Request, oid: str) -> Response:
    if not hmac.compare_digest(request.query_params.get("sig", ""), lfs_signature(cfg, oid)):
        return error_response(403, "bad or missing upload signature")
    cfg.storage.blob_path(oid)
    writer = await run_in_threadpool(cfg.storage.blob_writer, oid)
    try:
        async for chunk in request.stream():
            await run_in_threadpool(writer.write, chunk)
        await run_in_threadpool(writer.finish)
    except ClientDisconnect:
        return error_response(400, "client disconnected during the upload; nothing was stored")
    finally:
        writer.abort()
    return Response(status_code=200)


async def lfs_verify(cfg: HubConfig, request: Request) -> Response:
    body = await request.json()
    if not cfg.storage.has_blob(str(body.get("oid", "")), int(body.get("size", -1))):
        return error_response(404, f"LFS object {body.get('oid')} not found")
    return json_response({"success": True})


# ---- downloads -------------------------------------------------------------------------------------
def resolve_file(cfg: HubConfig, request: Request, repo_type: str, repo_id: str, revision: str, path: str) -> Response:
    c = cfg.storage.resolve(repo_type, repo_id, revision)
    e = c.files.get(path)
    if e is None:
        raise EntryNotFound(f"{path} not found in {repo_id} at {revision}", commit=c.id)
    headers = {"ETag": f'"{e.etag}"', "X-Repo-Commit": c.id, "Cache-Control": "no-cache"}
    if e.lfs:
        headers.update({"X-Linked-Etag": f'"{e.sha256}"', "X-Linked-Size": str(e.size)})
    head = request.method == "HEAD"
    if not head:  # HEAD answers from the record: a 5xx there makes the client retry for seconds
        damage = cfg.storage.blob_damage(e)
        if damage is not None:
            msg = f"stored file {path!r} of {repo_type} {repo_id} at {c.id[:12]} is corrupt on the server: {damage}"
            log.error(msg)
            raise CorruptEntry(msg, commit=c.id)
    cut = None
    if not head and not request.headers.get("range") and cfg.faults.truncate.get(path, 0) > 0:
        cfg.faults.truncate[path] -= 1
        cut = e.size // 2
    return file_response(cfg.storage.blob_path(e.sha256), e.size, headers, request.headers.get("range"), head, cut)
