"""Selection instructions of the Vector Engine: select_reduce, range_select, and the top-8 family
(max8, nc_find_index8, nc_match_replace8) used for top-k sampling and MoE routing.
"""
from __future__ import annotations

import numpy as np

from nkihub.simulator import cost_rules as cr
from nkihub.simulator.isa import alu
from nkihub.simulator.isa.base import ELEMENTWISE, REDUCE, f32, fit, free_elems, reduce_res_read, register, store
from nkihub.simulator.isa.elementwise import _act_rules, _engine_cost, _reduce_into, operand, reduce_ops
from nkihub.simulator.rules import (COMPUTE_RULES, Documented, cited_same_free_size, cited_same_partitions,
                                     column_operand, documents, exact_partitions, fail, operand_dtype, partitions)

TOP = 8  # the top-8 instructions always produce 8 values per partition
TOP_INPUT_MAX = 16384   # max8 / nc_find_index8 / nc_match_replace8 pages: at most 16,384 elements per partition


def _rows(a: np.ndarray) -> np.ndarray:
    return a.reshape(a.shape[0], -1)


FLOAT_DTYPES = frozenset({"float8_e4m3", "float8_e5m2", "float8_e4m3fn", "float16", "bfloat16", "float32"})
COMPARISONS = frozenset({"equal", "less", "less_equal", "greater", "greater_equal"})


def _comparisons(ins, program, target):
    """range_select compares with one of equal, less, less_equal, greater, greater_equal."""
    for k in ("comp_op0", "comp_op1"):
        if ins.attrs.get(k) not in COMPARISONS:
            raise fail("range-select-op", f"{k} {ins.attrs.get(k)!r} must be one of {', '.join(sorted(COMPARISONS))}",
                       ins, program, "on_true_tile")


documents(_comparisons, Documented("range-select-op", ("on_true_tile",), None,
                                   "comp_op0/comp_op1 are equal, less, less_equal, greater or greater_equal"))


def _select_reduce(ins, src, dst, ctx):
    """dst = on_true where predicate (reversed by ``reverse_pred``) else on_false (a tile, an immediate or
    a [P, 1] column); with ``reduce_res`` the result is also reduced along the free axes."""
    out = dst["dst"]
    pred = fit(src["predicate"], out.shape) != 0
    if ins.attrs.get("reverse_pred"):
        pred = ~pred
    on_false = fit(f32(src["on_false"]), out.shape) if "on_false" in src and \
        src["on_false"].size == out.size else operand(ins, src, "on_false")
    y = np.where(pred, fit(f32(src["on_true"]), out.shape), on_false).astype(np.float32)
    store(out, y)
    _reduce_into(ins, src, dst, y)


register("select_reduce", rows=True, engines={"vector"}, execute=_select_reduce,
         cost=lambda ins, p, t: _engine_cost(ins, p, t, 2),
         rules=COMPUTE_RULES + (cited_same_partitions("dst", "predicate", "on_true", "on_false", "acc"),
                                cited_same_free_size("dst", "on_true"), cited_same_free_size("dst", "predicate"), _act_rules,
                                exact_partitions("dst", "reduce_res"), reduce_ops("maximum"),
                                operand_dtype("nki.isa.select_reduce", reduce_res=FLOAT_DTYPES),
                                column_operand("on_true", "on_false", source="nki.isa.select_reduce (AWS NKI API "
                                               "reference)")),
         categories={ELEMENTWISE, REDUCE}, reads_dst=reduce_res_read)


def _gen3_only(ins, program, target):
    if target.nc_version == "gen2":
        raise fail("target-support", f"{ins.opcode} is available on NeuronCore-v3 and newer, not on "
                   f"{target.name}", ins, program, "dst")


def _range_select(ins, src, dst, ctx):
    """idx = range_start + free index; dst = on_true_tile where comp_op0(idx, bound0) and
    comp_op1(idx, bound1) else on_false_value; the result is reduced with reduce_op into reduce_res."""
    out = dst["dst"]
    p, n = out.shape[0], free_elems(out.shape)
    idx = np.float32(ins.attrs.get("range_start", 0.0)) + np.arange(n, dtype=np.float32)[None, :]
    b0 = operand(ins, src, "bound0")
    b1 = operand(ins, src, "bound1")
    b0 = b0.reshape(p, 1) if np.ndim(b0) else b0
    b1 = b1.reshape(p, 1) if np.ndim(b1) else b1
    pred = (alu.alu(ins.attrs["comp_op0"])(idx, b0) != 0) & (alu.alu(ins.attrs["comp_op1"])(idx, b1) != 0)
    y = np.where(pred, _rows(fit(f32(src["on_true_tile"]), out.shape)),
                 np.float32(ins.attrs.get("on_false_value", 0.0))).astype(np.float32)
    store(out, y.reshape(out.shape))
    _reduce_into(ins, src, dst, y)


documents(_gen3_only, Documented("target-support", ("dst",), None, "NeuronCore-v3 (trn2) and newer"))


register("range_select", rows=True, engines={"vector"}, execute=_range_select,
         cost=lambda ins, p, t: _engine_cost(ins, p, t, 1),
         rules=COMPUTE_RULES + (cited_same_partitions("dst", "on_true_tile", "bound0", "bound1", "acc"),
                                cited_same_free_size("dst", "on_true_tile"), _act_rules, _gen3_only,
                                exact_partitions("dst", "reduce_res"), reduce_ops("maximum"), _comparisons,
                                operand_dtype("nki.isa.range_select", on_true_tile=FLOAT_DTYPES,
                                              bound0=frozenset({"float32"}), bound1=frozenset({"float32"})),
                                column_operand("on_true_tile", "bound0", "bound1", source="nki.isa.range_select "
                                               "(AWS NKI API reference)")),
         categories={ELEMENTWISE, REDUCE}, reads_dst=reduce_res_read)


