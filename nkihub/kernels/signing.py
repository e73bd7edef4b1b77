"""Publisher signatures of kernel builds: signing at publish, checking at load.

``nkihub publish --sign KEY`` writes, for each variant, ``signatures/<variant>.json`` (outside
``build/``, which Hugging Face kernels hashes whole): an Ed25519 signature (:mod:`hub_client.signing`)
over the repo id, the variant name and the base64 sha256 of every file of ``build/<variant>/``,
``metadata.json`` included. A load checks it against the keys the user trusts for the repo's org
(``KERNELS_TRUSTED_KEYS``, the keys file; :func:`kernels.config.trusted_keys`), on the same bytes it
imports. A Hub that serves altered code with a matching ``metadata.json`` cannot produce a matching
signature.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import config
from .verify import read_files
class KernelSignatureError(ValueError):
    """A kernel's signature is missing (under ``KERNELS_REQUIRE_SIGNATURE=1``), untrusted or wrong."""


def signature_path(variant: str) -> str:
    """Where a variant's signature document lives in a kernel repo (outside ``build/``, which
    Hugging Face kernels hashes whole)."""
    return f"signatures/{variant}.json"


def check_signature(repo_id: str, variant: str, files: dict[str, bytes], document: bytes | None,
                    keys: dict[str, tuple[str, ...]] | None = None, required: bool | None = None) -> str:
    """Return what the signature says about ``files`` of ``repo_id``'s ``variant``, or raise.

    ``files`` are the verified bytes of every file of the variant (path in the variant -> bytes);
    ``document`` the bytes of its signature document, if the repo has one. ``keys`` (default
    :func:`config.trusted_keys`) are trusted per org, the repo id's namespace. A present signature is
    checked whenever the org has trusted keys or signatures are ``required`` (default
    ``KERNELS_REQUIRE_SIGNATURE``): a forged, replayed or stale signature, or one by a key not
    trusted for the org, is then refused. An unsigned kernel is refused only when ``required``.
    """
    from nkihub.hub_client import signing

    keys = config.trusted_keys() if keys is None else keys
    required = config.require_signature() if required is None else required
    org = repo_id.split("/", 1)[0]
    trusted = keys.get(org, ())
    if document is None:
        if required:
            raise KernelSignatureError(
                f"{repo_id} ({variant}) is not signed, and KERNELS_REQUIRE_SIGNATURE=1 refuses unsigned kernels "
                f"(the publisher signs with `nkihub publish --sign KEY`)")
        return "unsigned"
    try:
        doc = signing.read_document(document)
        kid = signing.key_id(doc["key"])
    except (signing.SignatureError, ValueError) as e:
        if required or trusted:
            raise KernelSignatureError(f"{repo_id} ({variant}): unreadable signature: {e}") from None
        return f"unreadable signature ({e})"
    if not required and not trusted:
        return f"signed by {kid} (not checked: no trusted key for {org!r})"
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
    actual, signed = signing.digest_set(files), st["files"]
    wrong = [f"{rel} ({'not covered' if rel not in signed else 'missing' if rel not in actual else 'altered'})"
             for rel in sorted(set(actual) | set(signed)) if actual.get(rel) != signed.get(rel)]
    if wrong:
        raise KernelSignatureError(f"{repo_id} ({variant}): files differ from what key {kid} signed: "
                                   f"{', '.join(wrong)}; the Hub serves content its publisher did not sign")
    return f"signed by {kid}, trusted for {org!r}"


def sign_build(out_dir: str | Path, repo_id: str, key_path: str | Path) -> list[str]:
    """Sign every ``build/<variant>/`` of a built repo folder; return the signature paths written.

    ``key_path`` is a private key from ``nkihub keygen``; a bad key raises (a ``ValueError``) naming it.
    """
    from nkihub.hub_client import signing

    key = signing.load_private_key(key_path)
    out_dir, written = Path(out_dir), []
    for vdir in sorted(p for p in (out_dir / "build").iterdir() if p.is_dir()):
        doc = signing.sign(key, repo_id, vdir.name, read_files(vdir))
        target = out_dir / signature_path(vdir.name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        written.append(signature_path(vdir.name))
    return written
