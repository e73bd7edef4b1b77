"""Elementwise instructions of the Vector, Scalar and GpSimd engines.

Operands are SBUF/PSUM tiles; scalar operands are immediates (in ``attrs``) or per-partition columns
``[P, 1]`` (in ``src``) broadcast along the free dims. The engines compute in fp32.
"""
from __future__ import annotations

import numpy as np

from nkihub.simulator import cost_rules as cr
from nkihub.simulator.dtypes import as_dtype
from nkihub.simulator.isa import alu
from nkihub.simulator.isa.base import ELEMENTWISE, GENERATE, ROUNDED, f32, fit, reduce_res_read, register, store
from nkihub.simulator.isa.fast import (NoBind, column, fitted, reader, refresher, strict_reshape, understands,
                                       writer)
from nkihub.simulator.rules import (COMPUTE_RULES, Documented, cited_same_free_size, cited_same_partitions,
                                     column_operand, documents, exact_partitions, fail, operand_dtype, partitions,
                                     same_dtype, same_shape_as)


def _n(ins) -> int:
    ap = ins.dst["dst"]
    return ap.size // max(1, partitions(ap))


def _bf16_sbuf(ins, program) -> bool:
    return all(program.tensor_of(ap).dtype in ("bfloat16", "float16") and program.tensor_of(ap).buffer == "sbuf"
               for ap in list(ins.src.values()) + list(ins.dst.values()))


def _any_psum(ins, program) -> bool:
    return any(program.tensor_of(ap).buffer == "psum" for ap in ins.src.values())


def _engine_cost(ins, program, target, inputs: int, *, fast=False, perf=1):
    n = _n(ins) * cr.stride_slowdown(ins, program)
    if ins.engine == "gpsimd":
        return cr.seconds(cr.gpsimd_cycles(n), target, "gpsimd")
    if ins.engine == "scalar":
        return cr.seconds(cr.scalar_cycles(n), target, "scalar")
    cycles = cr.vector_cycles(n, inputs, fast=fast)
    if perf > 1 and target.nc_version != "gen2" and _bf16_sbuf(ins, program):
        cycles = max(cr.MIN_II_CYCLES, cycles / perf)
    return cr.seconds(cycles, target, "vector")


def operand(ins, src, name: str, default=None):
    """A scalar operand: a ``[P, 1]`` column from ``src`` or an immediate from ``attrs``."""
    if name in src:
        a = f32(src[name])
        nd = len(next(iter(ins.dst.values())).shape) if ins.dst else a.ndim
        # A [P] or [P, 1] column broadcasts along every free axis of an N-D result (numpy would align it
        # with the last axis instead).
        return a.reshape(a.shape[0], *([1] * (nd - 1))) if nd > 1 and a.size == a.shape[0] else a
    value = ins.attrs.get(name, default)
    return None if value is None else np.float32(value)


def arithmetic_ops(*keys: str, role: str = "data", same_kind: bool = False):
    """Rule factory: the operator attributes ``keys`` (those set) are arithmetic, not bitvec; with
    ``same_kind`` they may be bitvec only together, on the Vector Engine, with integer operands
    (tensor_scalar). Raised as ``alu-op-kind`` on the input ``role``."""
    def rule(ins, program, target):
        ops = [ins.attrs[k] for k in keys if ins.attrs.get(k) is not None]
        bitvec = [op for op in ops if op in alu.BITVEC]
        if not bitvec:
            return
        if not same_kind:
            raise fail("alu-op-kind", f"{bitvec[0]} is a bitvec operator; {ins.opcode} takes arithmetic operators "
                       "only", ins, program, role)
        if len(bitvec) != len(ops):
            raise fail("alu-op-kind", f"op0 and op1 must both be bitvec or both arithmetic, not {ops}", ins,
                       program, role)
        if ins.engine != "vector":
            raise fail("alu-op-kind", "bitvec operators run on the Vector Engine only", ins, program, role)
        for r, ap in (*ins.src.items(), *ins.dst.items()):
            if program.tensors[ap.tensor].dtype.startswith(("float", "bfloat")):
                raise fail("alu-op-kind", f"bitvec operators take integer tiles; '{r}' is "
                           f"{program.tensors[ap.tensor].dtype}", ins, program, r)
    rule.__name__ = "arithmetic_ops"
    what = ("op0/op1 both arithmetic or both bitvec (Vector Engine, integer tiles)" if same_kind else
            f"{'/'.join(keys)} arithmetic operators, not bitvec")
    return documents(Documented("alu-op-kind", (role,), None, what))(rule)


