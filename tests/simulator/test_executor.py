"""The numpy executor's numerics: NaN-filled fresh buffers, fp32 accumulation in PSUM, round-to-nearest-
even casts; and its replay machinery (pooled buffers, inputs left untouched, errors located)."""
from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest

from nkihub.simulator.errors import SimulationError, SourceLoc
from nkihub.simulator.executor import Executor, fill_value, run_program
from nkihub.simulator.program import AccessPattern, Instruction, Program, TensorSpec

BF16 = ml_dtypes.bfloat16


def ap(name, shape, offset=0):
    return AccessPattern.row_major(name, shape, offset)


def program(tensors, instructions, inputs=(), outputs=()):
    p = Program("t")
    for t in tensors:
        p.add_tensor(t)
    p.instructions += instructions
    p.inputs += list(inputs)
    p.outputs += list(outputs)
    return p


def ins(opcode, engine, dst, src, **attrs):
    return Instruction(opcode, engine, dst, src, attrs)


# -- fresh buffers ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,expect", [("float32", "nan"), ("bfloat16", "nan"), ("float8_e4m3", "nan"),
                                          ("int32", 2**31 - 1), ("uint8", 255), ("bool_", True),
                                          ("float4_e2m1fn", 6.0)])
def test_fresh_buffers_are_nan_or_the_largest_value(dtype, expect):
    """An output nothing wrote comes back as NaN (ints at their max; fp4, which has no NaN, at 6.0)."""
    p = program([TensorSpec("o", (2, 3), dtype, "shared_hbm", "output")], [], outputs=["o"])
    (out,) = run_program(p, [])
    vals = out.astype(np.float32)
    assert np.isnan(vals).all() if expect == "nan" else (vals == np.float32(expect)).all()


def test_partially_written_tile_keeps_nan_elsewhere():
    p = program([TensorSpec("o", (4, 4), "float32", "sbuf", "output")],
                [ins("memset", "vector", {"dst": AccessPattern("o", 0, ((8, 2), (1, 4)))}, {}, value=1.0)],
                outputs=["o"])
    (out,) = run_program(p, [])
    assert (out[::2] == 1).all() and np.isnan(out[1::2]).all()


def test_reused_buffers_are_refilled_for_unchecked_programs():
    """Run 1 writes an internal tile; run 2 skips the write (predicate false) and must see NaN again."""
    t = [TensorSpec("pred", (1, 4), "float32", "sbuf", "input"), TensorSpec("tmp", (1, 4), "float32", "sbuf"),
         TensorSpec("o", (1, 4), "float32", "sbuf", "output")]
    prog = program(t, [ins("memset", "vector", {"dst": ap("tmp", (1, 4))}, {}, value=0.0),
                       ins("tensor_copy_predicated", "vector", {"dst": ap("tmp", (1, 4))},
                           {"predicate": ap("pred", (1, 4))}, value=7.0),
                       ins("tensor_copy", "vector", {"dst": ap("o", (1, 4))}, {"src": ap("tmp", (1, 4))})],
                   inputs=["pred"], outputs=["o"])
    ex = Executor(prog)
    assert (ex.run([np.ones((1, 4), np.float32)])[0] == 7).all()
    assert (ex.run([np.zeros((1, 4), np.float32)])[0] == 0).all()


def test_outputs_of_two_runs_do_not_alias():
    p = program([TensorSpec("x", (2, 2), "float32", "hbm", "input"), TensorSpec("o", (2, 2), "float32",
                                                                                "hbm", "output")],
                [ins("dma_copy", "dma", {"dst": ap("o", (2, 2))}, {"src": ap("x", (2, 2))})], ["x"], ["o"])
    ex = Executor(p)
    a = ex.run([np.ones((2, 2), np.float32)])[0]
    b = ex.run([np.full((2, 2), 2, np.float32)])[0]
    assert (a == 1).all() and (b == 2).all()


def test_inputs_are_not_modified_even_by_a_program_that_writes_one():
    x = np.ones((2, 2), np.float32)
    p = program([TensorSpec("x", (2, 2), "float32", "sbuf", "input"), TensorSpec("o", (2, 2), "float32",
                                                                                 "sbuf", "output")],
                [ins("memset", "vector", {"dst": ap("x", (2, 2))}, {}, value=5.0),
                 ins("tensor_copy", "vector", {"dst": ap("o", (2, 2))}, {"src": ap("x", (2, 2))})], ["x"], ["o"])
    assert (run_program(p, [x])[0] == 5).all() and (x == 1).all()


