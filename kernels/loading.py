"""Load kernels from the Hub: ``kernels.get`` and the Hugging Face ``kernels`` names.

A load resolves a revision (``version=N`` is branch ``vN``), lists the repo's build variants and
picks one for this machine (:mod:`kernels.variants`), downloads only that variant through
:mod:`hub_client` (which checks each file against its Hub digest), checks each file again against
the sha256 in the variant's ``metadata.json``, and imports the package under a module name made of
the repo id, commit and variant, so two versions live side by side in one process.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from hub_client import DigestMismatchError
from hub_client import paths as P

from . import config
from .trust import check_trust
from .variants import NoCompatibleVariantError, VariantSelection, select_variant

log = logging.getLogger("kernels")
REPO_TYPE = "kernel"
_IGNORED = ("metadata.json", "metadata.json.sigstore")
_loaded: dict[str, ModuleType] = {}
_lock = threading.RLock()


class KernelDigestError(DigestMismatchError):
    """A kernel file does not match the sha256 its variant's metadata.json records."""


@dataclass(frozen=True)
class LoadedKernel:
    """What was loaded and why: attached to the module as ``__kernel_info__``."""

    repo_id: str | None
    revision: str | None
    commit: str | None
    variant: str
    path: Path
    selection: VariantSelection
    trust: str

    def __str__(self) -> str:
        head = f"{self.repo_id or self.path} @ {self.revision} ({(self.commit or 'local')[:12]}), variant {self.variant}"
        return f"{head}\ntrust: {self.trust}\n{self.selection.table()}"


# ---- revisions -----------------------------------------------------------------------------------
def major_of(version) -> int:
    """``1``, ``"1"``, ``"v1"``, ``"1.2.3"`` -> 1."""
    if isinstance(version, bool):
        raise ValueError(f"invalid kernel version {version!r}")
    if isinstance(version, int):
        return version
    m = re.fullmatch(r"v?(\d+)(\.\d+)*", str(version).strip())
    if not m:
        raise ValueError(f"invalid kernel version {version!r}: expected a major version such as 1 or 'v1'")
    return int(m.group(1))


def _api(endpoint, token):
    from hub_client.client import hf_api

    return hf_api(config.endpoint(endpoint), config.token(token))


def _cache_repo_dir(repo_id: str) -> Path:
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    cache = config.cache_dir() or Path(constants.HF_HUB_CACHE)
    return cache / repo_folder_name(repo_id=repo_id, repo_type=REPO_TYPE)


def available_versions(repo_id: str, *, endpoint: str | None = None, offline: bool | None = None) -> dict[int, str]:
    """Major version -> commit of branch ``vN`` (from the Hub, or the cache when offline)."""
    offline = config.offline() if offline is None else offline
    out = {}
    if offline:
        refs = _cache_repo_dir(repo_id) / "refs"
        names = {p.name: p.read_text().strip() for p in refs.iterdir()} if refs.is_dir() else {}
    else:
        refs = _api(endpoint, None).list_repo_refs(repo_id, repo_type=REPO_TYPE)
        names = {b.name: b.target_commit for b in refs.branches}
    for name, commit in names.items():
        if re.fullmatch(r"v\d+", name):
            out[int(name[1:])] = commit
    return out


def _select_ref(repo_id, version, revision, endpoint, offline, required: bool) -> str:
    if revision is not None and version is not None:
        raise ValueError("Only one of `revision` or `version` must be specified.")
    if revision is not None:
        return P.check_revision(revision)
    if version is None and required:
        raise ValueError(
            "A kernel version or revision must be specified. Use `version=<major>` for a stable kernel API "
            "version or `revision=<branch/tag/commit>` for an explicit Hub revision (kernels.get picks the newest)."
        )
    versions = available_versions(repo_id, endpoint=endpoint, offline=offline)
    if version is None:
        if not versions:
            raise ValueError(f"{repo_id} has no version branches (v1, v2, ...){' in the cache' if offline else ''}")
        newest = max(versions)
        log.warning("kernels.get(%r): no version given, using v%d (available: %s)", repo_id, newest,
                    ", ".join(f"v{v}" for v in sorted(versions)))
        return f"v{newest}"
    major = major_of(version)
    if major not in versions:
        where = " in the local cache (offline)" if offline else ""
        raise ValueError(f"Version {major} of {repo_id} not found{where}, available versions: "
                         f"{', '.join(str(v) for v in sorted(versions)) or 'none'}")
    if major < max(versions):
        log.warning("You are using version %d of %r, but version %d is available.", major, repo_id, max(versions))
    return f"v{major}"


