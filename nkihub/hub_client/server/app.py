"""The ASGI application: routes raw request paths to views, checks names and the write token.

Routing works on the raw (still percent-encoded) path split at ``/``, then decodes each segment:
huggingface_hub sends revisions quoted with ``safe=""``, so a revision like ``refs/pr/1`` is one
segment and a path in a repo is the rest. Every repo id, revision and path is validated here,
before a view or the storage sees it.
"""

from __future__ import annotations

import logging
from urllib.parse import unquote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from .. import paths as P
from ..errors import InvalidNameError
from ..storage import BadRequest, Storage, StorageError
from . import pages
from . import views as V
from .responses import error_response, from_storage_error, json_response

log = logging.getLogger("nkihub.hub_client.server")

TYPES = {"models": "model", "datasets": "dataset", "spaces": "space", "kernels": "kernel"}
URL_PREFIXES = {"datasets": "dataset", "spaces": "space", "kernels": "kernel"}
RESERVED_NAMESPACES = {"api", "datasets", "spaces", "kernels", "models"}


class NotFound(StorageError):
    status = 404


def _segments(raw_path: bytes) -> list[str]:
    raw = raw_path.decode("latin-1")
    if "?" in raw:
        raw = raw.split("?", 1)[0]
    return [unquote(s, errors="strict") for s in raw.split("/")[1:]]


