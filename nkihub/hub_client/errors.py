"""Errors hub_client adds to those of huggingface_hub.

huggingface_hub already has classes for an unknown repo, revision or file, and the server sends
`X-Error-Code` so the client raises them. What it lacks is a way to say "the bytes I got are not the
bytes the Hub recorded", and a clear refusal of names that could escape a storage directory.
"""

from __future__ import annotations


class HubClientError(Exception):
    """Base class of the errors raised by hub_client itself."""


class InvalidNameError(HubClientError, ValueError):
    """A repo id, revision or file path that could escape a directory (``..``, absolute, ``\\``, NUL, too long)."""

    def __init__(self, kind: str, value: str, reason: str):
        self.kind, self.value, self.reason = kind, value, reason
        super().__init__(f"invalid {kind} {value[:200]!r}: {reason}")


class DigestMismatchError(HubClientError, ValueError):
    """A downloaded file does not hash to the digest recorded for it.

    ``path`` names the file inside the repo, ``expected`` and ``actual`` are the digests and
    ``algorithm`` says how they were computed (``git-sha1``, ``sha256`` or ``sha256-base64``).
    """

    def __init__(self, path: str, expected: str, actual: str, algorithm: str, where: str = "",
                 refetched: bool = True, others: tuple[str, ...] = ()):
        self.path, self.expected, self.actual, self.algorithm = path, expected, actual, algorithm
        self.others = tuple(others)  # further files that failed the same check
        again = ("The file was fetched again and still does not match; the Hub copy or the cache is corrupt."
                 if refetched else "Offline, it cannot be fetched again: the cache is corrupt.")
        msg = (
            f"digest mismatch for {path!r}{(' in ' + where) if where else ''}: expected {algorithm} "
            f"{expected}, got {actual}."
            + (f" Also failing: {', '.join(repr(o) for o in self.others[:10])}." if self.others else "")
            + f" {again} Do not load it."
        )
        super().__init__(msg)


class PublishConflictError(HubClientError, RuntimeError):
    """Another writer moved the branch between our read and our commit; nothing was written."""


class RemoteFileCorruptError(HubClientError, OSError):
    """The Hub reported that its stored copy of ``path`` no longer matches its record (a 5xx naming it).

    Refetching cannot help; the Hub's operator has to restore the file. ``where`` is ``repo@revision``.
    """

    def __init__(self, path: str, where: str, server_message: str):
        self.path, self.where = path, where
        super().__init__(f"the Hub's stored copy of {path!r} in {where} is corrupt; nothing was loaded. "
                         f"Server said: {server_message}")
