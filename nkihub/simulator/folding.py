"""Index arithmetic for folding copies into their readers (``simulator.dataflow``): where a reader's access
pattern sits inside a copy's destination, and whether a folded operand keeps the layout the reader's bind
would otherwise see (numpy and BLAS pick summation orders and kernels from layouts, so a folded read must
not change them).

Strides here are in elements, one per dimension, partitions first.
"""
from __future__ import annotations

import functools

import numpy as np

from nkihub.simulator.program import AccessPattern


def sub_index(outer: AccessPattern, inner: AccessPattern):
    """``(start, axes)`` when every element of ``inner`` is an element of ``outer`` reached by walking
    ``outer``'s dimensions: ``start`` is the index in ``outer`` of inner's first element and ``axes[r]``
    the dimension of ``outer`` that inner's dimension ``r`` walks (None for a dimension of size 1); else
    None. ``outer`` has distinct elements (a destination), so an offset has at most one index."""
    if outer.tensor != inner.tensor:
        return None
    return _sub_index(outer.dims, inner.dims, inner.offset - outer.offset)


@functools.lru_cache(maxsize=16384)     # a kernel's tiles repeat a few geometries: cached by shape
def _sub_index(outer_dims: tuple, inner_dims: tuple, delta: int):
    """``sub_index`` of an inner pattern starting ``delta`` elements after the outer one."""
    start = [0] * len(outer_dims)
    for d in sorted(range(len(outer_dims)), key=lambda d: -outer_dims[d][0]):
        stride, n = outer_dims[d]
        if n > 1 and stride > 0 and delta > 0:
            start[d] = min(delta // stride, n - 1)
            delta -= start[d] * stride
    if delta:
        return None
    axes, used = [], set()
    for stride, m in inner_dims:
        if m == 1:
            axes.append(None)
            continue
        d = next((d for d, (s, n) in enumerate(outer_dims) if s == stride and n > 1 and d not in used), None)
        if d is None or start[d] + m > outer_dims[d][1]:
            return None
        used.add(d)
        axes.append(d)
    return tuple(start), tuple(axes)


@functools.lru_cache(maxsize=16384)     # pure in its tuples: cached by shape
def compose(strides: tuple, start: tuple, axes: tuple, skip: int = -1, skip_start: int = 0):
    """``(offset, strides)`` of a sub-box (``sub_index``'s ``start``, ``axes``) of a view with ``strides``;
    ``skip``: a dimension whose index counts from ``skip_start`` (a box of a plan cut along it)."""
    offset = sum((s - (skip_start if d == skip else 0)) * st for d, (s, st) in enumerate(zip(start, strides)))
    return offset, tuple(0 if a is None else strides[a] for a in axes)


@functools.lru_cache(maxsize=4096)     # a plan asks for a few layouts, over and over
def compact(strides: tuple, shape: tuple) -> tuple:
    """The element strides of ``astype``'s fresh array for a view of ``shape`` and ``strides`` (numpy's
    "K" order: the view's dimensions packed in the order of their strides)."""
    fake = np.lib.stride_tricks.as_strided(np.empty(1, np.float32), shape, tuple(4 * s for s in strides))
    return tuple(s // 4 for s in np.empty_like(fake).strides)


@functools.lru_cache(maxsize=16384)     # pure in its tuples: cached by shape
def same_layout(got: tuple, want: tuple, shape: tuple) -> bool:
    """Whether a view with strides ``got`` takes the numpy paths one with ``want`` takes: the same free
    strides (where a dimension has more than one element), and partitions at least as far apart as the
    free elements span, back to back exactly when ``want``'s are (a column's stride-1 test)."""
    if any(n > 1 and g != w for g, w, n in zip(got[1:], want[1:], shape[1:])):
        return False
    if not shape or shape[0] <= 1:
        return True
    span = 1 + sum(s * (n - 1) for s, n in zip(got[1:], shape[1:]))
    return got[0] == want[0] or (got[0] >= span and (got[0] == 1) == (want[0] == 1))
