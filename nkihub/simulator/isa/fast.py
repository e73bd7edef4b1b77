"""Helpers for the ``bind`` column of the instruction table: what a row's bind uses to turn one
instruction and its operand views into a ready-to-run step for the fast engine (``simulator.replay``).

A bind receives the operands with a leading batch axis (``k`` instructions of one shape stacked; ``k``
is 1 when nothing is batched) and returns ``step(ctx)``. Everything that does not change between runs is
resolved at bind time: views, broadcasts, fp32 work arrays, the numpy functions of the ALU operators.
A step must give the bits the row's ``execute`` gives for each of its ``k`` instructions: same fp32
operations, in the same order, on arrays of the same memory layout (numpy's reductions and its SIMD
loops choose their summation order and code path from the layout).
"""
from __future__ import annotations

import math

import numpy as np

from nkihub.simulator.convert import F32, caster
from nkihub.simulator.isa.base import fit, store


class NoBind(Exception):
    """Raised by a bind for a case it does not compile: the engine runs the row's ``execute`` instead."""


def understands(ins, *names) -> None:
    """Raise NoBind when ``ins`` carries an attribute outside ``names``: a row's ``execute`` may learn
    a new attribute before its bind does, and then the execute must run."""
    extra = set(ins.attrs) - set(names)
    if extra:
        raise NoBind(f"attributes the bind does not know: {sorted(extra)}")


def strict_reshape(a: np.ndarray, shape) -> np.ndarray:
    """A view of ``a`` with ``shape``; raises NoBind where numpy would have to copy."""
    r = a.view()
    try:
        r.shape = tuple(shape)
    except AttributeError:
        raise NoBind(f"cannot view {a.shape} as {tuple(shape)}") from None
    return r


class Scratch:
    """Work arrays reused by every step of one plan on one thread, by (member shape, layout, dtype, slot):
    a step may use its arrays only while it runs."""

    def __init__(self):
        self._arrays: dict = {}
        self._casters: dict = {}
        self._stable: tuple = ()    # (first, end) byte addresses no instruction writes during a run
        self._holds: dict = {}      # id of a widening work array -> (its view, its source) last cast into it

    def stable(self, arrays) -> None:
        """Declare ``arrays`` (the kernel's input buffers no instruction writes) unchanged during a run:
        a work array widened from a slice of them keeps its values until the next run, so ``widened``
        skips casting the same slice into it again (the matmul tutorial reads each input tile from HBM in
        8-16 matmuls). Call before binding; ``forget`` when the inputs may change (each run)."""
        self._stable = tuple((_where(a)[0], _where(a)[0] + a.nbytes) for a in arrays)

    def forget(self) -> None:
        """What the work arrays hold is unknown from here (a run starts, its inputs reloaded)."""
        self._holds.clear()

    def widened(self, a: np.ndarray, slot: int):
        """``(buf, cast)``: an fp32 work array of stacked ``a``'s shape (``like``) and the cast refreshing
        it from ``a``, skipped when ``a`` lies in a ``stable`` array and ``buf`` still holds it. Every cast
        into a work array made here goes through this, so what each holds is known; nothing else writes
        them (binds only read their operands)."""
        buf = self.like(a, F32, slot)
        tag = (_where(buf), _where(a))
        cast = self.caster(buf, a, tag)
        flat = buf.base if buf.base is not None else buf
        key, holds = id(flat), self._holds
        lo = tag[1][0]
        hi = lo + _extent(a)
        if any(st < 0 for st in a.strides) or not any(first <= lo and hi <= end for first, end in self._stable):
            def cast_unknown():
                holds.pop(key, None)
                cast()
            return buf, cast_unknown

        def cast_once():
            if holds.get(key) != tag:
                cast()
                holds[key] = tag
        return buf, cast_once

    def caster(self, dst: np.ndarray, src: np.ndarray, key=None):
        """``convert.caster(dst, src)``, one per pair of views of the same memory: a long kernel reads one
        tile slice in many instructions, and each caster holds torch views (about 0.5 KB each). ``key``:
        ``(_where(dst), _where(src))`` when the caller has it."""
        key = key or (_where(dst), _where(src))
        cast = self._casters.get(key)
        if cast is None:
            cast = self._casters[key] = caster(dst, src)
        return cast

    def arrays(self) -> list:
        """The flat work arrays made so far."""
        return list(self._arrays.values())

    def _flat(self, key, n: int, dtype) -> np.ndarray:
        """A flat buffer of at least ``n`` elements for ``key``, grown by doubling: stacks of one member
        layout with any number of members share it, so a plan cut into windows (groups of many sizes)
        does not make one work array per size."""
        buf = self._arrays.get(key)
        if buf is None or buf.size < n:
            buf = self._arrays[key] = np.empty(max(n, 2 * buf.size if buf is not None else n), dtype)
        return buf

    def like(self, a: np.ndarray, dtype=F32, slot: int = 0) -> np.ndarray:
        """An array of stacked ``a``'s shape whose every member ``[j]`` is laid out as
        ``a[j].astype(dtype)`` lays it out (numpy's "K" order of the member; the batch axis outermost)."""
        member = np.empty_like(a[0], dtype=dtype)
        flat = self._flat((a.shape[1:], member.strides, np.dtype(dtype), slot), max(1, a.shape[0] * member.size),
                          dtype)
        return np.ndarray(a.shape, dtype, flat, 0, (member.size * member.itemsize, *member.strides))

    def new(self, shape, dtype=F32, slot: int = 0) -> np.ndarray:
        """A C-contiguous array of ``shape``."""
        shape = tuple(shape)
        n = math.prod(shape)
        flat = self._flat((shape[1:], "C", np.dtype(dtype), slot), max(1, n), dtype)
        return flat[:n].reshape(shape)


