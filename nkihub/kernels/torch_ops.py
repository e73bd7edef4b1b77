"""Library kernels as torch custom ops.

Each kernel build registers its functions with ``torch.library.custom_op`` under a namespace unique to
that build (package name, version and the directory it was loaded from), so two versions of a kernel can
be loaded side by side, as Hugging Face kernels' generated ``_ops.py`` does. A fake (meta)
implementation makes ``torch.compile(fullgraph=True)`` trace the op without running it.

    lib = OpLibrary("vit_attn", __version__, __file__)

    @lib.op("vit_attention", fake=lambda q, k, v, scale: torch.empty_like(q))
    def _vit_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
        return launch(vit_attention_kernel, q, k, v, scale)

    ops = lib.ops          # torch.ops.<namespace>; ops.vit_attention(q, k, v, 0.125)

Every op call is routed by the device of its tensor arguments (:mod:`kernels.device`): CPU tensors
run through ``nki.simulate`` (the simulator, which keeps numpy's BLAS off torch's cores while a
Program runs), Neuron tensors run through the Neuron toolchain (``launch`` inside the op picks it),
anything else is a ValueError. Each library counts the real (not fake) calls of its ops in
``lib.calls``, so a test can prove a model ran its kernels rather than a fallback.

This module stands alone (standard library, torch, the public ``nki`` API, :mod:`kernels.device` and
:mod:`kernels.tuned`):
``nkihub publish`` vendors it into every published kernel as that package's op-registration helper,
the way Hugging Face's kernel-builder writes ``_ops.py`` into each build. A published copy keeps its
own registry; :func:`adopt` makes nkihub's :func:`count_calls` and :func:`library_of` see it.
"""
from __future__ import annotations

import collections
import contextvars
import functools
import hashlib
import os
import re
from contextlib import contextmanager
from typing import Callable

import torch

from . import device, tuned

# Every OpLibrary built in this process, by namespace (a re-import of one build shares its ops).
_LIBRARIES: dict[str, "OpLibrary"] = {}
# (device, launch counter) of the op being run when its tensors are on a Neuron device (read by `launch`).
_NEURON_DEVICE: contextvars.ContextVar = contextvars.ContextVar("nkihub_neuron_device", default=None)


def op_namespace(package: str, version: str, origin: str) -> str:
    """A torch op namespace unique to one build of a kernel package: ``_<package>_<version>_<hash>``
    where the hash covers the directory the package was loaded from."""
    digest = hashlib.sha256(os.path.realpath(os.path.dirname(origin)).encode()).hexdigest()[:10]
    clean = re.sub(r"[^0-9a-zA-Z_]", "_", f"{package}_{version}")
    return f"_{clean}_{digest}"


def _tensors(args, kwargs) -> list[torch.Tensor]:
    out = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(t for t in a if isinstance(t, torch.Tensor))
    return out