def reduce_ops(*allowed: str):
    """Rule factory: with a ``reduce_res`` the ``reduce_op`` attribute is one of ``allowed`` (reduce
    operator names as ``alu.reduce_name`` spells them). Raised as ``reduce-op`` on ``reduce_res``."""
    def rule(ins, program, target):
        op = ins.attrs.get("reduce_op", "add")
        try:
            op = alu.reduce_name(op)
        except ValueError:
            pass
        if "reduce_res" in ins.dst and op not in allowed:
            raise fail("reduce-op", f"reduce_op {op!r}: {ins.opcode} reduces with {', '.join(allowed)}", ins,
                       program, "reduce_res")
    rule.__name__ = "reduce_ops"
    return documents(Documented("reduce-op", ("reduce_res",), None, f"reduce_op is {' or '.join(allowed)}"))(rule)


def _apply(op: str, a, b, reverse: bool):
    return alu.alu(op)(b, a) if reverse else alu.alu(op)(a, b)


def _reduce_into(ins, src, dst, y):
    """Shared by activation, tensor_scalar_reduce and the selects: the free-axis reduction of a result
    into ``reduce_res`` ([P, 1]). With the engine's accumulator registers as operand ``acc`` ([P, 1]),
    ``reduce_cmd='reduce'`` folds the result into them (else they restart from it) and ``reduce_res``
    receives them; without, ``reduce`` keeps accumulating onto reduce_res's contents."""
    if "reduce_res" not in dst and "acc" not in dst:
        return
    op = ins.attrs.get("reduce_op", "add")
    r = alu.reduce(op, y.reshape(y.shape[0], -1), axis=1, keepdims=True)
    if ins.attrs.get("reduce_cmd") == "reduce":
        prev = src["acc"] if "acc" in dst else dst["reduce_res"]
        r = alu.alu(alu.reduce_name(op))(f32(prev).reshape(r.shape), r)
    for role in ("acc", "reduce_res"):
        if role in dst:
            store(dst[role], r.reshape(dst[role].shape))


def reduce_into_step(ins, src, dst, sc, slot: int):
    """``_reduce_into`` for a stacked [k, P, ...] fp32 result: ``fold(y)`` (None without reduce_res)."""
    if "reduce_res" not in dst:
        return None
    res = dst["reduce_res"]
    op = alu.reduce_name(ins.attrs.get("reduce_op", "add"))
    fn, _ = alu.REDUCE_OPS[op]
    write = writer(res)
    if ins.attrs.get("reduce_cmd") == "reduce":
        acc, refresh = reader(res, sc, slot)
        combine = alu.alu_fn(op)

        def fold(y):
            r = np.asarray(fn(y.reshape(y.shape[0], y.shape[1], -1), axis=2, keepdims=True), dtype=np.float32)
            if refresh is not None:
                refresh()
            r = np.asarray(combine(acc.reshape(r.shape), r), dtype=np.float32)
            write(r.reshape(res.shape))
        return fold

    def fold(y):
        r = np.asarray(fn(y.reshape(y.shape[0], y.shape[1], -1), axis=2, keepdims=True), dtype=np.float32)
        write(r.reshape(res.shape))
    return fold


def binary_step(fn_name: str, t: np.ndarray):
    """``apply(a, b) -> fp32 array`` equal to ``alu.alu(name)(a, b)``: a ufunc writes into ``t``."""
    fn = alu.alu_fn(fn_name)
    if fn_name in alu.UFUNC_OPS:
        return lambda a, b: fn(a, b, out=t)
    return lambda a, b: np.asarray(fn(a, b), dtype=np.float32)


# -- tensor_tensor --------------------------------------------------------------------------------------
def _tensor_tensor(ins, src, dst, ctx):
    """dst = data1 <op> data2, elementwise (Vector or GpSimd engine)."""
    out = dst["dst"]
    a, b = fit(f32(src["data1"]), out.shape), fit(f32(src["data2"]), out.shape)
    store(out, alu.alu(ins.attrs["op"])(a, b))


def _tt_bind(ins, src, dst, sc):
    understands(ins, "op")
    out = dst["dst"]
    a_arr, a_ref = reader(src["data1"], sc, 0)
    b_arr, b_ref = reader(src["data2"], sc, 1)
    a, b = fitted(a_arr, out.shape), fitted(b_arr, out.shape)
    refresh = refresher(a_ref, b_ref)
    apply = binary_step(ins.attrs["op"], sc.new(out.shape, np.float32, 2))
    write = writer(out)

    def step(ctx):
        if refresh is not None:
            refresh()
        write(apply(a(), b()))
    return step


