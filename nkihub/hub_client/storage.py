"""On-disk storage of the local Hub: content-addressed blobs, one full manifest per commit, refs.

Layout under ``root``::

    blobs/sha256/ab/cdef...        file contents, named by sha256 (shared by all repos)
    repos/<type>/<ns>/<name>/
        repo.json                  type, id, creation date
        refs.json                  {"branches": {name: oid}, "tags": {name: {"commit", "message"}}}
        commits/<oid>.json         parents, title, message, date, author, files {path: entry}
        .lock                      held while refs.json changes
    tmp/                           partial writes; emptied on start

Every write goes to ``tmp`` (or a temp name beside its target) and is moved into place with
``os.replace``; refs change last, under the repo's file lock. A writer that dies half way leaves at
most unreferenced blobs or commit files, never a ref pointing at something missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

from filelock import FileLock

from . import paths as P
from .digest import git_blob_oid

INITIAL_GITATTRIBUTES = b"*.bin filter=lfs diff=lfs merge=lfs -text\n*.safetensors filter=lfs diff=lfs merge=lfs -text\n"


class StorageError(Exception):
    """An error with an HTTP status and, when huggingface_hub knows one, an ``X-Error-Code``."""

    status = 400
    code: str | None = None

    def __init__(self, message: str, commit: str | None = None):
        super().__init__(message)
        self.commit = commit  # sent as X-Repo-Commit on EntryNotFound, as the Hub does


class BadRequest(StorageError):
    status = 400


class RepoNotFound(StorageError):
    status, code = 404, "RepoNotFound"


class RevisionNotFound(StorageError):
    status, code = 404, "RevisionNotFound"


class EntryNotFound(StorageError):
    status, code = 404, "EntryNotFound"


class Conflict(StorageError):
    status = 409


class PreconditionFailed(StorageError):
    status = 412


class CorruptEntry(StorageError):
    """A stored file no longer matches its record: the server's fault, never served as if whole."""

    status, code = 500, "CorruptEntry"


@dataclass(frozen=True)
class FileEntry:
    sha256: str
    oid: str  # git blob id
    size: int
    lfs: bool = False

    def to_json(self) -> dict:
        return {"sha256": self.sha256, "oid": self.oid, "size": self.size, "lfs": self.lfs}

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.oid


@dataclass(frozen=True)
class Commit:
    id: str
    parents: tuple[str, ...]
    title: str
    message: str
    date: str
    author: str
    files: dict  # path -> FileEntry

    @staticmethod
    def from_json(d: dict) -> "Commit":
        files = {p: FileEntry(**e) for p, e in d["files"].items()}
        return Commit(d["id"], tuple(d["parents"]), d["title"], d["message"], d["date"], d["author"], files)


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file beside it and ``os.replace``: readers see old or new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with _suppress():
            os.unlink(tmp)
        raise


class _suppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], OSError)