# ---- variants and digests --------------------------------------------------------------------------
def _remote_variants(repo_id, ref, endpoint) -> list[str]:
    from huggingface_hub.errors import EntryNotFoundError
    from huggingface_hub.hf_api import RepoFolder

    try:
        tree = _api(endpoint, None).list_repo_tree(repo_id, path_in_repo="build", revision=ref, repo_type=REPO_TYPE)
        return [f.path.split("/")[-1] for f in tree if isinstance(f, RepoFolder)]
    except EntryNotFoundError:
        return []


def _cached_commit(repo_id: str, ref: str) -> str | None:
    if P.COMMIT_RE.match(ref):
        return ref
    p = _cache_repo_dir(repo_id) / "refs" / ref
    return p.read_text().strip() if p.is_file() else None


def _local_variants(base: Path) -> list[str]:
    return [p.name for p in base.iterdir() if p.is_dir()] if base.is_dir() else []


def read_metadata(variant_path: Path) -> dict:
    p = Path(variant_path) / "metadata.json"
    return json.loads(p.read_text()) if p.is_file() else {}


def verify_variant(variant_path: Path) -> list[tuple[str, str, str]]:
    """Files of a variant that differ from its metadata.json digest: ``[(path, expected, actual)]``.

    Digests are base64 sha256 per file, as Hugging Face kernels writes them; a file missing from
    disk has actual ``"missing"``, a file not listed has expected ``"unlisted"``.
    """
    from hub_client.digest import sha256_b64

    variant_path = Path(variant_path)
    digest = read_metadata(variant_path).get("digest")
    if not digest:
        log.warning("%s has no digest in metadata.json; its files are not verified", variant_path)
        return []
    if digest.get("algorithm") != "sha256":
        return [("metadata.json", "algorithm sha256", str(digest.get("algorithm")))]
    expected = digest.get("files", {})
    bad = []
    on_disk = {
        p.relative_to(variant_path).as_posix()
        for p in variant_path.rglob("*")
        if (p.is_file()) and "__pycache__" not in p.parts and p.name not in _IGNORED
    }
    for rel, want in sorted(expected.items()):
        P.check_path(rel)
        f = variant_path / rel
        if not f.is_file():
            bad.append((rel, want, "missing"))
            continue
        got = sha256_b64(f)
        if got != want:
            bad.append((rel, want, got))
    bad.extend((rel, "unlisted", "present") for rel in sorted(on_disk - set(expected)))
    return bad


def _check_digests(variant_path: Path, refetch=None) -> None:
    bad = verify_variant(variant_path)
    if bad and refetch is not None:
        refetch([rel for rel, *_ in bad])
        bad = verify_variant(variant_path)
    if bad:
        rel, want, got = bad[0]
        raise KernelDigestError(rel, want, got, "sha256-base64", where=str(variant_path))


# ---- import ----------------------------------------------------------------------------------------
def _package_dir(variant_path: Path) -> Path:
    meta = read_metadata(variant_path)
    if meta.get("name"):
        d = variant_path / meta["name"].replace("-", "_")
        if (d / "__init__.py").is_file():
            return d
    if (variant_path / "__init__.py").is_file():
        return variant_path
    pkgs = [p for p in variant_path.iterdir() if (p / "__init__.py").is_file()] if variant_path.is_dir() else []
    if len(pkgs) != 1:
        raise FileNotFoundError(f"No kernel package found at {variant_path} (expected one directory with __init__.py)")
    return pkgs[0]


def _module_name(*parts: str) -> str:
    return "_kernels_" + "_".join(re.sub(r"[^0-9A-Za-z]", "_", p) for p in parts if p)


