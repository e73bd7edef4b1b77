"""Every instruction of the table against numpy, with hypothesis over shapes and dtypes.

``OP_TESTS`` is the op-test table: one row per opcode of ``simulator.isa.OPS`` (tests/simulator/
test_isa_table.py fails when an opcode has no row). A row draws a case, runs one instruction on the
executor (after its operand rules pass) and compares with numpy. References follow the hardware's
rounding points: inputs are rounded to their dtype, the math runs in fp32, the result is rounded to the
destination dtype once (round to nearest even, as ``ml_dtypes`` casts).
"""
from __future__ import annotations

import math
import re

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nkihub.simulator.dtypes import as_dtype, dtype_name
from nkihub.simulator.executor import Executor
from nkihub.simulator.replay import Replay
from batch_copies import folding, staged, staged_copies
from nkihub.simulator.isa import OPS, alu, opdef
from nkihub.simulator.program import AccessPattern, Instruction, Program, TensorSpec
from nkihub.simulator.targets import get_target
from nkihub.simulator.validate import check_instruction

F32 = np.float32
FLOATS = ("float32", "bfloat16", "float16")


# -- running one instruction ------------------------------------------------------------------------------
def full_ap(spec: TensorSpec) -> AccessPattern:
    """The row-major access pattern of a whole tensor."""
    return AccessPattern.row_major(spec.name, spec.shape)


def run_op(opcode, engine, dst, src, attrs=None, *, target="trn2", init=None):
    """Run one instruction: ``dst`` maps role -> (shape, dtype name, buffer), ``src`` role -> (array,
    buffer); ``init`` role -> array gives a destination initial contents (for accumulation).
    Returns (outputs by role, execution context)."""
    prog, inputs = Program(opcode), []
    init = init or {}
    for role, (arr, buf, *name) in src.items():   # (array, buffer[, dtype name]): a name for packed dtypes
        prog.add_tensor(TensorSpec(role, arr.shape, name[0] if name else dtype_name(arr.dtype), buf, kind="input"))
        prog.inputs.append(role)
        inputs.append(arr)
    for role, (shape, dt, buf) in dst.items():
        name = f"out_{role}"
        prog.add_tensor(TensorSpec(name, tuple(shape), dt, buf, kind="input" if role in init else "output"))
        if role in init:
            prog.inputs.append(name)
            inputs.append(np.asarray(init[role]).astype(as_dtype(dt)))
        prog.outputs.append(name)
    ins = Instruction(opcode, engine, {r: full_ap(prog.tensors[f"out_{r}"]) for r in dst},
                      {r: full_ap(prog.tensors[r]) for r in src}, attrs or {})
    prog.instructions.append(ins)
    check_instruction(ins, prog, get_target(target))
    ex = Executor(prog, target)
    outs = ex.run(inputs, echo_prints=False)
    # The fast engine must give the reference's bits (every row of the table passes through here):
    # replayed as it is, and as one stacked step over three copies of the instruction.
    fast = Replay(prog, target)
    for got, want in zip(fast.run(inputs, echo_prints=False), outs):
        assert_bits(got, want)
    assert fast.last_context.printed == ex.last_context.printed
    # ... and stacked: three copies as one batched step, reading the host tensors in place (the staging
    # copies folded) and in renamed on-chip storage (rows with gaps, copies kept).
    for col0, gap, fold in ((0, 0, True), (1, 3, False)):
        rep, rep_inputs = staged_copies(prog, inputs, BATCH_COPIES, col0, gap)
        batched = Replay(rep, target, batch=True)
        with folding(fold):
            outs_batched = batched.run(rep_inputs, echo_prints=False)
        for got, want in zip(outs_batched, Executor(rep, target).run(rep_inputs, echo_prints=False)):
            assert_bits(got, want)
        if opdef(opcode).bind is not None or opdef(opcode).rows:
            assert any(len(g.members) == BATCH_COPIES and rep.instructions[g.members[0]].opcode == opcode
                       for g in batched._batches.groups) or \
                set(staged(rep)) <= batched._batches.dataflow.dropped, batched.batch_note
    return dict(zip(dst, outs)), ex.last_context


