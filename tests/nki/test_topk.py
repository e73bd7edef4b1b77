"""nisa.topk and the top-8 family, as the ISA pages describe them.

topk: each group of 16 partitions is one problem whose data sits in a snake (slot s = partition s % 16,
free position s // 16); results go back in the same snake; k is val_dst's free size.
nc_match_replace8: replaces the first occurrence of each of the 8 values, one value after the other, so a
value listed twice replaces two occurrences (the ISA page's numpy equivalent).
"""
import math

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkihub.nki.errors import KernelRuleError

BF16 = ml_dtypes.bfloat16


@nki.jit
def topk_kernel(x, k, n, descending):
    p, f = x.shape
    vals = nl.ndarray((p, k), nl.bfloat16, buffer=nl.shared_hbm)
    idx = nl.ndarray((p, k), nl.uint32, buffer=nl.shared_hbm)
    v_sb = nl.ndarray((p, k), nl.bfloat16, buffer=nl.sbuf)
    i_sb = nl.ndarray((p, k), nl.uint32, buffer=nl.sbuf)
    nisa.memset(v_sb, 0.0)          # only the first ceil(k / 16) positions receive results
    nisa.memset(i_sb, 0)
    nisa.topk(v_sb, i_sb, nl.load(x), n=n, sorted=descending)
    nl.store(vals, v_sb)
    nl.store(idx, i_sb)
    return vals, idx


def _desnake(t, group, count):
    """Entries 0..count-1 of a group's snake (partition j % 16, position j // 16)."""
    block = t[16 * group:16 * group + 16, :math.ceil(count / 16)]
    return block.T.reshape(-1)[:count]


@pytest.mark.parametrize("descending", [True, False])
def test_topk_reads_and_writes_16_partition_snakes(descending):
    rng = np.random.default_rng(0)
    x = rng.permutation(32 * 24).reshape(32, 24).astype(np.float32).astype(BF16)   # 2 groups
    k, n = 21, 300                                  # k not a multiple of 16; the last slots unused
    vals, idx = topk_kernel(x, k, n, descending)
    for g in range(2):
        snake = x[16 * g:16 * g + 16].astype(np.float32).T.reshape(-1)[:n]
        want = np.sort(snake)[::-1][:k]
        got_v = _desnake(vals, g, k).astype(np.float32)
        got_i = _desnake(idx, g, k).astype(np.int64)
        np.testing.assert_array_equal(np.sort(got_v)[::-1], want)       # the k largest of the group
        np.testing.assert_array_equal(snake[got_i], got_v)               # indices are snake slots
        assert (got_i < n).all()
        order = got_v if not descending else got_v[::-1]
        assert (np.diff(order) >= 0).all()                               # the order this model picks
    assert (vals[:, 2:] == 0).all()    # positions past ceil(k / 16) are left alone


def test_topk_rules_name_the_operand():
    x = np.zeros((24, 4), BF16)   # 24 partitions: not whole groups of 16
    with pytest.raises(KernelRuleError, match="topk-partitions"):
        topk_kernel(x, 4, 40, False)
    with pytest.raises(KernelRuleError, match="topk-k"):   # k > n
        topk_kernel(np.zeros((16, 4), BF16), 12, 8, False)
    with pytest.raises(KernelRuleError, match="dtype"):
        topk_kernel(np.zeros((16, 4), np.float32), 4, 40, False)


def test_topk_needs_neuroncore_v3():
    with pytest.raises(KernelRuleError, match="target-support"):
        topk_kernel.run(np.zeros((16, 4), BF16), 4, 40, False, target="trn1")


@nki.jit
def match_replace(x, v):
    p, f = x.shape
    out = nl.ndarray((p, f), x.dtype, buffer=nl.shared_hbm)
    pos = nl.ndarray((p, 8), nl.uint32, buffer=nl.shared_hbm)
    data, vals = nl.load(x), nl.load(v)
    res = nl.ndarray((p, f), x.dtype, buffer=nl.sbuf)
    idx = nl.ndarray((p, 8), nl.uint32, buffer=nl.sbuf)
    nisa.nc_match_replace8(dst=res, data=data, vals=vals, imm=-100.0, dst_idx=idx)
    nl.store(out, res)
    nl.store(pos, idx)
    return out, pos


def test_match_replace8_replaces_repeated_values_one_occurrence_each():
    x = np.array([[5, 2, 5, 3, 7, 7, 7, 1, 0, 4]], np.float32)
    vals = np.array([[7, 5, 7, 5, 4, 3, 2, 7]], np.float32)   # 7 three times, 5 twice
    out, pos = match_replace(x, vals)
    assert pos.tolist() == [[4, 0, 5, 2, 9, 3, 1, 6]]
    assert out.tolist() == [[-100, -100, -100, -100, -100, -100, -100, 1, 0, -100]]
