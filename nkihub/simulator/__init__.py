"""The NeuronCore machine: targets, the instruction set, Programs, the numpy executor and the cost model.

This package is the ground floor: it knows nothing of the kernel language (``nki``) above it.
"""
from nkihub.simulator.dtypes import as_dtype, dtype_name
from nkihub.simulator.errors import KernelRuleError, NkiError, SimulationError, SourceLoc
from nkihub.simulator.program import AccessPattern, Instruction, LoopInfo, Program, TensorSpec
from nkihub.simulator.targets import TARGETS, Target, get_target

__all__ = [
    "AccessPattern", "Instruction", "KernelRuleError", "LoopInfo", "NkiError", "Program",
    "SimulationError", "SourceLoc", "TARGETS", "Target", "TensorSpec", "as_dtype", "dtype_name",
    "get_target",
]
