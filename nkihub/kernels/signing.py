"""Publisher signatures of kernel builds: signing at publish, checking at load.

``nkihub publish --sign KEY [--expires 30d]`` writes, for each variant, ``signatures/<variant>.json``
(outside ``build/``, which Hugging Face kernels hashes whole): an Ed25519 signature
(:mod:`hub_client.signing`) over the repo id, the variant name, the version (major and package
version), the publish time, an optional expiry, the release (every variant with the digest of its
files) and the base64 sha256 of every file of ``build/<variant>/``, ``metadata.json`` included. A
load checks it against the keys the user trusts for the repo's org (``KERNELS_TRUSTED_KEYS``, the
keys file; :func:`kernels.config.trusted_keys`), on the same bytes it imports. A Hub that serves
altered code with a matching ``metadata.json`` cannot produce a matching signature; whether the
signed build is the *current* one for what was asked is :mod:`kernels.freshness`'s business.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from . import config
from .verify import metadata_of, read_files

SIGNATURES = "signatures/"


class KernelSignatureError(ValueError):
    """A kernel's signature is missing (under ``KERNELS_REQUIRE_SIGNATURE=1``), untrusted, wrong, or
    signs another version or release than the one served (rollback, freeze, mix-and-match)."""


@dataclass(frozen=True)
class SignatureCheck:
    """What a variant's signature says. ``checked``: verified against a key trusted for the org; then
    ``key_id``, ``major`` and ``package_version`` are the signer's word (from the statement, or from the
    signed ``metadata.json`` of a format-1 ``legacy`` document, which names no time, expiry or release)."""

    status: str
    checked: bool = False
    key_id: str | None = None
    major: int | None = None
    package_version: str | None = None
    published: str | None = None
    expires: str | None = None
    release: dict | None = field(default=None, repr=False)
    legacy: bool = False

    def __str__(self) -> str:
        return self.status


def signature_path(variant: str) -> str:
    """Where a variant's signature document lives in a kernel repo (outside ``build/``, which
    Hugging Face kernels hashes whole)."""
    return f"{SIGNATURES}{variant}.json"


def trusted_for(repo_id: str, keys: dict[str, tuple[str, ...]] | None = None) -> tuple[str, ...]:
    """The keys trusted for ``repo_id``'s org (its namespace)."""
    keys = config.trusted_keys() if keys is None else keys
    return keys.get(repo_id.split("/", 1)[0], ())


def verified_document(repo_id: str, variant: str, document: bytes, trusted: tuple[str, ...]) -> dict:
    """Parse ``document``, check it is by a key in ``trusted``, verifies and names ``repo_id``'s ``variant``."""
    from nkihub.hub_client import signing

    org = repo_id.split("/", 1)[0]
    try:
        doc = signing.read_document(document)
        kid = signing.key_id(doc["key"])
    except (signing.SignatureError, ValueError) as e:
        raise KernelSignatureError(f"{repo_id} ({variant}): unreadable signature: {e}") from None
    if doc["key"] not in trusted:
        where = f"trusted keys for {org!r}: {', '.join(signing.key_id(k) for k in trusted)}" if trusted \
            else f"no trusted key for {org!r} (KERNELS_TRUSTED_KEYS or {config.trusted_keys_file()})"
        raise KernelSignatureError(f"{repo_id} ({variant}) is signed by key {kid}, which is not trusted; {where}")
    try:
        signing.verify(doc)
    except signing.SignatureError as e:
        raise KernelSignatureError(f"{repo_id} ({variant}): {e}") from None
    st = doc["statement"]
    if (st.get("repo_id"), st.get("variant")) != (repo_id, variant):
        raise KernelSignatureError(f"{repo_id} ({variant}): the signature by key {kid} was made for "
                                   f"{st.get('repo_id')} ({st.get('variant')}), not for this repo")
    return doc


