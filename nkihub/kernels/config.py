"""Configuration of the kernels package, read from the environment when asked, never at import.

Environment variables:

- ``HF_ENDPOINT``: the Hub to talk to (default: huggingface_hub's default).
- ``HF_TOKEN``: the token for writes (default: huggingface_hub's stored token).
- ``HF_HUB_OFFLINE``: ``1`` to work only from the cache.
- ``KERNELS_CACHE``: cache directory for kernel downloads (default: the Hugging Face hub cache); it also
  holds which signed versions were accepted (``.nkihub-accepted/``, :mod:`kernels.accepted`).
- ``LOCAL_KERNELS``: ``repo_id=path:repo_id2=path2`` overrides, as Hugging Face kernels reads it.
- ``KERNELS_TRUSTED_PUBLISHERS``: comma-separated namespaces trusted without
  ``trust_remote_code`` (default ``neuron``).
- ``KERNELS_TRUSTED_KEYS``: publisher keys per org, ``org=ed25519:<base64>`` entries joined by
  commas (an org may appear several times); added to those of the keys file.
- ``KERNELS_TRUSTED_KEYS_FILE``: a TOML file ``[orgs] org = ["ed25519:...", ...]`` (default
  ``$XDG_CONFIG_HOME/nkihub/trusted_keys.toml``, i.e. ``~/.config/nkihub/trusted_keys.toml``).
- ``KERNELS_REQUIRE_SIGNATURE``: ``1`` refuses kernels that are not signed by a trusted key.
- ``NKIHUB_DEBUG``: ``1`` makes the CLI print tracebacks.
- ``NKIHUB_SIM_THREADS``: BLAS threads while the simulator runs inside a torch op
  (default 1; ``0`` leaves thread pools alone).
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_TRUSTED_PUBLISHERS = ("neuron",)
_TRUE = {"1", "on", "yes", "true"}


def endpoint(explicit: str | None = None) -> str | None:
    """The Hub URL without a trailing slash, or None for huggingface_hub's default."""
    value = explicit or os.environ.get("HF_ENDPOINT")
    return value.rstrip("/") if value else None


def token(explicit: str | bool | None = None) -> str | bool | None:
    if explicit is not None:
        return explicit
    return os.environ.get("HF_TOKEN") or None


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def cache_dir() -> Path | None:
    value = os.environ.get("KERNELS_CACHE")
    return Path(value) if value else None


def cache_root() -> Path:
    """Where kernel downloads and nkihub's client state live: ``KERNELS_CACHE``, else the Hugging Face hub cache."""
    from huggingface_hub import constants

    return cache_dir() or Path(constants.HF_HUB_CACHE)


def trusted_publishers(explicit=None) -> tuple[str, ...]:
    if explicit is not None:
        return tuple(explicit)
    value = os.environ.get("KERNELS_TRUSTED_PUBLISHERS")
    if value is None:
        return DEFAULT_TRUSTED_PUBLISHERS
    return tuple(p.strip() for p in value.split(",") if p.strip())


def trusted_keys_file() -> Path:
    value = os.environ.get("KERNELS_TRUSTED_KEYS_FILE")
    if value:
        return Path(value)
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "nkihub" / "trusted_keys.toml"


def trusted_keys() -> dict[str, tuple[str, ...]]:
    """Org -> public keys (``ed25519:<base64>``) trusted to sign its kernels: the keys file, then the env."""
    out: dict[str, list[str]] = {}
    path = trusted_keys_file()
    if path.is_file():
        try:
            import tomllib
        except ImportError:  # Python 3.10
            import tomli as tomllib
        try:
            orgs = tomllib.loads(path.read_text()).get("orgs", {})
        except (ValueError, OSError) as e:
            raise ValueError(f"cannot read the trusted keys file {path}: {e}") from None
        if not isinstance(orgs, dict) or not all(isinstance(v, list) for v in orgs.values()):
            raise ValueError(f"{path}: expected [orgs] with org = [\"ed25519:...\", ...] entries")
        for org, keys in orgs.items():
            out.setdefault(org, []).extend(str(k).strip() for k in keys)
    for entry in os.environ.get("KERNELS_TRUSTED_KEYS", "").split(","):
        if not entry.strip():
            continue
        org, sep, key = entry.partition("=")
        if not sep or not org.strip() or not key.strip():
            raise ValueError(f"Invalid KERNELS_TRUSTED_KEYS entry {entry.strip()!r}: expected org=ed25519:<base64>")
        out.setdefault(org.strip(), []).append(key.strip())
    return {org: tuple(dict.fromkeys(keys)) for org, keys in out.items()}


def require_signature() -> bool:
    return os.environ.get("KERNELS_REQUIRE_SIGNATURE", "").strip().lower() in _TRUE


def local_kernels() -> dict[str, Path]:
    """Parse ``LOCAL_KERNELS`` (``repo_id=path`` entries joined by ``:``)."""
    value = os.environ.get("LOCAL_KERNELS")
    if not value:
        return {}
    out = {}
    for entry in value.split(":"):
        if "=" not in entry:
            raise ValueError(f"Invalid LOCAL_KERNELS entry: {entry!r}. Expected format: repo_id_1=path_1:repo_id_2=path_2")
        repo_id, path = entry.split("=", 1)
        out[repo_id] = Path(path)
    return out


def debug() -> bool:
    return os.environ.get("NKIHUB_DEBUG", "").strip().lower() in _TRUE


def sim_threads() -> int:
    """Threads allowed to BLAS while a simulated kernel runs inside a torch op (0: don't pin)."""
    from nkihub.simulator import config as sim_config

    return sim_config.sim_threads(1)
