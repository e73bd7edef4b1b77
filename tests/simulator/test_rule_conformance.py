"""Conformance of the documented operand rules, generated from the instruction table.

Every rule on a row of the table states the constraints it checks (``simulator.rules.documented``: a
``rule`` name, the operand ``roles``, the AWS ``source`` page). For each (instruction, rule, role) this module
builds, in both dialects (``nki.isa`` and the old ``neuronxcc.nki.isa``) where the old one can express it, a
kernel that breaks the constraint -- refused with that rule's name, for that operand, at the author's call
line, naming the author's variable ``y_t`` -- and one that keeps it, which runs (and matches numpy where the
result is simple).

A case is data: ``CALLS`` holds, per instruction, a valid call (its operands' shapes, dtypes and buffers and
the one-line call in each dialect); ``BREAKS`` says which operand (or attribute, or target) to change to
break a rule. The shape rules every compute row shares (``partition-mismatch``, ``shape-mismatch``,
``scalar-operand-shape``, ``operand-shape``) and the engine rules of ``COMPUTE_RULES`` are broken by rule
(``_generic``), so a new row gets its cases from its ``CALLS`` entry. ``COVERAGE`` maps each nisa function to
the rules it is cased for; ``PENDING`` lists row rules (by module:qualname) cased elsewhere, with the reason.

A property test drives the same calls with arbitrary operand shapes: a kernel mistake surfaces as the
project's ``NkiError`` with a rule and a line, never as a raw numpy or Python error.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nkihub import nki
from nkihub.nki import isa as nisa, language as nl
from nkihub.nki.compat import isa as old_isa, language as old_nl
from nkihub.simulator import rules as shared
from nkihub.simulator.errors import KernelRuleError, NkiError
from nkihub.simulator.isa import OPS

import test_rule_conformance_data as data_side   # the data-movement and state rows' cases

P, F = 128, 64


@dataclass(frozen=True)
class Op:
    """An operand tile: its shape, dtype and buffer; ``view`` (lo, hi) per leading dim slices it;
    ``values`` says what it holds (normal, pos, pred, index)."""

    shape: tuple
    dtype: str = "float32"
    buffer: str = "sbuf"
    view: tuple | None = None
    values: str = "normal"

    @property
    def seen(self) -> tuple:
        """The shape the instruction sees."""
        if self.view is None:
            return self.shape
        return tuple(hi - lo for lo, hi in self.view) + self.shape[len(self.view):]


@dataclass(frozen=True)
class Call:
    """A valid call of one instruction: ``new(t, a)`` / ``old(t, a)`` call it on one line with tiles ``t``
    (role -> tile) and attributes ``a``; ``old`` None when the old dialect has no such function. ``derived``:
    the operand the old dialect makes its result's shape from (its dst cannot disagree with it)."""

    operands: dict
    new: object
    old: object = None
    attrs: dict = field(default_factory=dict)
    old_attrs: dict = field(default_factory=dict)
    expect: object = None
    result: str = "dst"
    target: str | None = None
    derived: str | None = None
    old_takes_dst: bool = False
    old_grid: bool = False      # the old call's index predicate covers a fixed (P, F) grid


def _f(*shape, **kw) -> Op:
    return Op(tuple(shape), **kw)


COL = _f(P, 1)
TILE = _f(P, F)
RC = nisa.reduce_cmd