def _tt_cost(ins, program, target):
    fast = (_bf16_sbuf(ins, program) and ins.attrs["op"] in ("add", "subtract", "multiply")) \
        or _any_psum(ins, program)
    return _engine_cost(ins, program, target, 2, fast=fast, perf=cr.PERF_MODE_TT_SPEEDUP)


register("tensor_tensor", engines={"vector", "gpsimd"}, execute=_tensor_tensor, cost=_tt_cost, bind=_tt_bind,
         rules=COMPUTE_RULES + (cited_same_partitions("dst", "data1", "data2"), cited_same_free_size("dst", "data1"),
                                cited_same_free_size("dst", "data2"),
                                same_shape_as("data1", "data2",
                                              source="nki.isa.tensor_tensor (AWS NKI API reference)")),
         categories={ELEMENTWISE})


# -- tensor_scalar ------------------------------------------------------------------------------------
def _tensor_scalar(ins, src, dst, ctx):
    """dst = (data <op0> operand0) <op1> operand1, operands immediates or [P, 1] columns; ``reverse``
    swaps an operator's operands."""
    out = dst["dst"]
    x = fit(f32(src["data"]), out.shape)
    y = _apply(ins.attrs["op0"], x, operand(ins, src, "operand0"), ins.attrs.get("reverse0", False))
    if ins.attrs.get("op1") is not None:
        y = _apply(ins.attrs["op1"], y, operand(ins, src, "operand1"), ins.attrs.get("reverse1", False))
    store(out, y)
    _reduce_into(ins, src, dst, y)


def _ts_bind(ins, src, dst, sc):
    understands(ins, "op0", "reverse0", "operand0", "op1", "reverse1", "operand1")
    out = dst["dst"]
    x_arr, x_ref = reader(src["data"], sc, 0)
    x = fitted(x_arr, out.shape)
    s0, s0_ref = column(ins, src, "operand0", out.ndim, sc, 1)
    a = ins.attrs
    if s0 is None or (a.get("op1") is not None and column(ins, src, "operand1", out.ndim, sc, 2)[0] is None):
        raise NoBind("missing operand")
    stages = [(binary_step(a["op0"], sc.new(out.shape, np.float32, 3)), s0, a.get("reverse0", False))]
    s1_ref = None
    if a.get("op1") is not None:
        s1, s1_ref = column(ins, src, "operand1", out.ndim, sc, 2)
        stages.append((binary_step(a["op1"], sc.new(out.shape, np.float32, 3)), s1, a.get("reverse1", False)))
    refresh = refresher(x_ref, s0_ref, s1_ref)
    write = writer(out)
    fold = reduce_into_step(ins, src, dst, sc, 4)

    def step(ctx):
        if refresh is not None:
            refresh()
        y = x()
        for apply, operand_, rev in stages:
            y = apply(operand_, y) if rev else apply(y, operand_)
        write(y)
        if fold is not None:
            fold(y)
    return step


def _ts_cost(ins, program, target):
    return _engine_cost(ins, program, target, 1, perf=cr.PERF_MODE_COPY_SPEEDUP)


register("tensor_scalar", engines={"vector", "scalar", "gpsimd"}, execute=_tensor_scalar, cost=_ts_cost,
         bind=_ts_bind,
         rules=COMPUTE_RULES + (cited_same_partitions("dst", "data", "operand0", "operand1"),
                                cited_same_free_size("dst", "data"), arithmetic_ops("op0", "op1", same_kind=True),
                                column_operand("data", "operand0", "operand1",
                                               source="nki.isa.tensor_scalar (AWS NKI API reference)")),
         categories={ELEMENTWISE})


# -- activation ---------------------------------------------------------------------------------------
def _activation(ins, src, dst, ctx):
    """dst = op(data * scale + bias) on the Scalar Engine; scale/bias are immediates or [P, 1] columns;
    optionally reduces the result along the free axes into ``reduce_res``."""
    out = dst["dst"]
    x = fit(f32(src["data"]), out.shape)
    scale = operand(ins, src, "scale", 1.0)
    bias = operand(ins, src, "bias", 0.0)
    y = alu.activation(ins.attrs["op"])(x * scale + bias)
    store(out, y)
    _reduce_into(ins, src, dst, y)


