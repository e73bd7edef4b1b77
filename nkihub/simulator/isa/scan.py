"""Scans and fused two-operator Vector Engine instructions: tensor_tensor_scan, scalar_tensor_tensor,
tensor_scalar_reduce.

All compute in fp32 along the flattened free axes of each partition independently.
"""
from __future__ import annotations

import numpy as np

from nkihub.simulator import cost_rules as cr
from nkihub.simulator.isa import alu
from nkihub.simulator.isa.base import ELEMENTWISE, REDUCE, f32, fit, reduce_res_read, register, store
from nkihub.simulator.isa.elementwise import (_act_rules, _any_psum, _apply, _engine_cost, _reduce_into,
                                              arithmetic_ops, operand, reduce_ops)
from nkihub.simulator.rules import (COMPUTE_RULES, Documented, cited_same_free_size, cited_same_partitions,
                                     column_operand, documents, exact_partitions, fail, operand_dtype, same_shape_as)


def _scan(ins, src, dst, ctx):
    """dst[:, i] = op1(op0(data0[:, i], dst[:, i-1]), data1[:, i]) along the flattened free axis, starting
    from ``initial`` (an immediate or a [P, 1] column); ``reverse0``/``reverse1`` swap an operator's
    operands (reverse1 puts data1 on the left of op1)."""
    out = dst["dst"]
    p = out.shape[0]
    a = fit(f32(src["data0"]), out.shape).reshape(p, -1)
    b = fit(f32(src["data1"]), out.shape).reshape(p, -1)
    init = operand(ins, src, "initial", 0.0)
    prev = np.broadcast_to(np.asarray(init, np.float32).reshape(-1, 1) if np.ndim(init) else init, (p, 1))
    op0, op1 = alu.alu(ins.attrs["op0"]), alu.alu(ins.attrs["op1"])
    rev0, rev1 = ins.attrs.get("reverse0", False), ins.attrs.get("reverse1", False)
    res = np.empty_like(a)
    for i in range(a.shape[1]):
        x = op0(prev, a[:, i:i + 1]) if rev0 else op0(a[:, i:i + 1], prev)
        prev = op1(b[:, i:i + 1], x) if rev1 else op1(x, b[:, i:i + 1])
        res[:, i:i + 1] = prev
    store(out, res.reshape(out.shape))


register("tensor_tensor_scan", engines={"vector"}, execute=_scan,
         cost=lambda ins, p, t: _engine_cost(ins, p, t, 2),
         rules=COMPUTE_RULES + (cited_same_partitions("dst", "data0", "data1", "initial"),
                                cited_same_free_size("dst", "data0"), cited_same_free_size("dst", "data1"),
                                arithmetic_ops("op0", "op1", role="data0"),
                                same_shape_as("data0", "data1", source="nki.isa.tensor_tensor_scan (AWS NKI API "
                                              "reference)"),
                                column_operand("data0", "initial", source="nki.isa.tensor_tensor_scan (AWS NKI "
                                               "API reference)")),
         categories={ELEMENTWISE})


def _stt(ins, src, dst, ctx):
    """dst = (data <op0> operand0) <op1> operand1: operand0 an immediate or a [P, 1] column, operand1 a
    tile of dst's shape; ``reverse0``/``reverse1`` swap an operator's operands."""
    out = dst["dst"]
    x = fit(f32(src["data"]), out.shape)
    y = _apply(ins.attrs["op0"], x, operand(ins, src, "operand0"), ins.attrs.get("reverse0", False))
    y = _apply(ins.attrs["op1"], y, fit(f32(src["operand1"]), out.shape), ins.attrs.get("reverse1", False))
    store(out, y)


def _stt_cost(ins, program, target):
    """Two tensor inputs: 2N on the Vector Engine, N when one of them is in PSUM (hardware.md "Cost rules":
    any op with a PSUM input runs at N; the RMSNorm-Quant spec's trn2 profile shows ~0.66 us per 512
    columns with a PSUM operand, N plus the access start, not 2N's 1.07 us)."""
    return _engine_cost(ins, program, target, 2, fast=_any_psum(ins, program))


register("scalar_tensor_tensor", rows=True, engines={"vector", "gpsimd"}, execute=_stt,
         cost=_stt_cost,
         rules=COMPUTE_RULES + (cited_same_partitions("dst", "data", "operand0", "operand1"),
                                cited_same_free_size("dst", "data"), cited_same_free_size("dst", "operand1"),
                                arithmetic_ops("op0", "op1"),
                                column_operand("data", "operand0", source="nki.isa.scalar_tensor_tensor "
                                               "(AWS NKI API reference)"),
                                same_shape_as("data", "operand1", source="nki.isa.scalar_tensor_tensor "
                                              "(AWS NKI API reference)")),
         categories={ELEMENTWISE})


def _tsr(ins, src, dst, ctx):
    """dst = data <op0> operand0 and reduce_res[P, 1] = reduce(reduce_op, dst) along the free axes."""
    out = dst["dst"]
    y = _apply(ins.attrs["op0"], fit(f32(src["data"]), out.shape), operand(ins, src, "operand0"),
               ins.attrs.get("reverse0", False))
    store(out, y)
    _reduce_into(ins, src, dst, y)


