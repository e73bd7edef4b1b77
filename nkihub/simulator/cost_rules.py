"""Per-instruction cost rules of shared/hardware.md as named constants and small formulas.

Every constant carries its source; where the documentation gives no figure the comment says so. These
are used by the ``cost`` functions of the instruction table; the scheduler in ``costmodel`` adds queues,
dependencies and DMA latency. Never tune a constant to make one kernel's number come out.
"""
from __future__ import annotations

import math

# -- engines (cycles) -- hardware.md "Cost rules" ----------------------------------------------------
MIN_II_CYCLES = 64                 # minimum initiation interval of Vector/Scalar instructions
ACCESS_START_CYCLES = 60           # every SBUF/PSUM access starts in about 60 cycles
DEPENDENT_TINY_CYCLES = 100        # a dependent tiny instruction adds roughly 100 cycles
GPSIMD_FIXED_CYCLES = 150          # GpSimd: about 150 + N
RECIPROCAL_CYCLES_PER_ELEM = 8     # reciprocal about max(MIN_II, 8N)
BN_AGGR_FACTOR = 13 / 3            # bn_aggr about 13N/3
ACTIVATION_REDUCE_EXTRA_CYCLES = MIN_II_CYCLES   # a reduce adds MIN_II
# Switching the activation function loads a table. The cost is not published: a tunable guess.
ACT_TABLE_LOAD_CYCLES = 128
PERF_MODE_COPY_SPEEDUP = 4         # v3 perf mode: tensor_copy/tensor_scalar 4x for bf16/fp16 SBUF
PERF_MODE_TT_SPEEDUP = 2           # v3 perf mode: tensor_tensor 2x
STRIDE_PENALTY_BYTES = 16          # innermost strides over 16 bytes halve bandwidth
STRIDE_PENALTY_SLOWDOWN = 2        # ... "halve bandwidth": the streaming cycles double (fixed parts stay)

# v2 (trn1) shared ports, hardware.md "Engines": Vector and GpSimd cannot use SBUF at the same time, Vector
# and Scalar cannot use PSUM at the same time (lifted on v3; Target.shared_port_limits). Buffer -> the
# engines that share its port. The arbitration policy is not published: the scheduler lets an instruction
# start only where it overlaps no already-placed instruction of the other engine on that port.
SHARED_PORTS = {"sbuf": ("vector", "gpsimd"), "psum": ("vector", "scalar")}

# -- Tensor Engine -------------------------------------------------------------------------------------
MATMUL_MIN_CYCLES = 64             # a matmul issues every max(N_moving, 64) cycles
FP32_MATMUL_SLOWDOWN = 4           # fp32 operands about 4x slower
LOAD_STATIONARY_SPEEDUP = 4        # LoadStationary runs in the background, up to 4x faster than moving
FP8_DOUBLE_ROW_SPEEDUP = 2         # v3+ double-row fp8 mode

# -- DMA -------------------------------------------------------------------------------------------------
DMA_FIXED_LATENCY_S = 1.3e-6       # trigger to start
DMA_DESCRIPTOR_S = 0.6e-6          # descriptor generation per hardware DMA instruction
# On v3+ descriptors come from a hardware DGE, which generates them one instruction at a time: "Each
# DGE-based DMA instruction takes about 600 ns to execute on NeuronCore-v3" (the NKI docs' Trainium2
# architecture page, "Descriptor Generation Engine"); a core has Target.dge_instances of them. For a DMA with
# dge_mode=hwdge the scheduler holds one DGE for DMA_DESCRIPTOR_S, so such a stream triggers at most one DMA
# per 0.6 us per DGE. Other DMAs (dge_mode none: descriptors made by the runtime before the run; unknown:
# the compiler's choice, not published) and every DMA on v2 (no DGE) overlap it across the DMA queues.
DMA_PARTITIONS_PER_ENGINE = 8      # a 128-partition transfer spreads 8 partitions per engine
DMA_OVERHEAD_BOUND_BYTES = 512     # under ~512 B contiguous per partition: overhead-bound
DMA_FULL_BW_BYTES = 2048           # 2-4 KiB contiguous per partition reaches full bandwidth
# dma_transpose on v3+ (the NKI docs' Trainium2 architecture page, "DMA Transpose"): all 16 engines write one
# [128, 16] SBUF block at a time; from HBM it "can achieve up to 90% DMA throughput utilization given
# hardware-friendly tensor access patterns", SBUF to SBUF "up to 50%". Hardware-friendly: the output's
# partitions a multiple of 128 and its innermost free size a multiple of 16. Other shapes run "at the cost of
# DMA performance", by an amount not published: they get the same rate (an optimistic estimate).
DMA_TRANSPOSE_HBM_EFFICIENCY = 0.9
DMA_TRANSPOSE_SBUF_EFFICIENCY = 0.5
# Bandwidth fraction of an overhead-bound transfer: not published (estimate, see dma_efficiency).
DMA_OVERHEAD_BOUND_FLOOR = 0.25
# Queues: hardware.md gives 16 DMA engines per core; each is modelled as one in-order queue holding one
# transfer in flight (trigger, descriptor, fixed latency, data). How the compiler assigns DMAs to queues is
# not published: the scheduler picks the queue that can start soonest.

