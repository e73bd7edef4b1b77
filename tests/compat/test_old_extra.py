"""More of the neuronxcc.nki dialect: nl.all_reduce across SPMD programs, nl.loop_reduce, nl.atomic_rmw, direct-allocation buffers, the tile-returning dynamic copies and gathers,
nki.FrameworkKernel, and names that exist but are not simulated (an error at the kernel line)."""
from __future__ import annotations

import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from nkihub.simulator.errors import NotSimulatedError


@nki.jit
def program_sum(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    t = nl.load(a[i, j])
    nl.store(out[i, j], nl.all_reduce(t, np.add, program_axes=[1]))
    return out


def test_all_reduce_over_one_grid_axis():
    a = np.random.default_rng(0).standard_normal((2, 3, 16, 4)).astype(np.float32)
    got = program_sum[2, 3](a)
    np.testing.assert_allclose(got, np.broadcast_to(a.sum(1, keepdims=True), a.shape), rtol=1e-6)


@nki.jit
def reduced(a):
    acc = nl.ndarray((nl.par_dim(128), 32), dtype=nl.float32,
                     buffer=nki.compiler.sbuf.mod_alloc(base_addr=0, num_free_tiles=(1,)))
    acc[...] = 0.0
    for i in nl.affine_range(a.shape[0]):
        acc[...] = nl.loop_reduce(nl.load(a[i]), np.add, loop_indices=[i])
    out = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, acc)
    nl.atomic_rmw(out, value=acc, op=np.multiply)     # out = out * acc
    return out


def test_loop_reduce_and_atomic_rmw():
    a = np.random.default_rng(1).standard_normal((5, 128, 32)).astype(np.float32)
    s = a.sum(0)
    np.testing.assert_allclose(reduced(a), s * s, rtol=1e-5)


@nki.jit
def copies(a, idx, seg):
    t = nl.load(a)
    c = nisa.tensor_copy_dynamic_src(t[:, 0:8])
    d = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy_dynamic_dst(dst=d, src=c)
    g = nisa.local_gather(t, nl.load(idx), num_elem_per_idx=1, num_valid_indices=4)
    b = nisa.sequence_bounds(segment_ids=nl.load(seg))
    out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, d)
    og = nl.ndarray(g.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(og, g)
    ob = nl.ndarray(b.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(ob, b)
    return out, og, ob


def test_tile_returning_copies_gathers_and_bounds():
    a = np.random.default_rng(2).standard_normal((128, 16)).astype(np.float32)
    idx = np.zeros((128, 1), np.uint16)
    idx[0:4, 0] = [3, 1, 2, 0]                     # the first 4 indices of each 16-partition core
    seg = np.array([[1, 1, 2, 2, 2, 0]], np.float32)
    out, og, ob = copies(a, idx, seg)
    np.testing.assert_array_equal(out, a[:, 0:8])
    np.testing.assert_array_equal(og[0:16], a[0:16][:, [3, 1, 2, 0]])
    np.testing.assert_array_equal(ob[0], [[0, 0, 2, 2, 2, 6], [2, 2, 5, 5, 5, -1]])


def test_framework_kernel_maps_tensors_and_dtypes():
    fk = nki.FrameworkKernel(None, target="trn2")
    x = np.ones((2, 3), np.float16)
    assert fk.is_framework_tensor(x) and not fk.is_framework_tensor(3)
    assert fk.map_framework_tensor(x) == ((2, 3), np.dtype(np.float16))
    assert fk.translate_to_neuron_dtype(np.float32) == np.dtype(np.float32)
    assert fk.dump_config() == {"target": "trn2"}


@nki.jit
def custom(a):
    nisa.builtin_custom_op("fn", "lib.so", 1, 1, srcs=[a], dsts=[a])
    return a


def test_unsimulated_names_say_so_at_the_kernel_line():
    with pytest.raises(NotSimulatedError, match="part of AWS NKI but nkihub does not simulate it") as exc:
        custom(np.ones((4, 4), np.float32))
    assert "test_old_extra.py" in str(exc.value)