CALLS: dict[str, Call] = {
    "nc_matmul": Call(
        {"stationary": _f(P, P, dtype="bfloat16"), "moving": _f(P, 512, dtype="bfloat16"),
         "dst": _f(P, 512, buffer="psum")},
        new=lambda t, a: nisa.nc_matmul(dst=t["dst"], stationary=t["stationary"], moving=t["moving"], **a),
        old=lambda t, a: old_isa.nc_matmul(t["stationary"], t["moving"], **a),
        expect=lambda i: i["stationary"].T.astype(np.float32) @ i["moving"].astype(np.float32)),
    "nc_transpose": Call(
        {"data": TILE, "dst": _f(F, P, buffer="psum")},
        new=lambda t, a: nisa.nc_transpose(dst=t["dst"], data=t["data"], engine=nisa.engine.tensor),
        old=lambda t, a: old_isa.nc_transpose(t["data"], engine=old_isa.engine.tensor),
        expect=lambda i: i["data"].T, derived="data"),
    "nc_transpose/vector": Call(
        {"data": _f(32, 32), "dst": _f(32, 32)},
        new=lambda t, a: nisa.nc_transpose(dst=t["dst"], data=t["data"], engine=nisa.engine.vector),
        old=lambda t, a: old_isa.nc_transpose(t["data"], engine=old_isa.engine.vector),
        expect=lambda i: i["data"].T, derived="data"),
    "activation": Call(
        {"data": TILE, "bias": COL, "scale": COL, "dst": TILE},
        new=lambda t, a: nisa.activation(dst=t["dst"], op=nl.copy, data=t["data"], bias=t["bias"], scale=t["scale"]),
        old=lambda t, a: old_isa.activation(op=np.copy, data=t["data"], bias=t["bias"], scale=t["scale"]),
        expect=lambda i: i["data"] * i["scale"] + i["bias"], derived="data"),
    # A compile-time scalar bias (NeuronCore-v3+; on NeuronCore-v2 the page asks for a [N, 1] vector).
    "activation/scalar_bias": Call(
        {"data": TILE, "dst": TILE},
        new=lambda t, a: nisa.activation(dst=t["dst"], op=nl.copy, data=t["data"], **a),
        old=lambda t, a: old_isa.activation(op=np.copy, data=t["data"], **a),
        attrs={"bias": 0.5, "scale": 2.0}, old_attrs={"bias": 0.5, "scale": 2.0},
        expect=lambda i: i["data"] * 2.0 + 0.5, derived="data"),
    "activation_reduce": Call(
        {"data": TILE, "reduce_res": COL, "dst": TILE},
        new=lambda t, a: nisa.activation_reduce(dst=t["dst"], op=nl.copy, data=t["data"], reduce_op=nl.add, reduce_res=t["reduce_res"]),
        old=lambda t, a: old_isa.activation_reduce(op=np.copy, data=t["data"], reduce_op=np.add, reduce_res=t["reduce_res"]),
        expect=lambda i: i["data"], derived="data"),
    "activate2": Call(
        {"data": TILE, "imm0": COL, "imm1": COL, "relu_param": COL, "reduce_res": COL, "dst": TILE},
        new=lambda t, a: nisa.activate2(dst=t["dst"], data=t["data"], imm0=t["imm0"], imm1=t["imm1"], relu_param=t["relu_param"], reduce_res=t["reduce_res"], **a),
        attrs={"op": nl.copy, "op0": nl.multiply, "op1": nl.add, "reduce_op": nl.add, "reduce_cmd": RC.reset_reduce},
        expect=lambda i: i["data"] * i["imm0"] + i["imm1"], target="trn3"),
    "exponential": Call(
        {"src": TILE, "max_value": COL, "reduce_init": COL, "reduce_res": COL, "dst": TILE},
        new=lambda t, a: nisa.exponential(dst=t["dst"], src=t["src"], max_value=t["max_value"], reduce_res=t["reduce_res"], reduce_init=t["reduce_init"], **a),
        attrs={"reduce_cmd": RC.load_reduce}, expect=lambda i: np.exp(i["src"] - i["max_value"]), target="trn3"),
    "exponential/reset": Call(
        {"src": TILE, "reduce_res": COL, "dst": TILE},
        new=lambda t, a: nisa.exponential(dst=t["dst"], src=t["src"], max_value=0.0, reduce_res=t["reduce_res"], **a),
        attrs={"reduce_cmd": RC.reset_reduce}, expect=lambda i: np.exp(i["src"]), target="trn3"),
    "tensor_reduce": Call(
        {"data": TILE, "dst": COL},
        new=lambda t, a: nisa.tensor_reduce(dst=t["dst"], data=t["data"], keepdims=True, **a),
        old=lambda t, a: old_isa.tensor_reduce(data=t["data"], keepdims=True, **a),
        attrs={"op": nl.add, "axis": 1}, old_attrs={"op": np.add, "axis": 1},
        expect=lambda i: i["data"].sum(axis=1, keepdims=True), derived="data"),
    "tensor_partition_reduce": Call(
        {"data": TILE, "dst": _f(1, F)},
        new=lambda t, a: nisa.tensor_partition_reduce(dst=t["dst"], data=t["data"], **a),
        old=lambda t, a: old_isa.tensor_partition_reduce(data=t["data"], **a),
        attrs={"op": nl.add}, old_attrs={"op": np.add},
        expect=lambda i: i["data"].sum(axis=0, keepdims=True), derived="data"),
    "tensor_tensor": Call(
        {"data1": TILE, "data2": TILE, "dst": TILE},
        new=lambda t, a: nisa.tensor_tensor(dst=t["dst"], data1=t["data1"], data2=t["data2"], op=nl.add),
        old=lambda t, a: old_isa.tensor_tensor(data1=t["data1"], data2=t["data2"], op=np.add),
        expect=lambda i: i["data1"] + i["data2"], derived="data1"),
    "tensor_tensor_scan": Call(
        {"data0": TILE, "data1": TILE, "initial": COL, "dst": TILE},
        new=lambda t, a: nisa.tensor_tensor_scan(dst=t["dst"], data0=t["data0"], data1=t["data1"], initial=t["initial"], **a),
        old=lambda t, a: old_isa.tensor_tensor_scan(t["data0"], t["data1"], t["initial"], **a),
        attrs={"op0": nl.multiply, "op1": nl.add}, old_attrs={"op0": np.multiply, "op1": np.add},
        derived="data0"),
    "scalar_tensor_tensor": Call(
        {"data": TILE, "operand0": COL, "operand1": TILE, "dst": TILE},
        new=lambda t, a: nisa.scalar_tensor_tensor(dst=t["dst"], data=t["data"], operand0=t["operand0"], operand1=t["operand1"], **a),
        old=lambda t, a: old_isa.scalar_tensor_tensor(data=t["data"], operand0=t["operand0"], operand1=t["operand1"], **a),
        attrs={"op0": nl.multiply, "op1": nl.add}, old_attrs={"op0": np.multiply, "op1": np.add},
        expect=lambda i: i["data"] * i["operand0"] + i["operand1"], derived="data"),
    "tensor_scalar": Call(
        {"data": TILE, "operand0": COL, "operand1": COL, "dst": TILE},
        new=lambda t, a: nisa.tensor_scalar(dst=t["dst"], data=t["data"], operand0=t["operand0"], operand1=t["operand1"], **a),
        old=lambda t, a: old_isa.tensor_scalar(data=t["data"], operand0=t["operand0"], operand1=t["operand1"], **a),
        attrs={"op0": nl.multiply, "op1": nl.add}, old_attrs={"op0": np.multiply, "op1": np.add},
        expect=lambda i: i["data"] * i["operand0"] + i["operand1"], derived="data"),
    # One operator: op1 and operand1 left out together.
    "tensor_scalar/one_op": Call(
        {"data": TILE, "operand0": COL, "dst": TILE},
        new=lambda t, a: nisa.tensor_scalar(dst=t["dst"], data=t["data"], operand0=t["operand0"], **a),
        old=lambda t, a: old_isa.tensor_scalar(data=t["data"], operand0=t["operand0"], **a),
        attrs={"op0": nl.multiply}, old_attrs={"op0": np.multiply},
        expect=lambda i: i["data"] * i["operand0"], derived="data"),
    "tensor_scalar_reduce": Call(
        {"data": TILE, "operand0": COL, "reduce_res": COL, "dst": TILE},
        new=lambda t, a: nisa.tensor_scalar_reduce(dst=t["dst"], data=t["data"], operand0=t["operand0"], reduce_res=t["reduce_res"], **a),
        old=lambda t, a: old_isa.tensor_scalar_reduce(data=t["data"], operand0=t["operand0"], reduce_res=t["reduce_res"], **a),
        attrs={"op0": nl.multiply, "reduce_op": nl.add}, old_attrs={"op0": np.multiply, "reduce_op": np.add},
        expect=lambda i: i["data"] * i["operand0"], derived="data"),
    "tensor_scalar_cumulative": Call(
        {"src": TILE, "imm0": COL, "imm1": COL, "dst": TILE},
        new=lambda t, a: nisa.tensor_scalar_cumulative(dst=t["dst"], src=t["src"], imm0=t["imm0"], imm1=t["imm1"], **a),
        old=lambda t, a: old_isa.tensor_scalar_cumulative(dst=t["dst"], src=t["src"], imm0=t["imm0"], imm1=t["imm1"], **a),
        attrs={"op0": nl.multiply, "op1": nl.add, "reduce_cmd": RC.load_reduce},
        old_attrs={"op0": np.multiply, "op1": np.add, "reduce_cmd": old_isa.reduce_cmd.load_reduce},
        expect=lambda i: i["imm1"] + np.cumsum(i["src"] * i["imm0"], axis=1), old_takes_dst=True),
    "tensor_copy": Call(
        {"src": TILE, "dst": TILE},
        new=lambda t, a: nisa.tensor_copy(dst=t["dst"], src=t["src"]),
        old=lambda t, a: old_isa.tensor_copy(t["src"]),
        expect=lambda i: i["src"], derived="src"),
    "tensor_copy_predicated": Call(
        {"src": TILE, "predicate": _f(P, F, values="pred"), "dst": TILE},
        new=lambda t, a: nisa.tensor_copy_predicated(dst=t["dst"], src=t["src"], predicate=t["predicate"]),
        old=lambda t, a: old_isa.tensor_copy_predicated(src=t["src"], dst=t["dst"], predicate=t["predicate"]),
        expect=lambda i: np.where(i["predicate"] != 0, i["src"], i["dst"]), old_takes_dst=True),
    "memset": Call(
        {"dst": TILE},
        new=lambda t, a: nisa.memset(dst=t["dst"], value=2.0),
        expect=lambda i: np.full((P, F), 2.0, np.float32)),
    "reciprocal": Call(
        {"data": _f(P, F, values="pos"), "dst": TILE},
        new=lambda t, a: nisa.reciprocal(dst=t["dst"], data=t["data"]),
        old=lambda t, a: old_isa.reciprocal(t["data"]),
        expect=lambda i: 1 / i["data"], derived="data"),
    "iota": Call(
        {"dst": _f(P, F, dtype="int32")},
        new=lambda t, a: nisa.iota(dst=t["dst"], pattern=[[1, F]], offset=0, channel_multiplier=F),
        expect=lambda i: np.arange(P * F).reshape(P, F)),
    "affine_select": Call(
        {"on_true_tile": TILE, "dst": TILE},
        new=lambda t, a: nisa.affine_select(dst=t["dst"], pattern=[[-1, F]], channel_multiplier=1, on_true_tile=t["on_true_tile"], on_false_value=-9.0, cmp_op="greater_equal"),
        old=lambda t, a: old_isa.affine_select(old_nl.arange(P)[:, None] >= old_nl.arange(F)[None, :], t["on_true_tile"], -9.0),
        expect=lambda i: np.where(np.arange(P)[:, None] >= np.arange(F)[None, :], i["on_true_tile"], -9.0),
        derived="on_true_tile", old_grid=True),
    "range_select": Call(
        {"on_true_tile": TILE, "bound0": COL, "bound1": COL, "reduce_res": COL, "dst": TILE},
        new=lambda t, a: nisa.range_select(dst=t["dst"], on_true_tile=t["on_true_tile"], comp_op1=nl.less, bound0=t["bound0"], bound1=t["bound1"], reduce_res=t["reduce_res"], **a),
        old=lambda t, a: old_isa.range_select(on_true_tile=t["on_true_tile"], comp_op1=np.less, bound0=t["bound0"], bound1=t["bound1"], reduce_cmd=old_isa.reduce_cmd.reset_reduce, reduce_res=t["reduce_res"], **a),
        attrs={"comp_op0": nl.greater_equal, "reduce_op": nl.maximum},
        old_attrs={"comp_op0": np.greater_equal, "reduce_op": np.maximum},
        derived="on_true_tile"),
    "select_reduce": Call(
        {"predicate": _f(P, F, values="pred"), "on_true": TILE, "on_false": COL, "reduce_res": COL, "dst": TILE},
        new=lambda t, a: nisa.select_reduce(dst=t["dst"], predicate=t["predicate"], on_true=t["on_true"], on_false=t["on_false"], reduce_res=t["reduce_res"], reduce_cmd=RC.reset_reduce, **a),
        old=lambda t, a: old_isa.select_reduce(dst=t["dst"], predicate=t["predicate"], on_true=t["on_true"], on_false=t["on_false"], reduce_res=t["reduce_res"], reduce_cmd=old_isa.reduce_cmd.reset_reduce, **a),
        attrs={"reduce_op": nl.maximum}, old_attrs={"reduce_op": np.maximum},
        expect=lambda i: np.where(i["predicate"] != 0, i["on_true"], i["on_false"]), old_takes_dst=True),
    "bn_stats": Call(
        {"data": TILE, "dst": _f(P, 6)},
        new=lambda t, a: nisa.bn_stats(dst=t["dst"], data=t["data"]),
        old=lambda t, a: old_isa.bn_stats(t["data"]), derived="data"),
    "bn_aggr": Call(
        {"data": _f(P, 6, values="pos"), "dst": _f(P, 2)},
        new=lambda t, a: nisa.bn_aggr(dst=t["dst"], data=t["data"]),
        old=lambda t, a: old_isa.bn_aggr(t["data"]), derived="data"),
    "max8": Call(
        {"src": TILE, "dst": _f(P, 8)},
        new=lambda t, a: nisa.max8(dst=t["dst"], src=t["src"]),
        old=lambda t, a: old_isa.max8(src=t["src"]),
        expect=lambda i: -np.sort(-i["src"], axis=1)[:, :8], derived="src"),
    "nc_find_index8": Call(
        {"data": TILE, "vals": _f(P, 8), "dst": _f(P, 8, dtype="uint32")},
        new=lambda t, a: nisa.nc_find_index8(dst=t["dst"], data=t["data"], vals=t["vals"]),
        old=lambda t, a: old_isa.nc_find_index8(data=t["data"], vals=t["vals"]), derived="data"),
    "nc_match_replace8": Call(
        {"data": TILE, "vals": _f(P, 8), "dst_idx": _f(P, 8, dtype="uint32"), "dst": TILE},
        new=lambda t, a: nisa.nc_match_replace8(dst=t["dst"], data=t["data"], vals=t["vals"], imm=0.0, dst_idx=t["dst_idx"]),
        old=lambda t, a: old_isa.nc_match_replace8(data=t["data"], vals=t["vals"], imm=0.0, dst_idx=t["dst_idx"]),
        derived="data"),
    "nc_stream_shuffle": Call(
        {"src": TILE, "dst": TILE},
        new=lambda t, a: nisa.nc_stream_shuffle(dst=t["dst"], src=t["src"], **a),
        old=lambda t, a: old_isa.nc_stream_shuffle(t["src"], t["dst"], **a),
        attrs={"shuffle_mask": list(range(31, -1, -1))}, old_attrs={"shuffle_mask": list(range(31, -1, -1))},
        expect=lambda i: i["src"].reshape(4, 32, F)[:, ::-1].reshape(P, F), old_takes_dst=True),
    "nc_stream_shuffle/broadcast": Call(   # AWS's test_broadcast_partition: one src partition to 32
        {"src": _f(1, F), "dst": _f(32, F)},
        new=lambda t, a: nisa.nc_stream_shuffle(dst=t["dst"], src=t["src"], **a),
        old=lambda t, a: old_isa.nc_stream_shuffle(t["src"], t["dst"], **a),
        attrs={"shuffle_mask": [0] * 32}, old_attrs={"shuffle_mask": [0] * 32},
        expect=lambda i: np.repeat(i["src"], 32, axis=0), old_takes_dst=True),
    "nc_n_gather": Call(
        {"data": TILE, "indices": _f(P, 16, dtype="uint32", values="index"), "dst": _f(P, 16)},
        new=lambda t, a: nisa.nc_n_gather(dst=t["dst"], data=t["data"], indices=t["indices"]),
        expect=lambda i: np.take_along_axis(i["data"], i["indices"].astype(np.int64), axis=1)),
    "dropout": Call(
        {"data": TILE, "dst": TILE},
        new=lambda t, a: nisa.dropout(dst=t["dst"], data=t["data"], prob=0.0),
        old=lambda t, a: old_isa.dropout(t["data"], 0.0),
        expect=lambda i: i["data"], derived="data"),
}