# -- collectives (between cores or ranks) ----------------------------------------------------------------
# Each step of a ring collective waits for a DMA and a semaphore; the figure is not published: one DMA's
# fixed latency per step (estimate). Data moves at the core's full DMA bandwidth (cores of a logical core
# share HBM; links between devices are not modelled separately).
COLLECTIVE_STEP_S = DMA_FIXED_LATENCY_S

# -- scheduler ---------------------------------------------------------------------------------------------
# A consumer may start ACCESS_START_CYCLES (its engine's clock) after a producer it reads from ends: the
# ~60-cycle SBUF/PSUM access start is not hidden across a dependency. With MIN_II this gives ~124 cycles per
# link of a chain of dependent tiny instructions, matching hardware.md's "roughly 100 cycles each"
# (DEPENDENT_TINY_CYCLES is kept as the documented figure; tests check the chain against it).
# Consecutive matmuls accumulating into one PSUM tile are pipelined by the Tensor Engine: no such gap.
#
# Instructions whose attribute selects an activation table: switching it costs ACT_TABLE_LOAD_CYCLES.
TABLE_SWITCH_ATTRS = {"activation": "op"}
# The DMA bandwidth model shares engine time and HBM bandwidth in time bins of this width (a modelling
# resolution, not a hardware figure): a transfer's end is exact to within one bin.
BANDWIDTH_BIN_S = 50e-9


def vector_cycles(n: int, inputs: int = 1, *, fast: bool = False) -> float:
    """Vector Engine: max(MIN_II, N) for one input, max(MIN_II, 2N) for two; ``fast`` (bf16 SBUF
    contiguous add/sub/mul, or a PSUM input) runs at N."""
    per = 1 if (fast or inputs <= 1) else 2
    return max(MIN_II_CYCLES, per * n)


def scalar_cycles(n: int, *, reduce: bool = False) -> float:
    """Scalar (Activation) Engine: max(MIN_II, N); scale and bias free; a reduce adds MIN_II."""
    return max(MIN_II_CYCLES, n) + (ACTIVATION_REDUCE_EXTRA_CYCLES if reduce else 0)


def gpsimd_cycles(n: int) -> float:
    """GpSimd: about 150 + N."""
    return GPSIMD_FIXED_CYCLES + n


def matmul_cycles(n_moving: int, *, fp32: bool, double_row: bool = False, n_stationary: int | None = None) -> float:
    """Tensor Engine, back-to-back matmuls of one shape: max(min(64, N_stationary), N_moving) cycles each
    (nki.isa.nc_matmul, "Estimated instruction cost": LoadStationary of the next matmul is hidden behind the
    current MultiplyMoving, and loads N_stationary columns 4x faster, so a short stationary issues sooner
    than 64); fp32 about 4x slower. Without ``n_stationary`` the floor is 64."""
    floor = MATMUL_MIN_CYCLES if n_stationary is None else min(MATMUL_MIN_CYCLES, n_stationary)
    cycles = max(n_moving, floor)
    if fp32:
        cycles *= FP32_MATMUL_SLOWDOWN
    if double_row:
        cycles /= FP8_DOUBLE_ROW_SPEEDUP
    return cycles


