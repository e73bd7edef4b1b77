"""``nki.isa`` instructions between the cores of a launch: ``core_barrier`` and ``sendrecv`` (recorded as
synchronisation points and merged across instances by ``nki.multicore``)."""
from __future__ import annotations

from nkihub.nki import multicore, tracing
from nkihub.nki.isa import _engine, _tile, engine
from nkihub.simulator.errors import KernelRuleError


def _cores_of_rank(b, cores) -> tuple:
    n = multicore.instance_count(b)
    out = []
    for c in cores:
        if not 0 <= int(c) < n:
            raise KernelRuleError("core-barrier", f"core {c} does not exist: the launch grid has {n} program "
                                  "instances (launch with kernel[nl.nc(2)] or a grid)", loc=tracing.caller_loc())
        out.append(b.rank * n + int(c))
    return tuple(out)


def core_barrier(data, cores, engine=engine.unknown, name=None):
    """Every core in ``cores`` (program instances of the launch, e.g. (0, 1) under LNC=2) waits here until
    all have arrived; writes to the shared HBM ``data`` before the barrier are seen by reads after it.
    NeuronCore-v3 and newer."""
    b = tracing.require("nisa.core_barrier")
    _tile(data, "data")
    members = _cores_of_rank(b, cores)
    b.sync(multicore.Sync("core_barrier", ("core_barrier", members), members, {}, {"data": data.to_ap()}, {},
                          _engine(engine, "gpsimd"), tracing.caller_loc()))


def _sendrecv_pairs(events) -> dict:
    ranks = [ev.attrs["me"] for ev in events]
    pairs = []
    for i, ev in enumerate(events):
        to = ev.attrs["send_to"]
        if to not in ranks or events[ranks.index(to)].attrs["recv_from"] != ev.attrs["me"]:
            raise KernelRuleError("sendrecv-mismatch", f"sendrecv: rank {ev.attrs['me']} sends to rank {to}, "
                                  f"which does not receive from it", loc=ev.loc)
        pairs.append([i, ranks.index(to)])
    # the author's (send_to_rank, recv_from_rank) of each participant: the row's sendrecv-rank rule
    return {"pairs": pairs, "ranks": [[ev.attrs["send_to"], ev.attrs["recv_from"]] for ev in events]}


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=None, name=None):
    """Send ``src`` to core ``send_to_rank`` and receive ``dst`` from core ``recv_from_rank`` over pipe
    ``pipe_id``; every core of the launch takes part in the exchange on that pipe."""
    from nkihub.nki.collectives import rank_id
    b = tracing.require("nisa.sendrecv")
    _tile(src, "src"), _tile(dst, "dst")
    n = b.n_ranks if b.n_ranks > 1 else multicore.instance_count(b)
    members = tuple(multicore.instance_index(b, r, b.program_ids) for r in range(n)) if b.n_ranks > 1 \
        else tuple(range(n))
    attrs = {"me": rank_id(), "send_to": int(send_to_rank), "recv_from": int(recv_from_rank)}
    b.sync(multicore.Sync("sendrecv", ("sendrecv", members, int(pipe_id)), members, {"dst0": dst.to_ap()},
                          {"src0": src.to_ap()}, attrs, "dma", tracing.caller_loc(), _sendrecv_pairs))
