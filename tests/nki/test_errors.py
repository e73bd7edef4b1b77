"""Every validation rule of issue 2, triggered by a small kernel: the error names the rule, points at the
offending kernel line (``file:line`` from inspect, the source line and a caret) and shows no frame of
nkihub's own code."""
from __future__ import annotations

import inspect
import re
import traceback
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkihub.nki.errors import KernelRuleError

ROOT = Path(nki.__file__).resolve().parent.parent
INTERNAL = [str(ROOT / pkg) for pkg in ("nki", "simulator", "kernels", "hub_client", "_toplevel")]
F32, BF16 = np.float32, ml_dtypes.bfloat16


def a(*shape, dtype=F32):
    return np.ones(shape, dtype)


def check(kernel, args, rule, *, target="trn2", message=None) -> KernelRuleError:
    """Run ``kernel`` and check the error against the line of its source marked ``# ERR``."""
    with pytest.raises(KernelRuleError) as info:
        kernel.run(*args, target=target)
    err = info.value
    lines, first = inspect.getsourcelines(kernel.fn)
    (idx,) = [i for i, text in enumerate(lines) if text.rstrip().endswith("# ERR")]
    text = str(err)
    assert err.rule == rule, text
    assert text.endswith(f"[rule: {rule}]")
    head, source, caret, *rest = text.split("\n")
    assert re.fullmatch(re.escape(f"{__file__}:{first + idx}:") + r"\d+", head), head
    assert source.strip() == lines[idx].strip()
    assert re.fullmatch(r" +\^+", caret)
    assert rest[0].startswith("error: ")
    if message:
        assert message in text, text
    rendered = "".join(traceback.format_exception_only(type(err), err))
    assert not any(p in rendered for p in INTERNAL), rendered
    assert err.__cause__ is None and err.__suppress_context__
    return err


def out_of(x):
    return nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)


# -- partition dim ---------------------------------------------------------------------------------------------
@nki.jit
def k_partitions(x):
    out = out_of(x)
    t = nl.ndarray((256, 4), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)  # ERR
    nl.store(out, t)
    return out


def test_partition_dim_over_128():
    e = check(k_partitions, (a(256, 4),), "partition-dim-limit", message="the partition dim (dim 0) is 256")
    assert e.shape == (256, 4) and e.buffer == "sbuf"


# -- matmul -----------------------------------------------------------------------------------------------------
def _mm(k, m, n, *, dt=BF16, st_buf=nl.sbuf, dst_buf=nl.psum, dst_dt=nl.float32, mv_dt=None):
    @nki.jit
    def kernel(x, y):
        out = nl.ndarray((m, n), nl.float32, buffer=nl.shared_hbm)
        s = nl.ndarray((k, m), x.dtype, buffer=st_buf)
        v = nl.ndarray((k, n), y.dtype, buffer=nl.sbuf)
        nl.store(s, 0.0) if st_buf is nl.psum else nisa.dma_copy(dst=s, src=x)
        nisa.dma_copy(dst=v, src=y)
        p = nl.ndarray((m, n), dst_dt, buffer=dst_buf)
        nisa.nc_matmul(p, s, v)  # ERR
        nl.store(out, nl.copy(p, dtype=nl.float32))
        return out
    return kernel, (a(k, m, dtype=dt), a(k, n, dtype=mv_dt or dt))


@pytest.mark.parametrize("case,rule,message", [
    ((128, 129, 64), "matmul-stationary-size", "the stationary free size is 129; at most 128"),
    ((128, 64, 513), "matmul-moving-size", "the moving free size is 513; at most 512"),
])
def test_matmul_operand_limits(case, rule, message):
    kernel, args = _mm(*case)
    check(kernel, args, rule, message=message)


