"""Instructions between cores or ranks: the collectives of ``nki.collectives``, ``core_barrier`` and
``sendrecv``. One instruction stands for every participant: participant i's operand ``role`` is
``p{i}_{role}`` (``attrs["n"]`` participants, in replica-group order; ``attrs["k"]`` tensors each for the
coalesced forms, roles ``src0``.. / ``dst0``..). Numerics: reductions add, min or max in fp32 and cast once
to each destination's dtype; collectives that only move data (gathers, all-to-alls, permutes, sendrecv)
copy the bits when source and destination dtypes agree, as a DMA does (a uint32 above 2^24 or a packed
x4 element would not survive fp32), and convert through fp32 otherwise.
"""
from __future__ import annotations

import numpy as np

from nkihub.simulator import cost_rules as cr
from nkihub.simulator.isa.base import DMA, f32, register, store
from nkihub.simulator.rules import Documented, documents, partitions, target_gate

REDUCE_OPS = {"add": np.add, "maximum": np.maximum, "minimum": np.minimum}


def parts(ops: dict, n: int, role: str) -> list:
    """Participant operands ``p0_role`` .. ``p{n-1}_role``."""
    return [ops[f"p{i}_{role}"] for i in range(n)]


def _tensors(ins) -> range:
    return range(ins.attrs.get("k", 1))


def _size(ins, i: int, role: str) -> int:
    ap = ins.src.get(f"p{i}_{role}") or ins.dst.get(f"p{i}_{role}")
    return ap.size


def _values(arrays: list, like: np.ndarray) -> list:
    """The sources as moved to a destination like ``like``: unchanged when every dtype matches its
    dtype (bits survive), else their fp32 values (the DMA engines convert through fp32)."""
    return list(arrays) if all(a.dtype == like.dtype for a in arrays) else [f32(a) for a in arrays]


def _reduce(arrays: list, op: str) -> np.ndarray:
    out = f32(arrays[0]).copy()
    for a in arrays[1:]:
        out = REDUCE_OPS[op](out, f32(a).reshape(out.shape))
    return out


def _size_rule(ratio, what: str):
    """Rule: each destination holds ``ratio(n)`` times the elements of the matching source (``what``: the
    relation in words, as the collective's page states it)."""
    size = Documented("collective-size", ("dst",), "nki.collectives.{opcode}", what)

    @documents(size)
    def rule(ins, program, target):
        n = ins.attrs["n"]
        for j in _tensors(ins):
            for i in range(n):
                s, d = _size(ins, i, f"src{j}"), _size(ins, i, f"dst{j}")
                if d * 1.0 != s * ratio(n):
                    raise size.fail(f"participant {i}: dst{j} has {d} elements, src{j} {s}; {ins.opcode} over {n} "
                                    f"ranks needs dst = {ratio(n):g} x src", ins, program, f"p{i}_dst{j}")
    return rule


COLLECTIVE_OP = Documented("collective-op", (), "nki.collectives.{opcode}", "op is nl.add, nl.maximum or nl.minimum")


@documents(COLLECTIVE_OP)
def _op_rule(ins, program, target):
    """The reduction is add, maximum or minimum."""
    if ins.attrs.get("op", "add") not in REDUCE_OPS:
        raise COLLECTIVE_OP.fail(f"the reduction must be one of {', '.join(REDUCE_OPS)}", ins, program)


def _bytes_in(ins, program) -> int:
    """Bytes one participant receives (its destinations)."""
    return sum(ap.size * program.tensor_of(ap).np_dtype.itemsize for r, ap in ins.dst.items()
               if r.startswith("p0_")) or 1


def _ring_cost(factor):
    """Cost of a ring collective moving ``factor(n)`` of a participant's destination bytes in n - 1 steps."""
    def cost(ins, program, target):
        n = ins.attrs["n"]
        return cr.collective_s(int(_bytes_in(ins, program) * factor(n)), max(1, n - 1), target)
    return cost


def _all_reduce(ins, src, dst, ctx):
    """Every participant's dst_j = op over participants of src_j (add, maximum or minimum)."""
    n = ins.attrs["n"]
    for j in _tensors(ins):
        total = _reduce(parts(src, n, f"src{j}"), ins.attrs.get("op", "add"))
        for d in parts(dst, n, f"dst{j}"):
            store(d, total.reshape(d.shape))


def _all_gather(ins, src, dst, ctx):
    """Every participant's dst_j = the participants' src_j concatenated along ``collective_dim``."""
    n, dim = ins.attrs["n"], ins.attrs.get("collective_dim", 0)
    for j in _tensors(ins):
        dsts = parts(dst, n, f"dst{j}")
        whole = np.concatenate(_values(parts(src, n, f"src{j}"), dsts[0]), axis=dim)
        for d in dsts:
            store(d, whole.reshape(d.shape))


def _reduce_scatter(ins, src, dst, ctx):
    """Participant i's dst_j = the i-th of n equal pieces (along ``collective_dim``) of op over src_j."""
    n, dim = ins.attrs["n"], ins.attrs.get("collective_dim", 0)
    for j in _tensors(ins):
        pieces = np.split(_reduce(parts(src, n, f"src{j}"), ins.attrs.get("op", "add")), n, axis=dim)
        for i, d in enumerate(parts(dst, n, f"dst{j}")):
            store(d, pieces[i].reshape(d.shape))


