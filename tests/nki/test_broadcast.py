"""Elementwise ``nl`` operators broadcast tile shapes as numpy does (AWS's nl.add page: "x.shape and y.shape
must be broadcastable to a common shape, that will become the shape of the output"), including the
partition dim and size-1 free dims; shapes that do not broadcast stay an error."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nki
import nki.language as nl
from nkihub.nki.errors import KernelRuleError

OPS = {"add": (nl.add, np.add), "multiply": (nl.multiply, np.multiply), "maximum": (nl.maximum, np.maximum),
       "subtract": (nl.subtract, np.subtract), "equal": (nl.equal, np.equal)}


def kernel_for(op):
    @nki.jit
    def kernel(a, b):
        c = op(nl.load(a), nl.load(b), dtype=nl.float32)
        out = nl.ndarray(c.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, c)
        return out
    return kernel


CASES = [((128, 512), (1, 1)), ((128, 512), (1, 512)), ((128, 1), (1, 512)), ((1, 64), (32, 1)),
         ((16, 56, 1, 1), (16, 56, 3, 3)), ((16, 1, 3), (16, 4, 1)), ((8, 6), (6,))]


@pytest.mark.parametrize("xs,ys", CASES)
@pytest.mark.parametrize("name", ["add", "subtract", "equal"])
def test_tiles_broadcast_like_numpy(name, xs, ys):
    ours, ref = OPS[name]
    rng = np.random.default_rng(0)
    a = rng.integers(0, 3, xs).astype(np.float32)
    b = rng.integers(0, 3, ys).astype(np.float32)
    if len(ys) == 1:    # a 1-D operand: a single partition's row after numpy's left padding
        b = b.reshape(1, *ys)
    got = kernel_for(ours)(a, b)
    np.testing.assert_array_equal(got, ref(a, b).astype(np.float32))
    # and the other way round (reverse operand order for the non-commutative ones)
    np.testing.assert_array_equal(kernel_for(ours)(b, a), ref(b, a).astype(np.float32))


@settings(max_examples=15, deadline=None)
@given(p=st.sampled_from([1, 3, 32]), f=st.lists(st.sampled_from([1, 2, 5]), min_size=1, max_size=2),
       mask=st.lists(st.booleans(), min_size=3, max_size=3), name=st.sampled_from(sorted(OPS)))
def test_random_broadcastable_pairs(p, f, mask, name):
    full = (p, *f)
    part = tuple(1 if m else s for s, m in zip(full, mask))
    rng = np.random.default_rng(1)
    a = rng.standard_normal(full).astype(np.float32)
    b = rng.standard_normal(part).astype(np.float32)
    ours, ref = OPS[name]
    np.testing.assert_allclose(kernel_for(ours)(a, b), ref(a, b).astype(np.float32), rtol=1e-6)


def test_shapes_that_do_not_broadcast_are_an_error():
    with pytest.raises(KernelRuleError, match="shape-mismatch"):
        kernel_for(nl.add)(np.zeros((8, 4), np.float32), np.zeros((8, 3), np.float32))