def _where(a: np.ndarray):
    return a.__array_interface__["data"][0], a.shape, a.strides, a.dtype


def _extent(a: np.ndarray) -> int:
    """Bytes from ``a``'s first element to past its last (non-negative strides)."""
    return 0 if a.size == 0 else sum((n - 1) * s for n, s in zip(a.shape, a.strides)) + a.itemsize


def reader(a: np.ndarray, sc: Scratch, slot: int):
    """``(arr, refresh)``: ``arr`` holds ``base.f32(a)`` once ``refresh()`` ran (``a`` itself when fp32, with
    ``refresh`` None; else a work array laid out as ``astype`` lays it out, ``Scratch.widened``). The
    caller only reads ``arr``."""
    if a.dtype == F32:
        return a, None
    return sc.widened(a, slot)


def refresher(*fns):
    """One ``refresh()`` running every non-None ``fn`` (None when there is none)."""
    fns = [f for f in fns if f is not None]
    if not fns:
        return None
    if len(fns) == 1:
        return fns[0]
    return lambda: [f() for f in fns]


def writer(dst: np.ndarray):
    """``write(value)`` equal to ``base.store(dst, value)`` for an fp32 value of dst's shape. The cast
    is bound to the value array last seen (steps mostly write the same work array every run)."""
    if dst.dtype.kind in "iub":
        return lambda v: store(dst, v)
    if dst.dtype == F32:
        return lambda v: np.copyto(dst, v, casting="unsafe")
    last = [None, None]

    def write(v):
        if v is not last[0]:
            last[0], last[1] = v, caster(dst, v)
        last[1]()
    return write


def fitted(a: np.ndarray, shape: tuple):
    """``get() -> base.fit(a, shape)``, resolved once when the fit is a view."""
    v = view_as(a, shape)
    if v is not None:
        return lambda: v
    return lambda: fit(a, shape)


def view_as(a: np.ndarray, shape: tuple) -> np.ndarray | None:
    """``base.fit(a, shape)`` when it is a view (equal, broadcast or a copy-free reshape), else None."""
    shape = tuple(shape)
    if a.shape == shape:
        return a
    try:
        return np.broadcast_to(a, shape)
    except ValueError:
        pass
    if a.size != math.prod(shape):
        return None
    try:
        return strict_reshape(a, shape)
    except NoBind:
        return None


def column(ins, src: dict, name: str, out_ndim: int, sc: Scratch, slot: int, default=None):
    """``elementwise.operand`` for stacked operands: ``(value, refresh)`` with value a [k, P, 1...] fp32
    column shaped to broadcast along the free axes of a [k, P, ...] result, or an fp32 immediate; value
    None when the operand is absent."""
    if name not in src:
        value = ins.attrs.get(name, default)
        return (None if value is None else np.float32(value)), None
    arr, refresh = reader(src[name], sc, slot)
    if out_ndim > 2 and arr.size == arr.shape[0] * arr.shape[1]:
        arr = strict_reshape(arr, (arr.shape[0], arr.shape[1], *([1] * (out_ndim - 2))))
    return arr, refresh