BATCH_COPIES = 3


def assert_bits(got, want):
    """The same dtype, shape and bytes (NaN payloads included)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(np.ascontiguousarray(got).view(np.uint8), np.ascontiguousarray(want).view(np.uint8)), \
        f"the fast engine differs from the reference: {got!r} != {want!r}"


def rounded(data, shape, dtype: str, lo=-4.0, hi=4.0) -> np.ndarray:
    """Random values in [lo, hi) rounded to ``dtype`` (the kernel's input)."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    return rng.uniform(lo, hi, size=shape).astype(F32).astype(as_dtype(dtype))


def ref_out(value, dtype: str) -> np.ndarray:
    """An fp32 reference rounded once to the destination dtype."""
    return np.asarray(value, dtype=F32).astype(as_dtype(dtype))


def assert_same(got, want):
    """Bit-equal values (NaNs equal) of the same dtype and shape."""
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.astype(F32), want.astype(F32))


def tile_shape(data, max_p=16, max_f=24, free_dims=st.integers(1, 2)):
    """A tile shape [P, F...] (small: shapes exercise layouts, not throughput)."""
    p = data.draw(st.sampled_from([1, 2, 3, 8, max_p]), label="P")
    nf = data.draw(free_dims, label="free dims")
    return (p,) + tuple(data.draw(st.integers(1, max_f), label=f"F{i}") for i in range(nf))


dtypes = st.sampled_from(FLOATS)


# -- the op-test table ------------------------------------------------------------------------------------
BINARY_REFS = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
               "maximum": np.maximum, "minimum": np.minimum,
               "greater": lambda a, b: (a > b).astype(F32), "equal": lambda a, b: (a == b).astype(F32)}


def case_tensor_tensor(data):
    shape, op = tile_shape(data), data.draw(st.sampled_from(sorted(BINARY_REFS)))
    dt1, dt2, dto = data.draw(dtypes), data.draw(dtypes), data.draw(dtypes)
    a, b = rounded(data, shape, dt1), rounded(data, shape, dt2, 0.5, 4.0)
    engine = data.draw(st.sampled_from(["vector", "gpsimd"]))
    out, _ = run_op("tensor_tensor", engine, {"dst": (shape, dto, "sbuf")},
                    {"data1": (a, "sbuf"), "data2": (b, "sbuf")}, {"op": op})
    with np.errstate(all="ignore"):
        assert_same(out["dst"], ref_out(BINARY_REFS[op](a.astype(F32), b.astype(F32)), dto))


def case_tensor_scalar(data):
    shape, dt, dto = tile_shape(data), data.draw(dtypes), data.draw(dtypes)
    x = rounded(data, shape, dt)
    op0, op1 = data.draw(st.sampled_from(["add", "multiply", "subtract"])), \
        data.draw(st.sampled_from([None, "maximum", "divide"]))
    rev0 = data.draw(st.booleans())
    src, attrs = {"data": (x, "sbuf")}, {"op0": op0, "reverse0": rev0}
    if data.draw(st.booleans(), label="column operand"):
        col = rounded(data, (shape[0], 1), "float32")
        src["operand0"], s0 = (col, "sbuf"), col.reshape((shape[0],) + (1,) * (len(shape) - 1))
    else:
        s0 = F32(data.draw(st.sampled_from([0.5, -1.25, 3.0])))
        attrs["operand0"] = float(s0)
    y = BINARY_REFS[op0](s0, x.astype(F32)) if rev0 else BINARY_REFS[op0](x.astype(F32), s0)
    if op1:
        attrs.update(op1=op1, operand1=2.0, reverse1=False)
        y = BINARY_REFS[op1](y, F32(2.0))
    out, _ = run_op("tensor_scalar", "vector", {"dst": (shape, dto, "sbuf")}, src, attrs)
    assert_same(out["dst"], ref_out(y, dto))


def _sigmoid(x):
    return F32(1) / (F32(1) + np.exp(-x))


ACT_REFS = {"exp": np.exp, "tanh": np.tanh, "relu": lambda x: np.maximum(x, F32(0)), "square": np.square,
            "abs": np.abs, "negative": np.negative, "copy": lambda x: x, "sigmoid": _sigmoid,
            "silu": lambda x: x * _sigmoid(x)}