# The table row each call emits.
OPCODE = {name: name.split("/")[0] for name in CALLS}
OPCODE["activation_reduce"] = "activation"


@dataclass(frozen=True)
class Break:
    """How to break rule ``rule`` for operand ``role`` of call ``call``: replace operands (``ops``), set
    attributes, or run for another target. ``old``: False where the old dialect cannot express it."""

    call: str
    rule: str
    role: str
    ops: dict = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)
    old_attrs: dict = field(default_factory=dict)
    target: str | None = None
    old: bool = True

    @property
    def opcode(self) -> str:
        return OPCODE[self.call]


# Rule-specific breaks (the shape rules and COMPUTE_RULES are generated by ``_generic``).
BF = "bfloat16"
SPECIFIC = [
    Break("nc_matmul", "matmul-buffer", "stationary", {"stationary": _f(P, P, dtype=BF, buffer="psum")}),
    Break("nc_matmul", "matmul-buffer", "moving", {"moving": _f(P, 512, dtype=BF, buffer="psum")}),
    Break("nc_matmul", "matmul-buffer", "dst", {"dst": _f(P, 512)}, old=False),
    Break("nc_matmul", "matmul-dtype", "stationary", {"stationary": _f(P, P, dtype="int32")}),
    Break("nc_matmul", "matmul-dtype", "moving", {"moving": _f(P, 512, dtype="int32")}),
    Break("nc_matmul", "matmul-dtype", "dst", {"dst": _f(P, 512, dtype="int32", buffer="psum")}, old=False),
    Break("nc_matmul", "matmul-contraction", "moving", {"moving": _f(64, 512, dtype=BF)}),
    Break("nc_matmul", "matmul-stationary-size", "stationary", {"stationary": _f(P, 256, dtype=BF)}),
    Break("nc_matmul", "matmul-moving-size", "moving", {"moving": _f(P, 1024, dtype=BF)}),
    Break("nc_matmul", "matmul-output-shape", "dst", {"dst": _f(P, 256, buffer="psum")}, old=False),
    Break("nc_matmul", "psum-bank", "dst", {"dst": _f(P, 1024, buffer="psum", view=((0, P), (256, 768)))},
          old=False),
    Break("nc_matmul", "matmul-perf-mode", "moving", attrs={"perf_mode": nisa.matmul_perf_mode.double_row},
          old_attrs={"perf_mode": "double_row_gen3"}, target="trn1"),
    Break("nc_matmul", "matmul-perf-mode", "stationary", attrs={"perf_mode": nisa.matmul_perf_mode.double_row},
          old_attrs={"perf_mode": "double_row_gen3"}),
    Break("nc_matmul", "start-partition", "stationary",
          {"stationary": _f(P, P, dtype=BF, view=((32, 96),)), "moving": _f(P, 512, dtype=BF, view=((32, 96),))}),
    Break("nc_transpose", "transpose-shape", "dst", {"dst": _f(P, F, buffer="psum")}, old=False),
    Break("nc_transpose", "transpose-buffer", "data", {"data": _f(P, F, buffer="psum")}),
    Break("nc_transpose", "transpose-buffer", "dst", {"dst": _f(F, P)}, old=False),
    Break("nc_transpose/vector", "transpose-size", "data", {"data": _f(F, F), "dst": _f(F, F)}),
    Break("activation_reduce", "reduce-result-shape", "reduce_res", {"reduce_res": _f(P, 2)}),
    Break("activate2", "reduce-result-shape", "reduce_res", {"reduce_res": _f(P, 2)}),
    Break("activate2", "activate2-ops", "data", attrs={"op0": nl.add, "op1": nl.add}),
    Break("activate2", "activation-op", "data", attrs={"op": nl.add}),
    Break("activate2", "reduce-op", "reduce_res", attrs={"reduce_op": nl.multiply}),
    Break("activate2", "reduce-cmd", "reduce_res", attrs={"reduce_cmd": RC.load_reduce}),
    Break("activate2", "target-support", "dst", target="trn2"),
    Break("exponential", "reduce-result-shape", "reduce_res", {"reduce_res": _f(P, 2)}),
    Break("exponential/reset", "reduce-cmd", "reduce_res", attrs={"reduce_cmd": RC.reset}),
    Break("exponential", "target-support", "dst", target="trn2"),
    Break("tensor_reduce", "reduce-axis", "data", attrs={"axis": 0}, old_attrs={"axis": 0}),
    Break("tensor_reduce", "reduce-output-shape", "dst", {"dst": _f(P, 2)}, old=False),
    Break("activation/scalar_bias", "activation-bias", "bias", target="trn1"),
    Break("tensor_reduce", "reduce-axes-last", "data", {"data": _f(P, 4, 8), "dst": _f(P, 8)},
          attrs={"axis": (1,)}, old_attrs={"axis": (1,)}),
    Break("tensor_reduce", "reduce-op", "data", attrs={"op": nl.divide}, old_attrs={"op": np.divide}),
    Break("tensor_partition_reduce", "shape-mismatch", "dst", {"dst": _f(2, F)}, old=False),
    Break("tensor_partition_reduce", "reduce-op", "data", attrs={"op": nl.divide}, old_attrs={"op": np.divide}),
    Break("tensor_scalar_reduce", "reduce-result-shape", "reduce_res", {"reduce_res": _f(P, 2)}),
    Break("tensor_scalar_cumulative", "cumulative-op", "dst", attrs={"op1": nl.divide},
          old_attrs={"op1": np.divide}),
    Break("tensor_scalar_cumulative", "reduce-cmd", "dst", attrs={"reduce_cmd": RC.idle},
          old_attrs={"reduce_cmd": old_isa.reduce_cmd.idle}),
    Break("tensor_scalar_cumulative", "dtype", "src", {"src": _f(P, F, dtype="int32")}),
    Break("tensor_scalar_cumulative", "dtype", "dst", {"dst": _f(P, F, dtype="int32")}),
    Break("scalar_tensor_tensor", "alu-op-kind", "data", attrs={"op0": nl.bitwise_and},
          old_attrs={"op0": np.bitwise_and}),
    Break("tensor_tensor_scan", "alu-op-kind", "data0", attrs={"op1": nl.bitwise_or}, old_attrs={"op1": np.bitwise_or}),
    Break("tensor_scalar_reduce", "alu-op-kind", "data", attrs={"op0": nl.bitwise_and},
          old_attrs={"op0": np.bitwise_and}),
    Break("tensor_scalar_reduce", "reduce-op", "reduce_res", attrs={"reduce_op": nl.divide},
          old_attrs={"reduce_op": np.divide}),
    Break("tensor_scalar_cumulative", "alu-op-kind", "src", attrs={"op0": nl.bitwise_and},
          old_attrs={"op0": np.bitwise_and}),
    Break("tensor_scalar", "alu-op-kind", "data", attrs={"op0": nl.bitwise_and}, old_attrs={"op0": np.bitwise_and}),
    # Operators from the wrong table of nki.api.shared, and an operator without its operand.
    Break("tensor_scalar", "operator-kind", "data", attrs={"op0": nl.exp}, old_attrs={"op0": np.exp}),
    Break("scalar_tensor_tensor", "operator-kind", "data", attrs={"op1": nl.rsqrt}, old_attrs={"op1": nl.rsqrt}),
    Break("tensor_scalar_reduce", "reduce-op", "reduce_res", attrs={"reduce_op": nl.exp},
          old_attrs={"reduce_op": np.exp}),
    Break("tensor_scalar/one_op", "operator-operand", "data", attrs={"op1": nl.add}, old_attrs={"op1": np.add}),
    Break("iota", "pattern-size", "dst", {"dst": _f(P, 32, dtype="int32")}, old=False),
    Break("affine_select", "engine-buffer", "on_true_tile", {"on_true_tile": _f(P, F, buffer="psum")}),
    Break("affine_select", "pattern-size", "dst", {"dst": _f(P, 32)}, old=False),
    Break("range_select", "reduce-result-shape", "reduce_res", {"reduce_res": _f(P, 2)}),
    Break("range_select", "target-support", "dst", target="trn1"),
    Break("range_select", "reduce-op", "reduce_res", attrs={"reduce_op": nl.add}, old_attrs={"reduce_op": np.add}),
    Break("range_select", "range-select-op", "on_true_tile", attrs={"comp_op0": nl.add},
          old_attrs={"comp_op0": np.add}),
    Break("select_reduce", "reduce-op", "reduce_res", attrs={"reduce_op": nl.add}, old_attrs={"reduce_op": np.add}),
    Break("nc_matmul", "matmul-tiling", "stationary", attrs={"tile_position": (0, 0), "tile_size": (64, 128)},
          old_attrs={"tile_position": (0, 0), "tile_size": (64, 128)}),
    Break("select_reduce", "reduce-result-shape", "reduce_res", {"reduce_res": _f(P, 2)}),
    Break("bn_stats", "bn-stats-size", "data", {"data": _f(P, 1024)}),
    Break("bn_stats", "bn-stats-shape", "dst", {"dst": _f(P, 5)}, old=False),
    Break("bn_aggr", "bn-aggr-shape", "data", {"data": _f(P, 5, values="pos")}),
    Break("bn_aggr", "bn-aggr-shape", "dst", {"dst": _f(P, 3)}, old=False),
    Break("max8", "top8-shape", "dst", {"dst": _f(P, 7)}, old=False),
    Break("nc_find_index8", "top8-shape", "dst", {"dst": _f(P, 7, dtype="uint32")}, old=False),
    Break("nc_find_index8", "top8-shape", "vals", {"vals": _f(P, 7)}),
    Break("nc_match_replace8", "top8-shape", "vals", {"vals": _f(P, 7)}),
    Break("nc_match_replace8", "top8-shape", "dst_idx", {"dst_idx": _f(P, 7, dtype="uint32")}),
    Break("nc_stream_shuffle", "shuffle-mask", "src", attrs={"shuffle_mask": [0] * 31},
          old_attrs={"shuffle_mask": [0] * 31}),
    Break("nc_stream_shuffle", "shape-mismatch", "src", {"src": _f(P, 32)}),
    Break("nc_stream_shuffle", "shuffle-mask", "src", {"src": _f(64, F)}),
    Break("nc_stream_shuffle", "dtype-mismatch", "src", {"src": _f(P, F, dtype=BF)}),
    Break("nc_n_gather", "shape-mismatch", "dst", {"dst": _f(P, 8)}),
    Break("nc_n_gather", "index-dtype", "indices", {"indices": _f(P, 16)}),
    Break("tensor_tensor", "engine-buffer", "data2",
          {"data1": _f(P, F, buffer="psum"), "data2": _f(P, F, buffer="psum")}),
    Break("tensor_copy", "free-size-limit", "src",
          {"src": _f(P, 8193, dtype=BF, buffer="psum"), "dst": _f(P, 8193, dtype=BF)}),
]

