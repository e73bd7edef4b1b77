"""nkihub kernels: load kernels from a Hub (Hugging Face kernels names), publish them, lock them.

``kernels.publish`` is the publishing module; its function is exported as ``publish_kernel``.
Imports are lazy: ``import kernels`` loads neither torch, huggingface_hub, ``nki`` nor
``simulator``; each name below is imported on first use.
"""

from __future__ import annotations

import importlib

# ---- Hub: loading, publishing, locking (kernels.loading / publish / lockfile / trust / variants) ----
_HUB_EXPORTS = {
    "get": "loading",
    "get_kernel": "loading",
    "has_kernel": "loading",
    "get_local_kernel": "loading",
    "install_kernel": "loading",
    "load_kernel": "loading",
    "get_locked_kernel": "loading",
    "KernelDigestError": "loading",
    "LoadedKernel": "loading",
    "publish_kernel": "publish:publish",
    "PublishError": "publish",
    "PublishResult": "publish",
    "UntrustedKernelError": "trust",
    "KernelSignatureError": "signing",
    "NoCompatibleVariantError": "variants",
    "VariantSelection": "variants",
    "select_variant": "variants",
    "lock_kernels": "lockfile",
}

# ---- Layers and torch ops (owned by the kernel-library / layers work): add entries here ----
_LAYER_EXPORTS: dict[str, str] = {
    "kernelize": "layers",
    "Mode": "layers",
    "LayerRepository": "layers",
    "LocalLayerRepository": "layers",
    "LibraryLayerRepository": "layers",
    "KernelizeReport": "layers",
    "use_kernel_forward_from_hub": "layers",
    "replace_kernel_forward_from_hub": "layers",
    "register_kernel_mapping": "layers",
    "use_kernel_mapping": "layers",
    "OpLibrary": "torch_ops",
    "NeuronUnavailableError": "device",
    "make_transformers_attention": "transformers_attention",
    "register_attention_sharding": "distributed",
}

_EXPORTS = {**_HUB_EXPORTS, **_LAYER_EXPORTS}
__all__ = sorted(_EXPORTS)


# Names of Hugging Face kernels 0.19's API that nkihub's kernels does not have. With their distribution
# installed in the same environment (transformers 5.25 and newer require it), code asking this package
# for one of them meant theirs: it gets an ImportError saying which package it found and why.
_HUGGING_FACE_ONLY = frozenset({
    "Benchmark", "CUDAProperties", "Device", "FuncRepository", "KernelizeFallback", "KernelizedFunc",
    "KernelizedLayer", "KernelizedLayers", "LocalFuncRepository", "LockedFuncRepository",
    "LockedLayerRepository", "Metadata", "ROCMProperties", "RepoInfo", "VariantAccepted", "VariantRejected",
    "get_kernel_dep", "get_kernel_variants", "get_kernelized_layers", "get_loaded_kernels",
    "use_kernel_func_from_hub", "use_kernelized_func"})


def _shadowed(name: str) -> ImportError | None:
    """The error for a Hugging Face-only ``name`` when their ``kernels`` distribution is installed here
    too (None otherwise: then a missing name is an AttributeError as usual)."""
    if name not in _HUGGING_FACE_ONLY:
        return None
    from importlib import metadata
    try:
        theirs = metadata.version("kernels")
    except metadata.PackageNotFoundError:
        return None
    return ImportError(
        f"kernels.{name} is Hugging Face kernels' name, but `import kernels` found nkihub's package "
        f"({__file__}). Hugging Face's kernels {theirs} is installed in this environment too (transformers "
        f"5.25 and newer require it) and both are the import package `kernels`, so they cannot share an "
        f"environment: use one without nkihub for transformers >= 5.25, or transformers < 5.25 with nkihub "
        f"(nkihub's docs/hub.md, 'Interop with Hugging Face kernels').", name=name)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        error = _shadowed(name)
        if error is not None:
            raise error
        raise AttributeError(f"module 'kernels' has no attribute {name!r}")
    module, _, attr = module.partition(":")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attr or name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