def case_activation(data):
    shape, dt, dto = tile_shape(data), data.draw(dtypes), data.draw(dtypes)
    x = rounded(data, shape, dt)
    op = data.draw(st.sampled_from(sorted(ACT_REFS)))
    scale, bias = F32(data.draw(st.sampled_from([1.0, 0.5, -2.0]))), rounded(data, (shape[0], 1), "float32")
    reduce = data.draw(st.sampled_from([None, "add", "maximum"]))
    dst, attrs = {"dst": (shape, dto, "sbuf")}, {"op": op, "scale": float(scale)}
    if reduce:
        dst["reduce_res"] = ((shape[0], 1), "float32", "sbuf")
        attrs.update(reduce_op=reduce, reduce_cmd="reset_reduce")
    out, _ = run_op("activation", "scalar", dst, {"data": (x, "sbuf"), "bias": (bias, "sbuf")}, attrs)
    b = bias.reshape((shape[0],) + (1,) * (len(shape) - 1))
    y = ACT_REFS[op](x.astype(F32) * scale + b).astype(F32)
    assert_same(out["dst"], ref_out(y, dto))
    if reduce:
        flat = y.reshape(shape[0], -1)
        r = flat.sum(axis=1, keepdims=True) if reduce == "add" else flat.max(axis=1, keepdims=True)
        np.testing.assert_allclose(out["reduce_res"], r, rtol=1e-5, atol=1e-5)


def case_tensor_copy(data):
    shape = tile_shape(data)
    dt = data.draw(st.sampled_from(FLOATS + ("float8_e4m3", "int32")))
    dto = data.draw(st.sampled_from(FLOATS + ("float8_e4m3", "float8_e5m2", "int32", "int8")))
    x = rounded(data, shape, dt, -100, 100)
    engine = data.draw(st.sampled_from(["vector", "scalar", "gpsimd"]))
    out, _ = run_op("tensor_copy", engine, {"dst": (shape, dto, "sbuf")}, {"src": (x, "sbuf")})
    if dt == dto:
        want = x
    elif dto in ("int32", "int8"):
        info = np.iinfo(dto)  # float -> int: round to nearest even, saturate
        want = np.clip(np.rint(x.astype(F32)), info.min, info.max).astype(dto)
    else:
        want = ref_out(x.astype(F32), dto)
    assert_same(out["dst"], want)


def case_tensor_copy_predicated(data):
    shape, dt = tile_shape(data), data.draw(dtypes)
    old, x = rounded(data, shape, dt), rounded(data, shape, dt)
    pred = (rounded(data, shape, "float32") > 0).astype(F32)
    rev = data.draw(st.booleans())
    out, _ = run_op("tensor_copy_predicated", "vector", {"dst": (shape, dt, "sbuf")},
                    {"src": (x, "sbuf"), "predicate": (pred, "sbuf")}, {"reverse_pred": rev},
                    init={"dst": old})
    take = (pred == 0) if rev else (pred != 0)
    assert_same(out["dst"], np.where(take, x, old))


def case_memset(data):
    shape = tile_shape(data)
    dt = data.draw(st.sampled_from(FLOATS + ("int32", "uint8")))
    value = data.draw(st.sampled_from([0.0, 1.0, -3.5, 1.00390625, 7.0]))
    out, _ = run_op("memset", data.draw(st.sampled_from(["vector", "gpsimd"])),
                    {"dst": (shape, dt, "sbuf")}, {}, {"value": value})
    want = np.full(shape, value, F32)
    if dt in ("int32", "uint8"):
        want = np.clip(np.rint(want), np.iinfo(dt).min, np.iinfo(dt).max)
    assert_same(out["dst"], want.astype(as_dtype(dt)))


def case_reciprocal(data):
    shape, dt, dto = tile_shape(data), data.draw(dtypes), data.draw(dtypes)
    x = rounded(data, shape, dt, 0.25, 8.0)
    out, _ = run_op("reciprocal", "vector", {"dst": (shape, dto, "sbuf")}, {"data": (x, "sbuf")})
    assert_same(out["dst"], ref_out(F32(1) / x.astype(F32), dto))


