"""What a kernel hands back: the tensors it returns and the caller's tensors it writes.

AWS NKI kernels return HBM tensors they allocate (``nl.ndarray(..., buffer=nl.shared_hbm)``), or write
output tensors the caller passes in and return those (``def k(x, out): ...; return out``); a returned
view (``return out.reshape((m, n))``) reaches the caller with the view's shape. Every caller tensor a
kernel writes is written back in place, whether or not it is returned, as on the device where the kernel
writes the caller's memory. At trace time :func:`set_outputs` records this in the Program
(``program.outputs`` and ``meta["returns"]``/``meta["returned"]``); after a run :func:`deliver` copies
written caller tensors back and builds the values the call returns.
"""
from __future__ import annotations

import dis
import linecache

import numpy as np

from nkihub.nki.arrays import is_torch, to_torch
from nkihub.nki.tensor import NkiTensor
from nkihub.simulator.errors import KernelRuleError, SourceLoc
from nkihub.simulator.executor import strided
from nkihub.simulator.program import AccessPattern, Program


def return_loc(fn) -> SourceLoc:
    """The ``return`` statement of kernel ``fn`` that returns a value (its def line when there are several
    or none)."""
    code = fn.__code__
    found, prev = [], None
    for ins in dis.get_instructions(code):
        if ins.opname == "RETURN_VALUE" and not (prev is not None and prev.opname == "LOAD_CONST"
                                                  and prev.argval is None):
            found.append(ins.positions)
        prev = ins
    lines = {p.lineno for p in found if p and p.lineno}
    if len(lines) != 1:
        line, col, end = code.co_firstlineno, 0, None
    else:
        p = found[0]
        line, col = p.lineno, p.col_offset or 0
        end = p.end_col_offset if p.end_lineno == p.lineno else None
    return SourceLoc(code.co_filename, line, col, end, linecache.getline(code.co_filename, line).rstrip("\n"))


def _bad_return(t, fn) -> KernelRuleError:
    rule = "a kernel returns HBM tensors: ones it allocated (nl.ndarray(shape, dtype, buffer=nl.shared_hbm)) " \
           "or ones the caller passed in"
    if isinstance(t, NkiTensor):
        return KernelRuleError("kernel-return", f"{rule}; '{t.name}' is an on-chip ({t.buffer}) tile",
                               operand=t.name, shape=t.shape, dtype=t.spec.dtype, buffer=t.buffer,
                               loc=return_loc(fn))
    return KernelRuleError("kernel-return", f"{rule}; it returns {type(t).__name__} {t!r:.60}",
                           loc=return_loc(fn))


def set_outputs(program: Program, ret, fn) -> None:
    """Record the outputs of a traced kernel: the HBM tensors ``ret`` holds (one tensor, or a tuple/list)
    and every input tensor an instruction writes."""
    if ret is None:
        items = []
    elif isinstance(ret, NkiTensor):
        items = [ret]
    elif isinstance(ret, (tuple, list)):
        items = list(ret)
    else:
        raise _bad_return(ret, fn)
    for t in items:
        if not isinstance(t, NkiTensor) or t.spec.on_chip:
            raise _bad_return(t, fn)
    written = {ap.tensor for ins in program.instructions for ap in ins.dst.values()}
    for name in [t.name for t in items] + [n for n in program.inputs if n in written]:
        if name not in program.outputs:
            program.outputs.append(name)
            if program.tensors[name].kind == "internal":
                program.tensors[name].kind = "output"
    program.meta["returns"] = "none" if ret is None else "single" if isinstance(ret, NkiTensor) else "tuple"
    if items:
        program.meta["returned"] = [t.to_ap().to_json() for t in items]


def caller_device(callers) -> str:
    """Where the caller's arrays live: ``"numpy"``, ``"cpu"``, or the torch device of its tensors
    (``"neuron:0"``); the first non-CPU tensor decides."""
    device = "numpy"
    for a in callers:
        if is_torch(a):
            kind = str(a.device)
            if kind != "cpu":
                return kind
            device = "cpu"
    return device


def to_device(result, device: str):
    """A call's result with its fresh (CPU) tensors moved to the caller's device, so a kernel called on
    device tensors returns device tensors; on the CPU or with numpy it is returned as it is."""
    if device in ("cpu", "numpy") or result is None:
        return result
    if isinstance(result, tuple):
        return tuple(to_device(r, device) for r in result)
    return result.to(device) if is_torch(result) and result.device.type == "cpu" else result


def _copy_back(dst, value: np.ndarray) -> None:
    if is_torch(dst):
        dst.copy_(to_torch(value).reshape(dst.shape))
    else:
        np.copyto(dst, value.reshape(dst.shape).astype(dst.dtype, copy=False))


def deliver(program: Program, outs: list, callers: dict, want_torch: bool):
    """After a run: write back every caller tensor the kernel wrote (``callers`` maps input names to the
    caller's arrays), then build what the call returns (None, one value or a tuple)."""
    by_name = dict(zip(program.outputs, outs))
    for name, value in by_name.items():
        if name in callers:
            _copy_back(callers[name], value)
    kind = program.meta.get("returns")
    if kind == "none":
        return None
    vals = [_value(program, ap, by_name, callers, want_torch) for ap in _returned(program)]
    return vals[0] if kind == "single" else tuple(vals)


def _value(program, ap: AccessPattern, by_name, callers, want_torch):
    spec = program.tensors[ap.tensor]
    whole = ap.size == spec.size and ap == AccessPattern.row_major(ap.tensor, ap.shape)
    if ap.tensor in callers and whole:
        base = callers[ap.tensor]     # the caller's own tensor, reshaped when the kernel returned a reshape
        return base if tuple(base.shape) == ap.shape else base.reshape(ap.shape)
    buf = by_name[ap.tensor]    # a fresh array of the run
    if whole:
        out = buf.reshape(ap.shape)
    else:
        flat = np.ascontiguousarray(buf).reshape(-1)
        item = flat.dtype.itemsize
        out = strided(flat, ap.offset, ap.shape, tuple(s * item for s, _ in ap.dims), False).copy()
    return to_torch(out) if want_torch else out


def _returned(program: Program) -> list[AccessPattern]:
    if "returned" not in program.meta:   # written before views were recorded: whole outputs
        return [AccessPattern.row_major(n, program.tensors[n].shape) for n in program.outputs]
    return [AccessPattern.from_json(ap) for ap in program.meta["returned"]]


def returned_specs(program: Program) -> list[tuple[tuple, np.dtype]]:
    """(shape, dtype) of each value a call returns (empty for a kernel that returns nothing)."""
    if program.meta.get("returns") in (None, "none"):
        return []
    return [(ap.shape, program.tensors[ap.tensor].np_dtype) for ap in _returned(program)]
