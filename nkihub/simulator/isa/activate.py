"""Fused activations of NeuronCore-v4 with the engines' accumulator registers: exponential (Vector
Engine) and activate2 (Scalar Engine).

The accumulator registers are modelled as elsewhere in the table (``elementwise._reduce_into``): their
state lives in ``reduce_res``. ``reset_reduce`` starts from the reduce identity, ``reduce`` continues from
``reduce_res``'s contents (nisa then passes reduce_res as a source too, so only that operand counts as
read: the validator and the cost model see the true dependency), ``load_reduce`` starts from
``reduce_init`` and ``reset`` writes the identity without reducing.
"""
from __future__ import annotations

import numpy as np

from nkihub.simulator import cost_rules as cr
from nkihub.simulator.isa import alu
from nkihub.simulator.isa.base import ELEMENTWISE, REDUCE, f32, fit, free_elems, register, store
from nkihub.simulator.isa.elementwise import _act_rules, _apply, _engine_cost, operand
from nkihub.simulator.rules import (COMPUTE_RULES, Documented, cited_same_free_size, cited_same_partitions,
                                     column_operand, documents, exact_partitions, fail, operand_dtype)

BYPASS = "bypass"
# activate2's tensor-scalar stage: the (op0, op1) pairs the docs list.
ACTIVATE2_PAIRS = frozenset({("multiply", "add"), ("multiply", "subtract"), ("multiply", BYPASS),
                             ("add", BYPASS), ("subtract", BYPASS), (BYPASS, BYPASS)})
# activate2's reduce operators: name -> (free-axis reduction of an fp32 [P, F] array, identity).
ACTIVATE2_REDUCE = {
    "add": (lambda a: a.sum(axis=1, keepdims=True), 0.0),
    "maximum": (lambda a: a.max(axis=1, keepdims=True), -np.inf),
    "minimum": (lambda a: a.min(axis=1, keepdims=True), np.inf),
    "abs_max": (lambda a: np.abs(a).max(axis=1, keepdims=True), 0.0),
    "abs_min": (lambda a: np.abs(a).min(axis=1, keepdims=True), np.inf),
}
ACCUMULATOR_CMDS = {"exponential": ("reset_reduce", "reduce", "load_reduce"),
                    "activate2": ("reset_reduce", "reduce", "reset")}


def _gen4_only(ins, program, target):
    """Available on NeuronCore-v4 (trn3) and newer."""
    if target.nc_version in ("gen2", "gen3"):
        raise fail("target-support", f"{ins.opcode} is available on NeuronCore-v4 (trn3) and newer, not on "
                   f"{target.name}", ins, program, "dst")


def _reduce_cmd_rule(ins, program, target):
    """A reduce_res needs an accumulator command the instruction supports."""
    if "reduce_res" not in ins.dst:
        return
    cmd = ins.attrs.get("reduce_cmd")
    if cmd not in ACCUMULATOR_CMDS[ins.opcode]:
        raise fail("reduce-cmd", f"reduce_cmd {cmd!r} with reduce_res; use one of "
                   f"{', '.join(ACCUMULATOR_CMDS[ins.opcode])}", ins, program, "reduce_res")
    if cmd == "reduce" and ins.src.get("reduce_res") != ins.dst["reduce_res"]:
        raise fail("reduce-cmd", "reduce_cmd 'reduce' reads the accumulator from reduce_res: pass the same "
                   "reduce_res as a source operand", ins, program, "reduce_res")


def _accumulate(ins, src, dst, part, combine, identity, start=None) -> None:
    """Write the accumulator after this instruction into ``reduce_res``: ``part`` is this instruction's
    [P, 1] reduction, ``combine`` the binary operator that folds it in."""
    if "reduce_res" not in dst:
        return
    out = dst["reduce_res"]
    cmd = ins.attrs["reduce_cmd"]
    p = part.shape[0]
    if cmd == "reset":
        acc = np.full((p, 1), identity, np.float32)
    elif cmd == "reduce":
        acc = combine(f32(src["reduce_res"]).reshape(p, 1), part)
    elif cmd == "load_reduce":
        acc = combine(np.broadcast_to(np.asarray(start, np.float32).reshape(-1, 1), (p, 1)), part)
    else:  # reset_reduce
        acc = part
    store(out, np.asarray(acc, np.float32).reshape(out.shape))


# -- exponential ------------------------------------------------------------------------------------------
def _exponential(ins, src, dst, ctx):
    """dst = exp(src - max_value) in fp32 (max_value an immediate or a [P, 1] column); with reduce_res
    [P, 1] the accumulator sums dst per partition (reset_reduce / reduce / load_reduce from
    reduce_init) and is read out into reduce_res (Vector Engine, NeuronCore-v4+)."""
    out = dst["dst"]
    x = fit(f32(src["src"]), out.shape)
    with np.errstate(over="ignore"):
        y = np.exp(x - operand(ins, src, "max_value", 0.0)).astype(np.float32)
    store(out, y)
    start = operand(ins, src, "reduce_init", 0.0)
    _accumulate(ins, src, dst, y.reshape(y.shape[0], -1).sum(axis=1, keepdims=True), np.add, 0.0, start)