def _act_bind(ins, src, dst, sc):
    understands(ins, "op", "bias", "scale", "reduce_op", "reduce_cmd")
    out = dst["dst"]
    x_arr, x_ref = reader(src["data"], sc, 0)
    x = fitted(x_arr, out.shape)
    scale, sc_ref = column(ins, src, "scale", out.ndim, sc, 1, 1.0)
    bias, b_ref = column(ins, src, "bias", out.ndim, sc, 2, 0.0)
    fn = alu.ACTIVATION_FNS.get(ins.attrs["op"])
    if fn is None:
        raise NoBind("unknown activation")
    in_place = ins.attrs["op"] in alu.UFUNC_ACTIVATIONS
    if in_place:
        ufunc = fn
        fn = lambda v: ufunc(v, out=v)   # noqa: E731  (elementwise: in place gives the same bits)
    # An fp32 destination is computed in place (no copy out of a work array) when nothing the step reads
    # lives in it and its rows are laid out as the work array's (the fold's row sums take the same path).
    direct = (in_place or ins.attrs["op"] in ("copy", "identity", "bypass")) and _rows_like_work_array(out) and \
        not any(np.may_share_memory(out, a) for a in (*src.values(), *dst.values()) if a is not out)
    t = out if direct else sc.new(out.shape, np.float32, 3)
    if not in_place and ins.attrs["op"] not in ("copy", "identity", "bypass"):
        fn = blocked(fn, t, sc.new(out.shape, np.float32, 5))
    refresh = refresher(x_ref, sc_ref, b_ref)
    write = (lambda y: None) if direct else writer(out)
    fold = reduce_into_step(ins, src, dst, sc, 4)

    # x * 1.0 + bias is (x + bias) bit for bit, NaN payloads included (the add quiets a signalling NaN
    # as the multiply would): skip the multiply.
    unit = not isinstance(scale, np.ndarray) and scale == np.float32(1.0)

    def step(ctx):
        if refresh is not None:
            refresh()
        if unit:
            np.add(x(), bias, out=t)
        else:
            np.multiply(x(), scale, out=t)
            np.add(t, bias, out=t)
        y = np.asarray(fn(t), dtype=np.float32)
        write(y)
        if fold is not None:
            fold(y)
    return step


# Elements an activation built of several numpy calls (gelu: a dozen float64 temporaries) computes at a
# time: its temporaries then stay in the core's cache and below the allocator's mmap threshold. Whole
# stacks of 2^18 elements made 2 MB temporaries that a lane thread's malloc arena mapped and unmapped on
# every call (vit 64 images: 170k page faults a run, gelu 26 ns per element against 9 in blocks).
ACT_BLOCK = 16384


def blocked(fn, t: np.ndarray, y: np.ndarray):
    """``fn`` for the C-contiguous fp32 work array ``t`` alone: ``fn(t)`` computed ``ACT_BLOCK`` elements at
    a time into ``y`` (C-contiguous, t's shape), which it returns. Elementwise ``fn`` only: each element's
    value does not depend on the block it is computed in."""
    if t.size <= ACT_BLOCK:
        return fn
    tf, yf = strict_reshape(t, (t.size,)), strict_reshape(y, (y.size,))
    pairs = [(yf[a:a + ACT_BLOCK], tf[a:a + ACT_BLOCK]) for a in range(0, t.size, ACT_BLOCK)]

    def run(v):
        for ys, ts in pairs:
            np.copyto(ys, fn(ts), casting="unsafe")
        return y
    return run


def _rows_like_work_array(a: np.ndarray) -> bool:
    """Whether stacked [k, P, ...] ``a`` is fp32 with every partition's free elements back to back in C
    order and partitions and members ascending, as in a C-contiguous work array of its shape."""
    if a.dtype != np.float32 or a.ndim < 2:
        return False
    row = a[0, 0]
    k, p = a.shape[:2]
    return row.flags.c_contiguous and (p == 1 or a.strides[1] >= row.nbytes) and \
        (k == 1 or a.strides[0] >= p * max(a.strides[1], row.nbytes))


def _act_cost(ins, program, target):
    return cr.seconds(cr.scalar_cycles(_n(ins) * cr.stride_slowdown(ins, program), reduce="reduce_res" in ins.dst), target, "scalar")


ACT_BIAS_V2 = Documented("activation-bias", ("bias",), None,
                         "on NeuronCore-v2 a bias is a [N, 1] vector (a compile-time scalar bias from NeuronCore-v3)")
