"""Who may run code from the Hub: allow-listed publishers, or an explicit ``trust_remote_code``."""

from __future__ import annotations

from . import config


class UntrustedKernelError(ValueError):
    """The repo's publisher is not allow-listed and ``trust_remote_code`` was not given."""


def check_trust(repo_id: str, trust_remote_code: bool | list[str] = False, trusted_publishers=None) -> str:
    """Return why ``repo_id`` may be loaded, or raise :class:`UntrustedKernelError`.

    ``trust_remote_code`` is ``True`` (trust anything) or, as in Hugging Face kernels, a list of
    repo ids trusted in addition to the publishers. The publisher is the namespace of the repo id.
    """
    if trust_remote_code is True:
        return "trust_remote_code=True"
    if isinstance(trust_remote_code, (list, tuple, set)) and repo_id in trust_remote_code:
        return f"{repo_id} is in trust_remote_code"
    publishers = config.trusted_publishers(trusted_publishers)
    publisher = repo_id.split("/", 1)[0]
    if publisher in publishers:
        return f"publisher {publisher!r} is trusted"
    raise UntrustedKernelError(
        f"Kernel repository {repo_id!r} is not from a trusted publisher (trusted: {', '.join(publishers) or 'none'}). "
        "Kernels run code in your process: pass trust_remote_code=True (or a list of repo ids), or add the "
        "publisher to KERNELS_TRUSTED_PUBLISHERS."
    )