# Roles a row rule names that the author never passes: the engines' accumulator registers.
INTERNAL = {"acc"}
# Shared rules cased in test_validate.py (they need tiles the fill of this module cannot build).
ELSEWHERE = {"partition-dim-limit": "a tile of over 128 partitions cannot be allocated to fill it",
             "partition-step": "a partition-strided view needs nl.arange indexing; test_validate.py",
             "access-pattern-dims": "a 5-free-dim view; test_validate.py"}
# Shared rules a row's own rule states first (the row's page is more precise), so they never fire on it.
SHADOWED = {("nc_matmul", "engine-buffer"): "matmul-buffer: stationary/moving in SBUF, dst in PSUM (nc_matmul page)"}
# Rules cased once, on a representative call (they do not depend on the instruction).
ONCE = {"free-size-limit", "operator-kind", "operator-operand", "reduce-op", "activation-op"}


def _call_for(opcode: str, role: str) -> str | None:
    """The first call of ``opcode`` that passes operand ``role``."""
    for name, call in CALLS.items():
        if OPCODE[name] == opcode and role in call.operands:
            return name
    return None


def _generic() -> list:
    """Breaks of the shared shape rules and the engine rules, for every call that can express them."""
    out = []
    for name, call in CALLS.items():
        opcode = OPCODE[name]
        for fn in OPS[opcode].rules:
            for entry in shared.documented(fn):
                for role in entry.roles:
                    if role == "*" or role not in call.operands or _call_for(opcode, role) != name:
                        continue
                    op = call.operands[role]
                    old = call.old is not None and role != call.derived and (role != "dst" or call.old_takes_dst)
                    if entry.rule == "partition-mismatch":
                        out.append(Break(name, entry.rule, role, {role: replace(op, shape=(op.shape[0] // 2,)
                                                                                + op.shape[1:])}, old=old))
                    elif entry.rule == "shape-mismatch" and len(op.shape) == 2 and op.shape[1] > 2 and \
                            not any(b.call == name and b.rule == entry.rule and b.role == role for b in SPECIFIC):
                        out.append(Break(name, entry.rule, role, {role: replace(op, shape=(op.shape[0], op.shape[1] // 2))},
                                         old=old))
                    elif entry.rule == "operand-dtype":
                        bad = next(d for d in ("float32", "bfloat16", "int32") if d not in fn.allowed[role])
                        out.append(Break(name, entry.rule, role, {role: replace(op, dtype=bad)}, old=old))
                    elif entry.rule == "dtype-mismatch" and not any(
                            b.call == name and b.rule == entry.rule and b.role == role for b in SPECIFIC):
                        bad = "bfloat16" if op.dtype != "bfloat16" else "float32"
                        out.append(Break(name, entry.rule, role, {role: replace(op, dtype=bad)}, old=old))
                    elif entry.rule in ("scalar-operand-shape", "operand-shape"):
                        out.append(Break(name, entry.rule, role, {role: replace(op, shape=fn.breaking[0])}))
        # COMPUTE_RULES: an HBM operand; a 64-partition access starting at partition 32.
        first = next((r for r in call.operands if r != "dst"), "dst")
        op = call.operands[first]
        if opcode != "nc_matmul" and not any(b.call == name and b.rule == "engine-buffer" for b in SPECIFIC):
            out.append(Break(name, "engine-buffer", first, {first: replace(op, buffer="shared_hbm")},
                             old=call.old is not None and (first != "dst" or call.old_takes_dst)))
        if op.shape[0] == P and opcode != "nc_matmul" and len(op.shape) == 2:
            out.append(Break(name, "start-partition", first, {first: replace(op, view=((32, 96),))},
                             old=call.old is not None and not call.old_grid))
    return out


BREAKS = SPECIFIC + _generic()
BY_KEY = {(b.opcode, b.rule, b.role) for b in BREAKS}
CASED_RULES = {b.rule for b in BREAKS}

# nisa function -> the rules it is cased for (both dialects where the old one has the function); the test
# below checks it against the cases BREAKS generates, so it reads as the reviewed table.
COVERAGE: dict[str, tuple[str, ...]] = {
    "nc_matmul": ("matmul-buffer", "matmul-contraction", "matmul-dtype", "matmul-moving-size", "matmul-output-shape",
                  "matmul-perf-mode", "matmul-stationary-size", "matmul-tiling", "psum-bank", "start-partition"),
    "nc_transpose": ("engine-buffer", "start-partition", "transpose-buffer", "transpose-shape", "transpose-size"),
    "activation": ("activation-bias", "engine-buffer", "operand-dtype", "partition-mismatch", "scalar-operand-shape",
                   "shape-mismatch", "start-partition"),
    "activation_reduce": ("engine-buffer", "partition-mismatch", "reduce-result-shape", "start-partition"),
    "activate2": ("activate2-ops", "activation-op", "engine-buffer", "partition-mismatch", "reduce-cmd", "reduce-op",
                  "reduce-result-shape", "scalar-operand-shape", "shape-mismatch", "start-partition",
                  "target-support"),
    "tensor_reduce": ("engine-buffer", "partition-mismatch", "reduce-axes-last", "reduce-axis", "reduce-op",
                      "reduce-output-shape", "start-partition"),
    "tensor_partition_reduce": ("engine-buffer", "reduce-op", "shape-mismatch", "start-partition"),
    "tensor_tensor": ("engine-buffer", "operand-shape", "partition-mismatch", "shape-mismatch", "start-partition"),
    "tensor_tensor_scan": ("alu-op-kind", "engine-buffer", "operand-shape", "partition-mismatch",
                           "scalar-operand-shape", "shape-mismatch", "start-partition"),
    "scalar_tensor_tensor": ("alu-op-kind", "engine-buffer", "operand-shape", "operator-kind", "partition-mismatch",
                             "scalar-operand-shape", "shape-mismatch", "start-partition"),
    "tensor_scalar": ("alu-op-kind", "engine-buffer", "operator-kind", "operator-operand", "partition-mismatch",
                      "scalar-operand-shape", "shape-mismatch",
                      "start-partition"),
    "tensor_scalar_reduce": ("alu-op-kind", "engine-buffer", "partition-mismatch", "reduce-op", "reduce-result-shape",
                             "scalar-operand-shape", "shape-mismatch", "start-partition"),
    "tensor_scalar_cumulative": ("alu-op-kind", "cumulative-op", "dtype", "engine-buffer", "operand-dtype",
                                 "partition-mismatch", "reduce-cmd", "scalar-operand-shape", "shape-mismatch",
                                 "start-partition"),
    "tensor_copy": ("engine-buffer", "free-size-limit", "partition-mismatch", "shape-mismatch", "start-partition"),
    "tensor_copy_predicated": ("dtype-mismatch", "engine-buffer", "partition-mismatch", "shape-mismatch",
                               "start-partition"),
    "exponential": ("engine-buffer", "operand-dtype", "partition-mismatch", "reduce-cmd", "reduce-result-shape",
                    "scalar-operand-shape", "shape-mismatch", "start-partition", "target-support"),
    "reciprocal": ("engine-buffer", "partition-mismatch", "shape-mismatch", "start-partition"),
    "iota": ("engine-buffer", "pattern-size", "start-partition"),
    "dropout": ("engine-buffer", "partition-mismatch", "shape-mismatch", "start-partition"),   # prob rules: data side
    "affine_select": ("engine-buffer", "partition-mismatch", "pattern-size", "shape-mismatch", "start-partition"),
    "range_select": ("engine-buffer", "operand-dtype", "partition-mismatch", "range-select-op", "reduce-op",
                     "reduce-result-shape", "scalar-operand-shape", "shape-mismatch", "start-partition",
                     "target-support"),
    "select_reduce": ("engine-buffer", "operand-dtype", "partition-mismatch", "reduce-op", "reduce-result-shape",
                      "scalar-operand-shape", "shape-mismatch", "start-partition"),
    "memset": ("engine-buffer", "start-partition"),
    "bn_stats": ("bn-stats-shape", "bn-stats-size", "engine-buffer", "partition-mismatch", "start-partition"),
    "bn_aggr": ("bn-aggr-shape", "engine-buffer", "partition-mismatch", "start-partition"),
    "max8": ("engine-buffer", "partition-mismatch", "start-partition", "top8-shape"),
    "nc_find_index8": ("engine-buffer", "operand-dtype", "partition-mismatch", "start-partition", "top8-shape"),
    "nc_match_replace8": ("engine-buffer", "partition-mismatch", "shape-mismatch", "start-partition", "top8-shape"),
    "nc_stream_shuffle": ("dtype-mismatch", "engine-buffer", "shape-mismatch", "shuffle-mask", "start-partition"),
    "nc_n_gather": ("dtype-mismatch", "engine-buffer", "index-dtype", "partition-mismatch", "shape-mismatch",
                    "start-partition"),
}

# Row rules cased elsewhere, by module:qualname, with the reason (none now: the data-movement and state rows
# state their constraints too, and test_rule_conformance_data.py cases them).
PENDING: dict[str, str] = {}

SCOPE = ("nc_matmul", "nc_transpose", "activation", "activation_reduce", "activate2", "tensor_reduce",
         "tensor_partition_reduce", "tensor_tensor", "tensor_tensor_scan", "scalar_tensor_tensor", "tensor_scalar",
         "tensor_scalar_reduce", "tensor_scalar_cumulative", "tensor_copy", "tensor_copy_predicated", "exponential",
         "reciprocal", "iota", "dropout", "affine_select", "range_select", "select_reduce", "memset", "bn_stats",
         "bn_aggr", "max8", "nc_find_index8", "nc_match_replace8", "nc_stream_shuffle", "nc_n_gather")


def _pending(fn, row) -> bool:
    """A rule listed in PENDING: by its own module or qualname, or (a factory's rule) by its row's module."""
    mod = getattr(fn, "__module__", "")
    return mod in PENDING or f"{mod}:{getattr(fn, '__qualname__', '')}" in PENDING or \
        (mod == shared.__name__ and row.execute.__module__ in PENDING)


def test_every_function_in_scope_has_coverage():
    missing = [f for f in SCOPE if f not in COVERAGE]
    assert not missing, f"no conformance cases for {missing}"
    cased: dict = {}
    for b in BREAKS:
        cased.setdefault(b.call.split("/")[0], set()).add(b.rule)
    for f in SCOPE:
        assert COVERAGE[f], f
        assert set(COVERAGE[f]) == cased.get(f, set()), f"{f}: COVERAGE says {COVERAGE[f]}, the cases {cased.get(f)}"


def test_every_documented_rule_on_a_row_has_a_case():
    scoped = {OPCODE.get(f, f) for f in SCOPE}
    missing = []
    for opcode in sorted(scoped):
        for fn in OPS[opcode].rules:
            if _pending(fn, OPS[opcode]):
                continue
            for entry in shared.documented(fn):
                if entry.rule in ELSEWHERE or (opcode, entry.rule) in SHADOWED or \
                        (opcode, entry.rule) in data_side.CASES:
                    continue
                if entry.roles == ("*",):
                    if entry.rule not in CASED_RULES or (entry.rule not in ONCE and not any(
                            b.opcode == opcode and b.rule == entry.rule for b in BREAKS)):
                        missing.append((opcode, entry.rule))
                    continue
                missing += [(opcode, entry.rule, r) for r in entry.roles
                            if r not in INTERNAL and (opcode, entry.rule, r) not in BY_KEY]
    assert not missing, f"documented rules without a conformance case: {missing}"


def test_every_rule_function_is_documented_or_pending():
    for opcode, row in OPS.items():
        for fn in row.rules:
            assert shared.documented(fn) or _pending(fn, row), \
                f"{opcode}: rule {fn.__module__}:{fn.__qualname__} states no documented constraint and is not PENDING"


def test_documented_rules_name_their_pages():
    for opcode, row in OPS.items():
        for fn in row.rules:
            for entry in shared.documented(fn):
                assert entry.rule and entry.page(opcode).startswith("nki."), (opcode, entry)


# -- running the cases -------------------------------------------------------------------------------------
COLS = 4096


def _data(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((P, COLS)).astype(np.float32)


def _values(op: Op, block: np.ndarray, n_data: int) -> np.ndarray:
    if op.values == "pos":
        return np.abs(block) + 0.5
    if op.values == "pred":
        return (block > 0).astype(np.float32)
    if op.values == "index":
        return np.floor(np.abs(block) * 997) % n_data
    return block


def _layout(ops: dict) -> dict:
    """role -> (column offset, elements per partition) in the kernel's input."""
    out, off = {}, 0
    for role, op in ops.items():
        free = math.prod(op.shape[1:])
        out[role] = (off, free)
        off += min(free, 2048)
    return out


def _inputs(x: np.ndarray, ops: dict, lay: dict) -> dict:
    """The values each operand holds, as the kernel fills them (converted to the operand's dtype)."""
    res = {}
    for role, op in ops.items():
        off, free = lay[role]
        p = op.shape[0]
        block = np.tile(x[:p, off:off + min(free, 2048)], (1, -(-free // 2048)))[:, :free]
        v = np.asarray(block, np.float32)
        dt = ml_dtypes.bfloat16 if op.dtype == "bfloat16" else np.dtype(op.dtype)
        res[role] = v.astype(dt).astype(np.float32).reshape(op.shape)
    return res


def _prepare(x: np.ndarray, ops: dict, lay: dict) -> np.ndarray:
    """The kernel input: x with each operand's columns holding its values."""
    x = x.copy()
    for role, op in ops.items():
        off, free = lay[role]
        n = min(free, 2048)
        x[:op.shape[0], off:off + n] = _values(op, x[:op.shape[0], off:off + n], F)
    return x


def _fill(t, op: Op, x, lay) -> None:
    """Write the operand's values (from the kernel input x) into tile t (a [P, a, b] tile through its
    [P, a * b] reshape), in chunks of at most 2048 columns, each chunk the same columns of x."""
    off, free = lay
    p = op.shape[0]
    if len(op.shape) > 2:
        t = t.reshape((p, free))
    for lo in range(0, free, 2048):
        n = min(2048, free - lo)
        src = x[0:p, off:off + n]
        if op.buffer == "shared_hbm":
            nisa.dma_copy(dst=t[0:p, lo:lo + n], src=src)
        else:
            s = nl.load(src)
            nisa.tensor_copy(dst=t[0:p, lo:lo + n], src=s)


def _buffer(name: str):
    return {"sbuf": nl.sbuf, "psum": nl.psum, "shared_hbm": nl.shared_hbm}[name]


def _view(t, op: Op):
    if op.view is None:
        return t
    return t[tuple(slice(lo, hi) for lo, hi in op.view)]


def _kernel(call: Call, ops: dict, broken: str | None, new: bool, attrs: dict, lay: dict):
    @nki.jit
    def kernel(x):
        t = {}
        for role, op in ops.items():
            if role != broken:
                tile = nl.ndarray(op.shape, dtype=op.dtype, buffer=_buffer(op.buffer))
                _fill(tile, op, x, lay[role])
                t[role] = _view(tile, op)
        if broken is not None:
            op = ops[broken]
            y_t = nl.ndarray(op.shape, dtype=op.dtype, buffer=_buffer(op.buffer))
            _fill(y_t, op, x, lay[broken])
            t[broken] = _view(y_t, op)
        res = call.new(t, attrs) if new else call.old(t, attrs)
        res = t[call.result] if new or res is None else res
        out = nl.ndarray(res.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        r = nl.ndarray(res.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r, src=res)
        nl.store(out, r)
        return out
    return kernel


def _run(brk: Break | None, call_name: str, new: bool, breaking: bool, seed: int = 0):
    call = CALLS[call_name]
    ops = dict(call.operands)
    attrs = dict(call.attrs if new else call.old_attrs)
    target = call.target
    broken = None
    if brk is not None:
        broken = brk.role if brk.role in ops else None
        if breaking:
            ops.update(brk.ops)
            attrs.update(brk.attrs if new else brk.old_attrs)
            target = brk.target or target
    lay = _layout(ops)
    x = _prepare(_data(seed), ops, lay)
    out = _kernel(call, ops, broken, new, attrs, lay).run(x, target=target)
    return out, _inputs(x, ops, lay)


def _line(call: Call, new: bool) -> int:
    return (call.new if new else call.old).__code__.co_firstlineno


CASES = [(b, new) for b in BREAKS for new in (True, False) if new or (b.old and CALLS[b.call].old is not None)]
IDS = [f"{b.call}-{b.rule}-{b.role}-{'nki.isa' if new else 'neuronxcc'}" for b, new in CASES]
CITED = {"scalar-operand-shape", "operand-shape", "operand-dtype"}


@pytest.mark.parametrize("brk,new", CASES, ids=IDS)
def test_breaking_the_rule_is_refused_at_the_authors_line(brk, new):
    with pytest.raises(KernelRuleError) as err:
        _run(brk, brk.call, new, breaking=True)
    e = err.value
    assert e.rule == brk.rule and e.operand == brk.role, f"{e.rule} on {e.operand}: {e}"
    assert e.loc.file == __file__ and e.loc.line == _line(CALLS[brk.call], new), e.loc
    if brk.target is None and brk.role in brk.ops:
        assert "'y_t'" in str(e), str(e)
    if brk.rule in CITED:
        assert "nki.isa." in str(e)


KEEPS = [(name, new) for name in CALLS for new in (True, False) if new or CALLS[name].old is not None]


@pytest.mark.parametrize("name,new", KEEPS, ids=[f"{n}-{'nki.isa' if new else 'neuronxcc'}" for n, new in KEEPS])
def test_keeping_the_rules_runs(name, new):
    out, inputs = _run(None, name, new, breaking=False)
    call = CALLS[name]
    assert np.isfinite(np.asarray(out, np.float32)).all() or name in ("range_select",)
    if call.expect is not None:
        np.testing.assert_allclose(np.asarray(out, np.float32), call.expect(inputs), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("brk,new", CASES, ids=IDS)
def test_keeping_each_rule_runs(brk, new):
    """The break's kernel with the operand it breaks as the valid call has it (and its role a named tile)."""
    _run(brk, brk.call, new, breaking=False)


@pytest.mark.parametrize("new", [True, False], ids=["nki.isa", "neuronxcc"])
def test_activation_with_a_vector_bias_runs_on_trn1(new):
    """The NeuronCore-v2 side of activation-bias: a [N, 1] bias (the page's only v2 layout) runs on trn1."""
    call = CALLS["activation"]
    ops = dict(call.operands)
    lay = _layout(ops)
    x = _prepare(_data(0), ops, lay)
    out = _kernel(call, ops, None, new, {}, lay).run(x, target="trn1")
    np.testing.assert_allclose(np.asarray(out, np.float32), call.expect(_inputs(x, ops, lay)), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("target,refused", [("trn1", True), ("trn2", False)])
def test_reciprocal_activation_takes_no_bias_on_trn1(target, refused):
    """The other NeuronCore-v2 bias constraint (the activation functions table: reciprocal with a bias)."""
    @nki.jit
    def k(x):
        t = nl.load(x)
        b = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=b, value=1.0)
        d = nl.ndarray(t.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=d, op=nl.reciprocal, data=t, bias=b)
        out = nl.ndarray(t.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, d)
        return out
    x = np.arange(P * 8, dtype=np.float32).reshape(P, 8) / 8 + 1
    if refused:
        with pytest.raises(KernelRuleError) as err:
            k.run(x, target=target)
        assert err.value.rule == "activation-bias" and err.value.operand == "bias", str(err.value)
        assert "nki.api.shared" in str(err.value)
    else:
        np.testing.assert_allclose(k.run(x, target=target), 1 / (x + 1), rtol=1e-5)


# -- tensor_reduce's last, consecutive axes: kept by nisa calls that name them, by nl reductions of any axes ----
X3 = (np.arange(P * 24, dtype=np.float32).reshape(P, 2, 3, 4) % 11 - 5) / 4


@pytest.mark.parametrize("axis", [(3,), (2, 3), (1, 2, 3), -1])
def test_tensor_reduce_of_the_last_axes_runs(axis):
    @nki.jit
    def k(x):
        t = nl.load(x)
        axes = (axis,) if isinstance(axis, int) else axis
        kept = [s for i, s in enumerate(x.shape) if i not in [a % 4 for a in axes]]
        d = nl.ndarray(tuple(kept), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=d, op=nl.add, data=t, axis=axis)
        out = nl.ndarray(d.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, d)
        return out
    np.testing.assert_allclose(k.run(X3), X3.sum(axis=axis), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis", [(1, 2), (1, 3), (2,), 1])
def test_tensor_reduce_of_other_axes_is_refused(axis):
    @nki.jit
    def k(x):
        t = nl.load(x)
        axes = (axis,) if isinstance(axis, int) else axis
        d = nl.ndarray(tuple(s for i, s in enumerate(x.shape) if i not in axes), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=d, op=nl.add, data=t, axis=axis)
        return d
    with pytest.raises(KernelRuleError) as err:
        k.run(X3)
    assert err.value.rule == "reduce-axes-last" and err.value.operand == "data", str(err.value)
    assert "nki.isa.tensor_reduce" in str(err.value)


NL_REDUCTIONS = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod, "mean": np.mean}


@pytest.mark.parametrize("new", [True, False], ids=["nki.language", "neuronxcc"])
@pytest.mark.parametrize("fn", sorted(NL_REDUCTIONS))
@pytest.mark.parametrize("axis,keepdims", [(1, False), ((1, 3), True), (2, False), ((1, 2), False)])
def test_nl_reductions_of_any_free_axes_run(fn, axis, keepdims, new):
    """nl reductions hand tensor_reduce a view with the reduced axes last (a permuted access pattern)."""
    lang = nl if new else old_nl

    @nki.jit
    def k(x):
        t = lang.load(x)
        r = getattr(lang, fn)(t, axis=axis, keepdims=keepdims)
        out = nl.ndarray(r.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        c = nl.ndarray(r.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=c, src=r)
        nl.store(out, c)
        return out
    x = X3 / 2 + 1 if fn == "prod" else X3
    want = NL_REDUCTIONS[fn](x, axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(k.run(x), want, rtol=1e-4, atol=1e-5)


# -- no raw errors from kernel mistakes -----------------------------------------------------------------
_SIZES = ([1, 32, 64, 128], [1, 3, 8, 64])


@st.composite
def mistakes(draw):
    name = draw(st.sampled_from(sorted(CALLS)))
    call = CALLS[name]
    role = draw(st.sampled_from(sorted(call.operands)))
    shape = tuple(draw(st.sampled_from(s)) for s in _SIZES)
    dtype = draw(st.sampled_from(["float32", "bfloat16", "int32"]))
    buffer = draw(st.sampled_from(["sbuf", "psum"]))
    return name, role, Op(shape, dtype, buffer), draw(st.booleans())


@settings(max_examples=60, deadline=None)
@given(m=mistakes())
def test_kernel_mistakes_surface_as_rule_errors(m):
    name, role, op, new = m
    call = CALLS[name]
    if not new and call.old is None:
        new = True
    brk = Break(name, "any", role, {role: op})
    try:
        _run(brk, name, new, breaking=True)
    except NkiError as e:
        assert e.rule and e.loc is not None, e
    except Exception as e:   # numpy's broadcasting ValueError, an IndexError, a TypeError...
        pytest.fail(f"raw {type(e).__name__} reached the author for {name} {role}={op}: {e}")


# Operators an author may pass where another kind belongs: ALU, activation, reduction, bitvec, comparison.
_OPERATOR_POOL = (nl.add, nl.subtract, nl.exp, nl.rsqrt, nl.gelu, nl.copy, nl.bitwise_and, nl.maximum, nl.divide,
                  nl.greater_equal, "foo")
_OPERATOR_CALLS = sorted(n for n, c in CALLS.items() if any(k in c.attrs for k in ("op", "op0", "op1", "reduce_op",
                                                                                     "comp_op0", "comp_op1")))


@st.composite
def operator_mistakes(draw):
    name = draw(st.sampled_from(_OPERATOR_CALLS))
    keys = sorted(k for k in CALLS[name].attrs if k in ("op", "op0", "op1", "reduce_op", "comp_op0", "comp_op1"))
    return name, draw(st.sampled_from(keys)), draw(st.sampled_from(_OPERATOR_POOL)), draw(st.booleans())


@settings(max_examples=60, deadline=None)
@given(m=operator_mistakes())
def test_operator_mistakes_surface_as_rule_errors(m):
    """An operator of the wrong kind (an activation function as an ALU operator, an ALU operator as a
    reduction, an unknown name) is refused with a rule at the author's line or runs, in both dialects; no
    raw numpy or Python error."""
    name, key, op, new = m
    if not new and CALLS[name].old is None:
        new = True
    brk = Break(name, "any", "data", attrs={key: op}, old_attrs={key: op})
    try:
        _run(brk, name, new, breaking=True)
    except NkiError as e:
        assert e.rule and e.loc is not None, e
    except Exception as e:
        pytest.fail(f"raw {type(e).__name__} reached the author for {name} {key}={op}: {e}")


def test_every_public_nisa_function_is_covered():
    """Every public function of ``nki.isa`` (shared/nki_api.md's inventory, as nkihub exports it) has its
    documented constraints cased here (``COVERAGE``) or in test_rule_conformance_data.py."""
    import inspect as _inspect
    public = {name for name, obj in vars(nisa).items() if not name.startswith("_") and _inspect.isfunction(obj)
              and obj.__module__.startswith("nkihub.nki.isa")}
    not_instructions = {"get_nc_version", "get_nc_sub_version",   # queries, no operands
                        "emit"}                                   # nkihub's front-end helper
    covered = set(COVERAGE) | set(data_side.COVERAGE)
    missing = sorted(public - covered - not_instructions)
    assert not missing, f"public nki.isa functions with no conformance coverage: {missing}"