def check_signature(repo_id: str, variant: str, files: dict[str, bytes], document: bytes | None,
                    keys: dict[str, tuple[str, ...]] | None = None, required: bool | None = None) -> SignatureCheck:
    """Return what the signature says about ``files`` of ``repo_id``'s ``variant``, or raise.

    ``files`` are the verified bytes of every file of the variant (path in the variant -> bytes);
    ``document`` the bytes of its signature document, if the repo has one. ``keys`` (default
    :func:`config.trusted_keys`) are trusted per org, the repo id's namespace. A present signature is
    checked whenever the org has trusted keys or signatures are ``required`` (default
    ``KERNELS_REQUIRE_SIGNATURE``): a forged or replayed signature, one by a key not trusted for the
    org, or one over other files is then refused. An unsigned kernel is refused only when ``required``.
    """
    from nkihub.hub_client import signing

    required = config.require_signature() if required is None else required
    org = repo_id.split("/", 1)[0]
    trusted = trusted_for(repo_id, keys)
    if document is None:
        if required:
            raise KernelSignatureError(
                f"{repo_id} ({variant}) is not signed, and KERNELS_REQUIRE_SIGNATURE=1 refuses unsigned kernels "
                f"(the publisher signs with `nkihub publish --sign KEY`)")
        return SignatureCheck("unsigned")
    if not required and not trusted:
        try:
            kid = signing.key_id(signing.read_document(document)["key"])
        except (signing.SignatureError, ValueError) as e:
            return SignatureCheck(f"unreadable signature ({e})")
        return SignatureCheck(f"signed by {kid} (not checked: no trusted key for {org!r})")
    doc = verified_document(repo_id, variant, document, trusted)
    kid, st = signing.key_id(doc["key"]), doc["statement"]
    actual, signed = signing.digest_set(files), st["files"]
    wrong = [f"{rel} ({'not covered' if rel not in signed else 'missing' if rel not in actual else 'altered'})"
             for rel in sorted(set(actual) | set(signed)) if actual.get(rel) != signed.get(rel)]
    if wrong:
        raise KernelSignatureError(f"{repo_id} ({variant}): files differ from what key {kid} signed: "
                                   f"{', '.join(wrong)}; the Hub serves content its publisher did not sign")
    if signing.is_legacy(doc):
        major, version = _legacy_version(repo_id, variant, kid, files)
        return SignatureCheck(f"signed by {kid}, trusted for {org!r}, as {version} (format 1: no expiry, no release)",
                              True, kid, major, version, legacy=True)
    if st["release"].get(variant) != signing.files_digest(signed):
        raise KernelSignatureError(f"{repo_id} ({variant}): the statement signed by key {kid} names a release "
                                   "whose digest of this variant is not that of its files: refused")
    return SignatureCheck(f"signed by {kid}, trusted for {org!r}, as {st['package_version']}", True, kid,
                          st["version"], st["package_version"], st["published"], st["expires"], st["release"])


def _legacy_version(repo_id: str, variant: str, kid: str, files: dict[str, bytes]) -> tuple[int, str]:
    """A format-1 statement covers ``metadata.json``, so its package version is the signer's word too."""
    from nkihub.hub_client import signing

    version = (metadata_of(files).get("nkihub") or {}).get("package-version")
    try:
        return signing.parse_version(version)[0], version
    except signing.SignatureError:
        raise KernelSignatureError(
            f"{repo_id} ({variant}): key {kid} signed a format-1 statement whose metadata.json names no package "
            "version, so which version it is cannot be told; the publisher re-signs it with `nkihub publish "
            "--sign`") from None


_DURATION = re.compile(r"^(\d+)([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_expiry(text: str, now: datetime) -> datetime:
    """``"30d"`` (also ``s``, ``m``, ``h``, ``w``) after ``now``, or an ISO date/time (UTC unless it says)."""
    text = str(text).strip()
    m = _DURATION.match(text)
    if m:
        when = now + timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
    else:
        try:
            when = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"expiry {text!r}: expected a duration such as 30d, 12h, 2w or an ISO date "
                             "(2026-01-31, 2026-01-31T12:00:00Z)") from None
        when = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    if when <= now:
        raise ValueError(f"expiry {text!r} is not in the future")
    return when


def sign_build(out_dir: str | Path, repo_id: str, key_path: str | Path, *, package_version: str,
               expires: str | None = None, now: datetime | None = None) -> list[str]:
    """Sign every ``build/<variant>/`` of a built repo folder as one release; return the paths written.

    ``key_path`` is a private key from ``nkihub keygen``; a bad key raises (a ``ValueError``) naming it.
    ``expires`` (:func:`parse_expiry`) makes loads after that time warn that the build may be frozen
    (refuse it under ``KERNELS_REQUIRE_SIGNATURE=1``).
    """
    from nkihub.hub_client import signing

    key = signing.load_private_key(key_path)
    now = (now or datetime.now(timezone.utc)).replace(microsecond=0)
    until = parse_expiry(expires, now) if expires is not None else None
    out_dir = Path(out_dir)
    variants = {p.name: read_files(p) for p in sorted((out_dir / "build").iterdir()) if p.is_dir()}
    release = {name: signing.files_digest(signing.digest_set(files)) for name, files in variants.items()}
    written = []
    for name, files in variants.items():
        statement = signing.make_statement(repo_id, name, files, package_version=package_version, published=now,
                                           release=release, expires=until)
        target = out_dir / signature_path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(signing.sign(key, statement), indent=2, sort_keys=True) + "\n")
        written.append(signature_path(name))
    return written
