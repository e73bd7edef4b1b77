"""A ``neuron`` process-group backend for the emulated device: collectives over gloo on host views.

Each process emulates its NeuronCores; ``torch.distributed.init_process_group("neuron")`` gives a process
group whose collectives take neuron tensors, hand gloo host views of the same memory (no copies: gloo
writes the results straight into the neuron tensors) and return gloo's work objects. CPU tensors pass
through unchanged. What runs over it is whatever runs over gloo: DTensor and the functional collectives
(all_reduce, all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single), broadcast, barrier,
send/recv. It is a test harness for multi-NeuronCore code paths, not a model of Neuron's collective
engines or their speed.

    dist.init_process_group("neuron", rank=rank, world_size=2, init_method="tcp://127.0.0.1:29500")
    torch.neuron.set_device(rank)
    mesh = init_device_mesh("neuron", (2,))
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from .host import to_host

NAME = "neuron"
# ProcessGroup methods forwarded to gloo, every tensor argument (at any list depth) as a host view
_FORWARDED = (
    "allreduce", "allreduce_coalesced", "allgather", "_allgather_base", "allgather_coalesced", "broadcast",
    "reduce", "reduce_scatter", "_reduce_scatter_base", "alltoall", "alltoall_base", "gather", "scatter", "send",
    "recv", "recv_anysource", "barrier", "monitored_barrier",
)
# tensor-list collectives gloo has no binding for: one call of the single-tensor collective per pair
_COALESCED = {"allgather_into_tensor_coalesced": "_allgather_base",
              "reduce_scatter_tensor_coalesced": "_reduce_scatter_base"}


def _host(a):
    if isinstance(a, torch.Tensor):
        return to_host(a) if a.device.type == NAME else a
    if isinstance(a, list):
        return [_host(x) for x in a]
    return a


def _forward(name: str):
    def method(self, *args):
        return getattr(self._gloo, name)(*(_host(a) for a in args))

    method.__name__ = name
    return method


def _coalesced(name: str, single: str):
    def method(self, outputs, inputs, opts):
        from torch._C._distributed_c10d import _create_work_from_future

        for out, inp in zip(outputs, inputs):
            getattr(self._gloo, single)(_host(out), _host(inp), opts).wait()
        done = torch.futures.Future()
        done.set_result(outputs)
        return _create_work_from_future(done)

    method.__name__ = name
    return method


class NeuronProcessGroup(dist.ProcessGroup):
    """A process group over the emulated NeuronCores of several processes, staged through gloo."""

    def __init__(self, store, rank: int, size: int, timeout):
        super().__init__(rank, size)
        self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
        # c10d keeps a process group's name on its backends: gloo holds it (and serves the C++ paths that
        # ask a device's backend directly); the collectives themselves come through the methods below
        for device in ("cpu", NAME):
            self._register_backend(torch.device(device), dist.ProcessGroup.BackendType.GLOO, self._gloo)

    def getBackendName(self) -> str:  # noqa: N802  (c10d's name)
        return NAME

    @property
    def _backend_name(self) -> str:
        return NAME

    def __repr__(self) -> str:
        return f"<NeuronProcessGroup rank={self.rank()} size={self.size()} (emulated, over gloo)>"


for _name in _FORWARDED:
    setattr(NeuronProcessGroup, _name, _forward(_name))
for _name, _single in _COALESCED.items():
    setattr(NeuronProcessGroup, _name, _coalesced(_name, _single))


def _create(store, rank, size, timeout):
    return NeuronProcessGroup(store, rank, size, timeout)


def register() -> None:
    """Register the ``neuron`` backend with torch.distributed (once per process)."""
    if NAME not in dist.Backend.backend_list:
        dist.Backend.register_backend(NAME, _create, devices=[NAME, "cpu"])