ACT_RECIPROCAL_BIAS_V2 = Documented("activation-bias", ("bias",), "nki.api.shared (Supported activation functions)",
                                    "on NeuronCore-v2 activation with op=reciprocal takes no bias")


def _act_rules(ins, program, target):
    if "reduce_res" in ins.dst and ins.dst["reduce_res"].size // max(1, partitions(ins.dst["reduce_res"])) != 1:
        raise fail("reduce-result-shape", "reduce_res must hold one element per partition", ins, program,
                   "reduce_res")


documents(Documented("reduce-result-shape", ("reduce_res",), None,
                                "reduce_res holds one element per partition ([P, 1])"))(_act_rules)


@documents(ACT_BIAS_V2, ACT_RECIPROCAL_BIAS_V2)
def _act_bias_v2(ins, program, target):
    """On NeuronCore-v2 an activation bias, when given, is a tile (the page's Layout section), and
    op=reciprocal takes none (the activation functions table's note)."""
    if target.nc_version != "gen2":
        return
    if ins.attrs.get("bias") is not None:
        raise ACT_BIAS_V2.fail(f"bias is the scalar {ins.attrs['bias']!r}; on {target.name} (NeuronCore-v2) it "
                               "must be a [N, 1] vector (a scalar bias needs NeuronCore-v3+)", ins, program, "bias")
    if "bias" in ins.src and ins.attrs.get("op") == "reciprocal":
        raise ACT_RECIPROCAL_BIAS_V2.fail(f"activation(op=reciprocal) takes no bias on {target.name} "
                                          "(NeuronCore-v2)", ins, program, "bias")


register("activation", engines={"scalar"}, execute=_activation, cost=_act_cost, bind=_act_bind,
         rules=COMPUTE_RULES + (cited_same_partitions("dst", "data", "bias", "scale"), cited_same_free_size("dst", "data"),
                                _act_rules, _act_bias_v2, exact_partitions("dst", "reduce_res"),
                                operand_dtype("nki.isa.activation", scale=frozenset({"float32"}),
                                              bias=frozenset({"float32", "float16", "bfloat16"})),
                                column_operand("data", "scale", "bias",
                                               source="nki.isa.activation (AWS NKI API reference)")),
         categories={ELEMENTWISE, ROUNDED},
         reads_dst=reduce_res_read)


# -- copies, memset, reciprocal -----------------------------------------------------------------------
def _tensor_copy(ins, src, dst, ctx):
    """dst = src: bit-exact for equal dtypes, through fp32 otherwise (Vector, Scalar or GpSimd); with an
    output ``dtype`` attribute other than dst's, the values are rounded to it on the way."""
    out, s = dst["dst"], src["src"]
    if ins.attrs.get("dtype") is not None:
        store(out, fit(f32(s).astype(as_dtype(ins.attrs["dtype"])), out.shape))
    elif s.dtype == out.dtype:
        out[...] = fit(s, out.shape)
    else:
        store(out, fit(f32(s), out.shape))


def _copy_bind(ins, src, dst, sc):
    understands(ins)
    from nkihub.simulator.isa.dma import copy_step
    return copy_step(src["src"], dst["dst"], sc)


register("tensor_copy", engines={"vector", "scalar", "gpsimd"}, execute=_tensor_copy, cost=_ts_cost, bind=_copy_bind,
         rules=COMPUTE_RULES + (cited_same_partitions("dst", "src"), cited_same_free_size("dst", "src")),
         categories={ELEMENTWISE},
         # an output dtype attribute rounds the values on the way
         copies=lambda ins: "src" if not ins.attrs else None)


def _predicated(ins, src, dst, ctx):
    """dst = src where predicate (reversed with ``reverse_pred``) else dst unchanged (Vector Engine)."""
    out = dst["dst"]
    pred = fit(src["predicate"], out.shape) != 0
    if ins.attrs.get("reverse_pred"):
        pred = ~pred
    value = fit(f32(src["src"]), out.shape) if "src" in src else np.float32(ins.attrs["value"])
    store(out, np.where(pred, value, f32(out)))


register("tensor_copy_predicated", rows=True, engines={"vector"}, execute=_predicated,
         cost=lambda ins, p, t: _engine_cost(ins, p, t, 2),
         rules=COMPUTE_RULES + (cited_same_partitions("dst", "src", "predicate"), cited_same_free_size("dst", "predicate"),
                                cited_same_free_size("dst", "src"), same_dtype("dst", "src")),
         # The page's "predicate must be uint8, uint16 or uint32" is not a rule: nl.where lowers to this
         # instruction with the float tile an nl comparison returns as its predicate.
         categories={ELEMENTWISE}, reads_dst=lambda ins: True)


