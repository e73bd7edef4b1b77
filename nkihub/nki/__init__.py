"""nkihub's NKI: write NeuronCore kernels with ``@nki.jit``, ``nki.language`` and ``nki.isa``, run them on
the numpy simulator, compile and profile them for trn1/trn2/trn3.

    from nkihub import nki
    import nkihub.nki.language as nl
    import nkihub.nki.isa as nisa
"""
from nkihub.nki import collectives, isa, language  # noqa: F401  (nki.collectives: between ranks)
from nkihub.nki import dtype, typing  # noqa: F401  (nki.dtype / nki.typing, as kernels annotate with them)
from nkihub.nki.errors import KernelRuleError, NkiError, SimulationError
from nkihub.nki.jit import JitKernel, jit, simulate
from nkihub.nki.compile import compile  # noqa: A004  (nki.compile as in AWS NKI tooling)
from nkihub.nki.profile import benchmark, profile
from nkihub.nki.estimate import estimating
from nkihub.nki import autotune  # noqa: E402  (nki.autotune(...) decorates; nki.autotune.tune(...) sweeps)

__version__ = "0.1.0"
__all__ = ["JitKernel", "autotune", "benchmark", "compile", "estimating", "profile", "KernelRuleError", "NkiError", "SimulationError", "isa", "jit", "language", "simulate"]


from nkihub.nki import unsupported as _unsupported  # noqa: E402

__getattr__ = _unsupported.module_getattr("nki")  # AWS NKI names not simulated: a clear error