def _affine(p, pattern, offset, cm):
    """Reference affine values by explicit loops over the partition and the pattern's indices."""
    nums = [n for _, n in pattern]
    out = np.zeros((p, math.prod(nums)), np.int64)
    for q in range(p):
        for flat, idx in enumerate(np.ndindex(*nums)):
            out[q, flat] = offset + cm * q + sum(s * i for (s, _), i in zip(pattern, idx))
    return out


def case_iota(data):
    p = data.draw(st.sampled_from([1, 4, 16]))
    pattern = [[data.draw(st.integers(-3, 3)), data.draw(st.integers(1, 6))] for _ in range(data.draw(
        st.integers(1, 2)))]
    offset, cm = data.draw(st.integers(-10, 10)), data.draw(st.integers(-2, 2))
    dt = data.draw(st.sampled_from(["int32", "float32", "bfloat16"]))
    shape = (p,) + tuple(n for _, n in pattern)
    out, _ = run_op("iota", "gpsimd", {"dst": (shape, dt, "sbuf")}, {},
                    {"pattern": pattern, "offset": offset, "channel_multiplier": cm})
    assert_same(out["dst"], _affine(p, pattern, offset, cm).reshape(shape).astype(as_dtype(dt)))


def case_affine_select(data):
    p, f = data.draw(st.sampled_from([1, 4, 16])), data.draw(st.integers(1, 20))
    dt = data.draw(dtypes)
    x = rounded(data, (p, f), dt)
    cmp = data.draw(st.sampled_from(["greater_equal", "equal", "less"]))
    offset, cm = data.draw(st.integers(-5, 5)), data.draw(st.sampled_from([1, -1]))
    out, _ = run_op("affine_select", "gpsimd", {"dst": ((p, f), dt, "sbuf")}, {"on_true_tile": (x, "sbuf")},
                    {"pattern": [[-1, f]], "offset": offset, "channel_multiplier": cm, "cmp_op": cmp,
                     "on_false_value": -9984.0})
    v = _affine(p, [[-1, f]], offset, cm)
    pred = {"greater_equal": v >= 0, "equal": v == 0, "less": v < 0}[cmp]
    assert_same(out["dst"], np.where(pred, x.astype(F32), F32(-9984.0)).astype(as_dtype(dt)))


def case_nc_matmul(data):
    k, m, n = data.draw(st.sampled_from([1, 8, 128])), data.draw(st.integers(1, 32)), data.draw(st.integers(1, 64))
    dt = data.draw(st.sampled_from(["bfloat16", "float16", "float32", "float8_e4m3"]))
    a, b = rounded(data, (k, m), dt), rounded(data, (k, n), dt)
    acc = data.draw(st.booleans())
    old = rounded(data, (m, n), "float32")
    out, _ = run_op("nc_matmul", "tensor", {"dst": ((m, n), "float32", "psum")},
                    {"stationary": (a, "sbuf"), "moving": (b, "sbuf")}, {"accumulate": acc},
                    init={"dst": old} if acc else None)
    want = a.astype(np.float64).T @ b.astype(np.float64) + (old if acc else 0)
    assert out["dst"].dtype == F32
    np.testing.assert_allclose(out["dst"], want, rtol=1e-5, atol=1e-5 * k)


def case_nc_transpose(data):
    engine = data.draw(st.sampled_from(["tensor", "vector"]))
    lim = 32 if engine == "vector" else 128
    p, f = data.draw(st.integers(1, lim)), data.draw(st.integers(1, lim))
    dt = data.draw(dtypes)
    x = rounded(data, (p, f), dt)
    out_dt, buf = ("float32", "psum") if engine == "tensor" else (dt, "sbuf")
    out, _ = run_op("nc_transpose", engine, {"dst": ((f, p), out_dt, buf)}, {"data": (x, "sbuf")})
    assert_same(out["dst"], x.T.astype(as_dtype(out_dt)))


REDUCE_REFS = {"add": np.sum, "maximum": np.max, "minimum": np.min}


