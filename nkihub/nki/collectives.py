"""``nki.collectives``: communication between ranks, simulated in one Program (see ``nki.multicore``).

Ranks are the program instances of an SPMD launch (``kernel[2](...)``: rank = the flattened program id;
the logical cores of ``kernel[nl.nc(2)]`` share HBM) or, with ``nki.multicore.run_ranks(kernel,
per_rank_args)``, separate invocations with their own inputs and outputs (then instances with the same
program id exchange data, as each logical core of a rank talks to its peers). Each call records this
rank's part; the instructions of all ranks are interleaved so every participant's sources are written
before the collective reads them. Costed as ring collectives on the DMA queues (``cost_rules.collective_s``).
"""
from __future__ import annotations

from nkihub.nki import multicore, tracing
from nkihub.nki.ops import op_name
from nkihub.nki.tensor import NkiTensor
from nkihub.simulator.errors import KernelRuleError


class ReplicaGroup:
    """Groups of ranks that take part in a collective together: ``ReplicaGroup([[0, 1, 2, 3]])`` (one
    group of four) or ``ReplicaGroup([[0, 1], [2, 3]])``; groups may not overlap."""

    def __init__(self, groups=None, *, replica_groups=None):
        groups = groups if groups is not None else replica_groups
        self.replica_groups = [list(map(int, g)) for g in (groups or [])]
        seen = [r for g in self.replica_groups for r in g]
        if len(seen) != len(set(seen)):
            raise ValueError(f"ReplicaGroup {self.replica_groups}: groups overlap")

    def group_of(self, rank: int) -> list[int]:
        """The ranks of the group holding ``rank``."""
        for g in self.replica_groups:
            if rank in g:
                return g
        raise KernelRuleError("replica-group", f"rank {rank} is in none of the groups {self.replica_groups}",
                              loc=tracing.caller_loc())

    def __repr__(self) -> str:
        return f"ReplicaGroup({self.replica_groups})"


def _builder(what: str):
    return tracing.require(f"nki.collectives.{what}")


def rank_id(name=None) -> int:
    """The rank of the program instance being traced (see the module doc for what a rank is)."""
    b = _builder("rank_id")
    if b.n_ranks > 1:
        return b.rank
    return multicore.instance_index(b, 0, b.program_ids)


def _members(b, group: list[int]) -> tuple:
    """Instance indices of the ranks of ``group``, in group order."""
    n = b.n_ranks if b.n_ranks > 1 else multicore.instance_count(b)
    for r in group:
        if not 0 <= r < n:
            raise KernelRuleError("replica-group", f"rank {r} does not exist: the launch has {n} ranks "
                                  "(program instances of the grid, or nki.multicore.run_ranks ranks)",
                                  loc=tracing.caller_loc())
    if b.n_ranks > 1:
        return tuple(multicore.instance_index(b, r, b.program_ids) for r in group)
    return tuple(group)


def _tiles(xs, what: str) -> list:
    xs = list(xs) if isinstance(xs, (list, tuple)) else [xs]
    for x in xs:
        if not isinstance(x, NkiTensor):
            raise TypeError(f"{what} must be a list of tensors, got {type(x).__name__}")
    return xs


def _emit(opcode: str, srcs, dsts, replica_group: ReplicaGroup, attrs: dict, extra_src: dict | None = None):
    b = _builder(opcode)
    srcs, dsts = _tiles(srcs, "srcs"), _tiles(dsts, "dsts")
    members = _members(b, replica_group.group_of(rank_id()))
    src = {f"src{j}": t.to_ap() for j, t in enumerate(srcs)}
    src.update(extra_src or {})
    dst = {f"dst{j}": t.to_ap() for j, t in enumerate(dsts)}
    attrs = dict(attrs, k=len(dsts))
    b.sync(multicore.Sync(opcode, (opcode, members), members, dst, src, attrs, "dma", tracing.caller_loc()))


def all_reduce(srcs, dsts, replica_group, op, priority=None, name=None):
    """Every rank's dsts[j] = op (nl.add, nl.maximum or nl.minimum) over the group's srcs[j] (fp32)."""
    _emit("all_reduce", srcs, dsts, replica_group, {"op": op_name(op)})


def all_gather(srcs, dsts, replica_group, collective_dim, priority=None, name=None):
    """Every rank's dsts[j] = the group's srcs[j] concatenated in rank order along ``collective_dim``."""
    _emit("all_gather", srcs, dsts, replica_group, {"collective_dim": int(collective_dim)})


