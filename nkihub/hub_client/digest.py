"""Digests: git blob ids (what the Hub calls a regular file's oid) and sha256."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

CHUNK = 1 << 20


def git_blob_oid(data: bytes) -> str:
    """The git blob sha1 of ``data`` (``git hash-object``): the Hub's oid and ETag of a regular file."""
    h = hashlib.sha1(b"blob %d\x00" % len(data))
    h.update(data)
    return h.hexdigest()


def file_digests(path: str | os.PathLike) -> tuple[str, str, int]:
    """Return ``(sha256_hex, git_blob_oid, size)`` of a file, reading it once in chunks."""
    size = os.path.getsize(path)
    sha = hashlib.sha256()
    git = hashlib.sha1(b"blob %d\x00" % size)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            sha.update(chunk)
            git.update(chunk)
    return sha.hexdigest(), git.hexdigest(), size


def sha256_file(path: str | os.PathLike) -> str:
    return file_digests(path)[0]


def b64_sha256(data: bytes) -> str:
    """Base64 of the raw sha256 of ``data``: the per-file form Hugging Face kernels' metadata.json uses."""
    return base64.b64encode(hashlib.sha256(data).digest()).decode("ascii")


def hex_to_b64(sha256_hex: str) -> str:
    """A hex sha256 (the Hub's record of a file) in the base64 form metadata.json and signatures use."""
    return base64.b64encode(bytes.fromhex(sha256_hex)).decode("ascii")


def sha256_b64(path: str | os.PathLike) -> str:
    """Base64 of the raw sha256 of a file: the per-file form Hugging Face kernels' metadata.json uses."""
    return hex_to_b64(sha256_file(path))