def _exp_cost(ins, program, target):
    extra = cr.seconds(cr.ACTIVATION_REDUCE_EXTRA_CYCLES, target, "vector") if "reduce_res" in ins.dst else 0.0
    return _engine_cost(ins, program, target, 1) + extra


documents(_gen4_only, Documented("target-support", ("dst",), None, "NeuronCore-v4 (trn3) and newer"))
documents(_reduce_cmd_rule, Documented("reduce-cmd", ("reduce_res",), None,
                                       "a reduce_res takes an accumulator command the instruction supports"))


register("exponential", rows=True, engines={"vector"}, execute=_exponential, cost=_exp_cost,
         rules=COMPUTE_RULES + (cited_same_partitions("dst", "src", "max_value", "reduce_init", "reduce_res"),
                                cited_same_free_size("dst", "src"), _act_rules, _reduce_cmd_rule, _gen4_only,
                                exact_partitions("dst", "reduce_res"),
                                operand_dtype("nki.isa.exponential", max_value=frozenset({"float32"}),
                                              reduce_init=frozenset({"float32"})),
                                column_operand("src", "max_value", "reduce_init", source="nki.isa.exponential "
                                               "(AWS NKI API reference)")),
         categories={ELEMENTWISE, REDUCE})


# -- activate2 --------------------------------------------------------------------------------------------
def _act_fn(name: str, relu_param):
    if name == "prelu":
        # PReLU: the slope ``relu_param`` applies to negative inputs.
        return lambda v: np.where(v >= 0, v, v * relu_param).astype(np.float32)
    return alu.activation(name)


def _activate2(ins, src, dst, ctx):
    """val = (data <op0> imm0) <op1> imm1 (either op ``bypass``; ``reverse`` puts the immediate on the
    left), dst = op(val) with ``relu_param`` the slope of ``prelu``; with reduce_res [P, 1] the
    accumulator folds dst with reduce_op (add, maximum, minimum, abs_max, abs_min) per reduce_cmd
    (reset_reduce / reduce / reset) and is read out (Scalar Engine, NeuronCore-v4+)."""
    out = dst["dst"]
    a = ins.attrs
    v = fit(f32(src["data"]), out.shape)
    for k in ("0", "1"):
        if a[f"op{k}"] != BYPASS:
            v = _apply(a[f"op{k}"], v, operand(ins, src, f"imm{k}", 0.0), a.get(f"reverse{k}", False))
    y = _act_fn(a["op"], operand(ins, src, "relu_param", 0.0))(v)
    store(out, y)
    if "reduce_res" in dst:
        fold, identity = ACTIVATE2_REDUCE[a["reduce_op"]]
        _accumulate(ins, src, dst, fold(y.reshape(y.shape[0], -1)), alu.alu(a["reduce_op"]), identity)


def _activate2_rules(ins, program, target):
    """(op0, op1) is one of the documented pairs; reverse needs its op; op and reduce_op are known."""
    a = ins.attrs
    if (a["op0"], a["op1"]) not in ACTIVATE2_PAIRS:
        pairs = ", ".join(f"({x}, {y})" for x, y in sorted(ACTIVATE2_PAIRS))
        raise fail("activate2-ops", f"(op0, op1) = ({a['op0']}, {a['op1']}) is not supported; use one of {pairs}",
                   ins, program, "data")
    for k in ("0", "1"):
        if a.get(f"reverse{k}") and a[f"op{k}"] == BYPASS:
            raise fail("activate2-ops", f"reverse{k} requires op{k} to be set", ins, program, "data")
    if a["op"] != "prelu" and a["op"] not in alu.ACTIVATIONS:
        raise fail("activation-op", f"unknown activation {a['op']!r}", ins, program, "data")
    if "reduce_res" in ins.dst and a.get("reduce_op") not in ACTIVATE2_REDUCE:
        raise fail("reduce-op", f"reduce_op {a.get('reduce_op')!r}; use one of {', '.join(ACTIVATE2_REDUCE)}",
                   ins, program, "reduce_res")


def _activate2_cost(ins, program, target):
    n = free_elems(ins.dst["dst"].shape) * cr.stride_slowdown(ins, program)
    return cr.seconds(cr.scalar_cycles(n, reduce="reduce_res" in ins.dst), target, "scalar")


documents(_activate2_rules,
          Documented("activate2-ops", ("data",), None, "(op0, op1) is a listed pair; reverse needs its op"),
          Documented("activation-op", ("data",), None, "op is a known activation function"),
          Documented("reduce-op", ("reduce_res",), None, "reduce_op is add, maximum, minimum, abs_max or abs_min"))


register("activate2", rows=True, engines={"scalar"}, execute=_activate2, cost=_activate2_cost,
         rules=COMPUTE_RULES + (cited_same_partitions("dst", "data", "imm0", "imm1", "relu_param", "reduce_res"),
                                cited_same_free_size("dst", "data"), _act_rules, _activate2_rules, _reduce_cmd_rule,
                                _gen4_only, exact_partitions("dst", "reduce_res"),
                                column_operand("data", "imm0", "imm1", "relu_param", source="nki.isa.activate2 "
                                               "(AWS NKI API reference)")),
         categories={ELEMENTWISE, REDUCE})
