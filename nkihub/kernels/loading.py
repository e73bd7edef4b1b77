"""Load kernels from the Hub: ``kernels.get`` and the Hugging Face ``kernels`` names.

A load resolves a revision (``version=N`` is branch ``vN``), lists the repo's build variants and
picks one for this machine (:mod:`kernels.variants`), then fetches only that variant and its
signature through :mod:`hub_client.snapshot`, which reads every file once and checks its bytes
against the Hub's tree listing (offline: the cache's content-addressed blobs), refetching a bad file
once. Those same bytes are then checked against the variant's ``metadata.json``
(:mod:`kernels.verify`) and its publisher signature (:func:`kernels.signing.check_signature`); a
checked signature must also be of the version asked for, not expired, of one release with the
commit's other variants (:mod:`kernels.freshness`) and no older than what this machine accepted
before (:mod:`kernels.accepted`). Only then is it imported, from memory (:mod:`kernels.importer`):
no file is reopened after its check and no bytecode is read. The module name is made of the repo id, commit and variant, so two versions
live side by side in one process.
"""

from __future__ import annotations

import hashlib
import logging
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from nkihub.hub_client import paths as P

from . import config
from . import accepted, freshness
from .importer import import_verified
from .signing import SIGNATURES, SignatureCheck, check_signature, signature_path, trusted_for
from .trust import check_trust
from .variants import NoCompatibleVariantError, VariantSelection, select_variant
from .verify import KernelDigestError, metadata_of, read_files, require_match, verify_variant

__all__ = ["KernelDigestError", "LoadedKernel", "get", "get_kernel", "get_local_kernel", "get_locked_kernel",
           "has_kernel", "import_variant", "install_kernel", "load_kernel", "verify_variant"]

log = logging.getLogger("kernels")
REPO_TYPE = "kernel"
_loaded: dict[str, ModuleType] = {}
_lock = threading.RLock()


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
    signature: SignatureCheck | None = None  # what the publisher signed (version, time, expiry, release)

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
    from nkihub.hub_client.client import hf_api

    return hf_api(config.endpoint(endpoint), config.token(token))


def _cache_repo_dir(repo_id: str) -> Path:
    from huggingface_hub.file_download import repo_folder_name

    return config.cache_root() / repo_folder_name(repo_id=repo_id, repo_type=REPO_TYPE)


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


# ---- import ----------------------------------------------------------------------------------------
def _package_prefix(files: dict[str, bytes], where: str) -> str:
    """``"<package>/"`` (or ``""``) of the package directory among a variant's files."""
    name = metadata_of(files).get("name")
    if name and f"{name.replace('-', '_')}/__init__.py" in files:
        return f"{name.replace('-', '_')}/"
    if "__init__.py" in files:
        return ""
    pkgs = sorted({rel.split("/")[0] for rel in files if rel.count("/") == 1 and rel.endswith("/__init__.py")})
    if len(pkgs) != 1:
        raise FileNotFoundError(f"No kernel package found at {where} (expected one directory with __init__.py)")
    return pkgs[0] + "/"


def _module_name(*parts: str) -> str:
    return "_kernels_" + "_".join(re.sub(r"[^0-9A-Za-z]", "_", p) for p in parts if p)


def import_variant(variant_path: Path, module_name: str, files: dict[str, bytes] | None = None,
                   where: str | None = None) -> ModuleType:
    """Import the package of a variant as ``module_name`` (once per name per process), from ``files``.

    ``files`` (path in the variant -> bytes) are what a load verified; without them the directory is
    read once now. Either way the modules are compiled from those bytes (:mod:`kernels.importer`).
    """
    with _lock:
        if module_name in _loaded:
            return _loaded[module_name]
        variant_path = Path(variant_path)
        where = where or str(variant_path)
        files = read_files(variant_path) if files is None else files
        prefix = _package_prefix(files, where)
        package = {rel[len(prefix):]: data for rel, data in files.items() if rel.startswith(prefix)}
        module = import_verified(module_name, variant_path / prefix.rstrip("/") if prefix else variant_path,
                                 package, where)
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


def _install(repo_id, *, revision, version, backend, offline, trust_remote_code, endpoint, token, required,
             lock_major: int | None = None):
    """Resolve, choose, fetch and check a variant; return ``(LoadedKernel, verified files)``.

    ``lock_major``: the major a lock file entry names for the pinned commit ``revision``.
    """
    from nkihub.hub_client.snapshot import fetch_snapshot

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
    sig = signature_path(variant)
    snap = fetch_snapshot(repo_id, revision=ref, allow_patterns=[f"build/{variant}/*", f"{SIGNATURES}*"],
                          repo_type=REPO_TYPE,
                          local_files_only=offline, cache_dir=config.cache_dir(), endpoint=config.endpoint(endpoint),
                          token=config.token(token))
    prefix = f"build/{variant}/"
    files = {rel[len(prefix):]: data for rel, data in snap.files.items() if rel.startswith(prefix)}
    where = f"{repo_id}@{snap.commit[:12]} ({variant})"
    require_match(files, where)
    signed = check_signature(repo_id, variant, files, snap.files.get(sig))
    note = _check_current(repo_id, variant, signed, ref, snap, files, offline=offline, endpoint=endpoint,
                          lock_major=lock_major,
                          newest=version is None and revision is None)
    info = LoadedKernel(repo_id, ref, snap.commit, variant, snap.path / "build" / variant, selection,
                        f"{trust}; {signed}{note}", signed)
    return info, files


