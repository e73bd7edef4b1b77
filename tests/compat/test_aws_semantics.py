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


# -- indirect access: a tile of indices, loaded or computed, picks rows when the kernel runs ------------
@nki.jit(mode="simulation")
def gather_rows(table, rows):
    n = rows.shape[0]
    out = nl.ndarray((n, table.shape[1]), dtype=table.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(n)[:, None], nl.arange(table.shape[1])[None, :]
    idx = nl.load(rows[i_p, 0])                      # indices must be on chip
    nl.store(out, value=nl.load(table[idx[i_p, 0], i_f]))
    return out


def test_a_loaded_tile_indexes_rows():
    rng = np.random.default_rng(1)
    table = rng.standard_normal((40, 24)).astype(np.float32)
    rows = rng.integers(0, 40, (16, 1)).astype(np.int32)
    np.testing.assert_array_equal(gather_rows(table, rows), table[rows[:, 0]])


@nki.jit(mode="simulation")
def scatter_rows(values, rows, base):
    out = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(base))
    n, m = values.shape
    i_p, i_f = nl.arange(n)[:, None], nl.arange(m)[None, :]
    idx = nl.load(rows)
    nl.store(out[idx, i_f], value=nl.load(values))
    return out


def test_a_store_through_an_index_tile_scatters_rows():
    rng = np.random.default_rng(2)
    base = rng.standard_normal((32, 8)).astype(np.float32)
    values = rng.standard_normal((8, 8)).astype(np.float32)
    rows = rng.permutation(32)[:8].reshape(8, 1).astype(np.int32)
    want = base.copy()
    want[rows[:, 0]] = values
    np.testing.assert_array_equal(scatter_rows(values, rows, base), want)


def _copy_through(rows, oob, direction):
    @nki.jit(mode="simulation")
    def kernel(table, idx_in):
        n, m = idx_in.shape[0], table.shape[1]
        i_f = nl.arange(m)[None, :]
        idx = nl.load(idx_in)
        if direction == "gather":
            out = nl.ndarray((n, m), dtype=table.dtype, buffer=nl.shared_hbm)
            tile = nisa.memset(shape=(n, m), value=-1, dtype=table.dtype)
            nisa.dma_copy(dst=tile, src=table[idx, i_f], oob_mode=oob)
            nl.store(out, value=tile)
        else:
            out = nl.ndarray(table.shape, dtype=table.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=nisa.memset(shape=table.shape, value=-1, dtype=table.dtype))
            nisa.dma_copy(dst=out[idx, i_f], src=nl.load(table[0:n, :]), oob_mode=oob)
        return out
    table = np.arange(16 * 4, dtype=np.float32).reshape(16, 4)
    return table, kernel(table, np.asarray(rows, np.int32).reshape(-1, 1))


@pytest.mark.parametrize("direction", ["gather", "scatter"])
@pytest.mark.parametrize("rows,first_bad", [([0, 5, 16, 3], 16 * 4), ([2, -1, 7, 1], -4)])
def test_out_of_bounds_indices_raise_index_error_with_the_flat_element(direction, rows, first_bad):
    # oob_mode.error (the default): an IndexError naming the first element outside the flattened tensor
    with pytest.raises(IndexError) as err:
        _copy_through(rows, nisa.oob_mode.error, direction)
    assert type(err.value) is IndexError
    assert str(err.value) == f"index {first_bad} is out of bounds for axis 0 with size 64"


@pytest.mark.parametrize("direction", ["gather", "scatter"])
def test_out_of_bounds_indices_are_skipped_with_oob_mode_skip(direction):
    rows = [3, 20, -2, 9]
    table, got = _copy_through(rows, nisa.oob_mode.skip, direction)
    want = np.full((4, 4) if direction == "gather" else table.shape, -1, np.float32)
    for i, r in enumerate(rows):
        if 0 <= r < 16:
            if direction == "gather":
                want[i] = table[r]
            else:
                want[r] = table[i]
    np.testing.assert_array_equal(got, want)


@nki.jit(mode="simulation")
def scatter_add(values, rows, base):
    out = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(base))
    i_f = nl.arange(values.shape[1])[None, :]
    nisa.dma_copy(dst=out[nl.load(rows), i_f], src=nl.load(values), dst_rmw_op=np.add)
    return out


