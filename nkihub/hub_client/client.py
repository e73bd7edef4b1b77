"""Client side: push a directory as one commit, move refs, download a snapshot and verify it.

Thin wrappers over the official ``huggingface_hub`` client. ``endpoint`` and ``token`` are passed
explicitly (callers read configuration); ``None`` falls back to huggingface_hub's own defaults.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from filelock import FileLock

from . import paths as P
from .digest import file_digests
from .errors import PublishConflictError


def hf_api(endpoint: str | None = None, token: str | bool | None = None):
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint, token=token, library_name="nkihub")


@dataclass(frozen=True)
class PushResult:
    """``commit`` is the head after the push; ``created`` is False when nothing had changed."""

    commit: str
    created: bool
    added: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()


def local_files(folder: str | os.PathLike) -> dict[str, Path]:
    """Relative POSIX path -> file, skipping bytecode caches; every path is validated."""
    folder = Path(folder)
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_dir() or "__pycache__" in p.parts or p.suffix == ".pyc":
            continue
        rel = p.relative_to(folder).as_posix()
        out[P.check_path(rel)] = p
    return out


def remote_files(api, repo_id: str, revision: str, repo_type: str) -> dict[str, str]:
    """Path -> git blob oid at ``revision`` (one paged recursive tree listing)."""
    from huggingface_hub.hf_api import RepoFile

    return {
        f.path: f.blob_id
        for f in api.list_repo_tree(repo_id, recursive=True, revision=revision, repo_type=repo_type)
        if isinstance(f, RepoFile)
    }


def push_folder(folder, repo_id: str, *, branch: str = "main", message: str, repo_type: str = "kernel",
                endpoint: str | None = None, token: str | bool | None = None, base_commit: str | None = None,
                keep: Iterable[str] = (".gitattributes",)) -> PushResult:
    """Make ``branch`` hold exactly the files of ``folder`` (plus ``keep``) in at most one commit.

    Files that did not change are not uploaded; remote files absent locally are deleted. When the
    result would equal the current head no commit is made. ``base_commit`` (default: the head
    read here) is sent as the parent: if another writer moved the branch meanwhile the Hub refuses
    the commit and :class:`PublishConflictError` is raised, with nothing written.
    """
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete
    from huggingface_hub.errors import HfHubHTTPError

    P.check_repo_id(repo_id)
    P.check_revision(branch)
    api = hf_api(endpoint, token)
    head = base_commit or api.repo_info(repo_id, repo_type=repo_type, revision=branch).sha
    remote = remote_files(api, repo_id, head, repo_type)
    local = local_files(folder)
    ops, added, deleted = [], [], []
    for rel, path in local.items():
        if remote.get(rel) != file_digests(path)[1]:
            ops.append(CommitOperationAdd(path_in_repo=rel, path_or_fileobj=str(path)))
            added.append(rel)
    for rel in sorted(set(remote) - set(local) - set(keep)):
        ops.append(CommitOperationDelete(path_in_repo=rel))
        deleted.append(rel)
    if not ops:
        return PushResult(head, False)
    try:
        info = api.create_commit(repo_id, ops, commit_message=message, repo_type=repo_type, revision=branch,
                                 parent_commit=head)
    except HfHubHTTPError as e:
        if e.response is not None and e.response.status_code in (409, 412):
            raise PublishConflictError(
                f"{repo_id}@{branch} moved while publishing (expected parent {head[:12]}); nothing was written. "
                "Retry to publish on top of the new head."
            ) from e
        raise
    return PushResult(info.oid, info.oid != head, tuple(added), tuple(deleted))


def set_branch(repo_id: str, branch: str, commit: str, *, repo_type: str = "kernel",
               endpoint: str | None = None, token: str | bool | None = None) -> bool:
    """Point ``branch`` at ``commit``: create it, or move it forward. Returns True if it moved.

    A move is one compare-and-set (:func:`compare_and_set_branch`) where the Hub offers it (nkihub's
    server does), so readers never see the branch missing; elsewhere the Hub API has no atomic
    "update ref" and a move is delete + create. Either is retried when a concurrent writer got in
    between, and a branch is never moved to an ancestor of where it is (the later of two racing
    publishers keeps the branch).
    """
    from huggingface_hub.errors import HfHubHTTPError

    api = hf_api(endpoint, token)
    history = None
    for _ in range(5):
        refs = api.list_repo_refs(repo_id, repo_type=repo_type)
        current = {b.name: b.target_commit for b in refs.branches}.get(branch)
        if current == commit:
            return False
        if current is not None:
            if history is None:
                history = {c.commit_id for c in api.list_repo_commits(repo_id, repo_type=repo_type, revision=commit)}
            if current not in history:
                newer = {c.commit_id for c in api.list_repo_commits(repo_id, repo_type=repo_type, revision=current)}
                if commit in newer:
                    return False  # the branch already moved past us
            swapped = compare_and_set_branch(api, repo_id, branch, commit, current, repo_type)
            if swapped is not None:
                if swapped:
                    return True
                continue  # another writer moved it: look again
            try:
                api.delete_branch(repo_id, branch=branch, repo_type=repo_type)
            except HfHubHTTPError as e:
                if e.response is None or e.response.status_code != 404:
                    raise
        try:
            api.create_branch(repo_id, branch=branch, revision=commit, repo_type=repo_type)
            return True
        except HfHubHTTPError as e:
            if e.response is None or e.response.status_code != 409:
                raise
    raise PublishConflictError(f"could not point {repo_id}@{branch} at {commit[:12]}: concurrent writers kept moving it")


def compare_and_set_branch(api, repo_id: str, branch: str, commit: str, expected: str,
                           repo_type: str = "kernel") -> bool | None:
    """Point ``branch`` at ``commit`` only if it is at ``expected``, in one request (nkihub extension:
    ``PUT /api/{type}s/{repo}/branch/{branch}`` with ``{"targetCommit", "expectedCommit"}``).

    Returns True when moved, False when the branch was elsewhere (412), None when the Hub does not
    offer the operation (a Hub without it answers 404 without an error code, or 405).
    """
    from urllib.parse import quote

    from huggingface_hub.utils import get_session, hf_raise_for_status

    url = f"{api.endpoint}/api/{repo_type}s/{repo_id}/branch/{quote(branch, safe='')}"
    r = get_session().put(url, headers=api._build_hf_headers(), json={"targetCommit": commit, "expectedCommit": expected})
    if r.status_code == 405 or (r.status_code == 404 and not r.headers.get("X-Error-Code")):
        return None
    if r.status_code in (409, 412):
        return False
    hf_raise_for_status(r)
    return True


def download_snapshot(repo_id: str, *, revision: str, repo_type: str = "kernel",
                      allow_patterns: list[str] | None = None, cache_dir: str | os.PathLike | None = None,
                      endpoint: str | None = None, token: str | bool | None = None,
                      local_files_only: bool = False) -> Path:
    """Download (or find in the cache) a snapshot, check every file, return its folder.

    See :func:`hub_client.snapshot.fetch_snapshot` (which also returns the checked bytes): files are
    checked against the Hub's listing (offline: the cache's blob names), a mismatch is refetched
    once, then :class:`DigestMismatchError` names the file.
    """
    from .snapshot import fetch_snapshot

    return fetch_snapshot(repo_id, revision=revision, repo_type=repo_type, allow_patterns=allow_patterns,
                          cache_dir=cache_dir, endpoint=endpoint, token=token,
                          local_files_only=local_files_only).path


def verify_snapshot(snapshot: str | os.PathLike) -> list[tuple[str, str, str, str]]:
    """Files of a cached snapshot that are not links to a blob holding exactly the digest it is named by.

    Returns ``[(path, expected, actual, algorithm)]``; empty when all match. ``__pycache__`` is skipped.
    """
    from .snapshot import check_cache

    _, bad = check_cache(Path(snapshot), None)
    return [(rel, want, got, "sha256" if len(want) == 64 else "git-sha1") for rel, want, got in bad]