def test_fill_value():
    assert np.isnan(fill_value(np.dtype(BF16))) and fill_value(np.dtype(np.int8)) == 127


# -- PSUM accumulation in fp32 -------------------------------------------------------------------------------
def _accumulate_program(k_tiles: int, psum_dtype: str):
    t = [TensorSpec("a", (k_tiles, 1, 1), "bfloat16", "sbuf", "input"),
         TensorSpec("b", (k_tiles, 1, 1), "bfloat16", "sbuf", "input"),
         TensorSpec("acc", (1, 1), psum_dtype, "psum"), TensorSpec("o", (1, 1), "float32", "sbuf", "output")]
    body = [ins("nc_matmul", "tensor", {"dst": ap("acc", (1, 1))},
                {"stationary": ap("a", (1, 1), k), "moving": ap("b", (1, 1), k)}, accumulate=k > 0)
            for k in range(k_tiles)]
    body.append(ins("tensor_copy", "vector", {"dst": ap("o", (1, 1))}, {"src": ap("acc", (1, 1))}))
    return program(t, body, ["a", "b"], ["o"])


def test_psum_accumulates_in_fp32():
    """1 + 256 * 2^-9 = 1.5 in fp32; a bf16 accumulator would stay at 1 (each 2^-9 step rounds away)."""
    n = 257
    a = np.ones((n, 1, 1), BF16)
    b = np.full((n, 1, 1), 2 ** -9, BF16)
    b[0] = 1
    (out,) = run_program(_accumulate_program(n, "float32"), [a, b])
    assert out[0, 0] == np.float32(1.5)
    (out_bf16_psum,) = run_program(_accumulate_program(n, "bfloat16"), [a, b])
    assert out_bf16_psum[0, 0] == 1.0  # rounding to the accumulator's dtype at every step


def test_matmul_products_are_exact_in_fp32():
    """bf16 x bf16 products fit fp32 exactly: (1 + 2^-7)^2 = 1 + 2^-6 + 2^-14 is kept."""
    v = np.float32(1 + 2 ** -7)
    a = np.full((1, 1, 1), v, BF16)
    t = [TensorSpec("a", (1, 1, 1), "bfloat16", "sbuf", "input"), TensorSpec("o", (1, 1), "float32", "psum", "output")]
    p = program(t, [ins("nc_matmul", "tensor", {"dst": ap("o", (1, 1))},
                        {"stationary": ap("a", (1, 1)), "moving": ap("a", (1, 1))}, accumulate=False)],
                ["a"], ["o"])
    assert run_program(p, [a])[0][0, 0] == np.float32(1 + 2 ** -6 + 2 ** -14)


# -- round-to-nearest-even casts -------------------------------------------------------------------------------
def _copy(values, dst_dtype):
    x = np.asarray(values, np.float32).reshape(1, -1)
    t = [TensorSpec("x", x.shape, "float32", "sbuf", "input"), TensorSpec("o", x.shape, dst_dtype, "sbuf", "output")]
    p = program(t, [ins("tensor_copy", "vector", {"dst": ap("o", x.shape)}, {"src": ap("x", x.shape)})],
                ["x"], ["o"])
    return run_program(p, [x])[0].reshape(-1)


def test_fp32_to_bf16_rounds_to_nearest_even():
    half = 2 ** -8  # half a bf16 ulp at 1.0
    got = _copy([1 + half, 1 + 3 * half, 1 + half + 2 ** -20, -(1 + half)], "bfloat16").astype(np.float32)
    assert got.tolist() == [1.0, 1 + 4 * half, 1 + 2 * half, -1.0]


def test_fp32_to_fp8_rounds_to_nearest_even():
    # e4m3 has 3 mantissa bits: between 1 and 1.125 the tie 1.0625 goes to 1 (even), 1.1875 to 1.25.
    got = _copy([1.0625, 1.1875], "float8_e4m3").astype(np.float32)
    assert got.tolist() == [1.0, 1.25]


