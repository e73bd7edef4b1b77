"""nkihub kernels: load kernels from a Hub (Hugging Face kernels names), publish them, lock them.

    from nkihub import kernels
    kernels.get("neuron/vit-attn")

``kernels.publish`` is the publishing module; its function is exported as ``publish_kernel``.
Imports are lazy: ``from nkihub import kernels`` loads neither torch, huggingface_hub, ``nkihub.nki`` nor
``nkihub.simulator``; each name below is imported on first use.
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
    "StaleSignatureWarning": "freshness",
    "NoCompatibleVariantError": "variants",
    "VariantSelection": "variants",
    "select_variant": "variants",
    "lock_kernels": "lockfile",
}

# ---- Layers and torch ops (owned by the kernel-library / layers work): add entries here ----
_LAYER_EXPORTS: dict[str, str] = {
    "kernelize": "layers",
    "Mode": "layers",
    "Device": "layers",
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


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, attr = module.partition(":")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attr or name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