def case_tensor_reduce(data):
    shape = tile_shape(data, free_dims=st.integers(1, 3))
    dt, dto = data.draw(dtypes), data.draw(dtypes)
    x = rounded(data, shape, dt)
    op, negate = data.draw(st.sampled_from(sorted(REDUCE_REFS))), data.draw(st.booleans())
    # the last k free axes (the page: reduced axes are the last, consecutive ones)
    k = data.draw(st.integers(1, len(shape) - 1))
    axes = tuple(range(len(shape) - k, len(shape)))
    oshape = tuple(s for i, s in enumerate(shape) if i not in axes)
    out, _ = run_op("tensor_reduce", "vector", {"dst": (oshape, dto, "sbuf")}, {"data": (x, "sbuf")},
                    {"op": op, "axis": list(axes), "negate": negate})
    want = REDUCE_REFS[op](x.astype(np.float64), axis=axes) * (-1 if negate else 1)
    if op == "add":
        np.testing.assert_allclose(out["dst"].astype(F32), ref_out(want, dto).astype(F32),
                                   rtol=1e-2 if dto != "float32" else 1e-5, atol=1e-4)
    else:
        assert_same(out["dst"], ref_out(want, dto))


def case_bn_stats(data):
    p, f = data.draw(st.sampled_from([1, 8, 128])), data.draw(st.integers(2, 512))
    dt = data.draw(dtypes)
    x = rounded(data, (p, f), dt)
    out, _ = run_op("bn_stats", "vector", {"dst": ((p, 6), "float32", "sbuf")}, {"data": (x, "sbuf")})
    x64, want = x.astype(np.float64), []
    for part in (x64[:, 0::2], x64[:, 1::2]):
        want += [np.full(p, part.shape[1]), part.mean(1), part.var(1) * part.shape[1]]
    np.testing.assert_allclose(out["dst"], np.stack(want, 1), rtol=1e-4, atol=1e-4)


def case_bn_aggr(data):
    """bn_stats of chunks then bn_aggr gives the mean and variance of the whole row."""
    p, chunks, f = data.draw(st.sampled_from([1, 8])), data.draw(st.integers(1, 4)), data.draw(st.integers(2, 32))
    x = rounded(data, (p, chunks * f), "float32").astype(np.float64)
    stats = []
    for c in range(chunks):
        part = x[:, c * f:(c + 1) * f]
        for half in (part[:, 0::2], part[:, 1::2]):
            stats += [np.full(p, half.shape[1]), half.mean(1), half.var(1) * half.shape[1]]
    triples = np.stack(stats, 1).astype(F32)
    out, _ = run_op("bn_aggr", "vector", {"dst": ((p, 2), "float32", "sbuf")}, {"data": (triples, "sbuf")})
    np.testing.assert_allclose(out["dst"], np.stack([x.mean(1), x.var(1)], 1), rtol=1e-4, atol=1e-5)


def case_dma_copy(data):
    shape = tile_shape(data)
    dt, dto = data.draw(st.sampled_from(FLOATS + ("int8",))), data.draw(dtypes)
    x = rounded(data, shape, dt, -50, 50)
    flat = (shape[0], math.prod(shape[1:]))  # DMA moves equal element counts; shapes may differ
    src_buf, dst_buf = data.draw(st.sampled_from([("hbm", "sbuf"), ("sbuf", "hbm"), ("hbm", "hbm")]))
    out, _ = run_op("dma_copy", "dma", {"dst": (flat, dto, dst_buf)}, {"src": (x, src_buf)})
    want = x.reshape(flat) if dt == dto else ref_out(x.astype(F32).reshape(flat), dto)
    assert_same(out["dst"], want)


def case_device_print(data):
    shape, dt = tile_shape(data, max_p=4, max_f=4), data.draw(dtypes)
    x = rounded(data, shape, dt)
    _, ctx = run_op("device_print", "vector", {}, {"data": (x, "sbuf")}, {"prefix": "x = "})
    (line,) = ctx.printed
    assert line.startswith("x = [")
    values = [float(v) for v in re.findall(r"-?\d+\.?\d*(?:e[-+]?\d+)?", line[4:])]
    np.testing.assert_allclose(values, x.astype(F32).reshape(-1), rtol=1e-3)


