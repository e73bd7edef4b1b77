"""Old-dialect masks on reductions: AWS documents ``mask=`` as limiting which elements an instruction
computes, not the shape of the tile it returns. A masked ``nl.max`` over [128, k, w] still returns a
[128, w] tile; a later statement may keep fewer of its rows with its own mask."""
import numpy as np

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def row_max_then_narrower_store(x, keep):
    n, k, w = x.shape
    out = nl.ndarray((keep, w), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_k, i_w = nl.mgrid[0:128, 0:k, 0:w]
    tile = nl.load(x[i_p, i_k, i_w], mask=(i_p < n))
    red = nl.max(tile, axis=[1], mask=(i_p < n))          # rows < n computed; the tile has 128 rows
    j_p, j_w = nl.mgrid[0:128, 0:w]
    nl.store(out[j_p, j_w], value=red, mask=(j_p < keep))  # keeps fewer rows than were computed
    return out


def test_masked_reduction_keeps_the_unmasked_shape():
    x = np.random.default_rng(0).standard_normal((40, 3, 8)).astype(np.float32)
    got = row_max_then_narrower_store(x, 30)
    np.testing.assert_array_equal(got, x.max(axis=1)[:30])


@nki.jit
def keepdims_sum(x):
    n, w = x.shape
    out = nl.ndarray((n, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_w = nl.mgrid[0:128, 0:w]
    tile = nl.load(x[i_p, i_w], mask=(i_p < n))
    s = nl.sum(tile, axis=1, keepdims=True, mask=(i_p < n))
    j_p, j_f = nl.mgrid[0:128, 0:1]
    nl.store(out[j_p, j_f], value=s, mask=(j_p < n))
    return out


def test_masked_keepdims_reduction():
    x = np.random.default_rng(1).standard_normal((50, 16)).astype(np.float32)
    np.testing.assert_allclose(keepdims_sum(x), x.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)
