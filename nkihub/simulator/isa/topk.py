"""GpSimd top-k (NeuronCore-v3 and newer): the k largest of up to 65535 bf16 values held by 16 partitions.

Read from the ``nki.isa.topk`` API pages (Neuron 2.32 and 2.33). Each group of 16 partitions holds one
problem in a "snake": slot s of the group is partition s % 16, free position s // 16 (free axes
flattened); the first ``n`` slots are the data. Result j goes back to the same snake (partition j % 16,
position j // 16) of ``val_dst`` (bf16) and ``idx_dst`` (uint32 slot indices 0..n-1); k is the free size
of ``val_dst``, so only its first ceil(k / 16) positions receive results.

What the pages leave open, and the choices made here:
- the order of the k results: the 2.32 page says ascending, the 2.33 page adds ``sorted`` and nki-library
  (experimental gpsimd_topk) treats the order as unspecified and sorts them itself. Here ``sorted=False``
  gives ascending values and ``sorted=True`` descending; equal values are taken lowest slot first.
- the slots of the last written position past result k-1: the hardware writes a whole position at once
  and nki-library calls them garbage, so they are written with NaN (values) and 0xFFFFFFFF (indices).
"""
from __future__ import annotations

import numpy as np

from nkihub.simulator import cost_rules as cr
from nkihub.simulator.isa.base import CROSS_PARTITION, REDUCE, f32, register, store
from nkihub.simulator.isa.select import _gen3_only
from nkihub.simulator.rules import COMPUTE_RULES, Documented, documents, partitions

GROUP = 16
N_RANGE = (8, 65536)     # 8 <= n < 65536
K_LIMIT = 32768          # 1 <= k < 32768, k <= n


def _free(ap) -> int:
    return ap.size // max(1, partitions(ap))


def _topk(ins, src, dst, ctx):
    """Per group of 16 partitions: the k largest of the first n snake slots of src, and their slot
    indices, written in snake order to val_dst / idx_dst (see the module docstring for the order)."""
    data, vals, idxs = src["src"], dst["val_dst"], dst["idx_dst"]
    n, k, descending = int(ins.attrs["n"]), _free_shape(vals), bool(ins.attrs.get("sorted"))
    p = data.shape[0]
    x = f32(data).reshape(p, -1)
    v_out = f32(vals).reshape(p, -1).copy()
    i_out = np.array(idxs).reshape(p, -1).copy()
    cols = -(-k // GROUP)
    for g in range(0, p, GROUP):
        snake = x[g:g + GROUP].T.reshape(-1)[:n]              # slot s = position * 16 + partition
        order = np.argsort(-snake, kind="stable")[:k]         # largest first, lowest slot first on ties
        if not descending:
            order = order[::-1]
        got_v = np.full(cols * GROUP, np.nan, np.float32)
        got_i = np.full(cols * GROUP, np.iinfo(np.uint32).max, np.uint64)
        got_v[:k], got_i[:k] = snake[order], order
        v_out[g:g + GROUP, :cols] = got_v.reshape(cols, GROUP).T
        i_out[g:g + GROUP, :cols] = got_i.reshape(cols, GROUP).T.astype(i_out.dtype)
    store(vals, v_out.reshape(vals.shape))
    idxs[...] = i_out.reshape(idxs.shape)


def _free_shape(view) -> int:
    return view.size // max(1, view.shape[0])


_PAGE = "nki.isa.topk"
DTYPE = Documented("dtype", ("src", "val_dst", "idx_dst"), _PAGE, "src and val_dst are bfloat16, idx_dst uint32")
GROUPS = Documented("topk-partitions", ("src",), _PAGE, "src spans a multiple of 16 partitions (one problem each)")
SAME_PARTITIONS = Documented("partition-mismatch", ("val_dst", "idx_dst"), _PAGE,
                             "val_dst and idx_dst span src's partitions")
N = Documented("topk-n", ("src",), _PAGE, "8 <= n < 65536")
K = Documented("topk-k", ("val_dst",), _PAGE, "k, val_dst's free size: 1 <= k < 32768 and k <= n")
INDICES = Documented("topk-indices", ("idx_dst",), _PAGE, "idx_dst holds k indices per partition")
SOURCE = Documented("topk-src-size", ("src",), _PAGE, "src holds ceil(n / 16) positions per partition")


@documents(DTYPE, GROUPS, SAME_PARTITIONS, N, K, INDICES, SOURCE)
def _rules(ins, program, target):
    """bf16 source and values, uint32 indices, in SBUF; partitions a multiple of 16, the same for all
    three; 8 <= n < 65536; 1 <= k < 32768 and k <= n; the source holds ceil(n / 16) positions; the
    index tile has k per partition (NeuronCore-v3 or newer: ``_gen3_only`` on the row)."""
    want = {"src": "bfloat16", "val_dst": "bfloat16", "idx_dst": "uint32"}
    for role, dt in want.items():
        ap = ins.src.get(role) or ins.dst[role]
        if program.tensors[ap.tensor].dtype != dt:
            raise DTYPE.fail(f"topk takes '{role}' as {dt}", ins, program, role, ap)
    src = ins.src["src"]
    parts = partitions(src)
    if parts % GROUP:
        raise GROUPS.fail(f"spans {parts} partitions; topk works on groups of {GROUP}", ins, program, "src", src)
    for role in ("val_dst", "idx_dst"):
        if partitions(ins.dst[role]) != parts:
            raise SAME_PARTITIONS.fail(f"spans {partitions(ins.dst[role])} partitions but 'src' spans {parts}",
                                       ins, program, role, ins.dst[role])
    n, k = int(ins.attrs["n"]), _free(ins.dst["val_dst"])
    if not N_RANGE[0] <= n < N_RANGE[1]:
        raise N.fail(f"n = {n}; topk needs {N_RANGE[0]} <= n < {N_RANGE[1]}", ins, program, "src", src)
    if not 1 <= k < K_LIMIT or k > n:
        raise K.fail(f"k = {k} (the free size of val_dst); topk needs 1 <= k < {K_LIMIT} and k <= n = {n}",
                     ins, program, "val_dst", ins.dst["val_dst"])
    if _free(ins.dst["idx_dst"]) != k:
        raise INDICES.fail(f"holds {_free(ins.dst['idx_dst'])} indices per partition; val_dst holds k = {k}",
                           ins, program, "idx_dst", ins.dst["idx_dst"])
    if _free(src) * GROUP < n:
        raise SOURCE.fail(f"holds {_free(src)} positions per partition; n = {n} needs ceil(n / 16) = "
                          f"{-(-n // GROUP)}", ins, program, "src", src)


def _cost(ins, program, target):
    # The API page's estimate: 4 * n + k GpSimd cycles.
    n, k = int(ins.attrs["n"]), _free(ins.dst["val_dst"])
    return cr.seconds(cr.GPSIMD_FIXED_CYCLES + 4 * n + k, target, "gpsimd")


register("topk", engines={"gpsimd"}, execute=_topk, cost=_cost, rules=COMPUTE_RULES + (_gen3_only, _rules),
         categories={REDUCE, CROSS_PARTITION})   # a result draws on its group's 16 partitions