def _all_to_all(ins, src, dst, ctx):
    """Participant i's dst_j = the i-th pieces of every participant's src_j (split in n along
    ``collective_dim``), concatenated in participant order."""
    n, dim = ins.attrs["n"], ins.attrs.get("collective_dim", 0)
    for j in _tensors(ins):
        dsts = parts(dst, n, f"dst{j}")
        pieces = [np.split(s, n, axis=dim) for s in _values(parts(src, n, f"src{j}"), dsts[0])]
        for i, d in enumerate(dsts):
            store(d, np.concatenate([p[i] for p in pieces], axis=dim).reshape(d.shape))


def _meta(src, i) -> np.ndarray:
    return np.asarray(src[f"p{i}_meta"]).astype(np.int64).reshape(-1, src[f"p{i}_meta"].shape[-1])


def _all_gather_v(ins, src, dst, ctx):
    """Flat buffers: each participant s sends src[displ:displ + count] (metadata rows 0/1, first column);
    it lands in every dst at slot s (slots of dst.size / n elements), or at row 3's displacement."""
    n = ins.attrs["n"]
    moved = _values(parts(src, n, "src0") + parts(dst, n, "dst0"), dst["p0_dst0"])
    chunks = []
    for s in range(n):
        m, flat = _meta(src, s), moved[s].reshape(-1)
        chunks.append(flat[m[1, 0]:m[1, 0] + m[0, 0]])
    for r in range(n):
        d = dst[f"p{r}_dst0"]
        out = moved[n + r].reshape(-1).copy()
        m, slot = _meta(src, r), d.size // n
        for s, c in enumerate(chunks):
            at = m[3, s] if ins.attrs.get("has_rdispls") else s * slot
            out[at:at + c.size] = c
        store(d, out.reshape(d.shape))


def _all_to_all_v(ins, src, dst, ctx):
    """Flat buffers: participant s sends src[sdispl[r]:sdispl[r] + scount[r]] (metadata rows 1 and 0) to
    each r; r places what it receives in source order, contiguously, or at row 3's displacements."""
    n = ins.attrs["n"]
    moved = _values(parts(src, n, "src0") + parts(dst, n, "dst0"), dst["p0_dst0"])
    for r in range(n):
        d = dst[f"p{r}_dst0"]
        out, at = moved[n + r].reshape(-1).copy(), 0
        mine = _meta(src, r)
        for s in range(n):
            m, flat = _meta(src, s), moved[s].reshape(-1)
            chunk = flat[m[1, r]:m[1, r] + m[0, r]]
            if ins.attrs.get("has_rdispls"):
                at = mine[3, s]
            out[at:at + chunk.size] = chunk
            at += chunk.size
        store(d, out.reshape(d.shape))


def _move(d, s) -> None:
    """d = s: the bits themselves when the dtypes agree (a packed x4 or integer element survives; fp32
    would round a uint32 above 2^24), else converted through fp32 as the DMA engines convert."""
    if d.dtype == s.dtype:
        d[...] = s.reshape(d.shape)
    else:
        store(d, f32(s).reshape(d.shape))


_SR = "nki.isa.sendrecv"
SR_BUFFER = Documented("sendrecv-buffer", ("src", "dst"), _SR, "src and dst are both in SBUF")
SR_DTYPE = Documented("dtype-mismatch", ("dst",), _SR, "src and dst have the same dtype")
SR_SHAPE = Documented("shape-mismatch", ("dst",), _SR, "src and dst have the same partition dimension size and "
                      "the same number of elements per partition")

# The page: sendrecv runs between the NeuronCores of a Logical NeuronCore that share an HBM stack, "therefore
# send_to_rank and recv_from_rank must be either 0 or 1" (two cores, LNC=2: nkihub's launch of 2 programs, as
# core_barrier's cores (0, 1)).
SR_RANK = Documented("sendrecv-rank", ("src",), _SR, "send_to_rank and recv_from_rank are 0 or 1: the two "
                     "NeuronCores of a Logical NeuronCore (LNC=2) sharing an HBM stack")