def reduce_scatter(srcs, dsts, replica_group, collective_dim, op, priority=None, name=None):
    """Rank i's dsts[j] = the i-th of n equal pieces along ``collective_dim`` of op over srcs[j]."""
    _emit("reduce_scatter", srcs, dsts, replica_group, {"collective_dim": int(collective_dim),
                                                         "op": op_name(op)})


def all_to_all(srcs, dsts, replica_group, collective_dim, priority=None, name=None):
    """Rank i's dsts[j] = the i-th pieces (of n along ``collective_dim``) of every rank's srcs[j]."""
    _emit("all_to_all", srcs, dsts, replica_group, {"collective_dim": int(collective_dim)})


def all_gather_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False, has_rdispls=False,
                 priority=None, name=None):
    """Variable all-gather of flat buffers: uint32 ``metadata_tensor`` rows are send count, send
    displacement (first column), recv counts and, with ``has_rdispls``, recv displacements per rank."""
    _emit("all_gather_v", srcs, dsts, replica_group, {"has_rdispls": bool(has_rdispls)},
          {"meta": metadata_tensor.to_ap()})


def all_to_all_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False, has_rdispls=False,
                 priority=None, name=None):
    """Variable all-to-all of flat buffers: uint32 ``metadata_tensor`` rows are send counts and send
    displacements per destination rank, then (optional) recv counts and recv displacements."""
    _emit("all_to_all_v", srcs, dsts, replica_group, {"has_rdispls": bool(has_rdispls)},
          {"meta": metadata_tensor.to_ap()})


def collective_permute(srcs, dsts, source_target_pairs, priority=None, name=None):
    """For each (source, target) rank pair, the target's dsts[0] = the source's srcs[0]."""
    b = _builder("collective_permute")
    pairs = [(int(s), int(t)) for s, t in source_target_pairs]
    ranks = sorted({r for p in pairs for r in p})
    members = _members(b, ranks)
    me = ranks.index(rank_id()) if rank_id() in ranks else None
    if me is None:
        return
    dst = {"dst0": _tiles(dsts, "dsts")[0].to_ap()} if any(t == ranks[me] for _, t in pairs) else {}
    src = {"src0": _tiles(srcs, "srcs")[0].to_ap()} if any(s == ranks[me] for s, _ in pairs) else {}
    attrs = {"pairs": [[ranks.index(s), ranks.index(t)] for s, t in pairs]}
    b.sync(multicore.Sync("collective_permute", ("collective_permute", members, tuple(pairs)), members, dst, src,
                          attrs, "dma", tracing.caller_loc()))


def collective_permute_implicit(srcs_by_channel, dsts_by_channel, replica_group, channel_ids=(0,), priority=None,
                                name=None):
    """Ring: each rank's dsts_by_channel[c][0] = its predecessor's srcs_by_channel[c][0]."""
    _emit("collective_permute_implicit", [c[0] for c in srcs_by_channel], [c[0] for c in dsts_by_channel],
          replica_group, {})


def collective_permute_implicit_reduce(srcs0_by_channel, srcs1_by_channel, dsts_by_channel, replica_group, op,
                                       channel_ids=(0,), priority=None, name=None):
    """Ring: each rank's dsts_by_channel[c][0] = op(srcs0[c][0], srcs1[c][0]) of its predecessor."""
    extra = {f"srcb{c}": ch[0].to_ap() for c, ch in enumerate(srcs1_by_channel)}
    _emit("collective_permute_implicit", [c[0] for c in srcs0_by_channel], [c[0] for c in dsts_by_channel],
          replica_group, {"op": op_name(op)}, extra)


def collective_permute_implicit_current_processing_rank_id(iteration_id, replica_group, channel_id=0,
                                                            num_channels=1, name=None) -> int:
    """The rank whose data a ring step ``iteration_id`` processes: this rank's own at step 0, then its
    predecessors' going round the ring."""
    group = replica_group.group_of(rank_id())
    return group[(group.index(rank_id()) - int(iteration_id)) % len(group)]


__all__ = ["ReplicaGroup", "all_gather", "all_gather_v", "all_reduce", "all_to_all", "all_to_all_v",
           "collective_permute", "collective_permute_implicit", "collective_permute_implicit_reduce",
           "collective_permute_implicit_current_processing_rank_id", "rank_id", "reduce_scatter"]