register("tensor_scalar_reduce", rows=True, engines={"vector"}, execute=_tsr,
         cost=lambda ins, p, t: _engine_cost(ins, p, t, 1) + cr.seconds(cr.ACTIVATION_REDUCE_EXTRA_CYCLES, t,
                                                                         "vector"),
         rules=COMPUTE_RULES + (cited_same_partitions("dst", "data", "operand0", "reduce_res"),
                                cited_same_free_size("dst", "data"), _act_rules, arithmetic_ops("op0"),
                                # The page also lists subtract; its fold order is not stated, so it is refused
                                # rather than guessed (it was an unknown-operator failure in the simulator).
                                reduce_ops("add", "multiply", "maximum", "minimum"),
                                exact_partitions("dst", "reduce_res"),
                                column_operand("data", "operand0", source="nki.isa.tensor_scalar_reduce "
                                               "(AWS NKI API reference)")),
         categories={ELEMENTWISE, REDUCE},
         reads_dst=reduce_res_read)


CUMULATIVE_START = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}


def _cumulative_rules(ins, program, target):
    if ins.attrs.get("op1") not in CUMULATIVE_START:
        raise fail("cumulative-op", f"op1 must be one of {', '.join(CUMULATIVE_START)}", ins, program, "dst")
    cmd = ins.attrs.get("reduce_cmd", "reset_reduce")
    if cmd not in ("reset_reduce", "load_reduce", "reduce"):
        raise fail("reduce-cmd", f"reduce_cmd {cmd!r}: tensor_scalar_cumulative takes reset_reduce, "
                   "load_reduce or reduce", ins, program, "dst")
    if cmd == "reduce" and "acc" not in ins.src:
        raise fail("reduce-cmd", "reduce_cmd reduce continues the Vector Engine's accumulator: the "
                   "instruction must read it (operand 'acc')", ins, program, "dst")
    for role, ap in (*ins.src.items(), *ins.dst.items()):
        if program.tensor_of(ap).dtype in ("int32", "uint32"):
            raise fail("dtype", "int32/uint32 are not supported by tensor_scalar_cumulative", ins, program, role)


def _cumulative(ins, src, dst, ctx):
    """dst[:, i] = reg = op1(op0(src[:, i], imm0), reg) along the flattened free axis of each partition;
    reg starts at op1's identity (reset_reduce), at imm1 (load_reduce, an immediate or a [P, 1] column) or at
    the accumulator registers ``acc`` [P, 1] (reduce); the last reg is left in ``acc``."""
    out = dst["dst"]
    p = out.shape[0]
    x = fit(f32(src["src"]), out.shape).reshape(p, -1)
    imm0 = operand(ins, src, "imm0")
    imm0 = np.asarray(imm0, np.float32).reshape(-1, 1) if np.ndim(imm0) else imm0
    op0, op1 = alu.alu(ins.attrs["op0"]), alu.alu(ins.attrs["op1"])
    cmd = ins.attrs.get("reduce_cmd", "reset_reduce")
    if cmd == "reduce":
        reg = f32(src["acc"]).reshape(p, 1)
    elif cmd == "load_reduce":
        start = operand(ins, src, "imm1", 0.0)
        reg = np.broadcast_to(np.asarray(start, np.float32).reshape(-1, 1) if np.ndim(start) else start, (p, 1))
    else:
        reg = np.full((p, 1), CUMULATIVE_START[ins.attrs["op1"]], np.float32)
    res = np.empty_like(x)
    y = op0(x, imm0)
    for i in range(x.shape[1]):
        reg = op1(y[:, i:i + 1], reg)
        res[:, i:i + 1] = reg
    store(out, res.reshape(out.shape))
    if "acc" in dst:
        store(dst["acc"], np.broadcast_to(reg, (p, 1)).reshape(dst["acc"].shape))


documents(_cumulative_rules,
          Documented("cumulative-op", ("dst",), None, "op1 is add, subtract, multiply, maximum or minimum"),
          Documented("reduce-cmd", ("dst",), None, "reduce_cmd is reset_reduce, load_reduce or reduce"),
          Documented("dtype", ("src", "dst"), None, "int32/uint32 are not supported (an ISA limitation)"))


register("tensor_scalar_cumulative", rows=True, engines={"vector"}, execute=_cumulative,
         cost=lambda ins, p, t: _engine_cost(ins, p, t, 1),
         rules=COMPUTE_RULES + (cited_same_partitions("dst", "src", "imm0", "imm1", "acc"),
                                cited_same_free_size("dst", "src"), _cumulative_rules, arithmetic_ops("op0", role="src"),
                                operand_dtype("nki.isa.tensor_scalar_cumulative", imm0=frozenset({"float32"}),
                                              imm1=frozenset({"float32"})),
                                column_operand("src", "imm0", "imm1", source="nki.isa.tensor_scalar_cumulative "
                                               "(AWS NKI API reference)")),
         categories={ELEMENTWISE})
