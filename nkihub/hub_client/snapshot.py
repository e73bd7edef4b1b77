"""Download a snapshot and hand back the bytes of its files, each checked against the Hub's record.

The anchor is never the cache alone. Online, the expected digest of every file is the Hub's own tree
listing at the snapshot's commit (git blob id, or sha256 for LFS files), read fresh at each call;
offline, it is the name of the content-addressed blob each cache pointer links to (huggingface_hub
names blobs after the Hub's ETag), and a pointer that is not such a link (an editor's save, ``sed -i``)
fails. Each file is read once: the bytes returned are the bytes that were hashed, so a caller that
runs them (``kernels``) never reopens a file that could have changed since. Bytecode caches
(``__pycache__``) are never read.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from . import paths as P
from .digest import git_blob_oid
from .errors import DigestMismatchError, RemoteFileCorruptError

log = logging.getLogger("hub_client")
_DIGEST_NAME = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
IGNORED = ["*.pyc", "*.pyo", "*__pycache__/*"]  # fnmatch: '*' crosses '/', so these hold at any depth


@dataclass(frozen=True)
class Snapshot:
    """Verified files of one commit: ``files`` maps repo paths to the bytes that passed the check."""

    path: Path
    commit: str
    files: dict = field(repr=False)
    anchor: str  # what the digests were checked against


def _digest(data: bytes, expected: str) -> str:
    return hashlib.sha256(data).hexdigest() if len(expected) == 64 else git_blob_oid(data)


def _wanted(items, allow_patterns, key=None) -> list:
    """What a download takes: matching ``allow_patterns``, never bytecode (the same filter as the Hub client's)."""
    from huggingface_hub.utils import filter_repo_objects

    return list(filter_repo_objects(items, allow_patterns=allow_patterns, ignore_patterns=IGNORED, key=key))


def _cached_files(snap: Path, allow_patterns) -> list[str]:
    return _wanted([p.relative_to(snap).as_posix() for p in snap.rglob("*") if not p.is_dir()], allow_patterns)


def hub_digests(api, repo_id: str, commit: str, repo_type: str, allow_patterns) -> dict[str, str]:
    """The Hub's record at ``commit``: path -> sha256 for LFS files, git blob id for the others."""
    from huggingface_hub.hf_api import RepoFile

    entries = [f for f in api.list_repo_tree(repo_id, recursive=True, revision=commit, repo_type=repo_type)
               if isinstance(f, RepoFile)]
    return {f.path: (f.lfs.sha256 if f.lfs else f.blob_id) for f in _wanted(entries, allow_patterns, lambda f: f.path)}


def cache_digests(snap: Path, allow_patterns) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """Offline record: path -> digest-shaped name of the blob its pointer links to.

    Returns ``(expected, refused)``; a pointer that is not a link into the repo's ``blobs/`` folder
    under a digest-shaped name is refused as ``(path, reason, "")``.
    """
    blobs = (snap.parent.parent / "blobs").resolve()
    expected, refused = {}, []
    for rel in _cached_files(snap, allow_patterns):
        p = snap / rel
        target = p.resolve()
        if not p.is_symlink() or target.parent != blobs or not _DIGEST_NAME.match(target.name):
            refused.append((rel, "a link to a content-addressed blob of the cache", "a plain file (edited in place?)"))
        else:
            expected[rel] = target.name
    return expected, refused


def check_cache(snap: Path, allow_patterns) -> tuple[dict[str, bytes], list[tuple]]:
    """The offline check: :func:`cache_digests` then :func:`read_checked`; returns ``(files, bad)``."""
    expected, refused = cache_digests(snap, allow_patterns)
    files, bad = read_checked(snap, expected, allow_patterns)
    seen = {r[0] for r in refused}
    return files, sorted(refused + [b for b in bad if b[0] not in seen])


def read_checked(snap: Path, expected: dict[str, str], allow_patterns) -> tuple[dict[str, bytes], list[tuple]]:
    """Read every expected file once; return ``(files, bad)`` with ``bad = [(path, expected, actual)]``.

    A file present in the cache but absent from ``expected`` is bad too (``"unlisted"``).
    """
    files, bad = {}, []
    for rel, want in sorted(expected.items()):
        try:
            data = (snap / rel).read_bytes()
        except FileNotFoundError:
            bad.append((rel, want, "missing"))
            continue
        got = _digest(data, want)
        if got != want:
            bad.append((rel, want, got))
        else:
            files[rel] = data
    bad.extend((rel, "unlisted", "present") for rel in _cached_files(snap, allow_patterns) if rel not in expected)
    return files, bad


def _path_in_url(e) -> str:
    from urllib.parse import unquote

    url = str(e.response.url) if getattr(e, "response", None) is not None else ""
    return unquote(url.split("/resolve/", 1)[-1].split("/", 1)[-1]) if "/resolve/" in url else "?"


def _corrupt_on_server(e, rel: str, where: str):
    """Turn the Hub's 5xx for a rotten stored file into an error whose first line names the file."""
    response = getattr(e, "response", None)
    if response is not None and response.headers.get("X-Error-Code") == "CorruptEntry":
        return RemoteFileCorruptError(rel, where, getattr(e, "server_message", None) or str(e))
    return None


def fetch_snapshot(repo_id: str, *, revision: str, repo_type: str = "kernel", allow_patterns: list[str] | None = None,
                   cache_dir: str | os.PathLike | None = None, endpoint: str | None = None,
                   token: str | bool | None = None, local_files_only: bool = False) -> Snapshot:
    """Download (or find in the cache) the files matching ``allow_patterns`` at ``revision`` and check them.

    A file that does not match the record (tampered, truncated, planted, missing) is refetched once
    from the Hub; if it still does not match, :class:`DigestMismatchError` names it. Offline there is
    no refetch. Downloads of one repo are serialised by a file lock in the cache.
    """
    from huggingface_hub import constants, hf_hub_download, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError

    from .client import hf_api

    P.check_repo_id(repo_id)
    P.check_revision(revision)
    cache = Path(cache_dir) if cache_dir is not None else Path(constants.HF_HUB_CACHE)
    lock_dir = cache / ".nkihub-locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    kwargs = dict(repo_type=repo_type, cache_dir=str(cache), endpoint=endpoint, token=token)
    where = f"{repo_id}@{revision}"
    with FileLock(str(lock_dir / f"{repo_type}--{repo_id.replace('/', '--')}.lock")):
        try:
            snap = Path(snapshot_download(repo_id, revision=revision, allow_patterns=allow_patterns,
                                          ignore_patterns=IGNORED, local_files_only=local_files_only, **kwargs))
        except HfHubHTTPError as e:
            raise _corrupt_on_server(e, _path_in_url(e), where) or e
        where = f"{repo_id}@{snap.name[:12]}"
        if local_files_only:
            files, bad = check_cache(snap, allow_patterns)
            anchor = "the cache's content-addressed blob names (offline)"
        else:
            expected = hub_digests(hf_api(endpoint, token), repo_id, snap.name, repo_type, allow_patterns)
            files, bad = read_checked(snap, expected, allow_patterns)
            anchor = f"the Hub's tree listing at {snap.name[:12]}"
        if bad and not local_files_only:
            for rel, want, _ in bad:
                log.warning("%s: %s does not match the Hub's record; fetching it again", where, rel)
                (snap / rel).unlink(missing_ok=True)
                if want == "unlisted":
                    continue  # not part of this commit on the Hub: the cache only keeps what the Hub lists
                try:
                    hf_hub_download(repo_id, rel, revision=snap.name, force_download=True, **kwargs)
                except HfHubHTTPError as e:
                    raise _corrupt_on_server(e, rel, where) or e
            files, bad = read_checked(snap, expected, allow_patterns)
        if bad:
            rel, want, got = bad[0]
            algo = "sha256" if len(want) == 64 else "git-sha1" if len(want) == 40 else "record"
            raise DigestMismatchError(rel, want, got, algo, where=where, refetched=not local_files_only,
                                      others=tuple(b[0] for b in bad[1:]))
    return Snapshot(snap, snap.name, files, anchor)
