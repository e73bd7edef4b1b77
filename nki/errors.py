"""The errors kernels raise (defined in ``simulator.errors``, the layer that detects most of them)."""
from simulator.errors import KernelRuleError, NkiError, SimulationError, SourceLoc

__all__ = ["KernelRuleError", "NkiError", "SimulationError", "SourceLoc"]
