"""A ``neuron`` process-group backend for the emulated device: collectives over gloo on host views.

Each process emulates its NeuronCores; ``torch.distributed.init_process_group("neuron", ...)`` gives a process
group whose backend, for the neuron device and the CPU alike, is gloo. Every collective reaches gloo through
torch's c10d dispatcher ops (``c10d::allreduce_``, ``c10d::_allgather_base_`` ...), which dispatch on the
device of their tensors; the emulation registers their PrivateUse1 kernels: hand gloo host views of the
neuron tensors (no copies: gloo writes results straight into the neuron tensors' memory) by running the
CPU kernel, and return the caller's neuron tensors. So everything that runs over gloo runs here, by
whichever door it comes in: ``dist.all_reduce`` and friends, the functional collectives, DTensor, and
FSDP2 (which also resizes storages in place: that needs the emulation's C++ part).
(The futures of the returned work objects hold the host views, CPU tensors aliasing the neuron ones.)
It is a test harness for multi-NeuronCore code paths, not a model of Neuron's collective engines or
their speed.

    torch.neuron.set_device(rank)
    dist.init_process_group("neuron", rank=rank, world_size=2, init_method="tcp://127.0.0.1:29500")
    mesh = init_device_mesh("neuron", (2,))
"""
from __future__ import annotations

import warnings

import torch
import torch.distributed as dist

from .host import to_host

NAME = "neuron"
_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_library = None


def _host(a, back: dict):
    if isinstance(a, torch.Tensor):
        if a.device.type != NAME:
            return a
        h = to_host(a)
        back[id(h)] = a
        return h
    if isinstance(a, list):
        return [_host(x, back) for x in a]
    return a


def _back(a, back: dict):
    if isinstance(a, torch.Tensor):
        return back.get(id(a), a)
    if isinstance(a, (list, tuple)):
        return type(a)(_back(x, back) for x in a)
    return a


def _collective(op):
    def kernel(*args, **kwargs):
        back: dict = {}
        hargs = [_host(a, back) for a in args]
        hkwargs = {k: _host(v, back) for k, v in kwargs.items()}
        return _back(op.redispatch(_CPU_KEYS, *hargs, **hkwargs), back)

    return kernel


def _c10d_ops():
    """The c10d collectives torch gives a PrivateUse1 kernel (which would ask the group's neuron backend,
    gloo, to take neuron tensors, and it cannot)."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    for name in torch._C._dispatch_get_all_op_names():
        if name.startswith("c10d::") and has(name, "CPU") and has(name, "PrivateUse1"):
            packet, _, overload = name.split("::", 1)[1].partition(".")
            yield name.split("::", 1)[1], getattr(getattr(torch.ops.c10d, packet), overload or "default")


def _create(store, rank, size, timeout):
    return dist.ProcessGroupGloo(store, rank, size, timeout)


def register() -> None:
    """Register the ``neuron`` backend with torch.distributed and the c10d kernels (once per process)."""
    global _library
    if _library is not None:
        return
    _library = torch.library.Library("c10d", "IMPL")
    with warnings.catch_warnings():   # torch's own PrivateUse1 kernels are replaced, on purpose
        warnings.simplefilter("ignore")
        for name, op in _c10d_ops():
            _library.impl(name, _collective(op), "PrivateUse1")
    if NAME not in dist.Backend.backend_list:
        dist.Backend.register_backend(NAME, _create, devices=[NAME, "cpu"])