def import_variant(variant_path: Path, module_name: str) -> ModuleType:
    """Import the package of a variant directory as ``module_name`` (once per name per process)."""
    with _lock:
        if module_name in _loaded:
            return _loaded[module_name]
        pkg = _package_dir(Path(variant_path))
        spec = importlib.util.spec_from_file_location(module_name, pkg / "__init__.py",
                                                      submodule_search_locations=[str(pkg)])
        if spec is None or spec.loader is None:
            raise ImportError(f"Cannot load kernel package from {pkg}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            for name in [n for n in sys.modules if n == module_name or n.startswith(module_name + ".")]:
                del sys.modules[name]
            raise
        _loaded[module_name] = module
        if "torch" in sys.modules:  # a package that registered torch ops did so in its own (vendored) registry
            from .torch_ops import adopt

            adopt(module)
        return module


# ---- public API --------------------------------------------------------------------------------------
def install_kernel(repo_id: str, *, revision: str | None = None, version=None, backend: str | None = None,
                   local_files_only: bool = False, user_agent=None, trust_remote_code: bool | list[str] = False,
                   endpoint: str | None = None, token: str | None = None) -> Path:
    """Download the variant of a kernel for this machine to the cache; return the variant directory."""
    return _install(repo_id, revision=revision, version=version, backend=backend, offline=local_files_only,
                    trust_remote_code=trust_remote_code, endpoint=endpoint, token=token, required=True)[0].path


def _install(repo_id, *, revision, version, backend, offline, trust_remote_code, endpoint, token, required):
    from hub_client.client import download_snapshot

    P.check_repo_id(repo_id)
    offline = offline or config.offline()
    trust = check_trust(repo_id, trust_remote_code)
    ref = _select_ref(repo_id, version, revision, endpoint, offline, required)
    if offline:
        commit = _cached_commit(repo_id, ref)
        base = _cache_repo_dir(repo_id) / "snapshots" / (commit or "-") / "build"
        names = _local_variants(base)
    else:
        names = _remote_variants(repo_id, ref, endpoint)
    selection = select_variant(names, backend)
    variant = selection.chosen
    if variant is None:
        raise NoCompatibleVariantError(f"Kernel {repo_id} at {ref}", selection)
    kw = dict(repo_type=REPO_TYPE, cache_dir=config.cache_dir(), endpoint=config.endpoint(endpoint),
              token=config.token(token))
    snap = download_snapshot(repo_id, revision=ref, allow_patterns=[f"build/{variant}/*"],
                             local_files_only=offline, **kw)
    variant_path = snap / "build" / variant

    def refetch(rels):
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError

        for rel in rels:
            try:
                hf_hub_download(repo_id, f"build/{variant}/{rel}", revision=snap.name, force_download=True,
                                repo_type=REPO_TYPE, cache_dir=str(kw["cache_dir"]) if kw["cache_dir"] else None,
                                endpoint=kw["endpoint"], token=kw["token"])
            except EntryNotFoundError:
                pass  # listed in metadata.json but absent from the repo: re-verification reports it

    _check_digests(variant_path, None if offline else refetch)
    info = LoadedKernel(repo_id, ref, snap.name, variant, variant_path, selection, trust)
    return info, snap.name


def _load(info: LoadedKernel) -> ModuleType:
    name = _module_name(info.repo_id or "local", (info.commit or "")[:12], info.variant)
    module = import_variant(info.path, name)
    module.__kernel_info__ = info
    return module


def get(repo_id: str, version=None, revision: str | None = None, *, backend: str | None = None,
        trust_remote_code: bool | list[str] = False, endpoint: str | None = None,
        token: str | None = None) -> ModuleType:
    """Load a kernel from the Hub (``neuron/vit-attn``), newest major version unless told otherwise.

    ``version`` is a major version (``1``, ``"v1"``); ``revision`` a branch, tag or commit. With
    neither, the highest ``vN`` branch is used and a warning says which. ``LOCAL_KERNELS``
    overrides the Hub for listed repo ids; ``HF_HUB_OFFLINE=1`` loads from the cache only. The
    module's ``__kernel_info__`` records the commit, the variant and every rejected variant.
    """
    override = config.local_kernels().get(repo_id)
    if override is not None:
        return get_local_kernel(override, backend=backend)
    info, _ = _install(repo_id, revision=revision, version=version, backend=backend, offline=False,
                       trust_remote_code=trust_remote_code, endpoint=endpoint, token=token, required=False)
    return _load(info)


def get_kernel(repo_id: str, *, revision: str | None = None, version=None, backend: str | None = None,
               user_agent=None, trust_remote_code: bool | list[str] = False, check_arch: bool = True,
               endpoint: str | None = None) -> ModuleType:
    """Hugging Face ``kernels.get_kernel``: like :func:`get` but ``version`` or ``revision`` is required."""
    override = config.local_kernels().get(repo_id)
    if override is not None:
        return get_local_kernel(override, backend=backend)
    info, _ = _install(repo_id, revision=revision, version=version, backend=backend, offline=False,
                       trust_remote_code=trust_remote_code, endpoint=endpoint, token=None, required=True)
    return _load(info)


def get_local_kernel(repo_path: Path, *, backend: str | None = None, trust_remote_code=False,
                     user_agent=None) -> ModuleType:
    """Import a kernel from a local repo checkout or snapshot (``repo_path/build/<variant>/<pkg>``)."""
    repo_path = Path(repo_path)
    selection = VariantSelection(())
    for base in (repo_path, repo_path / "build"):
        selection = select_variant(_local_variants(base), backend)
        if selection.chosen is not None:
            variant_path = base / selection.chosen
            _check_digests(variant_path)
            digest = hashlib.sha1(str(variant_path.resolve()).encode()).hexdigest()[:12]
            info = LoadedKernel(None, None, None, selection.chosen, variant_path, selection, "local path")
            module = import_variant(variant_path, _module_name("local", digest, selection.chosen))
            module.__kernel_info__ = info
            return module
    if (repo_path / "__init__.py").is_file() or any((p / "__init__.py").is_file() for p in repo_path.glob("*")):
        digest = hashlib.sha1(str(repo_path.resolve()).encode()).hexdigest()[:12]
        return import_variant(repo_path, _module_name("local", digest))
    if not repo_path.exists():
        raise FileNotFoundError(f"Could not find kernel in {repo_path}")
    raise NoCompatibleVariantError(f"Local kernel {repo_path}", selection)


def has_kernel(repo_id: str, *, revision: str | None = None, version=None, backend: str | None = None,
               trust_remote_code: bool | list[str] = False, check_arch: bool = True,
               endpoint: str | None = None) -> bool:
    """True if the repo has a variant for this machine (checks refs and the tree, downloads nothing)."""
    ref = _select_ref(repo_id, version, revision, endpoint, config.offline(), True)
    if config.offline():
        commit = _cached_commit(repo_id, ref)
        names = _local_variants(_cache_repo_dir(repo_id) / "snapshots" / (commit or "-") / "build")
    else:
        names = _remote_variants(repo_id, ref, endpoint)
    variant = select_variant(names, backend).chosen
    if variant is None:
        return False
    if config.offline():
        return True
    return _api(endpoint, None).file_exists(repo_id, f"build/{variant}/metadata.json", repo_type=REPO_TYPE,
                                            revision=ref)


def load_kernel(repo_id: str, *, lockfile: Path | None = None, backend: str | None = None) -> ModuleType:
    """Load a locked kernel from the cache only (never downloads); ``kernels download`` fetches it."""
    from .lockfile import locked_commit

    commit = locked_commit(repo_id, lockfile)
    try:
        # trust was checked when the lock was written (`kernels lock`); this load never touches the network
        info, _ = _install(repo_id, revision=commit, version=None, backend=backend, offline=True,
                           trust_remote_code=True, endpoint=None, token=None, required=True)
    except (FileNotFoundError, OSError) as e:
        raise FileNotFoundError(
            f"Locked kernel `{repo_id}` ({commit[:12]}) was not downloaded or has no variant for this machine. "
            "Download it with `kernels download <project>`."
        ) from e
    return _load(info)


def get_locked_kernel(repo_id: str, *, lockfile: Path | None = None, trust_remote_code: bool | list[str] = False,
                      user_agent=None, endpoint: str | None = None) -> ModuleType:
    """Load the commit pinned for ``repo_id`` in a ``kernels.lock`` (downloading it if needed)."""
    from .lockfile import locked_commit

    commit = locked_commit(repo_id, lockfile)
    info, _ = _install(repo_id, revision=commit, version=None, backend=None, offline=False,
                       trust_remote_code=trust_remote_code, endpoint=endpoint, token=None, required=True)
    return _load(info)