@documents(SR_RANK, SR_BUFFER, SR_DTYPE, SR_SHAPE)
def _sendrecv_rules(ins, program, target):
    """Ranks 0 or 1 (attr ``ranks``: each participant's send_to_rank, recv_from_rank, recorded by the front
    end); SBUF operands; for each (source, target) pair the target's dst0 has the source's src0 dtype,
    partitions and elements per partition (sendrecv moves the data unchanged; a size mismatch was numpy's
    reshape error)."""
    for i, (to, frm) in enumerate(ins.attrs.get("ranks", ())):
        if to not in (0, 1) or frm not in (0, 1):
            raise SR_RANK.fail(f"participant {i} sends to rank {to} and receives from rank {frm}; ranks are 0 or 1 "
                               "(the two NeuronCores sharing an HBM stack under LNC=2)", ins, program, f"p{i}_src0")
    for role, ap in (*ins.src.items(), *ins.dst.items()):
        if program.tensor_of(ap).buffer != "sbuf":
            raise SR_BUFFER.fail(f"{role.split('_', 1)[1]} must be in SBUF", ins, program, role)
    for s, t in ins.attrs["pairs"]:
        src, dst = ins.src[f"p{s}_src0"], ins.dst[f"p{t}_dst0"]
        if program.tensor_of(src).dtype != program.tensor_of(dst).dtype:
            raise SR_DTYPE.fail(f"participant {t} receives {program.tensor_of(src).dtype} from participant {s} into "
                                f"a {program.tensor_of(dst).dtype} dst", ins, program, f"p{t}_dst0")
        if partitions(src) != partitions(dst) or src.size != dst.size:
            raise SR_SHAPE.fail(f"participant {t} receives {partitions(src)} partitions of "
                                f"{src.size // max(1, partitions(src))} elements from participant {s} into a dst of "
                                f"{partitions(dst)} of {dst.size // max(1, partitions(dst))}", ins, program,
                                f"p{t}_dst0")


def _permute(ins, src, dst, ctx):
    """dst of each target = src of its source, for the (source, target) participant pairs in attrs."""
    for s, t in ins.attrs["pairs"]:
        _move(dst[f"p{t}_dst0"], src[f"p{s}_src0"])


def _permute_ring(ins, src, dst, ctx):
    """Ring: participant i's dst_c (channel c) = its predecessor's src_c, or with ``op`` the predecessor's
    op(src0_c, src1_c) (collective_permute_implicit[_reduce])."""
    n, op = ins.attrs["n"], ins.attrs.get("op")
    for c in _tensors(ins):
        for i in range(n):
            pred, d = (i - 1) % n, dst[f"p{i}_dst{c}"]
            if op is None:
                _move(d, src[f"p{pred}_src{c}"])
            else:
                value = REDUCE_OPS[op](f32(src[f"p{pred}_src{c}"]), f32(src[f"p{pred}_srcb{c}"]).reshape(
                    src[f"p{pred}_src{c}"].shape))
                store(d, value.reshape(d.shape))


def _barrier(ins, src, dst, ctx):
    """No data moves: every participating core waits until all reached the barrier (its ``data`` operands
    order the writes before it against the reads after it)."""


def _barrier_cost(ins, program, target):
    return cr.collective_s(0, 1, target)


_SAME = _size_rule(lambda n: 1, "dst and src hold the same number of elements")
for opcode, fn, rules, factor in (
        ("all_reduce", _all_reduce, (_SAME, _op_rule), lambda n: 2 * (n - 1) / n),
        ("all_gather", _all_gather, (_size_rule(lambda n: n, "dst holds n x src's elements"),), lambda n: (n - 1) / n),
        ("reduce_scatter", _reduce_scatter, (_size_rule(lambda n: 1 / n, "dst holds src's elements / n"), _op_rule),
         lambda n: n - 1),
        ("all_to_all", _all_to_all, (_SAME,), lambda n: (n - 1) / n),
        ("all_gather_v", _all_gather_v, (), lambda n: (n - 1) / n),
        ("all_to_all_v", _all_to_all_v, (), lambda n: (n - 1) / n),
        ("collective_permute", _permute, (), lambda n: 1),
        ("collective_permute_implicit", _permute_ring, (), lambda n: 1)):
    register(opcode, engines={"dma"}, execute=fn, cost=_ring_cost(factor), rules=rules, categories={DMA})

_gen3_plus = target_gate("gen3", role=None)   # core_barrier: its page (NeuronCore-v3 and newer)
BARRIER_DATA = Documented("core-barrier-data", ("data",), "nki.isa.core_barrier",
                          "data is the shared HBM tensor the cores synchronise on")
BARRIER_CORES = Documented("core-barrier-cores", ("data",), "nki.isa.core_barrier",
                           "cores is (0, 1): two NeuronCores sharing an HBM stack (LNC=2)")


@documents(BARRIER_DATA, BARRIER_CORES)
def _barrier_rules(ins, program, target):
    """Two cores (cores=(0, 1)) synchronising on an HBM tensor."""
    if ins.attrs["n"] != 2:
        raise BARRIER_CORES.fail(f"a barrier of {ins.attrs['n']} cores; only cores=(0, 1) is supported", ins,
                                 program, "p0_data")
    for role, ap in ins.src.items():
        if program.tensor_of(ap).on_chip:
            raise BARRIER_DATA.fail("data must be a tensor in shared HBM, not an on-chip tile", ins, program, role)


register("core_barrier", engines={"tensor", "vector", "scalar", "gpsimd", "dma"}, execute=_barrier,
         cost=_barrier_cost, rules=(_gen3_plus, _barrier_rules))
_gen3_sendrecv = target_gate("gen3", role=None)   # the sendrecv page: NeuronCore-v3 and newer
register("sendrecv", engines={"dma", "gpsimd"}, execute=_permute, cost=_ring_cost(lambda n: 1),
         rules=(_gen3_sendrecv, _sendrecv_rules),
         categories={DMA})