def _memset(ins, src, dst, ctx):
    """Fill dst with a constant (Vector or GpSimd engine)."""
    store(dst["dst"], np.full(dst["dst"].shape, ins.attrs["value"], dtype=np.float64))


register("memset", rows=True, engines={"vector", "gpsimd"}, execute=_memset,
         cost=lambda ins, p, t: _engine_cost(ins, p, t, 1), rules=COMPUTE_RULES,
         categories={GENERATE})


def _reciprocal(ins, src, dst, ctx):
    """dst = 1 / data (Vector Engine)."""
    out = dst["dst"]
    with np.errstate(divide="ignore"):
        store(out, np.float32(1.0) / fit(f32(src["data"]), out.shape))


def _recip_cost(ins, program, target):
    return cr.seconds(max(cr.MIN_II_CYCLES, cr.RECIPROCAL_CYCLES_PER_ELEM * _n(ins) * cr.stride_slowdown(ins, program)), target, "vector")


register("reciprocal", rows=True, engines={"vector"}, execute=_reciprocal, cost=_recip_cost,
         rules=COMPUTE_RULES + (cited_same_partitions("dst", "data"), cited_same_free_size("dst", "data")),
         categories={ELEMENTWISE})


# -- iota and affine_select (GpSimd) ------------------------------------------------------------------
def affine_values(shape, pattern, offset, channel_multiplier) -> np.ndarray:
    """offset + channel_multiplier * partition + sum(step_i * index_i) over a [P, ...] tile whose free
    elements follow ``pattern`` ([[step, num], ...])."""
    p = shape[0]
    val = np.full((p, 1), offset, dtype=np.int64) + channel_multiplier * np.arange(p, dtype=np.int64)[:, None]
    free = np.zeros(1, dtype=np.int64)
    for step, num in pattern:
        free = (free[:, None] + step * np.arange(num, dtype=np.int64)[None, :]).reshape(-1)
    return (val + free[None, :]).reshape(shape)


def _pattern_rule(ins, program, target):
    out = ins.dst["dst"]
    n = 1
    for _, num in ins.attrs["pattern"]:
        n *= num
    if n != out.size // max(1, partitions(out)):
        raise fail("pattern-size", f"the pattern describes {n} elements per partition; dst has "
                   f"{out.size // max(1, partitions(out))}", ins, program, "dst")


def _iota(ins, src, dst, ctx):
    """dst[p, i...] = offset + channel_multiplier * p + sum(step_k * i_k) (GpSimd Engine)."""
    out = dst["dst"]
    store(out, affine_values(out.shape, ins.attrs["pattern"], ins.attrs.get("offset", 0),
                             ins.attrs.get("channel_multiplier", 0)).astype(np.float64))


def _gpsimd_cost(ins, program, target):
    return cr.seconds(cr.gpsimd_cycles(_n(ins) * cr.stride_slowdown(ins, program)), target, "gpsimd")


documents(Documented("pattern-size", ("dst",), None,
                                    "the access pattern describes dst's elements per partition"))(_pattern_rule)


register("iota", engines={"gpsimd"}, execute=_iota, cost=_gpsimd_cost,
         rules=COMPUTE_RULES + (_pattern_rule,), categories={GENERATE})


def _affine_select(ins, src, dst, ctx):
    """dst = on_true_tile where cmp_op(affine value, 0) else on_false_value; the affine value is the
    iota expression (pattern, offset, channel_multiplier) (GpSimd Engine)."""
    out = dst["dst"]
    vals = affine_values(out.shape, ins.attrs["pattern"], ins.attrs.get("offset", 0),
                         ins.attrs.get("channel_multiplier", 0)).astype(np.float32)
    pred = alu.alu(ins.attrs.get("cmp_op", "equal"))(vals, np.float32(0)) != 0
    store(out, np.where(pred, fit(f32(src["on_true_tile"]), out.shape), np.float32(ins.attrs["on_false_value"])))


register("affine_select", engines={"gpsimd"}, execute=_affine_select, cost=_gpsimd_cost,
         rules=COMPUTE_RULES + (_pattern_rule, cited_same_partitions("dst", "on_true_tile"),
                                cited_same_free_size("dst", "on_true_tile")),
         categories={ELEMENTWISE})
