"""Ed25519 publisher signatures over a kernel build: its file digests and which release it is.

A signature document is JSON::

    {"format": "nkihub-signature/2",
     "statement": {"format": 2, "repo_id": "neuron/vit-attn", "variant": "torch-cpu",
                   "version": 1, "package_version": "1.2.0",
                   "published": "2025-06-01T12:00:00Z", "expires": "2025-07-01T12:00:00Z" or null,
                   "release": {"torch-cpu": "<sha256 hex>", "torch-neuron": "<sha256 hex>"},
                   "files": {"metadata.json": "<base64 sha256>", "vit_attn/__init__.py": "...", ...}},
     "key": "ed25519:<base64 of the 32-byte public key>",
     "signature": "<base64 Ed25519 signature of the canonical statement>"}

The canonical statement is ``json.dumps(statement, sort_keys=True, separators=(",", ":"),
ensure_ascii=True)`` in UTF-8. The statement names its repo and variant (a signed build copied to
another repo does not carry the signer's word with it), the version it is (major = branch ``vN``,
package version = tag ``vX.Y.Z``: a build served under another version is told apart), when it was
signed and, if the publisher chose, until when a client may take it as current (``expires``), and the
release it belongs to: every variant of the release with the digest of its ``files`` map
(:func:`files_digest`), so variants of two releases cannot be combined in one commit. Those are the
protections of The Update Framework against rollback, freeze and mix-and-match attacks, carried by
one signature per variant.

Format 1 (``nkihub-signature/1``, statement ``{"repo_id", "variant", "files"}``, written before
versions were bound) is still read and verified: its version is the one of its signed
``metadata.json`` (a file it covers), and it names no publish time, expiry or release
(:func:`is_legacy`). Keys are written as ``ed25519:<base64>`` (one line, fit for an environment
variable); a key's id is the first 16 hex digits of the sha256 of its raw bytes. Which keys to trust
is the caller's business (``kernels`` reads it per org).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path

from .digest import b64_sha256
from .errors import HubClientError

FORMAT = "nkihub-signature/2"
LEGACY_FORMAT = "nkihub-signature/1"
STATEMENT_FORMAT = 2
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # UTC, whole seconds
_VERSION = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")
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


def files_digest(digests: dict[str, str]) -> str:
    """sha256 hex of a variant's canonical ``files`` map: what a statement's ``release`` names it by."""
    return hashlib.sha256(canonical(digests)).hexdigest()


def parse_version(text: str) -> tuple[int, int, int]:
    """``"1.2.3"`` -> ``(1, 2, 3)``; :class:`SignatureError` for anything but strict MAJOR.MINOR.PATCH."""
    m = _VERSION.match(text) if isinstance(text, str) else None
    if not m:
        raise SignatureError(f"version {text!r} is not MAJOR.MINOR.PATCH")
    return tuple(int(g) for g in m.groups())


def format_time(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime(TIME_FORMAT)


def parse_time(text: str) -> datetime:
    try:
        return datetime.strptime(text, TIME_FORMAT).replace(tzinfo=timezone.utc)
    except (TypeError, ValueError):
        raise SignatureError(f"time {text!r} is not of the form {TIME_FORMAT} (UTC)") from None


def make_statement(repo_id: str, variant: str, files: dict[str, bytes], *, package_version: str,
                   published: datetime, release: dict[str, str], expires: datetime | None = None) -> dict:
    """The statement for ``files`` (path in the variant -> bytes) of ``repo_id``'s ``variant``.

    ``release`` maps every variant of the release (this one included) to :func:`files_digest` of its
    files; ``expires`` (optional) is when a client stops taking the build as current.
    """
    parse_version(package_version)
    digests = digest_set(files)
    if release.get(variant) != files_digest(digests):
        raise SignatureError(f"release {sorted(release)} does not name {variant} with the digest of its files")
    if expires is not None and expires <= published:
        raise SignatureError(f"expiry {format_time(expires)} is not after the publish time {format_time(published)}")
    return {"format": STATEMENT_FORMAT, "repo_id": repo_id, "variant": variant,
            "version": parse_version(package_version)[0], "package_version": package_version,
            "published": format_time(published), "expires": None if expires is None else format_time(expires),
            "release": dict(sorted(release.items())), "files": digests}


def sign(private_key, statement: dict) -> dict:
    """The signature document of ``statement`` (from :func:`make_statement`)."""
    return {"format": FORMAT, "statement": statement, "key": public_key_string(private_key.public_key()),
            "signature": _b64(private_key.sign(canonical(statement)))}


def is_legacy(doc: dict) -> bool:
    """True for a format-1 document: no version, time, expiry or release in its statement."""
    return doc.get("format") == LEGACY_FORMAT


def read_document(data: bytes) -> dict:
    """Parse a signature document and check its shape (not its signature)."""
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise SignatureError(f"signature document is not JSON: {e}") from None
    fmt = doc.get("format") if isinstance(doc, dict) else None
    if fmt not in (FORMAT, LEGACY_FORMAT):
        raise SignatureError(f"signature document has format {fmt!r}, expected {FORMAT!r} (or the older "
                             f"{LEGACY_FORMAT!r}); a newer nkihub may have written it")
    st = doc.get("statement")
    if not (isinstance(st, dict) and isinstance(st.get("files"), dict) and isinstance(doc.get("key"), str)
            and isinstance(doc.get("signature"), str)):
        raise SignatureError("signature document lacks statement.files, key or signature")
    if fmt == FORMAT:
        _check_statement(st)
    return doc


def _check_statement(st: dict) -> None:
    fields = {"format": int, "repo_id": str, "variant": str, "version": int, "package_version": str,
              "published": str, "release": dict}
    bad = [k for k, t in fields.items() if not isinstance(st.get(k), t) or isinstance(st.get(k), bool)]
    if st.get("expires") is not None and not isinstance(st.get("expires"), str):
        bad.append("expires")
    if bad:
        raise SignatureError(f"signed statement lacks or mistypes {', '.join(bad)}")
    if st["format"] != STATEMENT_FORMAT:
        raise SignatureError(f"signed statement has format {st['format']}, expected {STATEMENT_FORMAT}")
    if parse_version(st["package_version"])[0] != st["version"]:
        raise SignatureError(f"signed statement names version {st['version']} and package version "
                             f"{st['package_version']}, which disagree")
    parse_time(st["published"])
    if st["expires"] is not None:
        parse_time(st["expires"])
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in st["release"].items()):
        raise SignatureError("signed statement's release must map variant names to digests")


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
