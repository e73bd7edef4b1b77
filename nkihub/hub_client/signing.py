"""Ed25519 publisher signatures over a set of file digests (through the ``cryptography`` package).

A signature document is JSON::

    {"format": "nkihub-signature/1",
     "statement": {"repo_id": "neuron/vit-attn", "variant": "torch-cpu",
                   "files": {"metadata.json": "<base64 sha256>", "vit_attn/__init__.py": "...", ...}},
     "key": "ed25519:<base64 of the 32-byte public key>",
     "signature": "<base64 Ed25519 signature of the canonical statement>"}

The canonical statement is ``json.dumps(statement, sort_keys=True, separators=(",", ":"),
ensure_ascii=True)`` in UTF-8. The statement names its repo and variant so a signed build copied to
another repo does not carry the signer's word with it. Keys are written as ``ed25519:<base64>``
(one line, fit for an environment variable); a key's id is the first 16 hex digits of the sha256 of
its raw bytes. Which keys to trust is the caller's business (``kernels`` reads it per org).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

from .digest import b64_sha256
from .errors import HubClientError

FORMAT = "nkihub-signature/1"
PREFIX = "ed25519:"


class SignatureError(HubClientError, ValueError):
    """A key or signature document that cannot be read, or a signature that does not verify."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def parse_public_key(text: str):
    """``ed25519:<base64>`` -> an ``Ed25519PublicKey``; :class:`SignatureError` names what is wrong."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    text = text.strip()
    if not text.startswith(PREFIX):
        raise SignatureError(f"public key {text[:40]!r} must look like {PREFIX}<base64 of 32 bytes>")
    try:
        raw = base64.b64decode(text[len(PREFIX):], validate=True)
        return Ed25519PublicKey.from_public_bytes(raw)
    except ValueError as e:
        raise SignatureError(f"public key {text[:40]!r} is not a 32-byte Ed25519 key in base64: {e}") from None


def public_key_string(public_key) -> str:
    """An ``Ed25519PublicKey`` as ``ed25519:<base64>``."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return PREFIX + _b64(public_key.public_bytes(Encoding.Raw, PublicFormat.Raw))


def key_id(public_key: str) -> str:
    """Short id of a public key string: 16 hex digits of the sha256 of its raw bytes."""
    raw = base64.b64decode(public_key.strip()[len(PREFIX):])
    return hashlib.sha256(raw).hexdigest()[:16]


def generate_key(path: str | os.PathLike) -> str:
    """Write a new private key to ``path`` (PKCS#8 PEM, mode 0600) and its public key to ``path.pub``.

    Refuses to overwrite an existing ``path``. Returns the public key string.
    """
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    path = Path(path)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never readable by others, not even briefly
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    public = public_key_string(key.public_key())
    Path(str(path) + ".pub").write_text(public + "\n")
    return public


def load_private_key(path: str | os.PathLike):
    """Read a private key written by :func:`generate_key` (or any unencrypted PEM Ed25519 key)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    path = Path(path)
    try:
        key = load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError) as e:
        raise SignatureError(f"{path} is not an unencrypted PEM private key: {e}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SignatureError(f"{path} holds a {type(key).__name__}, not an Ed25519 key")
    return key


def canonical(statement: dict) -> bytes:
    return json.dumps(statement, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("utf-8")


def digest_set(files: dict[str, bytes]) -> dict[str, str]:
    """Path -> base64 sha256 of each file's bytes (the form Hugging Face kernels' metadata uses)."""
    return {rel: b64_sha256(data) for rel, data in sorted(files.items())}


def sign(private_key, repo_id: str, variant: str, files: dict[str, bytes]) -> dict:
    """The signature document for ``files`` (path in the variant -> bytes) of ``repo_id``'s ``variant``."""
    statement = {"repo_id": repo_id, "variant": variant, "files": digest_set(files)}
    return {"format": FORMAT, "statement": statement, "key": public_key_string(private_key.public_key()),
            "signature": _b64(private_key.sign(canonical(statement)))}


def read_document(data: bytes) -> dict:
    """Parse a signature document and check its shape (not its signature)."""
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise SignatureError(f"signature document is not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SignatureError(f"signature document has format {doc.get('format') if isinstance(doc, dict) else None!r}, "
                             f"expected {FORMAT!r}")
    st = doc.get("statement")
    if not (isinstance(st, dict) and isinstance(st.get("files"), dict) and isinstance(doc.get("key"), str)
            and isinstance(doc.get("signature"), str)):
        raise SignatureError("signature document lacks statement.files, key or signature")
    return doc


def verify(doc: dict) -> None:
    """Check ``doc["signature"]`` over its statement with ``doc["key"]``; :class:`SignatureError` if it fails.

    This proves only that the holder of ``doc["key"]`` signed the statement: whether that key is
    trusted, and whether the statement matches the files at hand, is for the caller to decide.
    """
    from cryptography.exceptions import InvalidSignature

    public = parse_public_key(doc["key"])
    try:
        public.verify(base64.b64decode(doc["signature"], validate=True), canonical(doc["statement"]))
    except (InvalidSignature, ValueError):
        raise SignatureError(f"the signature by key {key_id(doc['key'])} does not verify: the signed statement "
                             "was altered or the signature is forged") from None
