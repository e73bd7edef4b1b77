"""Loops and SPMD ids of ``nki.language``. Loops unroll at trace time; affine_range iterations must be
independent (checked), sequential_range may carry values, static_range is plain unrolling.

Dynamic loops (``dynamic_range``, ``fori_loop``, ``while_loop``) run on the device in AWS NKI, their bounds
or condition read from registers at run time. Here they unroll too, for the trip count the call's data
gives (see ``nki.runtime``): the Program is the path these inputs take."""
from __future__ import annotations

import builtins
import dataclasses
import operator

from nkihub.nki import tracing


def _loop(kind: str, start, stop, step):
    if stop is None:
        start, stop = 0, start
    rng = builtins.range(int(start), int(stop), int(step))
    b = tracing.current()
    if b is None:
        yield from rng
        return
    lid = b.new_loop(kind, len(rng), tracing.caller_loc())
    for k, i in enumerate(rng):
        b.loop_stack.append((lid, k))
        try:
            yield i
        finally:
            b.loop_stack.pop()


def affine_range(start, stop=None, step=1):
    """Iterate ``range(start, stop, step)``; iterations must not depend on each other (PSUM matmul
    accumulation excepted), which lets the hardware overlap them."""
    return _loop("affine", start, stop, step)


def sequential_range(start, stop=None, step=1):
    """Iterate ``range(start, stop, step)`` in order; iterations may carry values."""
    return _loop("sequential", start, stop, step)


def static_range(start, stop=None, step=1):
    """Iterate ``range(start, stop, step)``, fully unrolled."""
    return _loop("static", start, stop, step)


def range(start, stop=None, step=1):  # noqa: A001 (NKI's name)
    """``nl.range``: iterate ``range(start, stop, step)`` in order, fully unrolled; iterations may carry
    values. Not on the public API pages nor in the stubs; nki-library uses it as a plain loop
    iterator, and the NKI docs say the compiler turns a Python ``range`` in a kernel into
    ``sequential_range``, so it is that loop here."""
    return _loop("sequential", start, stop, step)


def _bound(value, role: str) -> int:
    """A loop bound: a Python int, or a VirtualRegister's run-time value."""
    from nkihub.nki.isa.registers import VirtualRegister
    if isinstance(value, VirtualRegister):
        return value.value()
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"dynamic loop {role} must be an int or a nisa.VirtualRegister, got "
                        f"{type(value).__name__}") from None


def _step(step) -> int:
    from nkihub.nki.isa.registers import VirtualRegister
    if isinstance(step, VirtualRegister) or not isinstance(step, int) or step <= 0:
        raise ValueError(f"a dynamic loop's step must be a compile-time positive int, got {step!r}")
    return step


def dynamic_range(start, stop=None, step=1):
    """Iterate from ``start`` to ``stop`` (exclusive) by ``step``, the bounds ints or VirtualRegisters read
    at run time (one argument: the stop, from 0). ``step`` is a compile-time positive int."""
    if stop is None:
        start, stop = 0, start
    step = _step(step)
    return _loop("dynamic", _bound(start, "start"), _bound(stop, "stop"), step)


def fori_loop(lower, upper, body_fun, step=1):
    """``for i in range(lower, upper, step): body_fun(i)`` with bounds that may be VirtualRegisters; the
    body receives ``i`` as a register holding the iteration value (a copy: writing it does not change the
    loop). Returns None."""
    from nkihub.nki.isa.registers import register_alloc
    for i in dynamic_range(lower, upper, step):
        body_fun(register_alloc(i))


def while_loop(init, body_fun):
    """``r = init; while r != 0: r = body_fun(r)`` with ``r`` a VirtualRegister checked at run time
    before each iteration (the body gets a copy and returns the next condition register). Returns None."""
    from nkihub.nki.isa.registers import VirtualRegister, copy_of
    if not isinstance(init, VirtualRegister):
        raise TypeError(f"while_loop's init must be a nisa.VirtualRegister, got {type(init).__name__}")
    b = tracing.require("nl.while_loop")
    lid = b.new_loop("dynamic", 0, tracing.caller_loc())
    reg, k = init, 0
    while reg.value() != 0:
        b.loop_stack.append((lid, k))
        try:
            reg = body_fun(copy_of(reg))
        finally:
            b.loop_stack.pop()
        if not isinstance(reg, VirtualRegister):
            raise TypeError(f"while_loop's body_fun must return the next condition register, got "
                            f"{type(reg).__name__}")
        k += 1
    b.program.loops[lid] = dataclasses.replace(b.program.loops[lid], trip_count=k)


def program_id(axis=0) -> int:
    """The index of this program instance along launch-grid ``axis`` (0 outside a grid)."""
    b = tracing.require("nl.program_id")
    ids = b.program_ids
    return ids[axis] if axis < len(ids) else 0


def num_programs(axes=None):
    """Launch-grid size along ``axes`` (an int or tuple; all axes' product when None)."""
    b = tracing.require("nl.num_programs")
    grid = b.grid or (1,)
    if axes is None:
        n = 1
        for g in grid:
            n *= g
        return n
    if isinstance(axes, (tuple, list)):
        return tuple(grid[a] if a < len(grid) else 1 for a in axes)
    return grid[axes] if axes < len(grid) else 1


def program_ndim() -> int:
    """Number of launch-grid dims."""
    return len(tracing.require("nl.program_ndim").grid)
