"""Signed means current: the signed build is the version asked for, not frozen, and of one release.

A valid signature proves who made a build, not that it is the build the user asked for today. The
Update Framework names the attacks a Hub (or anyone with write access to a repo) can still make with
validly signed builds, and these checks answer them, on every load whose signature was checked
against a trusted key (:func:`kernels.signing.check_signature`):

- Version binding: the statement names its major and package version. Branch ``vN`` must serve a
  build signed as major N, tag ``vX.Y.Z`` one signed as X.Y.Z, a commit that carries version tags one
  signed as one of them, a lock file entry for major N one signed as major N. Otherwise the Hub serves
  another version's build under the name asked for (v1's snapshot uploaded onto branch ``v2``).
- Rollback: an older version of the same major than one accepted before (:mod:`kernels.accepted`).
- Freeze: a publisher may sign an expiry (``nkihub publish --sign KEY --expires 30d``). A floating
  revision (branch ``vN``, ``main``) whose signature has expired may be a Hub withholding newer
  releases: the load warns (:class:`StaleSignatureWarning`), or is refused under
  ``KERNELS_REQUIRE_SIGNATURE=1``. A pinned revision is the user's choice of an old build and loads.
- Mix-and-match: every statement names its release (all variants with the digest of their files).
  Every signature document in the commit must be of that one release, by a trusted key, and
  online the commit's ``build/`` variants must be exactly the release's.

Each refusal is a :class:`KernelSignatureError` naming the repo, the versions and the key.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone

from nkihub.hub_client import paths as P

from .signing import KernelSignatureError, SignatureCheck, verified_document

BRANCH = re.compile(r"^v(\d+)$")
TAG = re.compile(r"^v(\d+\.\d+\.\d+)$")


class StaleSignatureWarning(UserWarning):
    """A floating revision serves a build whose signed expiry has passed (a possible freeze attack)."""


@dataclass(frozen=True)
class Request:
    """What a load asked for. ``ref`` is the revision as asked (``v2``, ``v2.0.1``, ``main``, a commit);
    ``pinned`` when the user chose that exact build (a tag, a commit, a lock file entry); ``tags`` the
    version tags (``vX.Y.Z``) the Hub lists at ``commit``; ``lock_major`` the major a lock entry names."""

    ref: str
    commit: str
    pinned: bool
    tags: tuple[str, ...] = ()
    lock_major: int | None = None


def is_pinned(ref: str, tag_names=()) -> bool:
    """A commit, a version tag (``vX.Y.Z``) or any name listed among ``tag_names`` is a pin; a branch floats."""
    return bool(P.COMMIT_RE.match(ref) or TAG.match(ref) or ref in set(tag_names))


def _now() -> datetime:
    return datetime.now(timezone.utc)


def check_version(repo_id: str, variant: str, signed: SignatureCheck, request: Request) -> None:
    """Refuse a build signed as another version than ``request`` names."""
    head = f"{repo_id} ({variant})"
    served = (f"the build it serves (commit {request.commit[:12]}) is signed by key {signed.key_id} as "
              f"{signed.package_version} (major {signed.major})")
    branch, tag = BRANCH.match(request.ref), TAG.match(request.ref)
    if branch and int(branch.group(1)) != signed.major:
        raise KernelSignatureError(f"{head}: asked for v{branch.group(1)} (branch {request.ref}), but {served}; the "
                                   f"Hub serves another version's build under {request.ref}: refused")
    if tag and tag.group(1) != signed.package_version:
        raise KernelSignatureError(f"{head}: asked for {tag.group(1)} (tag {request.ref}), but {served}; the Hub "
                                   f"points {request.ref} at another version's build: refused")
    if request.lock_major is not None and request.lock_major != signed.major:
        raise KernelSignatureError(f"{head}: kernels.lock pins major {request.lock_major} at commit "
                                   f"{request.commit[:12]}, but {served}: refused")
    versions = sorted({m.group(1) for t in request.tags if (m := TAG.match(t))})
    if versions and signed.package_version not in versions:
        raise KernelSignatureError(f"{head}: commit {request.commit[:12]} is tagged "
                                   f"{', '.join('v' + v for v in versions)}, but {served}: refused")


def check_expiry(repo_id: str, variant: str, signed: SignatureCheck, request: Request, required: bool,
                 now: datetime | None = None) -> str:
    """Warn about (or, when ``required``, refuse) a floating revision whose signature has expired.

    Returns a note for ``__kernel_info__.trust`` ("" when the signature names no expiry or is current).
    """
    from nkihub.hub_client.signing import parse_time

    if signed.expires is None:
        return ""
    now = now or _now()
    if now <= parse_time(signed.expires):
        return f", current until {signed.expires}"
    if request.pinned:
        return f", expired {signed.expires} (pinned revision {request.ref}: loaded)"
    msg = (f"{repo_id} ({variant}): the signature of {signed.package_version} by key {signed.key_id} expired at "
           f"{signed.expires} (published {signed.published}); {request.ref} may be frozen, a Hub withholding newer "
           "releases would look like this (the publisher renews it by publishing a new version)")
    if required:
        raise KernelSignatureError(msg + "; refused under KERNELS_REQUIRE_SIGNATURE=1")
    warnings.warn(msg, StaleSignatureWarning, stacklevel=4)
    return f", STALE: expired {signed.expires}"


def _header(st: dict) -> tuple:
    return tuple(st.get(k) for k in ("version", "package_version", "published", "expires", "release"))


def check_release(repo_id: str, variant: str, signed: SignatureCheck, request: Request, siblings: dict[str, bytes],
                  trusted: tuple[str, ...], variants: set[str] | None = None) -> None:
    """Refuse a commit whose variants do not all belong to the release ``signed`` names.

    ``siblings``: the other variants' signature documents in the commit (variant -> bytes); ``variants``:
    the ``build/`` variants the Hub lists at the commit (None offline, where only signatures are known).
    """
    from nkihub.hub_client import signing

    where = f"{repo_id} commit {request.commit[:12]}"
    ours = f"{variant} is {signed.package_version}" + (f" (published {signed.published}" if signed.published else " (")
    ours += f", key {signed.key_id})"
    for name, data in sorted(siblings.items()):
        doc = verified_document(repo_id, name, data, trusted)
        st, kid = doc["statement"], signing.key_id(doc["key"])
        if signed.legacy or signing.is_legacy(doc):
            if signed.legacy and signing.is_legacy(doc):
                continue  # format 1 names no release: nothing to compare
            raise KernelSignatureError(f"{where}: mixed releases: {ours}, but {name} is signed in another statement "
                                       f"format by key {kid}; a commit holds one release: refused")
        if name not in signed.release:
            raise KernelSignatureError(f"{where}: {name} (signed by key {kid} as {st['package_version']}) is not part "
                                       f"of the release {variant} belongs to ({ours}): refused")
        if _header(st) != _header({"version": signed.major, "package_version": signed.package_version,
                                   "published": signed.published, "expires": signed.expires,
                                   "release": signed.release}) or st["release"].get(name) != \
                signing.files_digest(st["files"]):
            raise KernelSignatureError(f"{where}: mixed releases: {ours}, but {name} is {st['package_version']} "
                                       f"(published {st['published']}, key {kid}); a commit holds one release: refused")
    if signed.legacy:
        return
    missing = sorted(set(signed.release) - {variant} - set(siblings))
    if missing:
        raise KernelSignatureError(f"{where}: the release {signed.package_version} signed by key {signed.key_id} names "
                                   f"{', '.join(missing)}, which the commit has no signature for "
                                   f"({', '.join('signatures/' + m + '.json' for m in missing)}): not that release "
                                   "as a whole: refused")
    if variants is not None and set(variants) != set(signed.release):
        extra, gone = sorted(set(variants) - set(signed.release)), sorted(set(signed.release) - set(variants))
        raise KernelSignatureError(
            f"{where}: the release {signed.package_version} signed by key {signed.key_id} has variants "
            f"{', '.join(sorted(signed.release))}, but the commit's build/ "
            + (f"also holds {', '.join(extra)}" if extra else f"lacks {', '.join(gone)}") + ": refused")


def check_current(repo_id: str, variant: str, signed: SignatureCheck, request: Request, *,
                  siblings: dict[str, bytes], trusted: tuple[str, ...], variants: set[str] | None,
                  required: bool) -> str:
    """All of the above for a checked signature; returns the note for ``__kernel_info__.trust``."""
    check_version(repo_id, variant, signed, request)
    check_release(repo_id, variant, signed, request, siblings, trusted, variants)
    return check_expiry(repo_id, variant, signed, request, required)
