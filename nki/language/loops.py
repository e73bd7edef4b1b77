"""Loops and SPMD ids of ``nki.language``. Loops unroll at trace time; affine_range iterations must be
independent (checked), sequential_range may carry values, static_range is plain unrolling."""
from __future__ import annotations

import builtins

from nki import tracing


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
