"""The instruction table: one row per instruction (see ``base.OpDef``), defined by family modules."""
from nkihub.simulator.isa import debug, dma, elementwise, matmul, reduce  # noqa: F401  (each registers its rows)
from nkihub.simulator.isa import partition, random, scan, select  # noqa: F401  (issue 7: more families)
from nkihub.simulator.isa import activate, dma_compute, gather  # noqa: F401  (v4 activations, DMA math, GpSimd index)
from nkihub.simulator.isa import dma_indirect  # noqa: F401  (DMAs addressed through run-time offsets)
from nkihub.simulator.isa import mx  # noqa: F401  (v4 microscaling: quantize_mx, nc_matmul_mx)
from nkihub.simulator.isa import collectives  # noqa: F401  (between cores and ranks)
from nkihub.simulator.isa import topk  # noqa: F401  (GpSimd top-k over 16-partition snakes)
from nkihub.simulator.isa import registers  # noqa: F401  (sequencer registers: dynamic loops, run-time offsets)
from nkihub.simulator.isa.base import (ACCUMULATE, CROSS_PARTITION, DEBUG, DMA, ELEMENTWISE, ENGINES, GENERATE, INDIRECT,
                                MATMUL, OPS, RANDOM, REDUCE, ExecContext, OpDef, in_category, opdef)

__all__ = ["ACCUMULATE", "CROSS_PARTITION", "DEBUG", "DMA", "ELEMENTWISE", "ENGINES", "GENERATE", "INDIRECT",
           "MATMUL", "OPS", "RANDOM", "REDUCE", "ExecContext", "OpDef", "in_category", "opdef"]
