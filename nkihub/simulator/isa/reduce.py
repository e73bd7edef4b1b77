"""Reductions along the free axes (Vector Engine): tensor_reduce, bn_stats, bn_aggr."""
from __future__ import annotations

import numpy as np

from nkihub.simulator import cost_rules as cr
from nkihub.simulator.isa import alu
from nkihub.simulator.isa.base import REDUCE, f32, register, store
from nkihub.simulator.isa.fast import reader, understands, writer
from nkihub.simulator.rules import COMPUTE_RULES, Documented, documents, exact_partitions, fail, partitions


def _n_in(ins, role="data") -> int:
    ap = ins.src[role]
    return ap.size // max(1, partitions(ap))


def _axes(ins, ndim: int) -> tuple[int, ...]:
    axis = ins.attrs["axis"]
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(a % ndim for a in axes)


def _reduce_rules(ins, program, target):
    ndim = len(ins.src["data"].shape)
    axes = _axes(ins, ndim)
    if 0 in axes:
        raise fail("reduce-axis", "tensor_reduce reduces free axes only (axis 0 is the partition dim; "
                   "use nisa.tensor_partition_reduce or a matmul)", ins, program, "data")
    try:
        alu.reduce_name(ins.attrs["op"])
    except ValueError as exc:
        raise fail("reduce-op", str(exc), ins, program, "data") from None
    last = tuple(range(ndim - len(set(axes)), ndim))
    if tuple(sorted(set(axes))) != last:
        raise fail("reduce-axes-last", f"reduces axes {tuple(axes)} of a {ndim}-d tile "
                   f"{tuple(ins.src['data'].shape)}; the reduced axes must be the last, consecutive free axes, ending at axis {ndim - 1} (e.g. "
                   f"{last}); nl reductions move them last, or permute the view (source: nki.isa.tensor_reduce)",
                   ins, program, "data")
    data, dst = ins.src["data"], ins.dst["dst"]
    kept = 1
    for i, n in enumerate(data.shape[1:], start=1):
        kept *= 1 if i in axes else n
    if dst.size // max(1, partitions(dst)) != kept:
        raise fail("reduce-output-shape", f"dst holds {dst.size // max(1, partitions(dst))} elements per "
                   f"partition; reducing axes {axes} of {tuple(data.shape)} leaves {kept}", ins, program, "dst")


def _tensor_reduce(ins, src, dst, ctx):
    """dst = reduce(op, data) over the free ``axis`` (negated with ``negate``)."""
    data, out = f32(src["data"]), dst["dst"]
    r = alu.reduce(ins.attrs["op"], data, axis=_axes(ins, data.ndim), keepdims=True)
    if ins.attrs.get("negate"):
        r = -r
    store(out, r.reshape(out.shape))


def _reduce_bind(ins, src, dst, sc):
    understands(ins, "op", "axis", "negate", "keepdims")
    data, out = src["data"], dst["dst"]
    arr, refresh = reader(data, sc, 0)
    axes = tuple(a + 1 for a in _axes(ins, data.ndim - 1))
    fn, _ = alu.REDUCE_OPS[alu.reduce_name(ins.attrs["op"])]
    negate = bool(ins.attrs.get("negate"))
    write = writer(out)

    def step(ctx):
        if refresh is not None:
            refresh()
        r = np.asarray(fn(arr, axis=axes, keepdims=True), dtype=np.float32)
        if negate:
            r = -r
        write(r.reshape(out.shape))
    return step


def _reduce_cost(ins, program, target):
    n = _n_in(ins) * cr.stride_slowdown(ins, program)
    bf16_fast = program.tensor_of(ins.src["data"]).dtype == "bfloat16" and \
        alu.reduce_name(ins.attrs["op"]) in ("add", "maximum")
    return cr.seconds(max(cr.MIN_II_CYCLES, n / 2 if bf16_fast else n), target, "vector")


documents(Documented("reduce-axis", ("data",), None, "axis names free axes only (axis 0 is the partition dim)"),
          Documented("reduce-axes-last", ("data",), None, "the reduced axes are the last, consecutive free axes, "
                     "ending at the final axis (axis=(2, 3) of [P, D1, D2, D3], not (1, 2) or (1, 3))"),
          Documented("reduce-op", ("data",), None, "op is a reduction operator (add, max, ...)"),
          Documented("reduce-output-shape", ("dst",), None, "dst's elements per partition are consistent with "
                     "axis (1 when every free axis is reduced)"))(_reduce_rules)


register("tensor_reduce", engines={"vector"}, execute=_tensor_reduce, cost=_reduce_cost, bind=_reduce_bind,
         # The axis rule first: an old-dialect reduction over axis 0 makes a one-partition dst, which the
         # partition rule would otherwise report instead.
         rules=COMPUTE_RULES + (_reduce_rules, exact_partitions("dst", "data")), categories={REDUCE})


def _bn_stats_rules(ins, program, target):
    if _n_in(ins) > target.bn_stats_fmax:
        raise fail("bn-stats-size", f"{_n_in(ins)} elements per partition; bn_stats takes at most "
                   f"{target.bn_stats_fmax}", ins, program, "data")
    out = ins.dst["dst"]
    if out.size // max(1, partitions(out)) != 6:
        raise fail("bn-stats-shape", "dst holds 6 elements per partition", ins, program, "dst")