def test_dma_read_modify_write_adds_and_repeated_indices_add_up():
    rng = np.random.default_rng(3)
    base = rng.standard_normal((10, 6)).astype(np.float32)
    values = rng.standard_normal((5, 6)).astype(np.float32)
    rows = np.array([[1], [4], [1], [9], [4]], np.int32)
    want = base.copy()
    np.add.at(want, rows[:, 0], values)
    np.testing.assert_allclose(scatter_add(values, rows, base), want, rtol=1e-6)


@nki.jit(mode="simulation")
def transpose_picked(table, rows):
    n = rows.shape[0]
    i_p = nl.arange(n)[:, None]
    iy = nl.arange(table.shape[1])[None, :, None]
    iz = nl.arange(table.shape[2])[None, None, :]
    idx = nl.load(rows)
    t = nisa.dma_transpose(table[idx[i_p, 0], iy, iz], axes=(2, 1, 0))
    out = nl.ndarray(t.shape, dtype=table.dtype, buffer=nl.shared_hbm)
    nl.store(out, t)
    return out


def test_dma_transpose_of_rows_picked_by_an_index_tile():
    table = np.arange(12 * 3 * 8, dtype=np.float32).reshape(12, 3, 8)
    rows = np.array([[7], [0], [11], [4]], np.int32)
    np.testing.assert_array_equal(transpose_picked(table, rows), np.transpose(table[rows[:, 0]], (2, 1, 0)))


# -- element writes at any partition --------------------------------------------------------------------
@nki.jit(mode="simulation")
def write_elements(x):
    n, m = x.shape
    t = nl.zeros((n, m), dtype=nl.int32)
    for i in nl.static_range(n):          # partition i, whatever i is
        for j in nl.static_range(m):
            t[i, j] = i * 10 + j
    row = nl.load(x[0:1, :])
    t[5:6, :] = row                        # a one-partition copy starting at partition 5
    out = nl.ndarray((n, m), dtype=nl.int32, buffer=nl.shared_hbm)
    nl.store(out, value=t)
    return out


def test_elements_are_written_at_any_partition():
    # the gather_flattened page builds its index tile with indices[i, j] = j * 5, one element at a time;
    # engines may not start an access at such partitions, so these writes go through a DMA queue
    x = np.arange(4, dtype=np.int32).reshape(1, 4) + 100
    want = np.arange(7)[:, None] * 10 + np.arange(4)[None, :]
    want[5] = x[0]
    np.testing.assert_array_equal(write_elements(np.vstack([x] * 7)), want)
    program = write_elements.trace(np.vstack([x] * 7))
    assert any(i.opcode == "dma_copy" for i in program.instructions)


# -- masks: predicates joined with Python's `and`, and constant masks ------------------------------------
def _masked_square(how):
    @nki.jit(mode="simulation")
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.zeros(x.shape, dtype=x.dtype))
        i_p, i_f = nl.mgrid[0:x.shape[0], 0:x.shape[1]]
        t = nl.load(x)
        if how == "and":
            sq = nl.square(t, mask=(i_p < 5 and i_f < 6))
            nl.store(out[i_p, i_f], value=sq, mask=(i_p < 5 and i_f < 6))
        elif how == "and3":
            sq = nl.square(t, mask=(i_p < 7 and i_f < 6 and i_p < 5))
            nl.store(out[i_p, i_f], value=sq, mask=(i_p < 5) & (i_f < 6))
        else:
            sq = nl.square(t, mask=(i_p < 5) & (i_f < 6))
            nl.store(out[i_p, i_f], value=sq, mask=(i_p < 5) & (i_f < 6))
        return out
    return kernel


@pytest.mark.parametrize("how", ["and", "and3"])
def test_and_of_comparisons_is_the_conjunction(how):
    # the masking page: a mask is one compile-time predicate; `a and b` of comparisons means both
    x = np.random.default_rng(5).standard_normal((8, 10)).astype(np.float32)
    want = np.zeros_like(x)
    want[:5, :6] = x[:5, :6] ** 2
    np.testing.assert_allclose(_masked_square(how)(x), want, rtol=1e-6)
    np.testing.assert_allclose(_masked_square("&")(x), want, rtol=1e-6)