def test_float_to_int_rounds_half_to_even_and_saturates():
    assert _copy([0.5, 1.5, 2.5, -2.5, 300.0, -300.0], "int8").tolist() == [0, 2, 2, -2, 127, -128]


# -- running ---------------------------------------------------------------------------------------------------
def test_input_shape_and_count_are_checked():
    p = program([TensorSpec("x", (2, 2), "float32", "hbm", "input")], [], ["x"], [])
    with pytest.raises(ValueError, match=r"compiled for \(2, 2\)"):
        run_program(p, [np.zeros((3, 2), np.float32)])
    with pytest.raises(ValueError, match="takes 1 tensor inputs, got 0"):
        run_program(p, [])


def test_a_failing_instruction_names_its_kernel_line():
    loc = SourceLoc("kern.py", 12, 4, None, "    nisa.tensor_tensor(...)")
    t = [TensorSpec("o", (1, 2), "float32", "sbuf", "output")]
    bad = Instruction("tensor_tensor", "vector", {"dst": ap("o", (1, 2))}, {"data1": ap("o", (1, 2)),
                                                                          "data2": ap("o", (1, 2))},
                      {"op": "no_such_op"}, loc)
    with pytest.raises(SimulationError) as info:
        run_program(program(t, [bad], outputs=["o"]), [])
    assert "kern.py:12" in str(info.value) and "no_such_op" in str(info.value)


def test_concurrent_runs_are_independent():
    p = program([TensorSpec("x", (4, 64), "float32", "sbuf", "input"), TensorSpec("t", (4, 64), "float32", "sbuf"),
                 TensorSpec("o", (4, 64), "float32", "sbuf", "output")],
                [ins("activation", "scalar", {"dst": ap("t", (4, 64))}, {"data": ap("x", (4, 64))}, op="exp"),
                 ins("tensor_copy", "vector", {"dst": ap("o", (4, 64))}, {"src": ap("t", (4, 64))})],
                ["x"], ["o"])
    ex, errors = Executor(p, checked=True), []

    def work(v):
        x = np.full((4, 64), v, np.float32)
        for _ in range(50):
            if not np.array_equal(ex.run([x])[0], np.exp(x)):
                errors.append(v)

    threads = [threading.Thread(target=work, args=(v,)) for v in (0.0, 1.0, 2.0)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors


@pytest.mark.parametrize("dtype", ["float8_e5m2", "float8_e4m3fn", "float8_e4m3", "bfloat16", "float4_e2m1fn"])
def test_strided_views_of_every_ml_dtype(dtype):
    """Every-other-column views of ml_dtypes buffers (as_strided alone loses float8_e5m2's dtype)."""
    x = np.array([[1, 2, 3, 4]], np.float32)
    t = [TensorSpec("x", (1, 4), "float32", "sbuf", "input"), TensorSpec("o", (1, 4), dtype, "sbuf", "output")]
    half = AccessPattern("o", 0, ((4, 1), (2, 2)))
    p = program(t, [ins("memset", "vector", {"dst": ap("o", (1, 4))}, {}, value=0.0),
                    ins("tensor_copy", "vector", {"dst": half}, {"src": AccessPattern("x", 0, ((4, 1), (2, 2)))})],
                ["x"], ["o"])
    assert run_program(p, [x])[0].astype(np.float32).tolist() == [[1, 0, 3, 0]]


def test_blas_is_pinned_while_running_and_restored_after(monkeypatch):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from nkihub.simulator import executor
    # The controller is built on first use; libraries loaded since (scipy brings its own OpenBLAS when an
    # earlier test imported it) are only seen by a fresh one.
    monkeypatch.setattr(executor, "_blas", None)

    def blas_threads():
        return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]

    before, seen = blas_threads(), []
    with executor.blas_pinned():
        seen.append(blas_threads())
        with executor.blas_pinned():        # nested (another run inside): still pinned
            seen.append(blas_threads())
        seen.append(blas_threads())
    assert all(all(n == 1 for n in s) for s in seen) and blas_threads() == before
    monkeypatch.setenv("NKIHUB_SIM_THREADS", "0")
    with executor.blas_pinned():
        assert blas_threads() == before
