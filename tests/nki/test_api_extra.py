"""The instructions and nl functions added for the rest of the documented API, each against numpy."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import nki
import nki.isa as nisa
import nki.language as nl
from nkihub.simulator.errors import KernelRuleError

SETTINGS = settings(max_examples=8, deadline=None)
shapes = st.tuples(st.sampled_from([1, 4, 32]), st.sampled_from([8, 16, 40]))


def _arr(seed, shape, lo=-2.0, hi=2.0):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(np.float32)


def _run(body, *arrays, out_shape, out_dtype=np.float32):
    """Run ``body(tiles..., out_tile)`` on SBUF copies of ``arrays``; returns the out tile."""
    def body_of(*ins):
        tiles = []
        for a in ins:
            t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            tiles.append(t)
        res = nl.ndarray(out_shape, out_dtype, buffer=nl.sbuf)
        body(*tiles, res)
        out = nl.ndarray(out_shape, out_dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=res)
        return out
    # nki.jit binds tensors by name: one kernel per arity.
    kernel = {1: lambda a: body_of(a), 2: lambda a, b: body_of(a, b),
              3: lambda a, b, c: body_of(a, b, c)}[len(arrays)]
    kernel = nki.jit(kernel)
    return kernel(*arrays)


@SETTINGS
@given(shapes, st.integers(0, 100))
def test_tensor_tensor_scan(shape, seed):
    a, b = _arr(seed, shape, 0, 1), _arr(seed + 1, shape)
    init = _arr(seed + 2, (shape[0], 1))
    out = _run(lambda x, y, i, o: nisa.tensor_tensor_scan(o, x, y, i, op0=np.multiply, op1=np.add),
               a, b, init, out_shape=shape)
    ref, prev = np.empty_like(a), init[:, 0]
    for j in range(shape[1]):
        prev = a[:, j] * prev + b[:, j]
        ref[:, j] = prev
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@SETTINGS
@given(shapes, st.integers(0, 100))
def test_scalar_tensor_tensor_and_tensor_scalar_reduce(shape, seed):
    a, b, c = _arr(seed, shape), _arr(seed + 1, shape), _arr(seed + 2, (shape[0], 1))
    out = _run(lambda x, y, col, o: nisa.scalar_tensor_tensor(o, x, np.subtract, col, np.multiply, y),
               a, b, c, out_shape=shape)
    np.testing.assert_allclose(out, (a - c) * b, rtol=1e-5, atol=1e-6)

    def body(x, o):
        red = nl.ndarray((shape[0], 1), np.float32, buffer=nl.sbuf)
        full = nl.ndarray(shape, np.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(dst=full, data=x, op0=np.multiply, operand0=2.0, reduce_op=np.add,
                                  reduce_res=red)
        nisa.tensor_copy(o, red)
    red = _run(body, a, out_shape=(shape[0], 1))
    np.testing.assert_allclose(red[:, 0], (2 * a).sum(1), rtol=1e-5, atol=1e-4)


@SETTINGS
@given(shapes, st.integers(0, 100))
def test_partition_reduce_select_reduce_range_select(shape, seed):
    a, b = _arr(seed, shape), _arr(seed + 1, shape)
    out = _run(lambda x, o: nisa.tensor_partition_reduce(o, np.add, x), a, out_shape=(1, shape[1]))
    np.testing.assert_allclose(out[0], a.sum(0), rtol=1e-5, atol=1e-5)
    pred = (a > 0).astype(np.uint8)
    out = _run(lambda p, x, o: nisa.select_reduce(o, p, x, -1.0), pred, b, out_shape=shape)
    np.testing.assert_allclose(out, np.where(a > 0, b, -1.0))
    lo = np.full((shape[0], 1), 2.0, np.float32)
    hi = np.full((shape[0], 1), 6.0, np.float32)
    out = _run(lambda x, l, h, o: nisa.range_select(o, x, np.greater_equal, np.less, l, h, on_false_value=0.0),
               b, lo, hi, out_shape=shape)
    idx = np.arange(shape[1])
    np.testing.assert_allclose(out, np.where((idx >= 2) & (idx < 6), b, 0.0))


@SETTINGS
@given(st.sampled_from([1, 8, 32]), st.sampled_from([8, 24, 64]), st.integers(0, 100))
def test_top8_family(p, f, seed):
    a = np.random.default_rng(seed).permutation(p * f).reshape(p, f).astype(np.float32)
    top = _run(lambda x, o: nisa.max8(o, x), a, out_shape=(p, 8))
    np.testing.assert_array_equal(top, -np.sort(-a, axis=1)[:, :8])
    idx = _run(lambda x, v, o: nisa.nc_find_index8(o, x, v), a, top, out_shape=(p, 8), out_dtype=np.uint32)
    np.testing.assert_array_equal(np.take_along_axis(a, idx.astype(np.int64), 1), top)
    rep = _run(lambda x, v, o: nisa.nc_match_replace8(o, x, v, imm=-1.0), a, top, out_shape=(p, f))
    ref = a.copy()
    np.put_along_axis(ref, idx.astype(np.int64), -1.0, 1)
    np.testing.assert_array_equal(rep, ref)


def test_find_index8_gives_a_repeated_value_its_next_occurrence():
    # Data holding 7 at positions 1, 4 and 6; asking for 7 three times finds all three, in order.
    a = np.array([[0, 7, 2, 3, 7, 5, 7, 9]], np.float32)
    vals = np.array([[7, 3, 7, 9, 7, 0, 2, 5]], np.float32)
    idx = _run(lambda x, v, o: nisa.nc_find_index8(o, x, v), a, vals, out_shape=(1, 8), out_dtype=np.uint32)
    np.testing.assert_array_equal(idx, [[1, 3, 4, 7, 6, 0, 2, 5]])


def test_stream_shuffle_gather_transpose():
    a = _arr(0, (32, 8))
    mask = list(range(31, -1, -1))
    out = _run(lambda x, o: nisa.nc_stream_shuffle(o, x, mask), a, out_shape=(32, 8))
    np.testing.assert_array_equal(out, a[::-1])
    idx = np.random.default_rng(1).integers(0, 8, (32, 5)).astype(np.uint32)
    out = _run(lambda x, i, o: nisa.nc_n_gather(o, x, i), a, idx, out_shape=(32, 5))
    np.testing.assert_array_equal(out, np.take_along_axis(a, idx.astype(np.int64), 1))
    out = _run(lambda x, o: nisa.dma_transpose(o, x), a, out_shape=(8, 32))
    np.testing.assert_array_equal(out, a.T)


@pytest.mark.parametrize("shape,perm", [((8, 32), (1, 0)), ((4, 6, 8), (2, 1, 0)), ((16, 1, 4, 8), (3, 1, 2, 0)),
                                        ((16, 2, 3, 8), (3, 1, 2, 0))])
def test_dma_transpose_default_permutation_by_rank(shape, perm):
    # the dma_transpose page: without axes, 2-d tiles permute [1, 0], 3-d [2, 1, 0], 4-d [3, 1, 2, 0]
    # (nki-library's qkv_cte transposes [S, 1, n, 128] into [128, 1, n, S] this way)
    a = _arr(4, shape)
    want = np.transpose(a, perm)
    out = _run(lambda x, o: nisa.dma_transpose(o, x), a, out_shape=want.shape)
    np.testing.assert_array_equal(out, want)


def test_nl_extras():
    a = _arr(3, (16, 24))

    @nki.jit
    def k(x):
        t = nl.load(x)
        out = nl.ndarray((16, 4), np.float32, buffer=nl.shared_hbm)
        nl.store(out[:, 0:1], nl.var(t, axis=1, keepdims=True))
        nl.store(out[:, 1:2], nl.all(nl.greater(t, -5.0), axis=1))
        nl.store(out[:, 2:3], nl.prod(nl.ones((16, 3), np.float32), axis=1))
        eye = nl.shared_identity_matrix(16, dtype=np.float32)   # an SBUF tile
        assert eye.buffer == nl.sbuf
        nl.store(out[:, 3:4], nl.sum(eye, axis=1))
        return out
    out = k(a)
    np.testing.assert_allclose(out[:, 0], a.var(1), rtol=1e-4)
    np.testing.assert_array_equal(out[:, 1:], 1.0)


def test_rms_norm_and_load_transpose2d():
    a, w = _arr(4, (8, 32)), _arr(5, (1, 32))

    @nki.jit
    def k(x, wt):
        out = nl.ndarray((8, 32), np.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.rms_norm(nl.load(x), nl.load(wt), axis=1, n=32, epsilon=1e-6))
        out_t = nl.ndarray((32, 8), np.float32, buffer=nl.shared_hbm)
        nl.store(out_t, nl.load_transpose2d(x))
        return out, out_t
    out, out_t = k(a, w)
    np.testing.assert_allclose(out, a / np.sqrt((a * a).mean(1, keepdims=True) + 1e-6) * w, rtol=1e-4)
    np.testing.assert_array_equal(out_t, a.T)


def test_dropout_and_rand_statistics():
    a = np.ones((64, 256), np.float32)

    @nki.jit
    def k(x):
        out = nl.ndarray((64, 256), np.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.dropout(nl.load(x), 0.25))
        r = nl.ndarray((64, 256), np.float32, buffer=nl.shared_hbm)
        nl.store(r, nl.rand((64, 256), np.float32))
        return out, r
    out, r = k(a)
    assert set(np.unique(out)) <= {0.0, 1.0} and 0.2 < (out == 0).mean() < 0.3
    assert 0.0 <= r.min() and r.max() < 1.0 and abs(r.mean() - 0.5) < 0.02


def test_tensor_views():
    a = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)

    @nki.jit
    def k(x):
        out = nl.ndarray((4, 3, 2), np.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x.permute((2, 1, 0)))
        out2 = nl.ndarray((3, 4), np.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out2, src=x.select(0, 1))
        out3 = nl.ndarray((2, 2), np.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out3, src=x.ap([[12, 2], [1, 2]], offset=1))
        out4 = nl.ndarray((2, 12), np.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out4, src=x.flatten_dims(1, 2))
        return out, out2, out3, out4
    out, out2, out3, out4 = k(a)
    np.testing.assert_array_equal(out, a.transpose(2, 1, 0))
    np.testing.assert_array_equal(out2, a[1])
    np.testing.assert_array_equal(out3, a.reshape(2, 12)[:, 1:3])
    np.testing.assert_array_equal(out4, a.reshape(2, 12))


# -- exponential, activate2, local_gather, sequence_bounds, dma_compute ----------------------------------
def _load(x):
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def _store(t):
    out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@SETTINGS
@given(shapes, st.integers(0, 100))
def test_exponential_with_accumulated_sum(shape, seed):
    a, b, m = _arr(seed, shape), _arr(seed + 1, shape), _arr(seed + 2, (shape[0], 1))

    @nki.jit
    def k(x, y, mx):
        mt = _load(mx)
        e1 = nl.ndarray(shape, np.float32, buffer=nl.sbuf)
        e2 = nl.ndarray(shape, nl.bfloat16, buffer=nl.sbuf)
        s = nl.ndarray((shape[0], 1), np.float32, buffer=nl.sbuf)
        nisa.exponential(dst=e1, src=_load(x), max_value=mt, reduce_res=s, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.exponential(dst=e2, src=_load(y), max_value=0.5, reduce_res=s, reduce_cmd=nisa.reduce_cmd.reduce)
        return _store(e1), _store(s)
    e1, s = k(a, b, m, target="trn3")
    np.testing.assert_allclose(e1, np.exp(a - m), rtol=1e-6)
    # The accumulator sums the fp32 results (before e2's bf16 rounding).
    np.testing.assert_allclose(s[:, 0], np.exp(a - m).sum(1) + np.exp(b - 0.5).sum(1), rtol=1e-5)


def test_exponential_rules():
    a = _arr(0, (4, 8))

    @nki.jit
    def k(x):
        e = nl.ndarray((4, 8), np.float32, buffer=nl.sbuf)
        nisa.exponential(dst=e, src=_load(x))
        return _store(e)
    np.testing.assert_allclose(k(a, target="trn3"), np.exp(a), rtol=1e-6)
    with pytest.raises(KernelRuleError, match="NeuronCore-v4"):
        k(a, target="trn2")

    @nki.jit
    def bad(x):
        e = nl.ndarray((4, 8), np.float32, buffer=nl.sbuf)
        nisa.exponential(dst=e, src=_load(x), reduce_init=1.0)
        return _store(e)
    with pytest.raises(ValueError, match="reduce_init"):
        bad(a, target="trn3")


def _gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


@SETTINGS
@given(shapes, st.integers(0, 100))
def test_activate2(shape, seed):
    a, col = _arr(seed, shape), _arr(seed + 1, (shape[0], 1))

    @nki.jit
    def k(x, c):
        xt, ct = _load(x), _load(c)
        g = nl.ndarray(shape, np.float32, buffer=nl.sbuf)
        nisa.activate2(dst=g, op=nl.gelu, data=xt, imm0=2.0, imm1=0.5, op0=nl.multiply, op1=nl.add)
        p = nl.ndarray(shape, np.float32, buffer=nl.sbuf)
        r = nl.ndarray((shape[0], 1), np.float32, buffer=nl.sbuf)
        nisa.activate2(dst=p, op=nl.prelu, data=xt, imm0=ct, imm1=None, op0=nl.subtract, op1=nl.bypass, reverse0=True,
                       relu_param=0.1, reduce_op=nl.minimum, reduce_res=r, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activate2(dst=p, op=nl.copy, data=xt, imm0=None, imm1=None, op0=None, op1=None,
                       reduce_op=nl.minimum, reduce_res=r, reduce_cmd=nisa.reduce_cmd.reduce)
        return _store(g), _store(p), _store(r)
    g, p, r = k(a, col, target="trn3")
    np.testing.assert_allclose(g, _gelu(2 * a + 0.5), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(p, a)
    v = col - a
    pre = np.where(v >= 0, v, np.float32(0.1) * v)
    np.testing.assert_allclose(r[:, 0], np.minimum(pre.min(1), a.min(1)), rtol=1e-6)


def test_activate2_rules():
    a = _arr(0, (4, 8))

    def kernel(op0, op1, reverse1=False):
        @nki.jit
        def k(x):
            o = nl.ndarray((4, 8), np.float32, buffer=nl.sbuf)
            nisa.activate2(o, nl.exp, _load(x), 1.0, 2.0, op0, op1, reverse1=reverse1)
            return _store(o)
        return k
    with pytest.raises(KernelRuleError, match="not supported"):
        kernel(nl.add, nl.add)(a, target="trn3")
    with pytest.raises(KernelRuleError, match="reverse1 requires op1"):
        kernel(nl.add, None, reverse1=True)(a, target="trn3")
    with pytest.raises(KernelRuleError, match="NeuronCore-v4"):
        kernel(nl.add, None)(a, target="trn2")
    np.testing.assert_allclose(kernel(nl.add, None)(a, target="trn3"), np.exp(a + 1), rtol=1e-6)


@pytest.mark.parametrize("num_valid", [None, 40])
def test_local_gather_matches_the_aws_numpy_reference(num_valid):
    # AWS's example (nki/test/test_nki_isa_local_gather.py) at a smaller size: 2 cores, E = 4.
    rng = np.random.default_rng(0)
    src = (rng.random((32, 16, 4)) * 100).astype(np.float32)
    index = np.tile(rng.integers(0, 16, (16, 4)), (2, 1)).astype(np.uint16)
    nv = num_valid or 64

    @nki.jit
    def k(s, i):
        o = nl.ndarray((32, nv * 4), np.float32, buffer=nl.sbuf)
        nisa.local_gather(o, _load(s), _load(i), num_elem_per_idx=4, num_valid_indices=num_valid)
        return _store(o)
    out = k(src, index * 4)
    ref = np.empty((32, nv, 4), np.float32)
    for c in range(2):
        sl = slice(16 * c, 16 * c + 16)
        ref[sl] = np.take(src[sl], index[sl].flatten(order="F")[:nv], axis=1)
    np.testing.assert_array_equal(out, ref.reshape(32, -1))

    @nki.jit
    def bad(s, i):
        o = nl.ndarray((32, 64 * 3), np.float32, buffer=nl.sbuf)
        nisa.local_gather(o, _load(s), _load(i), num_elem_per_idx=3)
        return _store(o)
    with pytest.raises(KernelRuleError, match="num_elem_per_idx"):
        bad(src, index)


@pytest.mark.parametrize("dtype", [np.int32, np.float32])
def test_sequence_bounds_docs_example(dtype):
    ids = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3]], dtype)

    @nki.jit
    def k(s):
        o = nl.ndarray((1, 2, 9), dtype, buffer=nl.sbuf)
        nisa.sequence_bounds(dst=o, segment_ids=_load(s))
        return _store(o)
    np.testing.assert_array_equal(k(ids), [[[9, 1, 1, 3, 3, 3, 9, 7, 7], [-1, 3, 3, 6, 6, 6, -1, 9, 9]]])


def test_dma_compute_sums_sources():
    a, b, c = _arr(0, (8, 16)), _arr(1, (8, 16)), _arr(2, (8, 16))

    @nki.jit
    def k(x, y, z):
        out = nl.ndarray((8, 16), np.float32, buffer=nl.shared_hbm)
        nisa.dma_compute(dst=out, srcs=[x, _load(y), z], reduce_op=nl.add)
        return out
    np.testing.assert_allclose(k(a, b, c), a + b + c, rtol=1e-6)

    @nki.jit
    def scaled(x, y, z):
        out = nl.ndarray((8, 16), np.float32, buffer=nl.shared_hbm)
        nisa.dma_compute(dst=out, srcs=[x, y], reduce_op=nl.add, scales=[2.0, 1.0])
        return out
    with pytest.raises(KernelRuleError, match="scales"):
        scaled(a, b, c)
