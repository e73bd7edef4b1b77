"""The instruction table: one row per instruction (see ``base.OpDef``), defined by family modules."""
from simulator.isa import debug, dma, elementwise, matmul, reduce  # noqa: F401  (each registers its rows)
from simulator.isa.base import (ACCUMULATE, DEBUG, DMA, ELEMENTWISE, ENGINES, GENERATE, MATMUL, OPS, REDUCE,
                                ExecContext, OpDef, in_category, opdef)

__all__ = ["ACCUMULATE", "DEBUG", "DMA", "ELEMENTWISE", "ENGINES", "GENERATE", "MATMUL", "OPS", "REDUCE",
           "ExecContext", "OpDef", "in_category", "opdef"]
