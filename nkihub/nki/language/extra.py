"""More of ``nki.language`` (AWS NKI 0.3+): var, all, expand_dims, constants in HBM, random numbers,
dropout, gather_flattened, load_transpose2d, no_reorder. Each returns a new tile (or a view)."""
from __future__ import annotations

import contextlib
import os

import numpy as np

from nkihub.nki import isa as nisa
from nkihub.nki import tracing
from nkihub.nki.language.elementwise import result_dtype, square, subtract
from nkihub.nki.language.memory import _dtname, ndarray, sbuf, shared_hbm
from nkihub.nki.language.reductions import _axes, mean, reduce
from nkihub.nki.ops import nki_op
from nkihub.nki.tensor import NkiTensor


def var(x, axis, dtype=None, keepdims=False) -> NkiTensor:
    """Population variance of tile x [P, F...] along free ``axis``: mean((x - mean(x))^2), fp32 math."""
    axes = _axes(x, axis)
    m = mean(x, axes, np.float32, keepdims=True)
    d = subtract(x, m, dtype=np.float32)
    return mean(square(d, dtype=np.float32), axes, result_dtype(x, dtype=dtype), keepdims)


@nki_op("logical_and")
def all(x, axis, dtype=None) -> NkiTensor:  # noqa: A001 (NKI's name)
    """1 where every element of tile x along free ``axis`` is nonzero, else 0."""
    return reduce("logical_and", x, axis, dtype)


def rms_norm(x, w, axis, n, epsilon=1e-6, dtype=None, compute_dtype=None) -> NkiTensor:
    """x * rsqrt(sum(x^2, axis) / n + epsilon) * w for tile x [P, F] and weights w ([1, F] or [P, F]
    tile); fp32 math."""
    from nkihub.nki.language.elementwise import multiply, rsqrt
    from nkihub.nki.language.memory import broadcast_to
    ss = reduce("add", square(x, dtype=np.float32), axis, np.float32, keepdims=True)
    inv = rsqrt(ss * (1.0 / n) + float(epsilon), dtype=np.float32)
    wt = broadcast_to(w, x.shape) if w.shape != x.shape else w
    return multiply(multiply(x, inv, dtype=np.float32), wt, dtype=result_dtype(x, dtype=dtype))


def expand_dims(x, axis) -> NkiTensor:
    """A view of ``x`` with a size-1 dim inserted at ``axis`` (no data moves)."""
    return x.expand_dim(axis)


def shared_constant(constant, dtype=None) -> NkiTensor:
    """An HBM tensor holding a host array known at trace time (shipped inside the Program); ``constant``
    is an array or the path of a ``.npy`` file."""
    b = tracing.require("nl.shared_constant")
    if isinstance(constant, (str, os.PathLike)):
        constant = np.load(constant)
    arr = np.asarray(constant, dtype=dtype if dtype is not None else None)
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)
    arr = np.ascontiguousarray(arr)
    spec = b.new_tensor(arr.shape, _dtname(arr.dtype), "shared_hbm", kind="constant", name="constant",
                        data=arr.tobytes())
    return NkiTensor(spec)


def shared_identity_matrix(n, dtype=np.uint8, dst=None) -> NkiTensor:
    """An n x n identity matrix in SBUF, as AWS NKI documents it (n <= 128 partitions; default dtype
    uint8), written into ``dst`` when given: a constant in HBM copied in by one DMA."""
    eye = shared_constant(np.eye(int(n)), dtype=dtype)
    out = dst if dst is not None else ndarray((int(n), int(n)), eye.dtype, buffer=sbuf, name="identity")
    nisa.dma_copy(dst=out, src=eye)
    return out


def rand(shape, dtype, buffer=None, name=None) -> NkiTensor:
    """A new tile of uniform random values in [0, 1) (random bits for integer dtypes)."""
    t = ndarray(shape, dtype, buffer=buffer or sbuf, name=name or "rand")
    nisa.emit("rand", "vector", {"dst": t}, {})
    return t


def random_seed(seed) -> None:
    """Seed the random generator (a number or a tile of seeds) for later rand/dropout."""
    nisa.set_rng_seed(seed)


def dropout(x, rate, dtype=None) -> NkiTensor:
    """x with each element zeroed with probability ``rate`` (kept elements are not rescaled)."""
    out = ndarray(x.shape, result_dtype(x, dtype=dtype), buffer=sbuf, name="dropout")
    nisa.dropout(out, x, rate)
    return out


def gather_flattened(data, indices, axis=-1, dtype=None) -> NkiTensor:
    """out[p, j...] = data[p, indices[p, j...]] with data's free axes flattened (GpSimd Engine)."""
    if axis not in (-1, data.ndim - 1):
        raise ValueError(f"gather_flattened: axis must be the last axis, got {axis}")
    out = ndarray(indices.shape, dtype or data.dtype, buffer=sbuf, name="gather")
    nisa.nc_n_gather(out, data, indices)
    return out


def load_transpose2d(src, dtype=None) -> NkiTensor:
    """Load the 2-D HBM view src [K, M] into a new SBUF tile [M, K] (a DMA transpose)."""
    if len(src.shape) != 2:
        raise ValueError(f"load_transpose2d: src must be 2-D, got shape {src.shape}")
    out = ndarray((src.shape[1], src.shape[0]), dtype or src.dtype, buffer=sbuf, name="load_t")
    nisa.dma_transpose(out, src)
    return out


def no_reorder():
    """A context inside which instructions keep program order (the simulator never reorders)."""
    return contextlib.nullcontext()


__all__ = ["all", "dropout", "expand_dims", "gather_flattened", "load_transpose2d", "no_reorder", "rand",
           "random_seed", "rms_norm", "shared_constant", "shared_identity_matrix", "var", "shared_hbm"]
