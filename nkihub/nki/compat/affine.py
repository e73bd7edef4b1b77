"""Affine indices of the neuronxcc dialect: ``nl.arange``, ``nl.mgrid``, index expressions such as
``t[i * 128 + i_p, 2 * i_f + j]``, and ``mask=`` predicates such as ``(i * 128 + i_p < n)``.

An index expression is ``const + sum(coef[a] * g[a])`` over the axes ``a`` of a broadcast index grid;
``nl.arange(n)[:, None]`` is grid axis 0 of size n. Indexing a tensor with expressions builds a strided
view (numpy advanced-indexing layout); a mask restricts grid axes to ranges, which slices every operand
of the masked instruction the same way. Views whose unmasked extent leaves the tensor are *pending*
until a mask brings them in bounds.
"""
from __future__ import annotations

import operator

import numpy as np

from nkihub.nki.compat import masks
from nkihub.nki.tensor import NkiTensor, _oob
from nkihub.nki.unsupported import not_simulated

_CMP = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge, "eq": operator.eq,
        "ne": operator.ne}


class AffineExpr:
    """``const + sum(coefs[a] * index[a])`` over a grid of ``shape`` (broadcasting like numpy)."""

    __slots__ = ("shape", "coefs", "const")

    def __init__(self, shape, coefs, const=0):
        self.shape = tuple(int(s) for s in shape)
        self.coefs = {int(a): int(c) for a, c in coefs.items() if c}
        self.const = int(const)

    def __repr__(self) -> str:
        terms = " + ".join(f"{c}*i{a}" for a, c in sorted(self.coefs.items()))
        return f"AffineExpr({terms or '0'} + {self.const}, shape={self.shape})"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    # -- arithmetic -------------------------------------------------------------------------------------
    def _aligned(self, ndim: int) -> dict[int, int]:
        """Coefficients keyed by axis of a grid of ``ndim`` dims (right-aligned, as numpy broadcasts)."""
        shift = ndim - self.ndim
        return {a + shift: c for a, c in self.coefs.items()}

    def __add__(self, other):
        if isinstance(other, AffineExpr):
            shape = np.broadcast_shapes(self.shape, other.shape)
            coefs = self._aligned(len(shape))
            for a, c in other._aligned(len(shape)).items():
                coefs[a] = coefs.get(a, 0) + c
            return AffineExpr(shape, coefs, self.const + other.const)
        if isinstance(other, (int, np.integer)):
            return AffineExpr(self.shape, self.coefs, self.const + int(other))
        return NotImplemented

    __radd__ = __add__

    def __neg__(self):
        return AffineExpr(self.shape, {a: -c for a, c in self.coefs.items()}, -self.const)

    def __sub__(self, other):
        return self + (-other)

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, other):
        if isinstance(other, (int, np.integer)):
            k = int(other)
            return AffineExpr(self.shape, {a: c * k for a, c in self.coefs.items()}, self.const * k)
        return NotImplemented

    __rmul__ = __mul__

    def __getitem__(self, key):
        """``nl.arange(n)[:, None]``: place this expression's axes among new size-1 axes."""
        key = key if isinstance(key, tuple) else (key,)
        shape, coefs, old = [], {}, 0
        for k in key:
            if k is None:
                shape.append(1)
            elif k == slice(None):
                if old >= self.ndim:
                    raise IndexError(f"too many ':' for an index expression of {self.ndim} dims")
                if old in self.coefs:
                    coefs[len(shape)] = self.coefs[old]
                shape.append(self.shape[old])
                old += 1
            else:
                raise IndexError("index expressions take only ':' and None (e.g. nl.arange(n)[:, None])")
        if old != self.ndim:
            raise IndexError(f"an index expression of {self.ndim} dims needs {self.ndim} ':' entries")
        return AffineExpr(shape, coefs, self.const)

    # -- comparisons make mask predicates ----------------------------------------------------------------
    def _cmp(self, other, op):
        if isinstance(other, (AffineExpr, int, np.integer)):
            return Predicate(masks.absorb(((self - other, op),)))
        return NotImplemented

    def __lt__(self, o): return self._cmp(o, "lt")
    def __le__(self, o): return self._cmp(o, "le")
    def __gt__(self, o): return self._cmp(o, "gt")
    def __ge__(self, o): return self._cmp(o, "ge")
    def __eq__(self, o): return self._cmp(o, "eq")  # noqa: E704
    def __ne__(self, o): return self._cmp(o, "ne")  # noqa: E704
    __hash__ = object.__hash__

    def bounds(self, ranges) -> tuple[int, int]:
        """Smallest and largest value over grid axis ranges ``{axis: (lo, hi)}`` (hi exclusive)."""
        lo = hi = self.const
        for a, c in self.coefs.items():
            a_lo, a_hi = ranges.get(a, (0, self.shape[a]))
            if a_hi <= a_lo:
                continue
            lo += min(c * a_lo, c * (a_hi - 1))
            hi += max(c * a_lo, c * (a_hi - 1))
        return lo, hi


