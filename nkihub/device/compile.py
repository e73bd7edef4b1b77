"""``torch.compile(backend="neuron")`` for the emulated device.

Dynamo captures the graph (custom ops such as nkihub's kernel ops stay in it as single nodes, through
their fake implementations), AOTAutograd lowers it to aten and functionalises it (forward and backward),
and the graphs run op by op on the emulated device: each aten op through the CPU kernels, each kernel op
on the simulator. Nothing is compiled for a NeuronCore; what this checks is that the model captures (with
``fullgraph=True``: no graph breaks) and that the captured graph computes what eager does. The aten
graphs of this process are kept in :func:`graphs` for tests and inspection.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys

NAME = "neuron"
_GRAPHS: list = []
_REGISTRY = "torch._dynamo.backends.registry"


def graphs() -> list:
    """The aten GraphModules the ``neuron`` backend ran in this process (forward and backward), oldest
    first."""
    return list(_GRAPHS)


def _run_eagerly(gm, example_inputs):
    from functorch.compile import make_boxed_func

    _GRAPHS.append(gm)
    return make_boxed_func(gm.forward)


def neuron_backend(gm, example_inputs, **kwargs):
    """The ``neuron`` compile backend: AOTAutograd to aten graphs, run op by op on the emulated device."""
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(fw_compiler=_run_eagerly, bw_compiler=_run_eagerly)(gm, example_inputs, **kwargs)


def _register(registry) -> None:
    if NAME not in registry._COMPILER_FNS:
        registry.register_backend(neuron_backend, name=NAME)


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs ``callback(module)`` once module ``name`` has been imported (so registering the backend does not
    import torch._dynamo, a second of start-up, in processes that never compile)."""

    def __init__(self, name: str, callback):
        self.name, self.callback, self.loader = name, callback, None

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or self.loader is not None:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        self.loader, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.callback(module)


def register() -> None:
    """Make ``torch.compile(backend="neuron")`` name :func:`neuron_backend` (now, or when Dynamo loads)."""
    if _REGISTRY in sys.modules:
        _register(sys.modules[_REGISTRY])
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(_REGISTRY, _register))