def _bn_stats(ins, src, dst, ctx):
    """dst[p] = (count, mean, var*count) of the even then of the odd elements of data[p]."""
    x = f32(src["data"]).reshape(src["data"].shape[0], -1)
    res = []
    for part in (x[:, 0::2], x[:, 1::2]):
        c = part.shape[1]
        mean = part.mean(axis=1) if c else np.zeros(x.shape[0], np.float32)
        m2 = ((part - mean[:, None]) ** 2).sum(axis=1) if c else np.zeros(x.shape[0], np.float32)
        res += [np.full(x.shape[0], c, np.float32), mean, m2]
    store(dst["dst"], np.stack(res, axis=1).astype(np.float32).reshape(dst["dst"].shape))


def _bn_stats_bind(ins, src, dst, sc):
    """``_bn_stats`` for k stacked instructions: numpy's mean and sum over the free elements of every
    partition of the stack at once (a reduction along the innermost axis sums each row as the single
    instruction's does)."""
    understands(ins)
    data, out = src["data"], dst["dst"]
    arr, refresh = reader(data, sc, 0)
    k, p = arr.shape[0], arr.shape[1]
    res = sc.new((k, p, 6), np.float32, 1)
    f = arr[0, 0].size
    diff = [sc.new((k, p, c), np.float32, 2 + j) for j, c in enumerate(((f + 1) // 2, f // 2))]
    write = writer(out)

    def step(ctx):
        if refresh is not None:
            refresh()
        x = arr.reshape(k, p, -1)       # a view, or a C-ordered copy where _bn_stats's reshape copies
        for j, part in enumerate((x[..., 0::2], x[..., 1::2])):
            c = part.shape[-1]
            res[..., 3 * j] = c
            if c:
                mean = part.mean(axis=-1)
                res[..., 3 * j + 1] = mean
                d = np.subtract(part, mean[..., None], out=diff[j])
                res[..., 3 * j + 2] = np.square(d, out=d).sum(axis=-1)
            else:
                res[..., 3 * j + 1:3 * j + 3] = 0.0
        write(res.reshape(out.shape))
    return step


documents(Documented("bn-stats-size", ("data",), None, "at most 512 elements per partition (bn_stats_fmax)"),
          Documented("bn-stats-shape", ("dst",), None, "dst holds 6 elements per partition"))(_bn_stats_rules)


register("bn_stats", engines={"vector"}, execute=_bn_stats, bind=_bn_stats_bind,
         cost=lambda ins, p, t: cr.seconds(cr.vector_cycles(_n_in(ins) * cr.stride_slowdown(ins, p)), t, "vector"),
         rules=COMPUTE_RULES + (exact_partitions("dst", "data"), _bn_stats_rules), categories={REDUCE})


def _bn_aggr_rules(ins, program, target):
    if _n_in(ins) % 3:
        raise fail("bn-aggr-shape", "data holds (count, mean, var*count) triples: its elements per "
                   "partition must be a multiple of 3", ins, program, "data")
    out = ins.dst["dst"]
    if out.size // max(1, partitions(out)) != 2:
        raise fail("bn-aggr-shape", "dst holds 2 elements per partition (mean, variance)", ins, program, "dst")


def _bn_aggr(ins, src, dst, ctx):
    """dst[p] = (mean, variance) aggregated from bn_stats triples (count, mean, var*count) in data[p]."""
    t = f32(src["data"]).reshape(src["data"].shape[0], -1, 3).astype(np.float64)
    count, mean, m2 = t[..., 0], t[..., 1], t[..., 2]
    n = count.sum(axis=1)
    safe_n = np.where(n > 0, n, 1)
    mu = (count * mean).sum(axis=1) / safe_n
    var = (m2 + count * (mean - mu[:, None]) ** 2).sum(axis=1) / safe_n
    store(dst["dst"], np.stack([mu, var], axis=1).astype(np.float32).reshape(dst["dst"].shape))


def _bn_aggr_bind(ins, src, dst, sc):
    """``_bn_aggr`` for k stacked instructions, in float64 as there (sums over each partition's triples)."""
    understands(ins)
    data, out = src["data"], dst["dst"]
    arr, refresh = reader(data, sc, 0)
    k, p = arr.shape[0], arr.shape[1]
    res, res32 = sc.new((k, p, 2), np.float64, 1), sc.new((k, p, 2), np.float32, 2)
    write = writer(out)

    def step(ctx):
        if refresh is not None:
            refresh()
        t = arr.reshape(k, p, -1, 3).astype(np.float64)
        count, mean, m2 = t[..., 0], t[..., 1], t[..., 2]
        n = count.sum(axis=-1)
        safe_n = np.where(n > 0, n, 1)
        mu = (count * mean).sum(axis=-1) / safe_n
        res[..., 0] = mu
        res[..., 1] = (m2 + count * (mean - mu[..., None]) ** 2).sum(axis=-1) / safe_n
        np.copyto(res32, res, casting="same_kind")
        write(res32.reshape(out.shape))
    return step


documents(Documented("bn-aggr-shape", ("data", "dst"), None,
                     "data holds (count, mean, var*count) triples; dst holds (mean, variance)"))(_bn_aggr_rules)


register("bn_aggr", engines={"vector"}, execute=_bn_aggr, bind=_bn_aggr_bind,
         cost=lambda ins, p, t: cr.seconds(max(cr.MIN_II_CYCLES, cr.BN_AGGR_FACTOR * _n_in(ins) * cr.stride_slowdown(ins, p)),
                                          t, "vector"),
         rules=COMPUTE_RULES + (exact_partitions("dst", "data"), _bn_aggr_rules), categories={REDUCE})
