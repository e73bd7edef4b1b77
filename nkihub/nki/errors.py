"""The errors kernels raise (defined in ``simulator.errors``, the layer that detects most of them)."""
from nkihub.simulator.errors import KernelRuleError, NkiError, NotSimulatedError, SimulationError, SourceLoc

__all__ = ["KernelRuleError", "NkiError", "NotSimulatedError", "SimulationError", "SourceLoc"]
