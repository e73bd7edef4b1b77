"""Old-dialect semantics that AWS's NKI API pages document and its per-API examples rely on (issue 26),
each checked here on kernels of our own against numpy."""
import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit(mode="simulation")
def cumulative_then_continue(x, start):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    s = nl.load(start)
    acc = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    # the old dialect takes dst as well (positional here): in place, like the current one
    nisa.tensor_scalar_cumulative(acc, t, nl.multiply, nl.add, 2.0, s, nisa.reduce_cmd.load_reduce)
    nisa.tensor_scalar_cumulative(dst=acc, src=t, op0=nl.multiply, op1=nl.add, imm0=2.0,
                                  reduce_cmd=nisa.reduce_cmd.reduce)
    nl.store(out, value=acc)
    return out


def test_tensor_scalar_cumulative_load_reduce_then_reduce():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 8)).astype(np.float32)
    start = rng.standard_normal((64, 1)).astype(np.float32)
    first = start + np.cumsum(2 * x, axis=1)
    second = first[:, -1:] + np.cumsum(2 * x, axis=1)
    np.testing.assert_allclose(cumulative_then_continue(x, start), second, rtol=1e-5, atol=1e-5)


def test_isa_constants_is_a_submodule_of_the_old_isa():
    from neuronxcc.nki.isa.constants import dge_mode, oob_mode
    assert dge_mode is nisa.dge_mode and oob_mode is nisa.oob_mode