def _refs(repo_id: str, commit: str, offline: bool, endpoint) -> tuple[set[str], tuple[str, ...]]:
    """``(tag names, version tags at commit)``: from the Hub, or offline from the cache's refs (names only)."""
    if offline:
        refs = _cache_repo_dir(repo_id) / "refs"
        names = {p.name: p.read_text().strip() for p in refs.iterdir() if p.is_file()} if refs.is_dir() else {}
        return set(), tuple(sorted(n for n, c in names.items() if c == commit and freshness.TAG.match(n)))
    tags = _api(endpoint, None).list_repo_refs(repo_id, repo_type=REPO_TYPE).tags
    return {t.name for t in tags}, tuple(sorted(t.name for t in tags if t.target_commit == commit
                                                and freshness.TAG.match(t.name)))


def _check_current(repo_id, variant, signed: SignatureCheck, ref, snap, files, *, offline, endpoint,
                   lock_major, newest) -> str:
    """Version, release, expiry and rollback checks of a checked signature (:mod:`kernels.freshness`)."""
    trusted = trusted_for(repo_id)
    if not signed.checked and not trusted:
        return ""
    tag_names, tags = _refs(repo_id, snap.commit, offline, endpoint)
    request = freshness.Request(ref, snap.commit, freshness.is_pinned(ref, tag_names), tags, lock_major)
    if not signed.checked:  # unsigned, with keys trusted for the org: was this major signed before?
        branch = freshness.BRANCH.match(ref)
        major = int(branch.group(1)) if branch else metadata_of(files).get("version")
        if not request.pinned and isinstance(major, int):
            accepted.refuse_unsigned(repo_id, major, ref=ref, commit=snap.commit, trusted=trusted)
        return ""
    siblings = {rel[len(SIGNATURES):-len(".json")]: data for rel, data in snap.files.items()
                if rel.startswith(SIGNATURES) and rel.endswith(".json") and rel != signature_path(variant)}
    # the variants of the commit that was checked (the branch may have moved since the variant was chosen)
    variants = None if offline else set(_remote_variants(repo_id, snap.commit, endpoint))
    note = freshness.check_current(repo_id, variant, signed, request, siblings=siblings, trusted=trusted,
                                   variants=variants, required=config.require_signature())
    accepted.accept(repo_id, signed, ref=ref, commit=snap.commit, pinned=request.pinned, newest=newest,
                    trusted=trusted)
    return note


def _load(info: LoadedKernel, files: dict[str, bytes]) -> ModuleType:
    name = _module_name(info.repo_id or "local", (info.commit or "")[:12], info.variant)
    where = f"{info.repo_id}@{(info.commit or '')[:12]} ({info.variant})"
    module = import_variant(info.path, name, files, where)
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
    return _load(*_install(repo_id, revision=revision, version=version, backend=backend, offline=False,
                           trust_remote_code=trust_remote_code, endpoint=endpoint, token=token, required=False))


def get_kernel(repo_id: str, *, revision: str | None = None, version=None, backend: str | None = None,
               user_agent=None, trust_remote_code: bool | list[str] = False, check_arch: bool = True,
               endpoint: str | None = None) -> ModuleType:
    """Hugging Face ``kernels.get_kernel``: like :func:`get` but ``version`` or ``revision`` is required."""
    override = config.local_kernels().get(repo_id)
    if override is not None:
        return get_local_kernel(override, backend=backend)
    return _load(*_install(repo_id, revision=revision, version=version, backend=backend, offline=False,
                           trust_remote_code=trust_remote_code, endpoint=endpoint, token=None, required=True))


def get_local_kernel(repo_path: Path, *, backend: str | None = None, trust_remote_code=False,
                     user_agent=None) -> ModuleType:
    """Import a kernel from a local repo checkout or snapshot (``repo_path/build/<variant>/<pkg>``)."""
    repo_path = Path(repo_path)
    selection = VariantSelection(())
    for base in (repo_path, repo_path / "build"):
        selection = select_variant(_local_variants(base), backend)
        if selection.chosen is not None:
            variant_path = base / selection.chosen
            files = read_files(variant_path)
            require_match(files, str(variant_path))
            digest = hashlib.sha1(str(variant_path.resolve()).encode()).hexdigest()[:12]
            info = LoadedKernel(None, None, None, selection.chosen, variant_path, selection, "local path")
            module = import_variant(variant_path, _module_name("local", digest, selection.chosen), files)
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
    """Load a locked kernel from the cache only (never downloads); ``nkihub download`` fetches it."""
    from .lockfile import locked

    lock = locked(repo_id, lockfile)
    commit = lock.commit
    try:
        # trust was checked when the lock was written (`nkihub lock`); this load never touches the network
        info, files = _install(repo_id, revision=commit, version=None, backend=backend, offline=True,
                               trust_remote_code=True, endpoint=None, token=None, required=True,
                               lock_major=lock.version)
    except (FileNotFoundError, OSError) as e:
        raise FileNotFoundError(
            f"Locked kernel `{repo_id}` ({commit[:12]}) was not downloaded or has no variant for this machine. "
            "Download it with `nkihub download <project>`."
        ) from e
    return _load(info, files)


def get_locked_kernel(repo_id: str, *, lockfile: Path | None = None, trust_remote_code: bool | list[str] = False,
                      user_agent=None, endpoint: str | None = None) -> ModuleType:
    """Load the commit pinned for ``repo_id`` in a ``kernels.lock`` (downloading it if needed)."""
    from .lockfile import locked

    lock = locked(repo_id, lockfile)
    return _load(*_install(repo_id, revision=lock.commit, version=None, backend=None, offline=False,
                           trust_remote_code=trust_remote_code, endpoint=endpoint, token=None, required=True,
                           lock_major=lock.version))