def pe_transpose_cycles(p: int, f: int) -> float:
    """Transpose on the Tensor Engine: about max(P, min(64, F))."""
    return max(p, min(64, f))


def dma_engines(partitions: int, target) -> int:
    """DMA engines one transfer spreads over: 8 partitions per engine, at most all of the core's."""
    return max(1, min(target.dma_engines, math.ceil(max(1, partitions) / DMA_PARTITIONS_PER_ENGINE)))


def dma_efficiency(contiguous_bytes: int) -> float:
    """Fraction of an engine's bandwidth a transfer reaches, from its contiguous run per partition.

    hardware.md: under ~512 B a transfer is overhead-bound, 2-4 KiB reaches full bandwidth. The shape of
    the curve in between is not published: linear in the run length, floored at a quarter (estimate)."""
    if contiguous_bytes >= DMA_FULL_BW_BYTES:
        return 1.0
    return min(1.0, max(DMA_OVERHEAD_BOUND_FLOOR, contiguous_bytes / DMA_FULL_BW_BYTES))


def dma_transfer_s(total_bytes: int, partitions: int, contiguous_bytes: int, target) -> float:
    """Seconds of data movement of one DMA once started, alone on the engines it spreads over (no
    descriptor generation or fixed latency: the scheduler adds those, as they overlap across queues)."""
    bw = target.dma_bytes_per_s_per_engine * dma_engines(partitions, target) * dma_efficiency(contiguous_bytes)
    return total_bytes / bw


def dma_transpose_s(total_bytes: int, from_hbm: bool, target) -> float:
    """Seconds of data movement of a ``dma_transpose`` on v3+: all the core's DMA engines at DMA_TRANSPOSE_HBM_EFFICIENCY of their bandwidth from HBM, at
    DMA_TRANSPOSE_SBUF_EFFICIENCY from SBUF."""
    eff = DMA_TRANSPOSE_HBM_EFFICIENCY if from_hbm else DMA_TRANSPOSE_SBUF_EFFICIENCY
    return total_bytes / (target.dma_bytes_per_s_per_engine * target.dma_engines * eff)


def innermost_stride_bytes(ap, itemsize: int) -> int:
    """Bytes between consecutive elements of an on-chip access pattern's innermost free dim of more than
    one element (dims[0] walks partitions); 0 when no free dim has more than one element."""
    for stride, size in reversed(ap.dims[1:]):
        if size > 1:
            return abs(stride) * itemsize
    return 0


def stride_slowdown(ins, program, roles=None) -> int:
    """Factor on an engine instruction's streaming cycles: STRIDE_PENALTY_SLOWDOWN when one of its on-chip
    operands (those named in ``roles``, default all) walks its innermost dim with a stride over
    STRIDE_PENALTY_BYTES ("innermost strides over 16 bytes halve bandwidth"), else 1. Engine cost
    functions multiply their N by it, so fixed parts (MIN_II, GpSimd's 150) are kept. Not for DMAs
    (their efficiency comes from the contiguous run, ``dma_efficiency``)."""
    for role, ap in (*ins.src.items(), *ins.dst.items()):
        if roles is not None and role not in roles:
            continue
        spec = program.tensors[ap.tensor]
        if spec.on_chip and innermost_stride_bytes(ap, spec.np_dtype.itemsize) > STRIDE_PENALTY_BYTES:
            return STRIDE_PENALTY_SLOWDOWN
    return 1


def collective_s(bytes_per_rank: int, steps: int, target) -> float:
    """Seconds of a collective in which each rank receives ``bytes_per_rank`` bytes over ``steps`` ring
    steps (estimate: see COLLECTIVE_STEP_S)."""
    return steps * COLLECTIVE_STEP_S + bytes_per_rank / (target.dma_bytes_per_s_per_engine * target.dma_engines)


def seconds(cycles: float, target, engine: str) -> float:
    """Cycles on an engine's clock to seconds."""
    return cycles / target.clock_hz(engine)
