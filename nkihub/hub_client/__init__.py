"""Talk to a Hugging Face Hub (or the bundled local one) with the official huggingface_hub client.

Stores and serves files, builds and uploads repos from a directory, resolves revisions, downloads
into the cache and verifies digests. Knows nothing of what the files mean, beyond the kernel-repo
layout its server's pages show (variants, their digests and signatures, tuned configs).

Import is cheap: the server (starlette, uvicorn) and huggingface_hub load only when used.
"""

from __future__ import annotations

from .errors import (
    DigestMismatchError,
    HubClientError,
    InvalidNameError,
    PublishConflictError,
    RemoteFileCorruptError,
)

__all__ = [
    "DigestMismatchError",
    "HubClientError",
    "InvalidNameError",
    "PublishConflictError",
    "RemoteFileCorruptError",
    "serve_in_background",
]


def serve_in_background(root, **kwargs):
    """Start the local Hub on a free loopback port; see :func:`hub_client.server.serve_in_background`."""
    from .server import serve_in_background as _serve

    return _serve(root, **kwargs)
