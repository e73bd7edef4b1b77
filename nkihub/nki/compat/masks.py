"""Mask forms beyond a predicate: ``mask=True`` / ``mask=False`` (constants, or Python bools a kernel's
arithmetic folded), and predicates joined with Python's ``and`` (``mask=(ix < n // 2 and iy < m // 2)``, as
AWS's nc_match_replace8 example writes).

The masking page says a mask is "a compile-time constant predicate that controls whether/how this
instruction is executed": a true constant restricts nothing, a false one executes nothing.

Python's ``and`` cannot be overloaded: ``a and b`` tests ``bool(a)`` and, if true, evaluates to ``b``. So
``Predicate.__bool__`` asks :func:`and_span` whether the frame testing it is evaluating the left operand of
an ``and`` whose right operand is computed right there by a comparison; if so it answers True and records
the predicate's terms as pending for that span of bytecode, and the predicate that comparison creates
(:func:`absorb`) takes them in: the expression's value is the conjunction. Any other truth test of a
predicate (``if i_p < n:``, ``and`` with a predicate made earlier) stays an error.
"""
from __future__ import annotations

import dis
import functools
import inspect
import sys
import threading

import numpy as np

_local = threading.local()
_MAX_PENDING = 8


@functools.lru_cache(maxsize=256)
def _code_table(code) -> tuple[dict, list]:
    instructions = list(dis.get_instructions(code))
    return {ins.offset: i for i, ins in enumerate(instructions)}, instructions


def and_span(frame) -> tuple[int, int] | None:
    """(start, end) bytecode offsets when ``frame`` is testing the left operand of an ``and`` (CPython
    3.10-3.13 spellings), else None."""
    where, instructions = _code_table(frame.f_code)
    i = where.get(frame.f_lasti)
    if i is None:
        return None
    cur = instructions[i]
    prev = instructions[i - 1] if i else None
    copied = prev is not None and prev.opname == "COPY" and prev.arg == 1
    if cur.opname == "JUMP_IF_FALSE_OR_POP":                                   # 3.10, 3.11
        return cur.offset, cur.argval
    if cur.opname in ("POP_JUMP_IF_FALSE", "POP_JUMP_FORWARD_IF_FALSE") and copied:   # 3.12
        return cur.offset, cur.argval
    if cur.opname == "TO_BOOL" and copied and i + 1 < len(instructions):        # 3.13
        nxt = instructions[i + 1]
        if nxt.opname.startswith("POP_JUMP") and "FALSE" in nxt.opname:
            return cur.offset, nxt.argval
    return None


def _pending() -> list:
    if not hasattr(_local, "pending"):
        _local.pending = []
    return _local.pending


def _kernel_frame():
    """The first frame outside this package's affine/masks modules: the kernel line being evaluated."""
    here = (__file__, sys.modules["nkihub.nki.compat.affine"].__file__)
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename in here:
        frame = frame.f_back
    return frame


def truth(pred) -> bool:
    """``bool(predicate)``: True inside an ``and`` whose right operand is a comparison made on the spot
    (the predicate is then conjoined into it), else the TypeError a mask's truth value has always been."""
    frame = sys._getframe(2)   # truth <- Predicate.__bool__ <- the frame evaluating the expression
    span = and_span(frame)
    if span is not None:
        _, instructions = _code_table(frame.f_code)
        inline = any(ins.opname == "COMPARE_OP" for ins in instructions if span[0] < ins.offset < span[1])
        if inline:
            pending = _pending()
            pending[:] = [p for p in pending if p[0].f_lasti < p[2]][-_MAX_PENDING:]
            pending.append((frame, span[0], span[1], pred.terms))
            return True
    raise TypeError("a mask predicate has no truth value at trace time; combine masks with '&' (or 'and' "
                    "between comparisons written in the mask expression itself)")


def absorb(terms: tuple) -> tuple:
    """The terms of a predicate being created by a comparison, with those of every ``and`` left operand it
    is the right operand of."""
    pending = getattr(_local, "pending", None)
    if not pending:
        return terms
    pending[:] = [p for p in pending if p[0].f_lasti < p[2]]   # spans already left (frames kept alive no longer)
    frame = _kernel_frame()
    extra = ()
    for f, start, end, t in pending:
        if f is frame and start < frame.f_lasti < end:
            extra += t
    return extra + terms if extra else terms


# -- constant masks ---------------------------------------------------------------------------------------
def _is_bool(x) -> bool:
    return isinstance(x, (bool, np.bool_))


def constant_masks(fn):
    """Wrap an old-dialect function taking ``mask=``: a true constant is no mask, a false one makes the
    call emit nothing (its result tile, if any, is allocated and left unwritten)."""
    param = inspect.signature(fn).parameters.get("mask")
    if param is None or param.kind is not inspect.Parameter.KEYWORD_ONLY:
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        mask = kwargs.get("mask")
        if not _is_bool(mask):
            return fn(*args, **kwargs)
        kwargs["mask"] = None
        if mask:
            return fn(*args, **kwargs)
        from nkihub.nki import tracing
        b = tracing.current()
        if b is None:
            return fn(*args, **kwargs)
        start = len(b.program.instructions)
        out = fn(*args, **kwargs)
        del b.program.instructions[start:]   # executed nothing: only the tiles it allocated remain
        return out
    return wrapper


def wrap_module(namespace: dict) -> None:
    """Apply :func:`constant_masks` to the public functions of a module of the old-dialect layer that take
    a keyword-only ``mask=`` (the instructions and ``nl`` functions a kernel calls)."""
    for name, fn in list(namespace.items()):
        if not name.startswith("_") and inspect.isfunction(fn):
            namespace[name] = constant_masks(fn)