class Predicate:
    """A conjunction of ``expr <op> 0`` terms (``mask=`` and ``affine_select`` predicates)."""

    __slots__ = ("terms",)

    def __init__(self, terms):
        self.terms = tuple(terms)

    def __and__(self, other):
        if not isinstance(other, Predicate):
            return NotImplemented
        return Predicate(self.terms + other.terms)

    def __bool__(self):
        return masks.truth(self)   # True only as the left operand of an 'and' of comparisons

    def ranges(self) -> dict[int, tuple[int, int, int]]:
        """``{grid axis: (lo, hi, size)}``: each term must involve a single grid axis."""
        out: dict[int, tuple[int, int, int]] = {}
        for expr, op in self.terms:
            if len(expr.coefs) > 1:
                raise not_simulated(f"a mask term over several index axes ({expr!r} {op} 0)",
                                    "each mask term bounds one index axis; write one term per axis")
            if not expr.coefs:
                continue
            (axis, coef), = expr.coefs.items()
            size = expr.shape[axis]
            valid = [i for i in range(size) if _CMP[op](coef * i + expr.const, 0)]
            lo, hi = (valid[0], valid[-1] + 1) if valid else (0, 0)
            if valid and len(valid) != hi - lo:
                raise not_simulated(f"a mask term selecting a non-contiguous range ({expr!r} {op} 0)",
                                    "masks restrict each index axis to one contiguous range")
            key = axis + 16 - expr.ndim  # right-align: masks of different ndim refer to trailing axes
            old = out.get(key)
            out[key] = (max(lo, old[0]), min(hi, old[1]), size) if old else (lo, hi, size)
        return out


def arange(*args) -> AffineExpr:
    """``nl.arange(stop)`` / ``nl.arange(start, stop[, step])``: a 1-D index expression."""
    r = range(*[int(a) for a in args])
    return AffineExpr((len(r),), {0: r.step}, r.start)


class _MGrid:
    """``nl.mgrid[0:128, 0:512]``: one index expression per axis (``.p`` is axis 0, ``.x`` axis 1)."""

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        n = len(key)
        exprs = []
        for a, k in enumerate(key):
            r = range(k.start or 0, k.stop, k.step or 1)
            shape = [1] * n
            shape[a] = len(r)
            exprs.append(AffineExpr(shape, {a: r.step}, r.start))
        return _Grid(exprs)


class _Grid(tuple):
    """The tuple ``nl.mgrid`` returns, with NKI's axis names."""

    p = property(lambda self: self[0])
    x = property(lambda self: self[1])
    y = property(lambda self: self[2])
    z = property(lambda self: self[3])


mgrid = _MGrid()


class PendingView:
    """A view whose unmasked index range leaves its tensor: usable only by an instruction whose ``mask``
    brings it in bounds."""

    __slots__ = ("view", "checks")

    def __init__(self, view: NkiTensor, checks):
        self.view = view
        self.checks = checks  # [(expr aligned to the grid, axis offset, tensor dim, dim size)]

    shape = property(lambda self: self.view.shape)
    dtype = property(lambda self: self.view.dtype)

    def restrict(self, ranges: dict) -> NkiTensor:
        view = restrict(self.view, ranges)
        grid_nd = len(self.view.shape)
        for expr, first, d, size in self.checks:
            local = {a - first: (lo, hi) for a, (lo, hi) in _grid_ranges(ranges, grid_nd).items()
                     if 0 <= a - first < expr.ndim}
            lo, hi = expr.bounds(local)
            if lo < 0 or hi >= size:
                raise _oob(f"index expression {expr!r} spans {lo}..{hi} under its mask; dim {d} has size "
                           f"{size}", self.view)
        return view

    def to_ap(self):
        return self.restrict({}).to_ap()


def _grid_ranges(ranges: dict, ndim: int) -> dict:
    return {k - 16 + ndim: (lo, hi) for k, (lo, hi, _) in ranges.items() if 0 <= k - 16 + ndim < ndim}


def restrict(t, ranges: dict):
    """Slice tile/view ``t`` along the grid axes a mask restricts (axes whose size matches the mask's)."""
    if isinstance(t, PendingView):
        return t.restrict(ranges)
    if not ranges or not isinstance(t, NkiTensor):
        return t
    offset, dims = t.offset, list(t.dims)
    for k, (lo, hi, size) in ranges.items():
        a = k - 16 + t.ndim
        if 0 <= a < t.ndim and dims[a][1] == size:
            stride = dims[a][0]
            offset += lo * stride
            dims[a] = (stride, max(0, hi - lo))
    return NkiTensor(t.spec, offset, tuple(dims))


