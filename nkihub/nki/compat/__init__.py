"""The ``neuronxcc.nki`` dialect (NKI as shipped in neuronx-cc, SDK 2.20-2.27) as a translation layer over
nkihub's ``nki``: ``import neuronxcc.nki as nki`` resolves here when the real neuronx-cc is not installed
(see ``nkihub.aliases``). Kernels written for it run unmodified on the same simulator and instruction
table as the current dialect.

    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl
    import neuronxcc.nki.isa as nisa
"""
from nkihub.nki.compat import compiler, isa, language, typing  # noqa: F401
from nkihub.nki.compat.kernel import (BenchmarkResult, CompatKernel, LatencyResult, baremetal, benchmark, jit,  # noqa: F401
                               profile, simulate_kernel)
from nkihub.nki.tensor import NkiTensor as tensor  # noqa: F401  (``nki.tensor``: the tensor class)
from nkihub.nki.compat.extra import FrameworkKernel  # noqa: F401


def trace(func=None, **kwargs):
    """``@nki.trace`` (2.20 examples): the same as ``nki.jit``."""
    return jit(func, **kwargs)


__all__ = ["FrameworkKernel", "baremetal", "benchmark", "compiler", "isa", "jit", "language", "profile", "simulate_kernel",
           "tensor", "trace", "typing"]


from nkihub.nki import unsupported as _unsupported  # noqa: E402

__getattr__ = _unsupported.module_getattr("neuronxcc.nki")  # AWS NKI names not simulated: a clear error