class OpLibrary:
    """Registers a kernel package's torch ops under one unique namespace."""

    def __init__(self, package: str, version: str, origin: str):
        self.package = package
        self.version = version
        self.namespace = op_namespace(package, version, origin)
        previous = _LIBRARIES.get(self.namespace)
        # the same build imported under a second module name must not register its ops twice
        self.registered: dict[str, object] = previous.registered if previous else {}
        self.calls: collections.Counter = previous.calls if previous else collections.Counter()
        _LIBRARIES[self.namespace] = self

    def __repr__(self) -> str:
        return f"<OpLibrary {self.namespace}: {', '.join(sorted(self.registered)) or 'no ops'}>"

    @property
    def ops(self):
        """``torch.ops.<namespace>``: the registered ops."""
        return getattr(torch.ops, self.namespace)

    def op(self, name: str, *, fake: Callable, mutates_args=(), backward: Callable | None = None,
           setup_context: Callable | None = None) -> Callable:
        """Decorator: register a typed function as ``<namespace>::<name>`` with ``fake`` as its meta
        implementation (and ``backward``/``setup_context`` as its autograd formula, when given);
        returns the custom op object (callable like the function).

        The function is wrapped to route by device, pin threads on the simulator and count calls.
        """
        def register(fn):
            if name in self.registered:
                return self.registered[name]
            schema = torch.library.infer_schema(fn, mutates_args=mutates_args)
            custom = torch.library.custom_op(f"{self.namespace}::{name}", self._routed(name, fn),
                                             mutates_args=mutates_args, schema=schema)
            custom.register_fake(fake)
            if backward is not None:
                custom.register_autograd(backward, setup_context=setup_context)
            self.registered[name] = custom
            return custom
        return register

    def _routed(self, name: str, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def impl(*args, **kwargs):
            tensors = _tensors(args, kwargs)
            backend = device.backend_of(tensors)
            self.calls[name] += 1
            if backend == device.SIMULATOR:
                return fn(*args, **kwargs)
            launched = [0]
            token = _NEURON_DEVICE.set((tensors[0].device, launched))
            try:
                out = fn(*args, **kwargs)
            finally:
                _NEURON_DEVICE.reset(token)
            if not launched[0]:  # the op ran its kernels some other way (the simulator): never silently
                raise RuntimeError(f"{self.qualname(name)} ran no kernel on the Neuron device; its kernels "
                                   "must be called through kernels.torch_ops.launch")
            return out
        return impl

    def has_backward(self, name: str) -> bool:
        """True when op ``name`` has an autograd formula (registered here or on the op directly)."""
        custom = self.registered.get(name)
        return custom is not None and getattr(custom, "_backward_fn", None) is not None

    def qualname(self, name: str) -> str:
        return f"{self.namespace}::{name}"


def libraries() -> list[OpLibrary]:
    """Every kernel build whose ops are registered in this process."""
    return list(_LIBRARIES.values())


def adopt(module) -> list:
    """Register the op libraries of a kernel package imported from elsewhere (a published package
    carries its own copy of this module, with its own registry) so :func:`count_calls`,
    :func:`libraries` and :func:`library_of` see them; returns the libraries found."""
    import sys

    prefix = getattr(module, "__name__", "")
    found = []
    for name, mod in list(sys.modules.items()):
        registry = getattr(mod, "_LIBRARIES", None) if name == prefix or name.startswith(prefix + ".") else None
        if isinstance(registry, dict) and registry is not _LIBRARIES:
            for namespace, lib in registry.items():
                _LIBRARIES.setdefault(namespace, lib)
                found.append(lib)
    return found


def library_of(module) -> OpLibrary:
    """The OpLibrary of a kernel package (a module with ``ops``), ValueError if it has none."""
    namespace = getattr(getattr(module, "ops", None), "name", None)
    if namespace and namespace not in _LIBRARIES:
        adopt(module)
    lib = _LIBRARIES.get(namespace) if namespace else None
    if lib is None:
        raise ValueError(f"module: {getattr(module, '__name__', module)!r} exposes no registered kernel ops")
    return lib


@contextmanager
def count_calls():
    """Count the real calls of every library op inside the block: yields a Counter keyed by
    ``namespace::name`` that is filled in when the block ends."""
    before = {ns: collections.Counter(lib.calls) for ns, lib in _LIBRARIES.items()}
    counts: collections.Counter = collections.Counter()
    try:
        yield counts
    finally:
        for ns, lib in list(_LIBRARIES.items()):
            for name, n in (lib.calls - before.get(ns, collections.Counter())).items():
                counts[f"{ns}::{name}"] += n


def launch(kernel, *args, **kwargs):
    """Run an ``@nki.jit`` kernel on the device of the op being run.

    Inside an op on Neuron tensors the kernel goes to the Neuron toolchain (tensor arguments are moved
    to that device); otherwise it runs through ``nki.simulate`` with contiguous CPU tensors. The
    package's tuned config for these shapes on the current target, if it has one, replaces the
    launcher's keyword constants (:mod:`kernels.tuned`).
    Returns torch tensors (one, or a tuple), as the kernel returns them.
    """
    args, kwargs = tuned.configure(kernel, args, kwargs)
    target, launched = _NEURON_DEVICE.get() or (None, [0])
    if target is None:
        tensors = _tensors(args, kwargs)
        if tensors and device.backend_of(tensors) == device.NEURON:
            target = tensors[0].device
    if target is not None:
        launched[0] += 1
        moved = [a.contiguous().to(target) if isinstance(a, torch.Tensor) else a for a in args]
        return device.neuron_runner(kernel)(*moved, **kwargs)
    import nki  # the public NKI API: nki.simulate runs a kernel on CPU tensors and returns CPU tensors

    args = tuple(a.detach().contiguous() if isinstance(a, torch.Tensor) else a for a in args)
    return nki.simulate(kernel)(*args, **kwargs)


def compiling(target: str):
    """A context manager inside which kernel launches on CPU tensors are compiled for ``target`` (traced,
    checked and allocated, and kept in the kernel's cache as a run keeps them) and return zero-filled
    outputs instead of running (``nki.estimating(cost=False)``); a rule a kernel breaks at these shapes
    raises as its run would. None where the NKI in use has no such mode (AWS's: its compiler decides)."""
    import nki

    estimating = getattr(nki, "estimating", None)
    return None if estimating is None else estimating((target,), cost=False)


DEFAULT_OPCHECK_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def opcheck(op, args: tuple, kwargs: dict | None = None, *, test_utils=DEFAULT_OPCHECK_TESTS) -> dict:
    """``torch.library.opcheck`` on a library op (a custom op object or ``torch.ops`` overload) that
    raises on the first failure and names the op; returns opcheck's per-test result dict."""
    target = getattr(op, "_opoverload", op)
    try:
        return torch.library.opcheck(target, args, kwargs or {}, test_utils=test_utils, raise_exception=True)
    except Exception as exc:
        shapes = [tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args]
        raise AssertionError(f"opcheck failed for {target} with args {shapes}: {exc}") from exc
