"""Lock files: pin one commit per kernel dependency, in Hugging Face kernels' format (read and written by
their ``KernelLocks``, so a lock file either tool writes, the other reads).

``pyproject.toml``::

    [tool.kernels.dependencies]
    "neuron/vit-attn" = 1          # major version (branch v1); a string is a revision

``kernels.lock`` (written by ``nkihub lock``)::

    [{"dependency": {"repo-id": "neuron/vit-attn", "version": 1},
      "lock": {"commit": "<40 hex>"}}]
"""

from __future__ import annotations

import importlib.metadata
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path

from nkihub.hub_client import paths as P

from . import config

LOCKFILE = "kernels.lock"


@dataclass(frozen=True)
class KernelLock:
    repo_id: str
    commit: str
    version: int | None = None  # the major version asked for, or None when pinned by revision
    revision: str | None = None

    def dependency(self):
        """This lock's dependency as Hugging Face kernels' ``KernelDependency``."""
        from kernels._rust import KernelDependency, KernelVersion

        version = KernelVersion.Version(self.version) if self.version is not None else \
            KernelVersion.Revision(self.revision)
        return KernelDependency(self.repo_id, version)


def parse_locks(text: str, where: str) -> dict[str, KernelLock]:
    """The locks of a ``kernels.lock`` text (parsed by Hugging Face kernels' ``KernelLocks``), by repo id;
    ValueError naming ``where`` when it is not one."""
    from kernels._rust import KernelLocks, KernelVersion

    try:
        locks = KernelLocks.from_json(text)
    except ValueError as exc:
        raise ValueError(f"{where} is not a kernels.lock file: {exc}") from exc
    out = {}
    for dep, lock in locks.items():
        version = dep.version
        out[P.check_repo_id(dep.repo_id)] = KernelLock(
            dep.repo_id, str(lock.commit),
            version=version.version if isinstance(version, KernelVersion.Version) else None,
            revision=version.revision if isinstance(version, KernelVersion.Revision) else None)
    return out


def read_dependencies(project_dir: str | Path) -> dict:
    """``[tool.kernels.dependencies]`` of ``project_dir/pyproject.toml``: repo id -> version or revision."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    path = Path(project_dir) / "pyproject.toml"
    with open(path, "rb") as f:
        data = tomllib.load(f)
    deps = data.get("tool", {}).get("kernels", {}).get("dependencies")
    if not deps:
        raise ValueError(f"{path} has no [tool.kernels.dependencies] table")
    return dict(deps)


def lock_kernels(project_dir: str | Path, *, endpoint: str | None = None,
                 trust_remote_code: bool | list[str] = False) -> list[KernelLock]:
    """Resolve every dependency to a commit and write ``project_dir/kernels.lock``."""
    from .loading import _api, available_versions, major_of
    from .trust import check_trust

    locks = []
    for repo_id, spec in sorted(read_dependencies(project_dir).items()):
        P.check_repo_id(repo_id)
        check_trust(repo_id, trust_remote_code)
        if isinstance(spec, int) or (isinstance(spec, str) and spec.lstrip("v").isdigit()):
            major = major_of(spec)
            versions = available_versions(repo_id, endpoint=endpoint, offline=False)
            if major not in versions:
                raise ValueError(f"Version {major} of {repo_id} not found, available versions: "
                                 f"{', '.join(map(str, sorted(versions))) or 'none'}")
            locks.append(KernelLock(repo_id, versions[major], version=major))
        else:
            revision = P.check_revision(str(spec))
            sha = _api(endpoint, None).repo_info(repo_id, repo_type="kernel", revision=revision).sha
            locks.append(KernelLock(repo_id, sha, revision=revision))
    write_lockfile(Path(project_dir) / LOCKFILE, locks)
    return locks


def write_lockfile(path: Path, locks: list[KernelLock]) -> None:
    """Write ``locks`` to ``path`` as Hugging Face kernels writes a lock file."""
    from kernels._rust import KernelLock as HfLock, KernelLocks

    Path(path).write_text(KernelLocks({lk.dependency(): HfLock(lk.commit) for lk in locks}).to_json() + "\n")


def read_lockfile(path: str | Path) -> dict[str, KernelLock]:
    """The locks of the lock file at ``path``, by repo id."""
    return parse_locks(Path(path).read_text(), str(path))


def _caller_lockfile_text() -> str | None:
    """kernels.lock shipped in the metadata of the distribution that called us (as HF kernels does)."""
    here = sys.modules[__name__.rsplit(".", 1)[0]]
    for frame in inspect.stack()[1:]:
        module = inspect.getmodule(frame.frame)
        if module is None or module.__name__.split(".")[0] == here.__name__:
            continue
        top = module.__name__.split(".")[0]
        for dist in importlib.metadata.packages_distributions().get(top, []):
            text = importlib.metadata.distribution(dist).read_text(LOCKFILE)
            if text:
                return text
        return None
    return None


def locked_commit(repo_id: str, lockfile: str | Path | None = None) -> str:
    """The commit pinned for ``repo_id``: from ``lockfile``, else the caller's distribution, else ./kernels.lock."""
    return locked(repo_id, lockfile).commit


def locked(repo_id: str, lockfile: str | Path | None = None) -> KernelLock:
    """The lock entry of ``repo_id`` (commit, and the major version asked for): as :func:`locked_commit` finds it."""
    if lockfile is not None:
        locks = read_lockfile(lockfile)
    else:
        text = _caller_lockfile_text()
        if text is not None:
            locks = parse_locks(text, "the caller's kernels.lock")
        elif Path(LOCKFILE).is_file():
            locks = read_lockfile(LOCKFILE)
        else:
            raise ValueError("Could not find a kernels.lock (caller's package metadata or current directory). "
                             "Lock kernels with `nkihub lock <project>`.")
    if repo_id not in locks:
        raise ValueError(f"Kernel `{repo_id}` is not locked. Please lock it with `nkihub lock <project>`.")
    return locks[repo_id]


def download_locked(project_dir: str | Path, *, all_variants: bool = False, endpoint: str | None = None) -> list[Path]:
    """Fetch every locked kernel into the cache (the variant for this machine, or all variants)."""
    from nkihub.hub_client.client import download_snapshot

    from .loading import install_kernel

    out = []
    for repo_id, lk in read_lockfile(Path(project_dir) / LOCKFILE).items():
        if all_variants:
            out.append(download_snapshot(repo_id, revision=lk.commit, allow_patterns=["build/*", "signatures/*"],
                                         cache_dir=config.cache_dir(), endpoint=config.endpoint(endpoint),
                                         token=config.token()) / "build")
        else:
            out.append(install_kernel(repo_id, revision=lk.commit, trust_remote_code=True, endpoint=endpoint))
    return out
