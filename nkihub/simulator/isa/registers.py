"""Register instructions of the engine sequencers (AWS NKI ``nisa.register_move`` / ``register_load`` /
``register_store``): 32-bit integer registers a kernel uses as dynamic loop bounds, while-loop conditions
and run-time offsets. A register is a one-element int32 tensor of the Program (operand ``reg``).

Costs are estimates (the documentation gives none): a sequencer register move is one MIN_II slot, a load or
store from or to memory also waits for one memory access start.
"""
from __future__ import annotations

import numpy as np

from nkihub.simulator import cost_rules as cr
from nkihub.simulator.isa.base import f32, register
from nkihub.simulator.rules import Documented, documents

_I32 = np.iinfo(np.int32)


def _to_int32(value) -> np.ndarray:
    """A scalar as the register holds it: integers keep their value (wrapping to 32 bits), floats are
    truncated toward zero and saturate."""
    a = np.asarray(value).reshape(-1)[:1]
    if a.dtype.kind in "biu":
        return a.astype(np.int64).astype(np.int32)
    return np.clip(np.trunc(f32(a).astype(np.float64)), _I32.min, _I32.max).astype(np.int32)


def _move(ins, src, dst, ctx):
    """reg = imm (a compile-time integer) or reg = src register."""
    dst["reg"][...] = _to_int32(src["src"]) if "src" in src else np.int32(ins.attrs["imm"])


def _load(ins, src, dst, ctx):
    """reg = the one element of tensor ``src`` (HBM or SBUF), as a 32-bit integer."""
    dst["reg"][...] = _to_int32(src["src"])


def _store(ins, src, dst, ctx):
    """The one element of tensor ``dst`` (HBM or SBUF) = reg, converted to dst's dtype."""
    out = dst["dst"]
    out[...] = np.asarray(src["reg"]).reshape(-1)[0].astype(out.dtype) if out.dtype.kind in "biu" else \
        f32(src["reg"]).reshape(-1)[0].astype(out.dtype)


def _one_element(role: str):
    """Rule factory: operand ``role`` is one element (a register, or the scalar tensor a register loads from
    or stores to), not in PSUM (the register_load / register_store pages: a scalar tensor in HBM or SBUF)."""
    size = Documented("register-operand", (role,), None, f"'{role}' holds one element (a scalar tensor)")
    where = Documented("register-buffer", (role,), None, f"'{role}' is in HBM or SBUF, not PSUM")

    @documents(size, where)
    def rule(ins, program, target):
        ap = ins.src.get(role) or ins.dst.get(role)
        if ap.size != 1:
            raise size.fail(f"a register holds one value; '{role}' has {ap.size} elements (shape {ap.shape})",
                            ins, program, role)
        if program.tensor_of(ap).buffer == "psum":
            raise where.fail("registers load from and store to HBM or SBUF, not PSUM", ins, program, role)
    return rule


def _cost(extra: float):
    return lambda ins, program, target: cr.seconds(cr.MIN_II_CYCLES + extra, target, "gpsimd")


register("register_move", engines={"gpsimd"}, execute=_move, cost=_cost(0), rules=(_one_element("reg"),))
register("register_load", engines={"gpsimd"}, execute=_load, cost=_cost(cr.ACCESS_START_CYCLES),
         rules=(_one_element("reg"), _one_element("src")))
register("register_store", engines={"gpsimd"}, execute=_store, cost=_cost(cr.ACCESS_START_CYCLES),
         rules=(_one_element("reg"), _one_element("dst")))
