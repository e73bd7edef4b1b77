"""nisa.nonzero_with_count: each GpSimd core works on its first partition (0, 16, 32, ...), listing the
positions of the nonzero elements (plus index_offset), then padding, then the count; the other
partitions of dst keep what they held. NeuronCore-v3 and newer."""
from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkihub.simulator.errors import KernelRuleError


@nki.jit
def nonzero(x, offset, pad):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    found = nl.ndarray((x.shape[0], x.shape[1] * x.shape[2] + 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=found, value=99)
    nisa.nonzero_with_count(dst=found, src=t, index_offset=offset, padding_val=pad)
    out = nl.ndarray(found.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=found)
    return out


def test_indices_padding_and_count_on_each_cores_first_partition():
    rng = np.random.default_rng(3)
    x = (rng.random((128, 3, 5)) < 0.3).astype(np.float32) * rng.normal(size=(128, 3, 5)).astype(np.float32)
    got = nonzero(x, 100, -7)
    for p in range(128):
        if p % 16:
            assert (got[p] == 99).all()            # not a core's first partition: untouched
            continue
        nz = np.flatnonzero(x[p].reshape(-1))
        np.testing.assert_array_equal(got[p, :nz.size], nz + 100)
        assert (got[p, nz.size:15] == -7).all() and got[p, 15] == nz.size


def test_dst_holds_the_count_slot():
    @nki.jit
    def k(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        d = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.sbuf)   # no room for the count
        nisa.nonzero_with_count(dst=d, src=t)
        return x
    with pytest.raises(KernelRuleError, match="count"):
        k(np.zeros((16, 8), np.float32))


def test_needs_neuroncore_v3():
    with pytest.raises(KernelRuleError, match="NeuronCore-v3"):
        nonzero.run(np.zeros((16, 1, 4), np.float32), 0, -1, target="trn1")