class Storage:
    """All reads and writes of one Hub root directory. Thread- and process-safe."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).resolve()
        for sub in ("blobs/sha256", "repos", "tmp", "locks"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self._thread_lock = threading.Lock()
        self._verified: dict[str, tuple] = {}  # sha256 -> stat stamp of the blob when it last hashed right

    def clean_tmp(self) -> None:
        """Remove partial writes left by a killed process (call only when no writer runs)."""
        for entry in (self.root / "tmp").iterdir():
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with _suppress():
                    entry.unlink()

    # ---- blobs -------------------------------------------------------------------------------
    def blob_path(self, sha256: str) -> Path:
        if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
            raise BadRequest(f"invalid sha256 {sha256[:80]!r}")
        return self.root / "blobs" / "sha256" / sha256[:2] / sha256[2:]

    def has_blob(self, sha256: str, size: int | None = None) -> bool:
        p = self.blob_path(sha256)
        return p.is_file() and (size is None or p.stat().st_size == size)

    def put_bytes(self, data: bytes) -> FileEntry:
        sha = hashlib.sha256(data).hexdigest()
        target = self.blob_path(sha)
        if not target.exists():
            atomic_write(target, data)
        return FileEntry(sha256=sha, oid=git_blob_oid(data), size=len(data))

    def blob_writer(self, expected_sha256: str | None = None) -> "BlobWriter":
        """A writer that streams a blob to ``tmp`` and moves it into place only when complete."""
        return BlobWriter(self, expected_sha256)

    def put_stream(self, chunks: Iterable[bytes], expected_sha256: str | None = None) -> FileEntry:
        """Store a blob from chunks; if ``expected_sha256`` is given and differs, store nothing."""
        w = self.blob_writer(expected_sha256)
        try:
            for chunk in chunks:
                w.write(chunk)
            return w.finish()
        finally:
            w.abort()

    def open_blob(self, sha256: str) -> BinaryIO:
        return open(self.blob_path(sha256), "rb")

    def blob_damage(self, entry: "FileEntry") -> str | None:
        """Why the stored blob of ``entry`` no longer matches its record (missing, size, sha256), or None.

        A full hash runs once per version of the file on disk: the result is kept against the blob's
        inode, size, mtime and ctime, and any write to the blob changes the ctime.
        """
        path = self.blob_path(entry.sha256)
        try:
            st = path.stat()
        except FileNotFoundError:
            return "its stored content is missing"
        if st.st_size != entry.size:
            return f"its stored content has {st.st_size} bytes, the record says {entry.size}"
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if self._verified.get(entry.sha256) == stamp:
            return None
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        if h.hexdigest() != entry.sha256:
            return f"its stored content hashes to sha256 {h.hexdigest()}, the record says {entry.sha256}"
        self._verified[entry.sha256] = stamp
        return None

    # ---- repos -------------------------------------------------------------------------------
    def repo_dir(self, repo_type: str, repo_id: str) -> Path:
        P.check_repo_type(repo_type)
        P.check_repo_id(repo_id)
        return self.root / "repos" / repo_type / repo_id

    def _existing(self, repo_type: str, repo_id: str) -> Path:
        d = self.repo_dir(repo_type, repo_id)
        if not (d / "refs.json").is_file():
            raise RepoNotFound(f"{repo_type} repository {repo_id} not found")
        return d

    def repo_exists(self, repo_type: str, repo_id: str) -> bool:
        return (self.repo_dir(repo_type, repo_id) / "refs.json").is_file()

    def create_repo(self, repo_type: str, repo_id: str, private: bool = False, author: str = "nkihub") -> bool:
        """Create a repo with one initial commit on ``main``; False if it already exists."""
        target = self.repo_dir(repo_type, repo_id)
        with FileLock(str(self.root / "locks" / "repos.lock")):
            if (target / "refs.json").is_file():
                return False
            staging = self.root / "tmp" / f"repo-{uuid.uuid4().hex}"
            (staging / "commits").mkdir(parents=True)
            entry = self.put_bytes(INITIAL_GITATTRIBUTES)
            commit = self._make_commit([], {".gitattributes": entry}, "initial commit", "", author)
            atomic_write(staging / "commits" / f"{commit['id']}.json", json.dumps(commit).encode())
            meta = {"type": repo_type, "id": repo_id, "private": private, "createdAt": commit["date"]}
            atomic_write(staging / "repo.json", json.dumps(meta).encode())
            atomic_write(staging / "refs.json", json.dumps({"branches": {"main": commit["id"]}, "tags": {}}).encode())
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():  # a leftover without refs.json: never a complete repo
                shutil.rmtree(target)
            os.rename(staging, target)
            return True

    def delete_repo(self, repo_type: str, repo_id: str) -> None:
        d = self._existing(repo_type, repo_id)
        with FileLock(str(self.root / "locks" / "repos.lock")):
            grave = self.root / "tmp" / f"deleted-{uuid.uuid4().hex}"
            os.rename(d, grave)
        shutil.rmtree(grave, ignore_errors=True)

    def list_repos(self) -> list[tuple[str, str]]:
        """``(repo_type, repo_id)`` of every complete repo (one with refs), sorted by type then id."""
        out = []
        for repo_type in P.REPO_TYPES:
            for refs in (self.root / "repos" / repo_type).glob("*/*/refs.json"):
                ns, name = refs.parent.parent.name, refs.parent.name
                try:
                    out.append((repo_type, P.check_repo_id(f"{ns}/{name}")))
                except ValueError:  # a stray directory that no repo id names
                    continue
        return sorted(out)

    def repo_meta(self, repo_type: str, repo_id: str) -> dict:
        d = self._existing(repo_type, repo_id)
        return json.loads((d / "repo.json").read_text())

    # ---- refs and commits --------------------------------------------------------------------
    def refs(self, repo_type: str, repo_id: str) -> dict:
        d = self._existing(repo_type, repo_id)
        return json.loads((d / "refs.json").read_text())

    def read_commit(self, repo_type: str, repo_id: str, oid: str) -> Commit:
        d = self._existing(repo_type, repo_id)
        p = d / "commits" / f"{oid}.json"
        if not P.COMMIT_RE.match(oid) or not p.is_file():
            raise RevisionNotFound(f"commit {oid} not found in {repo_id}")
        return Commit.from_json(json.loads(p.read_text()))

    def resolve(self, repo_type: str, repo_id: str, revision: str) -> Commit:
        """Branch, tag (by name or full ref name, ``refs/heads/v1``, ``refs/tags/v1.0.0``), full commit id
        or unique prefix (7+ hex) -> Commit."""
        refs = self.refs(repo_type, repo_id)
        P.check_revision(revision)
        branch, tag = revision, revision
        if revision.startswith("refs/heads/"):  # Hugging Face kernels asks for a version by its ref name
            branch, tag = revision[len("refs/heads/"):], None
        elif revision.startswith("refs/tags/"):
            branch, tag = None, revision[len("refs/tags/"):]
        if branch in refs["branches"]:
            return self.read_commit(repo_type, repo_id, refs["branches"][branch])
        if tag in refs["tags"]:
            return self.read_commit(repo_type, repo_id, refs["tags"][tag]["commit"])
        if P.COMMIT_RE.match(revision):
            return self.read_commit(repo_type, repo_id, revision)
        if 7 <= len(revision) < 40 and all(c in "0123456789abcdef" for c in revision):
            d = self.repo_dir(repo_type, repo_id) / "commits"
            hits = [p.stem for p in d.glob(f"{revision}*.json")]
            if len(hits) == 1:
                return self.read_commit(repo_type, repo_id, hits[0])
        raise RevisionNotFound(f"revision {revision} not found in {repo_id}")

    def log(self, repo_type: str, repo_id: str, revision: str) -> Iterator[Commit]:
        c = self.resolve(repo_type, repo_id, revision)
        while True:
            yield c
            if not c.parents:
                return
            c = self.read_commit(repo_type, repo_id, c.parents[0])

    @staticmethod
    def _make_commit(parents: list[str], files: dict, title: str, message: str, author: str) -> dict:
        body = {
            "parents": parents,
            "title": title,
            "message": message,
            "date": now_iso(),
            "author": author,
            "files": {p: files[p].to_json() for p in sorted(files)},
        }
        body["id"] = hashlib.sha1(json.dumps(body, sort_keys=True).encode()).hexdigest()
        return body

    def _write_refs(self, d: Path, refs: dict) -> None:
        atomic_write(d / "refs.json", json.dumps(refs, indent=1, sort_keys=True).encode())

    def commit(
        self,
        repo_type: str,
        repo_id: str,
        branch: str,
        ops: list[tuple],
        title: str,
        message: str = "",
        parent: str | None = None,
        author: str = "nkihub",
    ) -> tuple[str, bool]:
        """Apply ``ops`` on top of ``branch`` in one commit. Returns ``(oid, created)``.

        ``ops`` are ``("add", path, FileEntry)``, ``("delete", path)``, ``("delete_folder", path)``;
        every added blob must already be stored. ``parent`` (a commit id) makes the commit fail
        with 412 if the branch moved. A commit that changes nothing creates nothing and returns
        the current head.
        """
        d = self._existing(repo_type, repo_id)
        P.check_revision(branch)
        for op in ops:
            if op[0] == "add" and not self.has_blob(op[2].sha256, op[2].size):
                raise BadRequest(f"content of {op[1]!r} (sha256 {op[2].sha256}) was never uploaded")
        with self._thread_lock, FileLock(str(d / ".lock")):
            refs = json.loads((d / "refs.json").read_text())
            head = refs["branches"].get(branch)
            if head is None:
                raise RevisionNotFound(f"branch {branch} not found in {repo_id}; create it first")
            if parent is not None and not head.startswith(parent):
                raise PreconditionFailed(
                    f"A commit has happened since {parent[:12]} on {branch} (now {head[:12]}); refresh and try again"
                )
            files = dict(self.read_commit(repo_type, repo_id, head).files)
            before = dict(files)
            for op in ops:
                kind, path = op[0], op[1]
                if kind == "add":
                    for existing in list(files):  # a file cannot also be a folder
                        if existing.startswith(path + "/"):
                            raise BadRequest(f"cannot add file {path!r}: a folder of that name exists")
                    files[path] = op[2]
                elif kind == "delete":
                    if path not in files:
                        raise EntryNotFound(f"A file with this name doesn't exist: {path}")
                    del files[path]
                elif kind == "delete_folder":
                    prefix = path.rstrip("/") + "/"
                    gone = [p for p in files if p.startswith(prefix)]
                    if not gone:
                        raise EntryNotFound(f"A folder with this name doesn't exist: {path}")
                    for p in gone:
                        del files[p]
            for p in files:
                parts = p.split("/")
                for i in range(1, len(parts)):
                    if "/".join(parts[:i]) in files:
                        raise BadRequest(f"{p!r} would sit under the file {'/'.join(parts[:i])!r}")
            if files == before:
                return head, False
            c = self._make_commit([head], files, title, message, author)
            atomic_write(d / "commits" / f"{c['id']}.json", json.dumps(c).encode())
            refs["branches"][branch] = c["id"]
            self._write_refs(d, refs)
            return c["id"], True

    def create_branch(self, repo_type: str, repo_id: str, branch: str, start: str | None = None) -> str:
        d = self._existing(repo_type, repo_id)
        P.check_revision(branch)
        if P.COMMIT_RE.match(branch):
            raise BadRequest("a branch name cannot look like a commit id")
        with self._thread_lock, FileLock(str(d / ".lock")):
            refs = json.loads((d / "refs.json").read_text())
            if branch in refs["branches"]:
                raise Conflict(f"Reference already exists: refs/heads/{branch}")
            oid = self.resolve(repo_type, repo_id, start or "main").id
            refs["branches"][branch] = oid
            self._write_refs(d, refs)
            return oid

    def move_branch(self, repo_type: str, repo_id: str, branch: str, target: str, expected: str) -> str:
        """Point an existing ``branch`` at ``target`` if it is still at ``expected`` (one atomic ref update).

        Raises :class:`PreconditionFailed` (412) when the branch moved meanwhile; readers never see the
        branch missing, as they would between a delete and a create. Returns the new commit id.
        """
        d = self._existing(repo_type, repo_id)
        P.check_revision(branch)
        with self._thread_lock, FileLock(str(d / ".lock")):
            refs = json.loads((d / "refs.json").read_text())
            current = refs["branches"].get(branch)
            if current is None:
                raise RevisionNotFound(f"branch {branch} not found in {repo_id}")
            if current != expected:
                raise PreconditionFailed(f"branch {branch} is at {current[:12]}, not at the expected {expected[:12]}")
            oid = self.resolve(repo_type, repo_id, target).id
            refs["branches"][branch] = oid
            self._write_refs(d, refs)
            return oid

    def delete_branch(self, repo_type: str, repo_id: str, branch: str) -> None:
        d = self._existing(repo_type, repo_id)
        P.check_revision(branch)
        if branch == "main":
            raise BadRequest("cannot delete the main branch")
        with self._thread_lock, FileLock(str(d / ".lock")):
            refs = json.loads((d / "refs.json").read_text())
            if branch not in refs["branches"]:
                raise RevisionNotFound(f"branch {branch} not found")
            del refs["branches"][branch]
            self._write_refs(d, refs)

    def create_tag(self, repo_type: str, repo_id: str, tag: str, revision: str, message: str = "") -> str:
        d = self._existing(repo_type, repo_id)
        P.check_revision(tag)
        with self._thread_lock, FileLock(str(d / ".lock")):
            refs = json.loads((d / "refs.json").read_text())
            if tag in refs["tags"]:
                raise Conflict(f"Tag already exists: {tag}")
            oid = self.resolve(repo_type, repo_id, revision).id
            refs["tags"][tag] = {"commit": oid, "message": message}
            self._write_refs(d, refs)
            return oid

    def delete_tag(self, repo_type: str, repo_id: str, tag: str) -> None:
        d = self._existing(repo_type, repo_id)
        P.check_revision(tag)
        with self._thread_lock, FileLock(str(d / ".lock")):
            refs = json.loads((d / "refs.json").read_text())
            if tag not in refs["tags"]:
                raise RevisionNotFound(f"tag {tag} not found")
            del refs["tags"][tag]
            self._write_refs(d, refs)


class BlobWriter:
    """Streams one blob into ``tmp``; ``finish`` checks the digest and moves it into the store."""

    def __init__(self, storage: Storage, expected_sha256: str | None):
        self.storage, self.expected = storage, expected_sha256
        self.tmp = storage.root / "tmp" / f"blob-{uuid.uuid4().hex}"
        self.f = open(self.tmp, "wb")
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, chunk: bytes) -> None:
        self.sha.update(chunk)
        self.size += len(chunk)
        self.f.write(chunk)

    def finish(self) -> FileEntry:
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        digest = self.sha.hexdigest()
        if self.expected is not None and digest != self.expected:
            raise BadRequest(f"uploaded content has sha256 {digest}, expected {self.expected}")
        git = hashlib.sha1(b"blob %d\x00" % self.size)
        with open(self.tmp, "rb") as f:
            while c := f.read(1 << 20):
                git.update(c)
        target = self.storage.blob_path(digest)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.tmp, target)
        return FileEntry(sha256=digest, oid=git.hexdigest(), size=self.size)

    def abort(self) -> None:
        """Drop the partial file (a no-op after ``finish``)."""
        if not self.f.closed:
            self.f.close()
        with _suppress():
            self.tmp.unlink()
