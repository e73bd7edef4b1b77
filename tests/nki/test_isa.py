"""``nki.isa`` (nisa), destination first, in kernels against numpy; the enums and get_nc_version."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl

F32, BF16 = np.float32, ml_dtypes.bfloat16
RNG = np.random.default_rng(7)


def rand(*shape, dtype=F32, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape).astype(F32).astype(dtype)


def tile_kernel(body, out_shape, out_dtype=F32):
    """A kernel loading every input into SBUF, running ``body(*tiles) -> tile`` and storing the result."""
    @nki.jit
    def kernel(*xs):
        tiles = [nl.load(x) for x in xs]
        res = body(*tiles)
        out = nl.ndarray(out_shape, out_dtype, buffer=nl.shared_hbm)
        nl.store(out, res)
        return out
    return kernel


def sb(shape, dtype=F32):
    return nl.ndarray(shape, dtype, buffer=nl.sbuf)


def test_nc_matmul_accumulates_by_default_after_the_first_write():
    a, b = rand(256, 32, dtype=BF16), rand(256, 64, dtype=BF16)

    @nki.jit
    def kernel(a, b):
        p = nl.ndarray((32, 64), nl.float32, buffer=nl.psum)
        for k in nl.affine_range(2):
            nisa.nc_matmul(p, nl.load(a[k * 128:(k + 1) * 128]), nl.load(b[k * 128:(k + 1) * 128]))
        out = nl.ndarray((32, 64), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.copy(p))
        return out

    np.testing.assert_allclose(kernel(a, b), a.astype(np.float64).T @ b.astype(np.float64), rtol=1e-5, atol=1e-4)
    flags = [i.attrs["accumulate"] for i in kernel.trace(a, b).instructions if i.opcode == "nc_matmul"]
    assert flags == [False, True]


def test_nc_matmul_accumulate_false_overwrites():
    a, b = rand(16, 8, dtype=BF16), rand(16, 8, dtype=BF16)

    def body(ta, tb):
        p = nl.ndarray((8, 8), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(p, ta, tb)
        nisa.nc_matmul(p, ta, tb, accumulate=False)
        return nl.copy(p)

    np.testing.assert_allclose(tile_kernel(body, (8, 8))(a, b), a.astype(F32).T @ b.astype(F32), rtol=1e-6)


@pytest.mark.parametrize("engine,shape", [(nisa.engine.tensor, (128, 96)), (nisa.engine.vector, (32, 16))])
def test_nc_transpose(engine, shape):
    x = rand(*shape)

    def body(t):
        buf = nl.psum if engine is nisa.engine.tensor else nl.sbuf
        d = nl.ndarray(shape[::-1], nl.float32, buffer=buf)
        nisa.nc_transpose(d, t, engine=engine)
        return nl.copy(d)

    np.testing.assert_array_equal(tile_kernel(body, shape[::-1])(x), x.T)


def test_activation_with_scale_bias_and_reduce():
    x, bias = rand(16, 32), rand(16, 1)

    @nki.jit
    def kernel(x, bias):
        y, r = sb((16, 32)), sb((16, 1))
        nisa.activation(y, nl.exp, nl.load(x), bias=nl.load(bias), scale=0.5, reduce_op=nl.add, reduce_res=r,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        out = nl.ndarray((16, 33), nl.float32, buffer=nl.shared_hbm)
        nl.store(out[:, 0:32], y)
        nl.store(out[:, 32:33], r)
        return out

    got = kernel(x, bias)
    want = np.exp(x * F32(0.5) + bias)
    np.testing.assert_allclose(got[:, :32], want, rtol=1e-6)
    np.testing.assert_allclose(got[:, 32], want.sum(1), rtol=1e-5)


def test_activation_reduce_accumulates_with_reduce_cmd_reduce():
    x = rand(8, 4)

    def body(t):
        y, r = sb((8, 4)), sb((8, 1))
        nisa.activation(y, nl.copy, t, reduce_res=r, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activation(y, nl.copy, t, reduce_res=r, reduce_cmd=nisa.reduce_cmd.reduce)
        return r

    np.testing.assert_allclose(tile_kernel(body, (8, 1))(x)[:, 0], 2 * x.sum(1), rtol=1e-5)


def test_tensor_tensor_and_tensor_scalar():
    a, b, c = rand(8, 16), rand(8, 16), rand(8, 1)

    def body(ta, tb, tc):
        d = sb((8, 16))
        nisa.tensor_tensor(d, ta, tb, op=nl.multiply)
        e = sb((8, 16))
        nisa.tensor_scalar(e, d, nl.add, tc, op1=nl.maximum, operand1=0.0)
        f = sb((8, 16))
        nisa.tensor_scalar(f, e, nl.subtract, 1.0, reverse0=True, engine=nisa.engine.gpsimd)
        return f

    np.testing.assert_array_equal(tile_kernel(body, (8, 16))(a, b, c), F32(1) - np.maximum(a * b + c, 0))


def test_tensor_reduce_and_negate():
    x = rand(8, 4, 6)

    def body(t):
        d = sb((8, 4))
        nisa.tensor_reduce(d, nl.maximum, t, axis=2, negate=True)
        return d

    np.testing.assert_array_equal(tile_kernel(body, (8, 4))(x), -x.max(2))


def test_tensor_copy_casts_round_to_nearest_even():
    x = rand(8, 16, lo=-300, hi=300)

    def body(t):
        d = sb((8, 16), nl.bfloat16)
        nisa.tensor_copy(d, t, engine=nisa.engine.scalar)
        return d

    got = tile_kernel(body, (8, 16), BF16)(x)
    assert (got.view(np.int16) == x.astype(BF16).view(np.int16)).all()


def test_memset_iota_and_affine_select_make_a_causal_mask():
    x = rand(8, 8)

    def body(t):
        idx = sb((8, 8), nl.int32)
        nisa.iota(idx, [[1, 8]], offset=0, channel_multiplier=-1)     # idx[p, j] = j - p
        mask = sb((8, 8))
        nisa.affine_select(mask, [[-1, 8]], 1, t, -1e4, cmp_op=nl.greater_equal)  # keep where p - j >= 0
        z = sb((8, 8))
        nisa.memset(z, 0.0)
        both = sb((8, 8))
        nisa.tensor_tensor(both, mask, z, nl.add)
        return nl.add(both, nl.copy(idx, dtype=nl.float32))

    p, j = np.arange(8)[:, None], np.arange(8)[None, :]
    want = np.where(p >= j, x, F32(-1e4)) + (j - p)
    np.testing.assert_array_equal(tile_kernel(body, (8, 8))(x), want.astype(F32))


def test_dma_copy_between_hbm_tensors_and_with_a_cast():
    x = rand(4, 8)

    @nki.jit
    def kernel(x):
        out = nl.ndarray((4, 8), nl.bfloat16, buffer=nl.shared_hbm)
        t = sb((4, 8), nl.bfloat16)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=out, src=t)
        return out

    assert (kernel(x).view(np.int16) == x.astype(BF16).view(np.int16)).all()


def test_bn_stats_and_bn_aggr_give_mean_and_variance():
    x = rand(16, 1024)

    def body(t):
        stats = sb((16, 12))
        for c in range(2):
            nisa.bn_stats(stats[:, c * 6:(c + 1) * 6], t[:, c * 512:(c + 1) * 512])
        mv = sb((16, 2))
        nisa.bn_aggr(mv, stats)
        return mv

    got = tile_kernel(body, (16, 2))(x)
    np.testing.assert_allclose(got, np.stack([x.mean(1), x.var(1)], 1), rtol=1e-4, atol=1e-6)


def test_reciprocal():
    x = rand(8, 8, lo=0.5, hi=4)

    def body(t):
        d = sb((8, 8))
        nisa.reciprocal(d, t)
        return d

    np.testing.assert_array_equal(tile_kernel(body, (8, 8))(x), F32(1) / x)


def test_enums_and_nc_version():
    assert {e.name for e in nisa.engine} >= {"tensor", "vector", "scalar", "gpsimd", "unknown"}
    assert {e.name for e in nisa.reduce_cmd} >= {"idle", "reset", "reduce", "reset_reduce"}
    assert {e.name for e in nisa.nc_version} >= {"gen2", "gen3", "gen4"}
    assert nisa.get_nc_version() is nisa.nc_version.gen2 or nisa.get_nc_version() in set(nisa.nc_version)
    seen = []

    @nki.jit
    def kernel(x):
        seen.append(nisa.get_nc_version())
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x))
        return out

    for target in ("trn1", "trn2", "trn3"):
        kernel.trace(rand(2, 2), target=target)
    assert seen == [nisa.nc_version.gen2, nisa.nc_version.gen3, nisa.nc_version.gen4]


def test_nisa_needs_tiles():
    def body(t):
        nisa.tensor_copy(sb((2, 2)), [[1, 2], [3, 4]])
        return t

    with pytest.raises(TypeError, match="'src' must be a tile"):
        tile_kernel(body, (2, 2))(rand(2, 2))