def test_a_predicate_elsewhere_still_has_no_truth_value():
    @nki.jit(mode="simulation")
    def truth_of_a_mask(x):
        i_p = nl.arange(x.shape[0])[:, None]
        early = i_p < 3
        if early:              # a predicate is not a Python bool
            pass
        return x

    @nki.jit(mode="simulation")
    def and_of_stored_masks(x):
        i_p, i_f = nl.mgrid[0:x.shape[0], 0:x.shape[1]]
        a, b = i_p < 3, i_f < 2
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x), mask=(a and b))   # the right operand is no comparison here
        return out
    for kernel in (truth_of_a_mask, and_of_stored_masks):
        with pytest.raises(TypeError, match="no truth value"):
            kernel(np.zeros((4, 4), np.float32))


@pytest.mark.parametrize("mask", [True, False, np.True_, np.False_, 3 < 4])
def test_constant_masks_run_everything_or_nothing(mask):
    @nki.jit(mode="simulation")
    def overwrite(x, y):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x)
        nl.store(out, value=nl.exp(nl.load(y), mask=mask), mask=mask)
        return out
    x, y = np.zeros((4, 6), np.float32), np.ones((4, 6), np.float32)
    np.testing.assert_allclose(overwrite(x, y), np.exp(y) if mask else x, rtol=1e-6)


def test_a_masked_result_stored_whole_warns_and_holds_the_masked_values():
    # AWS's nc_match_replace8 example stores a tile its masked instruction wrote only in part, and checks
    # the masked region: the rest holds no value (NaN here), which is reported as a warning
    from nkihub.simulator.errors import UninitializedWarning

    @nki.jit(mode="simulation")
    def partial(x):
        i_p, i_f = nl.mgrid[0:x.shape[0], 0:x.shape[1]]
        t = nisa.activation(op=nl.exp, data=nl.load(x), mask=(i_p < 2 and i_f < 3))
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out
    x = np.random.default_rng(6).standard_normal((4, 5)).astype(np.float32)
    with pytest.warns(UninitializedWarning, match="read-uninitialized"):
        got = partial(x)
    np.testing.assert_allclose(got[:2, :3], np.exp(x[:2, :3]), rtol=1e-6)
    assert np.isnan(got[2:]).all() and np.isnan(got[:, 3:]).all()


def test_an_on_chip_tile_a_kernel_returns_is_handed_back():
    # this dialect's simulator returns an SBUF tile's values (AWS's range_select example returns one)
    @nki.jit(mode="simulation")
    def doubled(x):
        return nl.multiply(nl.load(x), 2.0)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(doubled(x), 2 * x)


# -- affine_select reading PSUM: per target ---------------------------------------------------------------
def _causal_scores(target):
    @nki.jit(mode="simulation", platform_target=target)
    def causal(q, k):
        s = nisa.nc_matmul(nl.load(q), nl.load(k))          # scores in PSUM
        i_p, i_f = nl.mgrid[0:s.shape[0], 0:s.shape[1]]
        masked = nisa.affine_select(pred=(i_p - i_f >= 0), on_true_tile=s[i_p, i_f], on_false_value=-9984.0)
        out = nl.ndarray(s.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=masked)
        return out
    return causal


def test_affine_select_reads_psum_on_trn1_only():
    # AWS's trn1 attention kernels mask PSUM scores with affine_select; the NeuronCore-v3/v4 page says
    # "The input on_true_tile must also be in SBUF"
    from nkihub.nki.errors import KernelRuleError
    rng = np.random.default_rng(8)
    q = rng.standard_normal((32, 16)).astype(np.float32)
    k = rng.standard_normal((32, 16)).astype(np.float32)
    s = q.T @ k
    want = np.where(np.arange(16)[:, None] >= np.arange(16)[None, :], s, -9984.0)
    np.testing.assert_allclose(_causal_scores("trn1")(q, k), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(KernelRuleError, match="engine-buffer"):
        _causal_scores("trn2")(q, k)


def test_a_launch_with_grid_zero_runs_one_program():
    # neuronxcc launches kernel[0] as it launches the kernel without a grid (nki-samples' pipelined attention
    # calls flash_fwd[0](...) and checks the one program's output); grids with more programs are SPMD
    from nkihub.nki.errors import KernelRuleError

    @nki.jit(mode="simulation")
    def rows_of_program(x):
        out = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x[nl.program_id(0):nl.program_id(0) + 1, :]))
        return out
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(rows_of_program[0](x), x[0:1])
    with pytest.raises(KernelRuleError, match="launch-grid"):
        rows_of_program[0, 2](x)
