"""``NkiTensor``: the handle a kernel holds for a tensor or a view of one (HBM, SBUF or PSUM).

A handle is a tensor name plus an access pattern (offset and ``(stride, size)`` per dim, in elements).
Indexing makes new views; arithmetic operators emit instructions through ``nki.language``.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from nkihub.simulator.dtypes import PACKED, as_dtype, dtype_name
from nkihub.simulator.errors import KernelRuleError
from nkihub.simulator.program import AccessPattern, TensorSpec
from nkihub.nki import tracing


class NkiTensor:
    """A tensor of the kernel being traced, or a strided view of one."""

    __slots__ = ("spec", "offset", "dims", "indirect")
    # Hook for the neuronxcc dialect's affine index objects (``nl.arange``): a callable
    # ``(tensor, key) -> NkiTensor | NotImplemented`` tried before plain indexing.
    index_hooks: list = []
    # Hook for the neuronxcc dialect's statement-wide masks: ``(nl function, args) -> tile`` runs the
    # arithmetic operators (``a + b``) so that a later ``mask=`` can cover them (nki.compat.deferred).
    call_hook = None

    def __init__(self, spec: TensorSpec, offset: int = 0, dims=None):
        self.spec = spec
        self.offset = offset
        if dims is None:
            dims = AccessPattern.row_major(spec.name, spec.shape).dims
        self.dims = tuple(dims)
        self.indirect = None   # an nki.indirect.Indirect for views addressed through run-time offsets

    # -- description ---------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(s for _, s in self.dims)

    @property
    def dtype(self):
        """The numpy dtype, or for the packed MX dtypes their name (``nl.float8_e4m3fn_x4`` is a name,
        as in AWS NKI: numpy has no such type)."""
        return self.spec.dtype if self.spec.dtype in PACKED else as_dtype(self.spec.dtype)

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
        return self.spec.np_dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"NkiTensor({self.name}, shape={self.shape}, dtype={self.spec.dtype}, buffer={self.buffer})"

    def __bool__(self) -> bool:
        # A handle is a Python object: ``if params.bias:`` tests that an optional tensor was given, as
        # production kernels written for AWS NKI do (values are compared with nl.greater & co).
        return True

    def to_ap(self) -> AccessPattern:
        """The access pattern of this view (what instructions record). A view of a directly allocated
        tensor (nki.placement) becomes an access pattern of its physical storage."""
        if self.indirect is not None:
            from nkihub.nki import indirect
            raise indirect.refuse(self)
        if getattr(self.spec, "placement", None) is not None:
            from nkihub.nki.placement import view_ap
            return view_ap(self.spec, self.offset, self.dims)
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
        if self.indirect is not None:
            from nkihub.nki import indirect
            raise indirect.refuse(self)
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
                if d == 0 and self.spec.on_chip and stride == self.spec.free_size:
                    dims.append((stride, 1))  # a tile keeps its partition dim (not a leading block dim)
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
        return NkiTensor(self.spec, self.offset, AccessPattern.row_major(self.name, shape).dims)

    # -- views of the AWS NKI 0.3+ tensor API ---------------------------------------------------------------
    def _dim(self, dim: int) -> int:
        d = operator.index(dim)
        d = d + self.ndim if d < 0 else d
        if not 0 <= d < self.ndim:
            raise ValueError(f"dim {dim} is out of range for a tensor of {self.ndim} dims {self.shape}")
        return d

    def _with(self, dims, offset=None) -> "NkiTensor":
        if self.indirect is not None:
            from nkihub.nki import indirect
            raise indirect.refuse(self)
        return NkiTensor(self.spec, self.offset if offset is None else offset, tuple(dims))

    def permute(self, dims) -> "NkiTensor":
        """A view with dims reordered: ``t.permute((0, 2, 1))`` (no data moves)."""
        order = [self._dim(d) for d in dims]
        if sorted(order) != list(range(self.ndim)):
            raise ValueError(f"dims {tuple(dims)} is not a permutation of {self.ndim} dims")
        return self._with([self.dims[d] for d in order])

    def select(self, dim, index) -> "NkiTensor":
        """The view at ``index`` along ``dim``, with that dim removed."""
        d = self._dim(dim)
        stride, size = self.dims[d]
        i = operator.index(index) + (size if index < 0 else 0)
        if not 0 <= i < size:
            raise _oob(f"index {index} is out of bounds for dim {d} of size {size}", self)
        return self._with(self.dims[:d] + self.dims[d + 1:], self.offset + i * stride)

    def slice(self, dim, start, end, step=1) -> "NkiTensor":
        """Elements ``start:end:step`` along ``dim``."""
        d = self._dim(dim)
        key = [slice(None)] * self.ndim
        key[d] = slice(start, end, step)
        return self._index(tuple(key))

    def broadcast(self, dim, size) -> "NkiTensor":
        """Repeat a size-1 ``dim`` ``size`` times (stride 0)."""
        d = self._dim(dim)
        if self.dims[d][1] != 1:
            raise ValueError(f"broadcast: dim {d} has size {self.dims[d][1]}, not 1")
        return self._with(self.dims[:d] + ((0, int(size)),) + self.dims[d + 1:])

    def expand_dim(self, dim) -> "NkiTensor":
        """Insert a size-1 dim at ``dim``."""
        d = operator.index(dim)
        d = d + self.ndim + 1 if d < 0 else d
        return self._with(self.dims[:d] + ((0, 1),) + self.dims[d:])

    def squeeze_dim(self, dim) -> "NkiTensor":
        """Remove a size-1 ``dim``."""
        d = self._dim(dim)
        if self.dims[d][1] != 1:
            raise ValueError(f"squeeze_dim: dim {d} has size {self.dims[d][1]}, not 1")
        return self._with(self.dims[:d] + self.dims[d + 1:])

    def reshape_dim(self, dim, shape) -> "NkiTensor":
        """Split ``dim`` into ``shape`` (row-major inside that dim)."""
        d = self._dim(dim)
        stride, size = self.dims[d]
        shape = tuple(int(x) for x in shape)
        if math.prod(shape) != size:
            raise ValueError(f"reshape_dim: {shape} does not hold the {size} elements of dim {d}")
        split, st = [], stride
        for n in reversed(shape):
            split.append((st, n))
            st *= n
        return self._with(self.dims[:d] + tuple(reversed(split)) + self.dims[d + 1:])

    def flatten_dims(self, start_dim, end_dim) -> "NkiTensor":
        """Merge dims ``start_dim..end_dim`` (inclusive) into one; they must be contiguous in each other."""
        a, b = self._dim(start_dim), self._dim(end_dim)
        for (s0, _), (s1, n1) in zip(self.dims[a:b], self.dims[a + 1:b + 1]):
            if s0 != s1 * n1:
                raise ValueError(f"flatten_dims: dims {a}..{b} of strides {self.strides} are not contiguous")
        merged = (self.dims[b][0], math.prod(n for _, n in self.dims[a:b + 1]))
        return self._with(self.dims[:a] + (merged,) + self.dims[b + 1:])

    def ap(self, pattern, offset=0, scalar_offset=None, vector_offset=None, indirect_dim=None, dtype=None):
        """An explicit access pattern over this tensor: ``pattern`` = [[stride, size], ...] in elements from
        this view's start plus ``offset``. With ``dtype`` the storage is reinterpreted first and the
        pattern and offset count elements of ``dtype``. ``scalar_offset`` / ``vector_offset`` with
        ``indirect_dim`` make an indirect view, addressed at run time (see ``nki.indirect``), for
        ``nisa.dma_copy``."""
        base = self
        if dtype is not None and dtype_name(_dtype_arg(dtype)) != self.spec.dtype:
            base = self._reinterpret(dtype_name(_dtype_arg(dtype)), "ap(dtype=...)")
        view = base._with([(int(st), int(n)) for st, n in pattern], base.offset + int(offset))
        if scalar_offset is not None or vector_offset is not None:
            from nkihub.nki import indirect   # the dynamic part is only known at run time: no static bounds check
            return indirect.make(view, base, scalar_offset, vector_offset, indirect_dim)
        lo, hi = view.to_ap().extent()
        if lo < 0 or hi > view.spec.size:
            raise _oob(f"access pattern {list(map(list, view.dims))} at offset {view.offset} reaches elements "
                       f"{lo}..{hi - 1} of a tensor of {view.spec.size}", self)
        return view

    def view(self, dtype) -> "NkiTensor":
        """The same bytes as ``dtype`` (no data moves): the innermost dim (contiguous) is rescaled by the
        ratio of element sizes, e.g. a [128, 64] float32 tile viewed as bfloat16 is [128, 128]."""
        name = dtype_name(_dtype_arg(dtype))
        if name == self.spec.dtype:
            return self
        base = self._reinterpret(name, "view")
        old, new = self.itemsize, base.itemsize
        dims = [(st * old // new, n) for st, n in self.dims]
        if dims and self.dims[-1][0] == 1:
            size = self.dims[-1][1] * old
            if size % new:
                raise _oob(f"view({name}): the innermost dim holds {size} bytes, not a whole number of "
                           f"{new}-byte elements", self)
            dims[-1] = (1, size // new)
        elif old < new:
            raise _oob(f"view({name}): a wider dtype needs a contiguous innermost dim", self)
        return base._with(dims)

    def _reinterpret(self, name: str, what: str) -> "NkiTensor":
        """This view's start over the storage reinterpreted as dtype ``name`` (an alias tensor)."""
        b = tracing.require(f"NkiTensor.{what}")
        try:
            spec = b.program.add_alias(self.spec.name, name, b.fresh_name(f"{self.spec.name}_{name}"))
        except ValueError as exc:
            raise _oob(f"{what}: {exc}", self) from None
        start = self.offset * self.itemsize
        if start % spec.np_dtype.itemsize:
            raise _oob(f"{what}: the view starts at byte {start}, not a multiple of {name}'s "
                       f"{spec.np_dtype.itemsize} bytes", self)
        return NkiTensor(spec, start // spec.np_dtype.itemsize, ())

    # -- the neuronxcc dialect's tensor methods ---------------------------------------------------------------
    def broadcast_to(self, shape) -> "NkiTensor":
        """A new tile of ``shape`` repeating this one along its size-1 dims: the neuronxcc lowering
        (``compat.language.partition_broadcast``: a one-partition fp32 tile is a Tensor Engine matmul)."""
        from nkihub.nki.compat.language import partition_broadcast
        return partition_broadcast(self, shape)

    def expand_dims(self, axis) -> "NkiTensor":
        """Insert a size-1 dim at ``axis``."""
        return self.expand_dim(axis)

    def astype(self, dtype) -> "NkiTensor":
        """A copy of this tile cast to ``dtype``."""
        import nkihub.nki.language as nl
        return nl.copy(self, dtype=dtype)

    def assert_shape(self, shape) -> "NkiTensor":
        """Check this tensor's shape (a kernel-rule error if it differs); returns self."""
        if tuple(shape) != self.shape:
            raise _oob(f"expected shape {tuple(shape)}, got {self.shape}", self)
        return self

    # -- writes ------------------------------------------------------------------------------------------
    def __setitem__(self, key, value) -> None:
        from nkihub.nki.language import _assign
        _assign(self[key], value)

    # -- arithmetic ------------------------------------------------------------------------------------
    def _bin(self, other, name, reverse=False):
        import nkihub.nki.language as nl
        fn = getattr(nl, name)
        args = (other, self) if reverse else (self, other)
        return NkiTensor.call_hook(fn, args) if NkiTensor.call_hook is not None else fn(*args)

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
        import nkihub.nki.language as nl
        return nl.negative(self)

    def __iadd__(self, o):
        import nkihub.nki.language as nl
        _inplace(self, nl.add, o)
        return self

    def __isub__(self, o):
        import nkihub.nki.language as nl
        _inplace(self, nl.subtract, o)
        return self

    def __imul__(self, o):
        import nkihub.nki.language as nl
        _inplace(self, nl.multiply, o)
        return self

    __hash__ = object.__hash__
    __eq__ = object.__eq__  # identity: tensors are graph handles, nl.equal compares values


def _inplace(t: NkiTensor, fn, other) -> None:
    """``t <op>= other``: one in-place engine instruction for an on-chip tile (so ``acc += x`` inside an
    affine_range is an associative reduction), else compute then assign."""
    from nkihub.nki import isa as nisa
    from nkihub.nki.language import _assign
    if fn._nki_op == "add" and _accumulate_matmul(t, other):
        return
    if t.spec.on_chip and (not isinstance(other, NkiTensor) or other.spec.on_chip):
        if isinstance(other, NkiTensor) and other.shape == t.shape:
            nisa.tensor_tensor(t, t, other, fn)
            return
        if not isinstance(other, NkiTensor) or (other.shape[0] == t.shape[0] and other.size == other.shape[0]):
            nisa.tensor_scalar(t, t, fn, other)
            return
    _assign(t, fn(t, other))


def _accumulate_matmul(t: NkiTensor, other) -> bool:
    """``psum_tile += nisa.nc_matmul(a, b)`` (the neuronxcc idiom): retarget the matmul that just produced
    ``other`` to accumulate into ``t`` instead, as the compiler does; True when done. Into a PSUM region
    nothing wrote yet the matmul starts the accumulation group (overwrites), as the compiler's first
    matmul of a group does, so an uninitialised ``nl.ndarray(..., buffer=nl.psum)`` accumulates from zero."""
    from nkihub.simulator.isa import ACCUMULATE, MATMUL, opdef
    from nkihub.simulator.validate import check_instruction
    b = tracing.current()
    if b is None or not isinstance(other, NkiTensor) or t.buffer != "psum" or not b.program.instructions:
        return False
    last = b.program.instructions[-1]
    cats = opdef(last.opcode).categories
    if not (MATMUL in cats and ACCUMULATE in cats) or last.dst.get("dst") != other.to_ap() \
            or other.shape != t.shape:
        return False
    last.dst = {"dst": t.to_ap()}
    b.forget_psum(other.name)
    last.attrs["accumulate"] = b.psum_written(t.to_ap())
    check_instruction(last, b.program, b.target)
    b._track_psum(last)
    b.forget_psum(other.name)
    return True


def _dtype_arg(dtype):
    """A dtype argument as this machine names it (torch dtypes included)."""
    from nkihub.nki.dtypes import dtype_of
    return dtype if isinstance(dtype, str) else dtype_of(dtype)


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