def test_matmul_contraction_dims_must_match():
    @nki.jit
    def kernel(x, y):
        out = nl.ndarray((8, 8), nl.float32, buffer=nl.shared_hbm)
        s, v = nl.load(x), nl.load(y)
        p = nl.ndarray((8, 8), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(p, s, v)  # ERR
        nl.store(out, nl.copy(p))
        return out
    check(kernel, (a(16, 8, dtype=BF16), a(8, 8, dtype=BF16)), "matmul-contraction",
          message="stationary has 16, moving has 8")


def test_matmul_buffers():
    kernel, args = _mm(8, 8, 8, dst_buf=nl.sbuf)
    check(kernel, args, "matmul-buffer", message="the matmul output must be a PSUM tile")


def test_matmul_dtypes():
    kernel, args = _mm(8, 8, 8, dt=np.int32)
    check(kernel, args, "matmul-dtype", message="Tensor Engine inputs must be one of")
    kernel, args = _mm(8, 8, 8, dt=F32, mv_dt=BF16)
    check(kernel, args, "matmul-dtype", message="if one matmul input is float32 the other must be float32")


def test_bf16_psum_output_is_trn3_only():
    kernel, args = _mm(8, 8, 8, dst_dt=nl.bfloat16)
    check(kernel, args, "matmul-dtype", message="must be float32 on trn2")
    np.testing.assert_array_equal(kernel.run(*args, target="trn3"), np.full((8, 8), 8, F32))


# -- PSUM banks and accumulation ---------------------------------------------------------------------------------
@nki.jit
def k_bank(x, y):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    s, v = nl.load(x), nl.load(y)
    p = nl.ndarray((128, 1024), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(p[:, 256:768], s, v)  # ERR
    nl.store(out, nl.copy(p[:, 256:768]))
    return out


def test_matmul_output_may_not_cross_a_psum_bank():
    check(k_bank, (a(128, 128, dtype=BF16), a(128, 512, dtype=BF16)), "psum-bank",
          message="crossing a 2048-byte PSUM bank")


@nki.jit
def k_accumulate_fresh(x, y):
    out = nl.ndarray((8, 8), nl.float32, buffer=nl.shared_hbm)
    s, v = nl.load(x), nl.load(y)
    p = nl.ndarray((8, 8), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(p, s, v, accumulate=True)  # ERR
    nl.store(out, nl.copy(p))
    return out


def test_accumulating_onto_an_unwritten_psum_tile():
    check(k_accumulate_fresh, (a(8, 8, dtype=BF16), a(8, 8, dtype=BF16)), "read-uninitialized",
          message="operand 'dst'")


@nki.jit
def k_psum_capacity(x):
    out = out_of(x)
    t = nl.load(x)
    tiles = []
    for i in range(9):
        p = nl.ndarray((128, 4), nl.float32, buffer=nl.psum)  # ERR
        nisa.tensor_copy(p, t)
        tiles.append(p)
    acc = nl.copy(tiles[0])
    for p in tiles[1:]:
        acc = nl.add(acc, p)
    nl.store(out, acc)
    return out


def test_psum_capacity():
    check(k_psum_capacity, (a(128, 4),), "psum-capacity", message="8 banks of 2 KiB per partition")


# -- engines and buffers --------------------------------------------------------------------------------------
@nki.jit
def k_gpsimd_psum(x):
    out = out_of(x)
    p = nl.ndarray(x.shape, nl.float32, buffer=nl.psum)
    nisa.tensor_copy(p, nl.load(x))
    t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(t, p, engine=nisa.engine.gpsimd)  # ERR
    nl.store(out, t)
    return out


@nki.jit
def k_engine_on_hbm(x):
    out = out_of(x)
    nisa.tensor_copy(out, x)  # ERR
    return out


@nki.jit
def k_dma_psum(x):
    out = out_of(x)
    p = nl.ndarray(x.shape, nl.float32, buffer=nl.psum)
    nisa.dma_copy(dst=p, src=x)  # ERR
    nl.store(out, nl.copy(p))
    return out


@nki.jit
def k_wrong_engine(x):
    out = out_of(x)
    t = nl.load(x)
    nisa.tensor_tensor(t, t, t, nl.add, engine=nisa.engine.scalar)  # ERR
    nl.store(out, t)
    return out


@pytest.mark.parametrize("kernel,rule,message", [
    (k_gpsimd_psum, "engine-buffer", "the GpSimd engine cannot access PSUM"),
    (k_engine_on_hbm, "engine-buffer", "cannot access SHARED_HBM"),
    (k_dma_psum, "dma-buffer", "DMA cannot access PSUM"),
    (k_wrong_engine, "engine", "tensor_tensor cannot run on the scalar engine"),
])
def test_engine_buffer_pairs(kernel, rule, message):
    check(kernel, (a(4, 4),), rule, message=message)


# -- dtypes and shapes ----------------------------------------------------------------------------------------------
@nki.jit
def k_shape(x, y):
    out = out_of(x)
    nl.store(out, nl.add(nl.load(x), nl.load(y)))  # ERR
    return out


def test_operand_shapes_must_broadcast():
    check(k_shape, (a(4, 4), a(4, 3)), "shape-mismatch", message="do not broadcast")


# -- bounds, inputs, outputs, uninitialised reads -------------------------------------------------------------------
@nki.jit
def k_oob(x):
    out = out_of(x)
    nl.store(out, nl.load(x[0:4, 2:9]))  # ERR
    return out


@nki.jit
def k_oob_index(x):
    out = out_of(x)
    nl.store(out[4], nl.load(x[0]))  # ERR
    return out


@pytest.mark.parametrize("kernel,message", [(k_oob, "slice 2:9 is out of bounds for dim 1 of size 8"),
                                            (k_oob_index, "index 4 is out of bounds for dim 0 of size 4")])
def test_out_of_bounds(kernel, message):
    check(kernel, (a(4, 8),), "index-out-of-bounds", message=message)


@nki.jit
def k_output_unwritten(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)  # ERR
    nl.store(out[0:2], nl.load(x[0:2]))
    return out


def test_output_never_written():
    check(k_output_unwritten, (a(4, 4),), "output-not-written", message="output 'out' has 8 of 16 elements")


@nki.jit
def k_uninitialised(x):
    out = out_of(x)
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nl.store(out, t)  # ERR
    return out


def test_read_of_memory_never_written():
    check(k_uninitialised, (a(4, 4),), "read-uninitialized", message="that nothing wrote")


# -- SBUF capacity per target -------------------------------------------------------------------------------------
@nki.jit
def k_big(x):
    out = out_of(x)
    t = nl.ndarray((128, 200 * 256), nl.float32, buffer=nl.sbuf)  # ERR
    nisa.dma_copy(dst=t, src=x)
    nl.store(out, t)
    return out


def test_sbuf_capacity_fits_trn3_not_trn1():
    x = a(128, 200 * 256)
    check(k_big, (x,), "sbuf-capacity", target="trn1", message="on trn1")
    np.testing.assert_array_equal(k_big.run(x, target="trn3"), x)


# -- loops ------------------------------------------------------------------------------------------------------
@nki.jit
def k_carried(x):
    out = out_of(x)
    acc = nl.load(x)
    for i in nl.affine_range(3):
        nisa.tensor_scalar(acc, acc, nl.subtract, 1.0)  # ERR
    nl.store(out, acc)
    return out


def test_loop_carried_dependency_in_affine_range():
    check(k_carried, (a(4, 4),), "loop-carried-dependency",
          message="affine_range iterations must be independent")


@nki.jit
def k_carried_sequential(x):
    out = out_of(x)
    acc = nl.load(x)
    for i in nl.sequential_range(3):
        nisa.tensor_scalar(acc, acc, nl.subtract, 1.0)
    nl.store(out, acc)
    return out


def test_sequential_range_may_carry():
    np.testing.assert_array_equal(k_carried_sequential(a(4, 4)), np.full((4, 4), -2, F32))


@nki.jit
def k_affine_reduction(x):
    out = out_of(x)
    acc = nl.zeros(x.shape, nl.float32)
    for i in nl.affine_range(3):
        acc += nl.load(x)
    nl.store(out, acc)
    return out


def test_associative_in_place_reduction_in_affine_range_is_legal():
    """NKI documents ``acc += ...`` inside affine_range as a reduction, not a carried dependency."""
    np.testing.assert_array_equal(k_affine_reduction(a(4, 4)), np.full((4, 4), 3, F32))


@nki.jit
def k_psum_accumulate(x, y):
    out = nl.ndarray((8, 8), nl.float32, buffer=nl.shared_hbm)
    p = nl.ndarray((8, 8), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(4):
        nisa.nc_matmul(p, nl.load(x[k * 8:(k + 1) * 8, :]), nl.load(y[k * 8:(k + 1) * 8, :]))
    nl.store(out, nl.copy(p))
    return out


def test_psum_matmul_accumulation_across_affine_range_is_legal():
    x, y = np.random.default_rng(1).standard_normal((2, 32, 8)).astype(BF16)
    np.testing.assert_allclose(k_psum_accumulate(x, y), x.astype(F32).T @ y.astype(F32), rtol=1e-5, atol=1e-5)


def test_identical_kernels_in_two_files_each_point_at_their_own_file(tmp_path):
    # Code objects of identical source compare equal across files; the location must still be the
    # file that was traced.
    import importlib.util
    source = ("import nki\nimport nki.language as nl\n\n@nki.jit\ndef k(x):\n"
              "    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)\n"
              "    nl.store(out, nl.load(x))\n    return out\n")
    errors = []
    for name in ("first_kernel", "second_kernel"):
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        with pytest.raises(KernelRuleError) as info:
            mod.k(np.zeros((256, 4), np.float32))
        errors.append(str(info.value))
    assert errors[0].startswith(f"{tmp_path / 'first_kernel.py'}:7:")
    assert errors[1].startswith(f"{tmp_path / 'second_kernel.py'}:7:")