def _top8_rules(*roles):
    def rule(ins, program, target):
        for role in roles:
            ap = ins.dst.get(role) or ins.src.get(role)
            if ap is not None and ap.size // max(1, partitions(ap)) != TOP:
                raise fail("top8-shape", f"'{role}' holds {TOP} elements per partition", ins, program, role)
        data = ins.src.get("data") or ins.src.get("src")
        n = data.size // max(1, partitions(data))
        if not TOP <= n <= TOP_INPUT_MAX:
            raise fail("top8-shape", f"the input holds {n} elements per partition; between {TOP} and "
                       f"{TOP_INPUT_MAX}", ins, program, "data" if "data" in ins.src else "src")
    rule.__doc__ = f"Operands {', '.join(roles)} hold {TOP} elements per partition."
    return documents(rule, Documented("top8-shape", roles, None, f"{', '.join(roles)} hold {TOP} elements per "
                                      f"partition; the input {TOP} to {TOP_INPUT_MAX}"))


def _top8_cost(ins, program, target):
    data = ins.src.get("data") or ins.src.get("src")
    return cr.seconds(cr.vector_cycles(data.size // max(1, partitions(data)) * cr.stride_slowdown(ins, program)),
                      target, "vector")


def _max8(ins, src, dst, ctx):
    """dst[p, 0:8] = the 8 largest values of src[p] in descending order."""
    x = _rows(f32(src["src"]))
    store(dst["dst"], -np.sort(-x, axis=1)[:, :TOP].reshape(dst["dst"].shape))


register("max8", rows=True, engines={"vector"}, execute=_max8, cost=_top8_cost,
         rules=COMPUTE_RULES + (exact_partitions("dst", "src"), _top8_rules("dst")), categories={REDUCE})


def _first_index(x: np.ndarray, vals: np.ndarray, missing: int) -> np.ndarray:
    """Per partition, the first flat index of each of vals[p, k] in x[p] (``missing`` when absent)."""
    hit = x[:, None, :] == vals[:, :, None]
    return np.where(hit.any(axis=2), hit.argmax(axis=2), missing)


def _missing(dtype: np.dtype) -> int:
    # Not documented: a value that is not found reports the largest index the dst dtype holds.
    return int(np.iinfo(dtype).max) if dtype.kind in "iu" else -1


def _find_index8(ins, src, dst, ctx):
    """dst[p, k] = the first index in data[p] (flattened free axes) equal to vals[p, k]; a value listed
    more than once gets its next occurrence each time (its first, then its second, ...), as
    nc_match_replace8 consumes repeated values. The ISA page speaks of unique values only; the repeated
    case is an assumption taken from nki-library's topk_reduce, which lists token t eight times to find
    the K rows that carry it."""
    out = dst["dst"]
    x, vals = _rows(f32(src["data"])), _rows(f32(src["vals"]))
    idx = _first_index(x, vals, _missing(out.dtype))
    if ((vals[:, :, None] == vals[:, None, :]) & ~np.eye(vals.shape[1], dtype=bool)).any():   # consume matches in order of the vals, as nc_match_replace8 does
        x, rows = x.copy(), np.arange(x.shape[0])
        for j in range(vals.shape[1]):
            hit = x == vals[:, j:j + 1]
            found = hit.any(axis=1)
            pos = hit.argmax(axis=1)
            idx[:, j] = np.where(found, pos, _missing(out.dtype))
            x[rows[found], pos[found]] = np.nan
    out[...] = idx.reshape(out.shape).astype(out.dtype)


register("nc_find_index8", rows=True, engines={"vector"}, execute=_find_index8, cost=_top8_cost,
         rules=COMPUTE_RULES + (exact_partitions("dst", "data", "vals"), _top8_rules("dst", "vals"),
                                operand_dtype("nki.isa.nc_find_index8", dst=frozenset({"uint16", "uint32"}))),
         categories={REDUCE})


def _match_replace8(ins, src, dst, ctx):
    """dst = data with the first occurrence of each vals[p, k] replaced by ``imm``, value after value (the
    ISA's numpy equivalent), so a value listed twice replaces its first two occurrences; the optional
    ``dst_idx`` receives the replaced positions (0 for a value not found, as that equivalent leaves it;
    the ISA calls the case undefined)."""
    out = dst["dst"]
    x = _rows(f32(src["data"])).copy()
    vals = _rows(f32(src["vals"]))
    rows = np.arange(x.shape[0])
    idx = np.zeros(vals.shape, dtype=np.int64)
    imm = np.float32(ins.attrs["imm"])
    for j in range(vals.shape[1]):
        hit = x == vals[:, j:j + 1]
        found = hit.any(axis=1)
        pos = hit.argmax(axis=1)
        idx[found, j] = pos[found]
        x[rows[found], pos[found]] = imm
    store(out, x.reshape(out.shape))
    if "dst_idx" in dst:
        d = dst["dst_idx"]
        d[...] = idx.reshape(d.shape).astype(d.dtype)


register("nc_match_replace8", rows=True, engines={"vector"}, execute=_match_replace8, cost=_top8_cost,
         rules=COMPUTE_RULES + (exact_partitions("dst", "data", "vals", "dst_idx"), cited_same_free_size("dst", "data"),
                                _top8_rules("vals", "dst_idx")),
         categories={ELEMENTWISE})