OP_TESTS = {
    "tensor_tensor": case_tensor_tensor, "tensor_scalar": case_tensor_scalar, "activation": case_activation,
    "tensor_copy": case_tensor_copy, "tensor_copy_predicated": case_tensor_copy_predicated,
    "memset": case_memset, "reciprocal": case_reciprocal, "iota": case_iota,
    "affine_select": case_affine_select, "nc_matmul": case_nc_matmul, "nc_transpose": case_nc_transpose,
    "tensor_reduce": case_tensor_reduce, "bn_stats": case_bn_stats, "bn_aggr": case_bn_aggr,
    "dma_copy": case_dma_copy, "device_print": case_device_print,
}


def _extra_rows():
    """Rows of more families, kept beside this file in op_cases_*.py (each has ``cases(run_op)``)."""
    import importlib.util
    from pathlib import Path
    rows = {}
    for path in sorted(Path(__file__).parent.glob("op_cases_*.py")):
        spec = importlib.util.spec_from_file_location(f"_nkihub_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        rows.update(mod.cases(run_op))
    return rows


OP_TESTS.update(_extra_rows())


@pytest.mark.parametrize("opcode", sorted(set(OP_TESTS) & set(OPS)))
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_op_matches_numpy(opcode, data):
    OP_TESTS[opcode](data)


# -- the ALU tables against float64 math ------------------------------------------------------------------
_erf = np.vectorize(math.erf)
ACTIVATION_REFS64 = {
    "copy": lambda x: x, "identity": lambda x: x, "bypass": lambda x: x, "exp": np.exp, "log": np.log,
    "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "gelu_dx": lambda x: 0.5 * (1 + _erf(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi),
    "gelu_apprx_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    "gelu_apprx_sigmoid": lambda x: x / (1 + np.exp(-1.702 * x)),
    "gelu_apprx_sigmoid_dx": lambda x: (lambda s: s + 1.702 * x * s * (1 - s))(1 / (1 + np.exp(-1.702 * x))),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "silu_dx": lambda x: (lambda s: s * (1 + x * (1 - s)))(1 / (1 + np.exp(-x))),
    "rsqrt": lambda x: 1 / np.sqrt(x), "sqrt": np.sqrt, "reciprocal": lambda x: 1 / x, "square": np.square,
    "abs": np.abs, "negative": np.negative, "sign": np.sign, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "arctan": np.arctan, "erf": _erf, "erf_dx": lambda x: 2 / math.sqrt(math.pi) * np.exp(-x * x),
    "softplus": lambda x: np.log1p(np.exp(x)), "mish": lambda x: x * np.tanh(np.log1p(np.exp(x))),
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
}
POSITIVE_ONLY = {"log", "rsqrt", "sqrt"}


@pytest.mark.parametrize("name", sorted(alu.ACTIVATIONS))
def test_activation_function_matches_float64_math(name):
    assert name in ACTIVATION_REFS64, f"activation {name!r} has no float64 reference in this test"
    x = np.linspace(0.05 if name in POSITIVE_ONLY else -4.0, 4.0, 257, dtype=F32)
    x = x[np.abs(np.cos(x)) > 1e-2] if name == "tan" else x
    got = alu.activation(name)(x)
    assert got.dtype == F32
    with np.errstate(divide="ignore"):
        want = ACTIVATION_REFS64[name](x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


def test_bf16_result_is_rounded_once_from_fp32():
    """(1 + 2^-8) + 2^-9 in fp32 then one RNE rounding to bf16 gives 1 + 2^-7; rounding the intermediate
    to bf16 first would give 1."""
    a = np.full((1, 1), 1 + 2 ** -8, F32)
    b = np.full((1, 1), 2 ** -9, F32)
    out, _ = run_op("tensor_tensor", "vector", {"dst": ((1, 1), "bfloat16", "sbuf")},
                    {"data1": (a, "sbuf"), "data2": (b, "sbuf")}, {"op": "add"})
    assert float(out["dst"][0, 0]) == 1 + 2 ** -7
    assert float(np.float32(1 + 2 ** -8).astype(ml_dtypes.bfloat16)) == 1.0  # ties go to even
