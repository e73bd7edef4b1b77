"""Library kernels as torch custom ops.

Each kernel build registers its functions with ``torch.library.custom_op`` under a namespace unique to
that build (package name, version and the directory it was loaded from), so two versions of a kernel can
be loaded side by side, as Hugging Face kernels' generated ``_ops.py`` does. A fake (meta)
implementation makes ``torch.compile(fullgraph=True)`` trace the op without running it.

    lib = OpLibrary("vit_attn", __version__, __file__)

    @lib.op("vit_attention", fake=lambda q, k, v, scale: torch.empty_like(q))
    def _vit_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
        ...

    ops = lib.ops          # torch.ops.<namespace>; ops.vit_attention(q, k, v, 0.125)
"""
from __future__ import annotations

import hashlib
import os
import re
from typing import Callable

import torch


def op_namespace(package: str, version: str, origin: str) -> str:
    """A torch op namespace unique to one build of a kernel package: ``_<package>_<version>_<hash>``
    where the hash covers the directory the package was loaded from."""
    digest = hashlib.sha256(os.path.realpath(os.path.dirname(origin)).encode()).hexdigest()[:10]
    clean = re.sub(r"[^0-9a-zA-Z_]", "_", f"{package}_{version}")
    return f"_{clean}_{digest}"


class OpLibrary:
    """Registers a kernel package's torch ops under one unique namespace."""

    def __init__(self, package: str, version: str, origin: str):
        self.namespace = op_namespace(package, version, origin)
        self.registered: dict[str, object] = {}

    @property
    def ops(self):
        """``torch.ops.<namespace>``: the registered ops."""
        return getattr(torch.ops, self.namespace)

    def op(self, name: str, *, fake: Callable, mutates_args=()) -> Callable:
        """Decorator: register a typed function as ``<namespace>::<name>`` with ``fake`` as its meta
        implementation; returns the custom op object (callable like the function)."""
        def register(fn):
            qualname = f"{self.namespace}::{name}"
            if name in self.registered:
                return self.registered[name]
            custom = torch.library.custom_op(qualname, mutates_args=mutates_args)(fn)
            custom.register_fake(fake)
            self.registered[name] = custom
            return custom
        return register
