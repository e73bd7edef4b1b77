"""A kernel variant's files against its ``metadata.json``: the second check of a load, on bytes.

The first check (``hub_client.snapshot``) ties each file to the Hub's record; this one ties the files
to each other: every file of the variant is listed in ``metadata.json`` with its base64 sha256 (the
Hugging Face kernels form), and no other file is there. Both run on the bytes that will be imported.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from nkihub.hub_client import DigestMismatchError
from nkihub.hub_client import paths as P
from nkihub.hub_client.digest import b64_sha256

log = logging.getLogger("kernels")
IGNORED = ("metadata.json", "metadata.json.sigstore")


class KernelDigestError(DigestMismatchError):
    """A kernel file does not match the sha256 its variant's metadata.json records."""


def _skipped(rel: str) -> bool:
    parts = rel.split("/")
    return "__pycache__" in parts or rel.endswith((".pyc", ".pyo")) or rel in IGNORED


def read_files(variant_path: str | Path) -> dict[str, bytes]:
    """Every file under a variant directory (path relative to it -> bytes), bytecode left out."""
    variant_path = Path(variant_path)
    out = {}
    for p in sorted(variant_path.rglob("*")):
        rel = p.relative_to(variant_path).as_posix()
        if p.is_file() and ("__pycache__" not in rel.split("/")) and not rel.endswith((".pyc", ".pyo")):
            out[rel] = p.read_bytes()
    return out


def metadata_of(files: dict[str, bytes]) -> dict:
    data = files.get("metadata.json")
    if data is None:
        return {}
    try:
        meta = json.loads(data)
    except ValueError as e:
        raise KernelDigestError("metadata.json", "valid JSON", f"invalid JSON ({e})", "json") from None
    return meta if isinstance(meta, dict) else {}


def check_files(files: dict[str, bytes]) -> list[tuple[str, str, str]]:
    """Files that differ from ``metadata.json``'s digest: ``[(path, expected, actual)]``, empty if all match.

    A listed file missing from ``files`` has actual ``"missing"``, a file not listed has expected
    ``"unlisted"``. Without a digest in metadata.json nothing is checked (and a warning says so).
    """
    digest = metadata_of(files).get("digest")
    if not digest:
        log.warning("metadata.json has no digest; the variant's files are not checked against it")
        return []
    if digest.get("algorithm") != "sha256" or not isinstance(digest.get("files"), dict):
        return [("metadata.json", "algorithm sha256 with files", str(digest.get("algorithm")))]
    expected = digest["files"]
    bad = []
    for rel, want in sorted(expected.items()):
        P.check_path(rel)
        if rel not in files:
            bad.append((rel, want, "missing"))
        elif b64_sha256(files[rel]) != want:
            bad.append((rel, want, b64_sha256(files[rel])))
    bad.extend((rel, "unlisted", "present") for rel in sorted(files) if rel not in expected and not _skipped(rel))
    return bad


def require_match(files: dict[str, bytes], where: str) -> None:
    """Raise :class:`KernelDigestError` naming the first file that does not match ``metadata.json``."""
    bad = check_files(files)
    if bad:
        rel, want, got = bad[0]
        raise KernelDigestError(rel, want, got, "sha256-base64", where=where)


def verify_variant(variant_path: str | Path) -> list[tuple[str, str, str]]:
    """:func:`check_files` on a variant directory as it is on disk (``nkihub verify``, tests)."""
    return check_files(read_files(variant_path))