def resolve(x, mask=None):
    """An operand as an NkiTensor: restricted by ``mask`` (a Predicate) and bounds-checked."""
    ranges = mask.ranges() if isinstance(mask, Predicate) else {}
    if mask is not None and not isinstance(mask, Predicate):
        raise TypeError(f"mask= takes a predicate of index expressions (e.g. i_p < n), got {mask!r}")
    return restrict(x, ranges) if isinstance(x, (NkiTensor, PendingView)) else x


def _tile_index(t: NkiTensor, key: tuple, d: int):
    """``t[idx_tile, i_f]``: dim ``d`` of ``t`` indexed by the values of an on-chip tile of N indices
    ([N, 1] or [N]), one per partition, read when the kernel runs (the old dialect's indirect DMA,
    ``nl.load``/``nl.store``/``nisa.dma_copy`` pages). The view is ``t`` indexed as if by ``0`` on that
    axis, its first dim (N) being the indices: an indirect view with per-row offsets (``nki.indirect``)."""
    from nkihub.nki import indirect
    idx = key[d]
    if not idx.spec.on_chip:
        raise TypeError(f"an index tile must be on chip (load it into SBUF first); {idx.name} is in {idx.buffer}")
    if any(n != 1 for n in idx.shape[1:]):
        raise not_simulated(f"an index tile of shape {idx.shape}", "index tiles hold one index per partition "
                            "([N, 1] or [N])")
    if any(isinstance(k, NkiTensor) for i, k in enumerate(key) if i != d):
        raise not_simulated("indexing a tensor with two index tiles", "one dim may be indexed by a tile")
    if any(not isinstance(k, (AffineExpr, int, np.integer)) for k in key[:d]):
        raise not_simulated("an index tile after a slice", "the dims before an index tile take index "
                            "expressions or integers")
    rest = [k.ndim for k in key if isinstance(k, AffineExpr)]
    grid_nd = max([1, *rest])
    n = idx.shape[0]
    # the tile's indices run along grid axis 0 (its partition axis); a zero coefficient leaves the
    # address of each row to the run-time offset
    place = AffineExpr((n,) + (1,) * (grid_nd - 1), {}, 0)
    view = affine_index(t, key[:d] + (place,) + key[d + 1:])
    if isinstance(view, PendingView):
        raise _oob("an index expression beside an index tile leaves the tensor", view.view)
    if view.shape[0] != n:
        raise not_simulated(f"indexing {t.shape} with an index tile of {n} rows gives a view of shape "
                            f"{view.shape}", "the index tile's rows must be the first dim of the view")
    offsets = idx if idx.ndim == 2 else NkiTensor(idx.spec, idx.offset, (idx.dims[0], (1, 1)))
    return indirect.make(view, t, None, offsets, d)


def affine_index(t: NkiTensor, key):
    """``NkiTensor.index_hooks`` entry: index ``t`` with affine expressions (else NotImplemented)."""
    key = key if isinstance(key, tuple) else (key,)
    tiles = [d for d, k in enumerate(key) if isinstance(k, NkiTensor)]
    if tiles:
        return _tile_index(t, key, tiles[0])
    if not any(isinstance(k, AffineExpr) for k in key):
        return NotImplemented
    if any(k is Ellipsis or k is None for k in key):
        raise IndexError("'...' and None cannot be mixed with nl.arange/nl.mgrid indices")
    if len(key) > t.ndim:
        raise _oob(f"too many indices ({len(key)}) for a tensor of {t.ndim} dims {t.shape}", t)
    key = key + (slice(None),) * (t.ndim - len(key))
    adv = [d for d, k in enumerate(key) if not isinstance(k, slice)]
    exprs = {d: (key[d] if isinstance(key[d], AffineExpr) else AffineExpr((), {}, operator.index(key[d])))
             for d in adv}
    grid = np.broadcast_shapes(*(e.shape for e in exprs.values()))
    # numpy's layout: adjacent advanced indices keep their place, separated ones go first.
    adjacent = adv == list(range(adv[0], adv[-1] + 1))
    offset, basic_before, basic_after, checks = t.offset, [], [], []
    adv_dims = [[0, n] for n in grid]
    for d, k in enumerate(key):
        stride, size = t.dims[d]
        if isinstance(k, slice):
            start, stop, step = k.indices(size)
            offset += start * stride
            (basic_before if adjacent and d < adv[0] else basic_after).append(
                (stride * step, len(range(start, stop, step))))
            continue
        e = exprs[d]
        for a, c in e._aligned(len(grid)).items():
            adv_dims[a][0] += c * stride
        offset += e.const * stride
        lo, hi = e.bounds({})
        checks.append((e, len(grid) - e.ndim, d, size, lo < 0 or hi >= size))
    n_before = len(basic_before)
    dims = basic_before + [tuple(x) for x in adv_dims] + basic_after
    view = NkiTensor(t.spec, offset, tuple(dims))
    if any(bad for *_, bad in checks):
        return PendingView(view, [(e, n_before + first_a, d, size) for e, first_a, d, size, _ in checks])
    return view
