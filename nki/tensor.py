"""``NkiTensor``: the handle a kernel holds for a tensor or a view of one (HBM, SBUF or PSUM).

A handle is a tensor name plus an access pattern (offset and ``(stride, size)`` per dim, in elements).
Indexing makes new views; arithmetic operators emit instructions through ``nki.language``.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from simulator.dtypes import as_dtype
from simulator.errors import KernelRuleError
from simulator.program import AccessPattern, TensorSpec
from nki import tracing


class NkiTensor:
    """A tensor of the kernel being traced, or a strided view of one."""

    __slots__ = ("spec", "offset", "dims")
    # Hook for the neuronxcc dialect's affine index objects (``nl.arange``): a callable
    # ``(tensor, key) -> NkiTensor | NotImplemented`` tried before plain indexing.
    index_hooks: list = []

    def __init__(self, spec: TensorSpec, offset: int = 0, dims=None):
        self.spec = spec
        self.offset = offset
        if dims is None:
            dims, stride = [], 1
            for size in reversed(spec.shape):
                dims.append((stride, size))
                stride *= size
            dims = tuple(reversed(dims))
        self.dims = tuple(dims)

    # -- description ---------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(s for _, s in self.dims)

    @property
    def dtype(self) -> np.dtype:
        return as_dtype(self.spec.dtype)

    @property
    def buffer(self) -> str:
        return self.spec.buffer

    @property
    def ndim(self) -> int:
        return len(self.dims)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def strides(self) -> tuple[int, ...]:
        return tuple(s for s, _ in self.dims)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"NkiTensor({self.name}, shape={self.shape}, dtype={self.spec.dtype}, buffer={self.buffer})"

    def __bool__(self):
        raise TypeError("an NkiTensor has no truth value at trace time; use nl.where or a mask")

    def to_ap(self) -> AccessPattern:
        """The access pattern of this view (what instructions record)."""
        return AccessPattern(self.name, self.offset, self.dims)

    def is_contiguous(self) -> bool:
        expected = 1
        for stride, size in reversed(self.dims):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    # -- views -----------------------------------------------------------------------------------------
    def __getitem__(self, key) -> "NkiTensor":
        for hook in NkiTensor.index_hooks:
            res = hook(self, key)
            if res is not NotImplemented:
                return res
        return self._index(key)

    def _index(self, key) -> "NkiTensor":
        if not isinstance(key, tuple):
            key = (key,)
        n_ell = sum(k is Ellipsis for k in key)
        if n_ell > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        n_real = sum(k is not None and k is not Ellipsis for k in key)
        if n_real > self.ndim:
            raise _oob(f"too many indices ({n_real}) for a tensor of {self.ndim} dims {self.shape}", self)
        if n_ell:
            i = key.index(Ellipsis)
            key = key[:i] + (slice(None),) * (self.ndim - n_real) + key[i + 1:]
        else:
            key = key + (slice(None),) * (self.ndim - n_real)
        offset, dims, d = self.offset, [], 0
        for k in key:
            if k is None:
                dims.append((0, 1))
                continue
            stride, size = self.dims[d]
            if isinstance(k, (int, np.integer)):
                k = int(k)
                kk = k + size if k < 0 else k
                if not 0 <= kk < size:
                    raise _oob(f"index {k} is out of bounds for dim {d} of size {size}", self)
                offset += kk * stride
                if d == 0 and self.spec.on_chip:
                    dims.append((stride, 1))  # a tile keeps its partition dim
            elif isinstance(k, slice):
                start, stop, step = _check_slice(k, size, d, self)
                offset += start * stride
                dims.append((stride * step, max(0, -(-(stop - start) // step))))
            else:
                raise TypeError(f"unsupported index {k!r} for an NkiTensor (use ints, slices, nl.ds, ...)")
            d += 1
        return NkiTensor(self.spec, offset, dims)

    def reshape(self, shape) -> "NkiTensor":
        """A view with another shape over the same contiguous elements."""
        shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            shape = tuple(self.size // known if s == -1 else s for s in shape)
        if math.prod(shape) != self.size:
            raise _oob(f"cannot reshape {self.shape} ({self.size} elements) to {shape}", self)
        if not self.is_contiguous():
            raise _oob(f"reshape needs a contiguous view; {self.shape} with strides {self.strides} is not", self)
        dims, stride = [], 1
        for size in reversed(shape):
            dims.append((stride, size))
            stride *= size
        return NkiTensor(self.spec, self.offset, tuple(reversed(dims)))

    # -- writes ------------------------------------------------------------------------------------------
    def __setitem__(self, key, value) -> None:
        from nki.language import _assign
        _assign(self[key], value)

    # -- arithmetic ------------------------------------------------------------------------------------
    def _bin(self, other, name, reverse=False):
        import nki.language as nl
        fn = getattr(nl, name)
        return fn(other, self) if reverse else fn(self, other)

    def __add__(self, o): return self._bin(o, "add")
    def __radd__(self, o): return self._bin(o, "add", True)
    def __sub__(self, o): return self._bin(o, "subtract")
    def __rsub__(self, o): return self._bin(o, "subtract", True)
    def __mul__(self, o): return self._bin(o, "multiply")
    def __rmul__(self, o): return self._bin(o, "multiply", True)
    def __truediv__(self, o): return self._bin(o, "divide")
    def __rtruediv__(self, o): return self._bin(o, "divide", True)
    def __pow__(self, o): return self._bin(o, "power")
    def __lt__(self, o): return self._bin(o, "less")
    def __le__(self, o): return self._bin(o, "less_equal")
    def __gt__(self, o): return self._bin(o, "greater")
    def __ge__(self, o): return self._bin(o, "greater_equal")
    def __and__(self, o): return self._bin(o, "bitwise_and")
    def __or__(self, o): return self._bin(o, "bitwise_or")
    def __xor__(self, o): return self._bin(o, "bitwise_xor")

    def __neg__(self):
        import nki.language as nl
        return nl.negative(self)

    def __iadd__(self, o):
        import nki.language as nl
        _inplace(self, nl.add, o)
        return self

    def __isub__(self, o):
        import nki.language as nl
        _inplace(self, nl.subtract, o)
        return self

    def __imul__(self, o):
        import nki.language as nl
        _inplace(self, nl.multiply, o)
        return self

    __hash__ = object.__hash__
    __eq__ = object.__eq__  # identity: tensors are graph handles, nl.equal compares values


def _inplace(t: NkiTensor, fn, other) -> None:
    from nki.language import _assign
    _assign(t, fn(t, other))


def _oob(message: str, t: NkiTensor) -> KernelRuleError:
    return KernelRuleError("index-out-of-bounds", message, operand=t.name, shape=t.shape, dtype=t.spec.dtype,
                           buffer=t.buffer, loc=tracing.caller_loc())


def _check_slice(k: slice, size: int, d: int, t: NkiTensor) -> tuple[int, int, int]:
    step = 1 if k.step is None else operator.index(k.step)
    if step == 0:
        raise ValueError("slice step cannot be zero")
    if step < 0:
        start, stop, step = k.indices(size)
        return start, stop, step
    start = 0 if k.start is None else operator.index(k.start)
    stop = size if k.stop is None else operator.index(k.stop)
    start = start + size if start < 0 else start
    stop = stop + size if stop < 0 else stop
    if start < 0 or stop > size or start > stop:
        raise _oob(f"slice {start}:{stop} is out of bounds for dim {d} of size {size}", t)
    return start, stop, step
