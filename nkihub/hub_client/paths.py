"""Validation of repo ids, revisions and paths inside a repo.

Used by the server before any name reaches the disk, and by the client before a name reaches the
network. The rules are deliberately narrower than git's: a name that is accepted maps to exactly one
place under the storage root and can never climb out of it.
"""

from __future__ import annotations

import re

from .errors import InvalidNameError

MAX_NAME = 96  # one repo id component
MAX_REVISION = 255
MAX_PATH = 1024  # a whole path in a repo
MAX_SEGMENT = 255  # one path component (typical filesystem limit)

_REPO_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_REF_SEGMENT = re.compile(r"^[A-Za-z0-9._+-]+$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
REPO_TYPES = ("model", "dataset", "space", "kernel")


def _common(kind: str, value: str, limit: int) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidNameError(kind, str(value), "empty")
    if len(value) > limit:
        raise InvalidNameError(kind, value, f"longer than {limit} characters")
    if "\x00" in value:
        raise InvalidNameError(kind, value, "contains NUL")
    if "\\" in value:
        raise InvalidNameError(kind, value, "contains a backslash")
    if any(ord(c) < 32 for c in value):
        raise InvalidNameError(kind, value, "contains a control character")


def check_repo_type(repo_type: str | None) -> str:
    """Return the canonical repo type (``None`` means ``model``)."""
    repo_type = repo_type or "model"
    if repo_type not in REPO_TYPES:
        raise InvalidNameError("repo type", repo_type, f"must be one of {', '.join(REPO_TYPES)}")
    return repo_type


def check_repo_id(repo_id: str) -> str:
    """``namespace/name``, each part ``[A-Za-z0-9][A-Za-z0-9._-]*``, no ``..``."""
    _common("repo id", repo_id, 2 * MAX_NAME + 1)
    parts = repo_id.split("/")
    if len(parts) != 2:
        raise InvalidNameError("repo id", repo_id, "must be namespace/name")
    for part in parts:
        if len(part) > MAX_NAME:
            raise InvalidNameError("repo id", repo_id, f"a part is longer than {MAX_NAME} characters")
        if not _REPO_PART.match(part) or ".." in part or part.endswith((".git", ".")):
            raise InvalidNameError("repo id", repo_id, "parts must match [A-Za-z0-9][A-Za-z0-9._-]* without '..'")
    return repo_id


def check_revision(revision: str) -> str:
    """A branch, tag or commit id: slash-separated segments of ``[A-Za-z0-9._+-]``, no ``..``."""
    _common("revision", revision, MAX_REVISION)
    if revision.startswith("/") or revision.endswith("/"):
        raise InvalidNameError("revision", revision, "must not start or end with '/'")
    for seg in revision.split("/"):
        if not seg or seg in (".", "..") or ".." in seg or not _REF_SEGMENT.match(seg):
            raise InvalidNameError("revision", revision, "segments must match [A-Za-z0-9._+-]+ without '..'")
        if seg.endswith(".lock"):
            raise InvalidNameError("revision", revision, "segments must not end with '.lock'")
    return revision


def check_path(path: str, kind: str = "path") -> str:
    """A relative POSIX path inside a repo: no empty, ``.`` or ``..`` segments, not absolute."""
    _common(kind, path, MAX_PATH)
    if path.startswith("/"):
        raise InvalidNameError(kind, path, "is absolute")
    if re.match(r"^[A-Za-z]:", path):
        raise InvalidNameError(kind, path, "looks like a drive path")
    for seg in path.split("/"):
        if seg in ("", ".", ".."):
            raise InvalidNameError(kind, path, "has an empty, '.' or '..' segment")
        if len(seg) > MAX_SEGMENT:
            raise InvalidNameError(kind, path, f"has a segment longer than {MAX_SEGMENT}")
    if path == ".git" or path.startswith(".git/"):
        raise InvalidNameError(kind, path, "is inside .git")
    return path
