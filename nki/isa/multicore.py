"""Placeholders for the multi-core instructions of ``nki.isa`` (``core_barrier``, ``sendrecv``): kernels
that import them load, and a kernel that calls one gets the "part of AWS NKI but not simulated" error at
its line. The LNC=2 semantics (programs of one SPMD launch synchronising and exchanging tiles) replace
these when the multi-core simulation lands."""
from __future__ import annotations

_WHY = "multi-core synchronisation across the logical cores of an SPMD launch is not simulated yet"


def core_barrier(data, cores, engine=None, name=None):
    """Wait until every logical core in ``cores`` has reached this barrier on ``data`` (not simulated yet:
    raises NotSimulatedError naming the kernel line)."""
    from nki.unsupported import not_simulated
    raise not_simulated("nki.isa.core_barrier", _WHY)


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=None, name=None):
    """Send ``src`` to core ``send_to_rank`` while receiving ``dst`` from ``recv_from_rank`` (not simulated
    yet: raises NotSimulatedError naming the kernel line)."""
    from nki.unsupported import not_simulated
    raise not_simulated("nki.isa.sendrecv", _WHY)
