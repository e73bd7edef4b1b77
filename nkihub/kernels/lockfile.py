"""Lock files: pin one commit per kernel dependency, in the Hugging Face kernels 0.17 format.

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
import json
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

    def to_json(self) -> dict:
        dep = {"repo-id": self.repo_id}
        if self.version is not None:
            dep["version"] = self.version
        else:
            dep["revision"] = self.revision
        return {"dependency": dep, "lock": {"commit": self.commit}}

    @staticmethod
    def from_json(d: dict) -> "KernelLock":
        dep, lock = d["dependency"], d["lock"]
        commit = lock["commit"]
        if not P.COMMIT_RE.match(commit):
            raise ValueError(f"lock for {dep.get('repo-id')} has an invalid commit {commit!r}")
        return KernelLock(P.check_repo_id(dep["repo-id"]), commit, dep.get("version"), dep.get("revision"))


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
    Path(path).write_text(json.dumps([lk.to_json() for lk in locks], indent=2) + "\n")


def read_lockfile(path: str | Path) -> dict[str, KernelLock]:
    data = json.loads(Path(path).read_text())
    if not isinstance(data, list):
        raise ValueError(f"{path} is not a kernels.lock file (expected a JSON list)")
    return {lk.repo_id: lk for lk in map(KernelLock.from_json, data)}


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
    if lockfile is not None:
        locks = read_lockfile(lockfile)
    else:
        text = _caller_lockfile_text()
        if text is not None:
            locks = {lk.repo_id: lk for lk in map(KernelLock.from_json, json.loads(text))}
        elif Path(LOCKFILE).is_file():
            locks = read_lockfile(LOCKFILE)
        else:
            raise ValueError("Could not find a kernels.lock (caller's package metadata or current directory). "
                             "Lock kernels with `nkihub lock <project>`.")
    if repo_id not in locks:
        raise ValueError(f"Kernel `{repo_id}` is not locked. Please lock it with `nkihub lock <project>`.")
    return locks[repo_id].commit


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
