"""``nki.isa.constants``: the enums instructions take (the same classes ``nki.isa`` exports), for kernels
that write ``from nki.isa.constants import dge_mode, oob_mode``."""
from nkihub.nki.isa import (dge_mode, dma_engine, engine, matmul_perf_mode, nc_version, oob_mode,  # noqa: F401
                     reduce_cmd)

__all__ = ["dge_mode", "dma_engine", "engine", "matmul_perf_mode", "nc_version", "oob_mode", "reduce_cmd"]
