"""NeuronCore targets (trn1, trn2, trn3) as data: every constant of shared/hardware.md appears here once.

Sources: the AWS Neuron architecture pages for NeuronCore-v2/v3/v4, the NKI ISA reference, and the NKI
performance and DMA guides (as summarised in shared/hardware.md). Where the documentation is silent the
field says so in its comment. Figures are per NeuronCore unless a name says ``per_chip``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB


@dataclass(frozen=True)
class Target:
    """One NeuronCore generation. Units are in the field names."""

    name: str
    nc_version: str                       # gen2 / gen3 / gen4 (nki.isa.nc_version)
    cores_per_chip: int
    partitions: int                       # SBUF/PSUM partitions (and Tensor Engine rows)
    sbuf_bytes_per_partition: int
    psum_bytes_per_partition: int
    psum_banks: int
    tensor_clock_hz: float
    vector_clock_hz: float
    scalar_clock_hz: float
    gpsimd_clock_hz: float
    # Published Tensor Engine peaks per core, by input dtype name (flop/s).
    tensor_peak_flops: dict = field(hash=False, compare=False)
    vector_fp32_flops: float
    scalar_fp32_flops: float
    hbm_bytes_per_chip: int
    hbm_bytes_per_s_per_chip: float
    dma_engines: int                      # DMA queues per core
    dma_bytes_per_s_per_engine: float
    psum_bf16_allowed: bool               # bf16 matmul output in PSUM (v4 and newer)
    fp8_double_row: bool                  # fp8 double-row matmul mode (v3 and newer)
    shared_port_limits: bool              # v2: Vector/GpSimd share SBUF port, Vector/Scalar share PSUM port
    moving_fmax_fp32: int                 # nc_matmul moving free size (fp32 dst)
    # Hardware descriptor generation engines (DGE) per core: v3+ have two, commanded from the Sync and the
    # Scalar Engine sequencers (the NKI docs' Trainium2 architecture page, "Descriptor Generation Engine");
    # v2 has none (descriptors are static, made on the host, or software DGE on GpSimd).
    dge_instances: int = 0

    # -- limits common to all generations (NKI ISA reference) --
    stationary_fmax: int = 128            # nc_matmul stationary free size
    moving_fmax: int = 512                # nc_matmul moving free size on v2/v3 (one PSUM bank of fp32)
    bn_stats_fmax: int = 512
    sbuf_free_elems_max: int = 64 * 1024  # free size per instruction, SBUF operands
    # free size per instruction, PSUM operands, in bytes: the 8 banks of a partition (16 KiB), so 4096
    # float32 or 8192 bfloat16 elements (nki.isa.nc_matmul_mx: N up to 8192 with a bfloat16 dst)
    psum_free_bytes_max: int = 16 * 1024
    max_ap_free_dims: int = 4             # free-dimension access pattern dims
    vector_transpose_max: int = 32        # Vector Engine transpose block

    @property
    def psum_bank_bytes(self) -> int:
        return self.psum_bytes_per_partition // self.psum_banks

    @property
    def sbuf_bytes(self) -> int:
        return self.sbuf_bytes_per_partition * self.partitions

    @property
    def hbm_bytes_per_s(self) -> float:
        """HBM bandwidth available to one core (the chip's shared evenly between its cores)."""
        return self.hbm_bytes_per_s_per_chip / self.cores_per_chip

    def clock_hz(self, engine: str) -> float:
        """Clock of an engine by name (tensor, vector, scalar, gpsimd)."""
        return {"tensor": self.tensor_clock_hz, "vector": self.vector_clock_hz,
                "scalar": self.scalar_clock_hz, "gpsimd": self.gpsimd_clock_hz}[engine]


TRN1 = Target(
    name="trn1", nc_version="gen2", cores_per_chip=2, partitions=128,
    sbuf_bytes_per_partition=192 * KIB, psum_bytes_per_partition=16 * KIB, psum_banks=8,
    tensor_clock_hz=2.8e9, vector_clock_hz=1.12e9, scalar_clock_hz=1.4e9, gpsimd_clock_hz=1.4e9,
    tensor_peak_flops={"bfloat16": 92e12, "float16": 92e12, "tfloat32": 92e12, "float32": 23e12,
                       "float8_e4m3": 92e12, "float8_e5m2": 92e12},  # v2 has no fp8 speed-up (silent: same as bf16)
    vector_fp32_flops=2.3e12, scalar_fp32_flops=2.9e12,
    hbm_bytes_per_chip=32 * GIB, hbm_bytes_per_s_per_chip=820e9,
    dma_engines=16, dma_bytes_per_s_per_engine=17e9,
    psum_bf16_allowed=False, fp8_double_row=False, shared_port_limits=True, moving_fmax_fp32=512,
)

TRN2 = Target(
    name="trn2", nc_version="gen3", cores_per_chip=8, partitions=128,
    sbuf_bytes_per_partition=224 * KIB, psum_bytes_per_partition=16 * KIB, psum_banks=8,
    tensor_clock_hz=2.4e9, vector_clock_hz=0.96e9, scalar_clock_hz=1.2e9, gpsimd_clock_hz=1.2e9,
    tensor_peak_flops={"bfloat16": 79e12, "float16": 79e12, "tfloat32": 79e12, "float32": 20e12,
                       "float8_e4m3": 158e12, "float8_e5m2": 158e12},
    vector_fp32_flops=1.0e12, scalar_fp32_flops=1.2e12,
    hbm_bytes_per_chip=96 * GIB, hbm_bytes_per_s_per_chip=2.9e12,
    dma_engines=16, dma_bytes_per_s_per_engine=23e9,
    psum_bf16_allowed=False, fp8_double_row=True, shared_port_limits=False, moving_fmax_fp32=512,
    dge_instances=2,
)

TRN3 = Target(
    name="trn3", nc_version="gen4", cores_per_chip=8, partitions=128,
    sbuf_bytes_per_partition=256 * KIB, psum_bytes_per_partition=16 * KIB, psum_banks=8,
    tensor_clock_hz=2.4e9, vector_clock_hz=1.2e9, scalar_clock_hz=1.2e9, gpsimd_clock_hz=1.2e9,
    tensor_peak_flops={"bfloat16": 79e12, "float16": 79e12, "tfloat32": 79e12, "float32": 20e12,
                       "float8_e4m3": 158e12, "float8_e5m2": 158e12, "float8_e4m3fn": 315e12},
    vector_fp32_flops=1.2e12, scalar_fp32_flops=1.2e12,
    # hardware.md quotes 4.7-4.9 TB/s; the lower figure is used so estimates stay conservative.
    hbm_bytes_per_chip=144 * GIB, hbm_bytes_per_s_per_chip=4.7e12,
    dma_engines=16, dma_bytes_per_s_per_engine=33e9,
    psum_bf16_allowed=True, fp8_double_row=True, shared_port_limits=False, moving_fmax_fp32=4096,
    dge_instances=2,
)

TARGETS: dict[str, Target] = {t.name: t for t in (TRN1, TRN2, TRN3)}
_ALIASES = {"inf2": "trn1", "gen2": "trn1", "gen3": "trn2", "gen4": "trn3", "trn2n": "trn2"}
DEFAULT_TARGET = "trn2"


def get_target(target: "str | Target | None" = None) -> Target:
    """Resolve a target: an object, a name (trn1/trn2/trn3), else ``NEURON_PLATFORM_TARGET_OVERRIDE``,
    else trn2."""
    if isinstance(target, Target):
        return target
    name = target or os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE") or DEFAULT_TARGET
    name = _ALIASES.get(name.lower(), name.lower())
    if name not in TARGETS:
        raise ValueError(f"unknown target {target!r}: choose one of {', '.join(TARGETS)}")
    return TARGETS[name]