class HubApp:
    """ASGI callable serving one :class:`Storage`. ``config`` holds token, LFS and test settings."""

    def __init__(self, config: V.HubConfig):
        self.config = config

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        try:
            response = await self.dispatch(request)
        except InvalidNameError as e:
            response = error_response(400, str(e))
        except StorageError as e:
            response = from_storage_error(e)
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            response = error_response(400, f"bad request: {e}")
        except ConnectionAbortedError:
            raise
        except Exception as e:  # a bug: report it as a 500, keep serving
            log.exception("internal error")
            response = error_response(500, f"internal server error: {type(e).__name__}: {e}")
        await response(scope, receive, send)

    # ---- auth --------------------------------------------------------------------------------
    def _check_write(self, request: Request) -> Response | None:
        if pages.authorized(self.config, request):
            return None
        return error_response(401, "Invalid credentials in Authorization header")

    # ---- routing -----------------------------------------------------------------------------
    async def dispatch(self, request: Request) -> Response:
        segs = _segments(request.scope.get("raw_path") or request.scope["path"].encode())
        if any(len(s) > 2048 for s in segs) or len(segs) > 64:
            raise BadRequest("path too long")
        m = request.method
        base = str(request.base_url)
        cfg = self.config
        if segs[:1] == ["api"]:
            return await self._api(request, segs[1:], m, base)
        # file downloads and the git-LFS batch endpoint live under the repo URL
        repo_type, typed = "model", False
        if segs and segs[0] in URL_PREFIXES:
            repo_type, segs, typed = URL_PREFIXES[segs[0]], segs[1:], True
        if len(segs) >= 3 and segs[1].endswith(".git") and segs[2:] == ["info", "lfs", "objects", "batch"] and m == "POST":
            repo_id = P.check_repo_id(f"{segs[0]}/{segs[1][:-4]}")
            return self._check_write(request) or await V.lfs_batch(cfg, request, repo_type, repo_id, base)
        if len(segs) >= 5 and segs[2] == "resolve" and m in ("GET", "HEAD"):
            repo_id = P.check_repo_id(f"{segs[0]}/{segs[1]}")
            revision = P.check_revision(segs[3])
            path = P.check_path("/".join(segs[4:]))
            return await run_in_threadpool(V.resolve_file, cfg, request, repo_type, repo_id, revision, path)
        if m in ("GET", "HEAD"):  # the pages a browser opens (pages.py); the API above is never one of them
            page = await run_in_threadpool(pages.respond, cfg, request, segs, repo_type if typed else None)
            if page is not None:
                return page
        raise NotFound(f"no route for {m} {request.url.path}")

    async def _api(self, request: Request, segs: list[str], m: str, base: str) -> Response:
        cfg = self.config
        if segs == ["repos", "create"] and m == "POST":
            return self._check_write(request) or await V.create_repo(cfg, request, base)
        if segs == ["repos", "delete"] and m == "DELETE":
            return self._check_write(request) or await V.delete_repo(cfg, request, base)
        if segs == ["validate-yaml"] and m == "POST":
            return json_response({"errors": [], "warnings": []})
        if segs == ["whoami-v2"] and m == "GET":
            return self._check_write(request) or json_response({"type": "user", "name": "nkihub", "orgs": []})
        if len(segs) == 3 and segs[0] == "organizations" and segs[2] == "overview" and m == "GET":
            return V.organization_overview(cfg, P.check_repo_id(f"{segs[1]}/x").split("/")[0])
        if segs[:1] == ["lfs"] and len(segs) >= 5 and segs[1] in TYPES:
            return await self._lfs(request, segs, m)
        if len(segs) < 3 or segs[0] not in TYPES:
            raise NotFound(f"no API route for {m} /api/{'/'.join(segs)}")
        repo_type = TYPES[segs[0]]
        repo_id = P.check_repo_id(f"{segs[1]}/{segs[2]}")
        rest = segs[3:]
        st = cfg.storage
        q = request.query_params
        blobs = V._bool(q.get("blobs"))
        if not rest and m == "GET":
            return await run_in_threadpool(V.repo_info, cfg, repo_type, repo_id, "main", blobs)
        action, args = rest[0], rest[1:]
        if action == "revision" and args and m == "GET":
            rev = P.check_revision("/".join(args))
            return await run_in_threadpool(V.repo_info, cfg, repo_type, repo_id, rev, blobs)
        if action == "refs" and not args and m == "GET":
            return await run_in_threadpool(V.list_refs, cfg, repo_type, repo_id)
        if action == "commits" and m == "GET":
            rev = P.check_revision("/".join(args) or "main")
            return await run_in_threadpool(V.list_commits, cfg, request, repo_type, repo_id, rev)
        if action == "tree" and args and m == "GET":
            rev = P.check_revision(args[0])
            path = "/".join(args[1:]).strip("/")
            if path:
                P.check_path(path)
            return await run_in_threadpool(V.list_tree, cfg, request, repo_type, repo_id, rev, path)
        if action == "paths-info" and len(args) == 1 and m == "POST":
            return await V.paths_info(cfg, request, repo_type, repo_id, P.check_revision(args[0]))
        if action in ("preupload", "commit") and len(args) == 1 and m == "POST":
            rev = P.check_revision(args[0])
            denied = self._check_write(request)
            if denied:
                return denied
            if action == "preupload":
                return await V.preupload(cfg, request, repo_type, repo_id, rev)
            return await V.commit(cfg, request, repo_type, repo_id, rev, base)
        if action == "branch" and len(args) == 1 and m == "PUT":  # nkihub extension: compare-and-set a branch
            name = P.check_revision(args[0])
            denied = self._check_write(request)
            if denied:
                return denied
            body = await request.json()
            target, expected = P.check_revision(str(body.get("targetCommit", ""))), str(body.get("expectedCommit", ""))
            oid = await run_in_threadpool(st.move_branch, repo_type, repo_id, name, target, expected)
            return json_response({"name": name, "targetCommit": oid})
        if action in ("branch", "tag") and len(args) == 1 and m in ("POST", "DELETE"):
            name = P.check_revision(args[0])
            denied = self._check_write(request)
            if denied:
                return denied
            if action == "branch" and m == "POST":
                body = await request.json() if await request.body() else {}
                start = body.get("startingPoint")
                await run_in_threadpool(st.create_branch, repo_type, repo_id, name, start and P.check_revision(start))
            elif action == "branch":
                await run_in_threadpool(st.delete_branch, repo_type, repo_id, name)
            elif m == "POST":  # POST /tag/{revision} {"tag": ...}
                body = await request.json()
                tag = P.check_revision(str(body.get("tag", "")))
                await run_in_threadpool(st.create_tag, repo_type, repo_id, tag, name, body.get("message", ""))
            else:
                await run_in_threadpool(st.delete_tag, repo_type, repo_id, name)
            return json_response({})
        raise NotFound(f"no API route for {m} /api/{'/'.join(segs)}")

    async def _lfs(self, request: Request, segs: list[str], m: str) -> Response:
        repo_type = TYPES[segs[1]]
        P.check_repo_id(f"{segs[2]}/{segs[3]}")
        rest = segs[4:]
        if rest[:1] == ["objects"] and len(rest) == 2 and m == "PUT":
            return await V.lfs_upload(self.config, request, rest[1])  # authorised by the signed href
        if rest == ["verify"] and m == "POST":
            return self._check_write(request) or await V.lfs_verify(self.config, request)
        raise NotFound(f"no LFS route for {m} {request.url.path} ({repo_type})")


def create_app(root, token: str | None = None, lfs_threshold: int | None = None, tree_page_size: int = 1000,
               trusted_publishers=("neuron",), trusted_keys: dict | None = None) -> HubApp:
    """Build the ASGI app for a storage directory (created if missing; stale partial writes removed).
    ``trusted_publishers``: organizations the Hub reports as trusted kernel publishers; ``trusted_keys``:
    org -> publisher keys (``ed25519:<base64>``) whose signatures the pages call trusted."""
    storage = Storage(root)
    storage.clean_tmp()
    keys = {org: tuple(k) for org, k in (trusted_keys or {}).items()}
    return HubApp(V.HubConfig(storage=storage, token=token, lfs_threshold=lfs_threshold, tree_page_size=tree_page_size,
                              trusted_publishers=tuple(trusted_publishers), trusted_keys=keys))
