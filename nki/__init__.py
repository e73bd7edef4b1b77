"""nkihub's NKI: write NeuronCore kernels with ``@nki.jit``, ``nki.language`` and ``nki.isa``, run them on
the numpy simulator, compile and profile them for trn1/trn2/trn3.

    import nki
    import nki.language as nl
    import nki.isa as nisa
"""
from nki import collectives, isa, language  # noqa: F401  (nki.collectives: between ranks)
from nki import dtype, typing  # noqa: F401  (nki.dtype / nki.typing, as kernels annotate with them)
from nki.errors import KernelRuleError, NkiError, SimulationError
from nki.jit import JitKernel, jit, simulate
from nki.compile import compile  # noqa: A004  (nki.compile as in AWS NKI tooling)
from nki.profile import benchmark, profile
from nki.estimate import estimating
from nki import autotune  # noqa: E402  (nki.autotune(...) decorates; nki.autotune.tune(...) sweeps)

__version__ = "0.1.0"
__all__ = ["JitKernel", "autotune", "benchmark", "compile", "estimating", "profile", "KernelRuleError", "NkiError", "SimulationError", "isa", "jit", "language", "simulate"]


from nki import unsupported as _unsupported  # noqa: E402

__getattr__ = _unsupported.module_getattr("nki")  # AWS NKI names not simulated: a clear error
