"""Rollback protection: the highest signed package version this machine accepted, per repo and major.

A Hub that was broken into (or anyone with write access to a repo) can put an older, validly signed
build back on branch ``vN``: every signature still verifies. What tells it apart is memory, as in The
Update Framework: a client never goes back to an older version than one it already accepted. After
each load whose signature was checked against a trusted key, the signed ``(major, package version)``
is recorded here; a later load of a floating revision (branch ``vN``, ``main``) that is signed as an
older version of the same major is refused, naming both versions and keys. A revision the user pinned
(``revision=`` a tag or commit, a lock file entry) is the user's explicit choice and is not refused.
Once a signed version was accepted, an *unsigned* build served under the same major is refused the
same way (stripping the signatures is the cheap way round the check), and a load that asked for the
newest version is refused a major older than one accepted before (a Hub hiding branch ``v2``).

A record counts only while the key that signed it is trusted for the org: revoking a compromised key
(removing it from ``KERNELS_TRUSTED_KEYS`` or the keys file) also drops whatever versions it vouched
for, so a version number inflated by the thief does not lock the user out of honest releases.

State lives in the kernels cache (``config.cache_root()``), one JSON file per repo::

    <cache>/.nkihub-accepted/kernel--neuron--vit-attn.json
    {"format": 1, "repo_id": "neuron/vit-attn",
     "majors": {"1": {"version": "1.2.0", "commit": "<40 hex>", "key": "<key id>",
                      "published": "2025-06-01T12:00:00Z", "accepted": "2025-06-02T08:00:00Z"}}}

Every read-check-write runs under a file lock beside the file (``filelock``) and the file is replaced
atomically, so concurrent processes loading the repo neither lose an update nor read half a file.
Deleting the file forgets what was accepted (the next load starts afresh).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from filelock import FileLock

from . import config
from .signing import KernelSignatureError, SignatureCheck

FORMAT = 1
DIRNAME = ".nkihub-accepted"


def state_path(repo_id: str) -> Path:
    """The file that records what was accepted for ``repo_id``."""
    return config.cache_root() / DIRNAME / f"kernel--{repo_id.replace('/', '--')}.json"


def _read(path: Path, repo_id: str) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_bytes())
        majors = data["majors"]
        if data.get("format") != FORMAT or data.get("repo_id") != repo_id or not isinstance(majors, dict):
            raise ValueError("not a record of this repo")
        return majors
    except (ValueError, KeyError, TypeError) as e:
        # never reset silently: that would switch the protection off without a word
        raise ValueError(f"{path}: unreadable record of the signed versions accepted for {repo_id} ({e}); "
                         "delete it to start afresh (this forgets which versions were accepted)") from None


def _write(path: Path, repo_id: str, majors: dict) -> None:
    from nkihub.hub_client.storage import atomic_write

    body = {"format": FORMAT, "repo_id": repo_id, "majors": dict(sorted(majors.items(), key=lambda kv: int(kv[0])))}
    atomic_write(path, (json.dumps(body, indent=1, sort_keys=True) + "\n").encode())


def _lock(path: Path) -> FileLock:
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path) + ".lock")


def _counting(majors: dict, trusted: tuple[str, ...] | None) -> dict:
    """The records whose signing key is still trusted (all of them when ``trusted`` is None)."""
    if trusted is None:
        return majors
    from nkihub.hub_client.signing import key_id

    ids = {key_id(k) for k in trusted}
    return {m: r for m, r in majors.items() if r.get("key") in ids}


def accepted(repo_id: str, major: int, trusted: tuple[str, ...] | None = None) -> dict | None:
    """The record for ``repo_id``'s ``major`` (``version``, ``commit``, ``key`` ...), or None.

    With ``trusted`` (public keys), a record signed by a key not among them does not count.
    """
    path = state_path(repo_id)
    with _lock(path):
        return _counting(_read(path, repo_id), trusted).get(str(major))


def _older(a: str, b: str) -> bool:
    from nkihub.hub_client.signing import parse_version

    return parse_version(a) < parse_version(b)


def accept(repo_id: str, signed: SignatureCheck, *, ref: str, commit: str, pinned: bool, newest: bool = False,
           trusted: tuple[str, ...] | None = None) -> dict | None:
    """Record a checked signature's version, refusing a rollback on a floating ``ref``.

    Returns the record that was there before (None the first time). Raises
    :class:`KernelSignatureError` when ``signed`` is older than the recorded version of its major
    and ``pinned`` is False, or, when the load asked for the ``newest`` major, when a higher major was
    accepted before. A pinned older version loads and leaves the record as it was. Records by keys
    not in ``trusted`` (public keys; None: all count) are ignored and may be replaced.
    """
    path = state_path(repo_id)
    with _lock(path):
        majors = _read(path, repo_id)
        counting = _counting(majors, trusted)
        before = counting.get(str(signed.major))
        higher = max((int(m) for m in counting if int(m) > signed.major), default=None)
        if newest and not pinned and higher is not None:
            top = counting[str(higher)]
            raise KernelSignatureError(
                f"{repo_id}: asked for the newest version, and the Hub's newest is {ref} ({signed.package_version}, "
                f"signed by key {signed.key_id}), but this machine accepted {top['version']} of major {higher} "
                f"(signed by key {top['key']}) before; the Hub hides the newer major: refused. Ask for "
                f"version={signed.major} to load it on purpose")
        if before is not None and _older(signed.package_version, before["version"]):
            if pinned:
                return before
            raise KernelSignatureError(
                f"{repo_id}: rollback refused: {ref} serves {signed.package_version} (commit {commit[:12]}, signed "
                f"by key {signed.key_id}), older than {before['version']} of major {signed.major} that this machine "
                f"accepted before (commit {before['commit'][:12]}, signed by key {before['key']}); the Hub serves an "
                f"older signed build as the current one. To load {signed.package_version} on purpose, pin it: "
                f"revision=\"v{signed.package_version}\" or a kernels.lock entry")
        if before is None or _older(before["version"], signed.package_version):
            majors[str(signed.major)] = {
                "version": signed.package_version, "commit": commit, "key": signed.key_id,
                "published": signed.published,
                "accepted": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
            _write(path, repo_id, majors)
        return before


def refuse_unsigned(repo_id: str, major: int | None, *, ref: str, commit: str,
                    trusted: tuple[str, ...] | None = None) -> None:
    """Refuse an unsigned build served on floating ``ref`` for a major that was accepted signed before."""
    before = accepted(repo_id, major, trusted) if major is not None else None
    if before is not None:
        raise KernelSignatureError(
            f"{repo_id}: {ref} serves an unsigned build (commit {commit[:12]}), but this machine accepted "
            f"{before['version']} of major {major} signed by key {before['key']} (commit {before['commit'][:12]}); "
            "signatures do not disappear from a signed release: refused. To load it on purpose, pin the "
            "revision (a tag, a commit or a kernels.lock entry)")
