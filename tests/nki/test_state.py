"""nisa.rand2, the random generator state (rand_get_state / rand_set_state), get_nc_sub_version,
NkiInstruction and nl.average."""
from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkihub.nki.errors import KernelRuleError


@nki.jit(platform_target="trn3")
def replay(x):
    state = nl.ndarray((128, 6), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.rand_get_state(dst=state)
    a = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
    nisa.rand2(dst=a, min=-2.0, max=3.0)
    nisa.rand_set_state(src_seeds=state)
    b = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
    nisa.rand2(dst=b, min=-2.0, max=3.0)
    out = nl.ndarray((2, 128, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[0], src=a)
    nisa.dma_copy(dst=out[1], src=b)
    return out


def test_setting_the_read_state_replays_the_stream():
    out = replay(np.zeros(1, np.float32))
    np.testing.assert_array_equal(out[0], out[1])
    assert out.min() >= -2.0 and out.max() <= 3.0 and out.std() > 0.5


def test_rand2_is_neuroncore_v4_only():
    with pytest.raises(KernelRuleError, match="NeuronCore-v4"):
        replay.specialize(np.zeros(1, np.float32), target="trn2")


@nki.jit
def bad_state(x):
    s = nl.ndarray((128, 5), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.rand_get_state(dst=s)
    return x


def test_state_tile_size_is_checked():
    with pytest.raises(KernelRuleError, match="rng-state"):
        bad_state(np.zeros(1, np.float32))


def test_sub_version_and_instruction_handles():
    assert nisa.get_nc_sub_version() in (0, 1)
    ins = nisa.NkiInstruction("a")
    assert ins.depends_on(nisa.NkiInstruction("b")) is ins and len(ins.producers) == 1
    assert repr(nl.average) == "nl.average"


@nki.jit
def running_sum(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    c = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_cumulative(dst=c, src=t, op0=nl.multiply, op1=nl.add, imm0=0.5)
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=c)
    return out


def test_tensor_scalar_cumulative_is_a_running_reduction_per_partition():
    x = np.random.default_rng(3).standard_normal((16, 10)).astype(np.float32)
    np.testing.assert_allclose(running_sum(x), np.cumsum(x * 0.5, axis=1), rtol=1e-5, atol=1e-6)


def test_memory_region_typing_and_compile_kernel():
    import nki.compiler.kernel_builder as kb
    import nki.typing as nt

    @nki.jit
    def copy(x: nt.tensor[16, 10]):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.MemoryRegion.sbuf)   # an enum member as a buffer
        nisa.dma_copy(dst=t, src=x)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.MemoryRegion.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    program = kb.compile_kernel(copy, np.ones((16, 10), np.float32), target="trn2", cache=False)
    assert [ins.opcode for ins in program.instructions] == ["dma_copy", "dma_copy"]
    assert program.tensors[program.instructions[0].dst["dst"].tensor].buffer == "sbuf"


@nki.jit
def two_part_scan(x):
    """Scan the two halves of each row with two instructions; the second continues the first's
    accumulator registers (reduce_cmd=reduce), so together they scan the whole row."""
    p, f = x.shape
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    c = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    h = f // 2
    nisa.tensor_scalar_cumulative(dst=c[:, :h], src=t[:, :h], op0=nl.add, op1=nl.maximum, imm0=1.0,
                                  reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.tensor_scalar_cumulative(dst=c[:, h:], src=t[:, h:], op0=nl.add, op1=nl.maximum, imm0=1.0,
                                  reduce_cmd=nisa.reduce_cmd.reduce)
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=c)
    return out


def test_tensor_scalar_cumulative_reduce_continues_the_accumulator():
    # the ISA page: reset_reduce starts reg at op1's identity, reduce keeps reg as the engine left it
    x = np.random.default_rng(4).standard_normal((32, 12)).astype(np.float32)
    np.testing.assert_allclose(two_part_scan(x), np.maximum.accumulate(x + 1.0, axis=1), rtol=1e-6)


@nki.jit
def scan_from_nothing(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    c = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_cumulative(dst=c, src=t, op0=nl.add, op1=nl.add, imm0=0.0,
                                  reduce_cmd=nisa.reduce_cmd.reduce)
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=c)
    return out


def test_continuing_an_accumulator_nothing_set_is_an_error():
    with pytest.raises(KernelRuleError, match="nothing wrote"):
        scan_from_nothing(np.ones((8, 4), np.float32))


@nki.jit(platform_target="trn2")
def windowed_max(x, lo, hi):
    """range_select over three column blocks of x: the first resets the Vector Engine's accumulator
    registers, the next two fold into them (reduce_cmd=reduce), the last hands them to reduce_res."""
    p, f = x.shape
    w = f // 3
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    b0 = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
    b1 = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=b0, src=lo)
    nisa.dma_copy(dst=b1, src=hi)
    sel = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    res = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
    for k, cmd in enumerate((nisa.reduce_cmd.reset_reduce, nisa.reduce_cmd.reduce, nisa.reduce_cmd.reduce)):
        nisa.range_select(dst=sel[:, k * w:(k + 1) * w], on_true_tile=t[:, k * w:(k + 1) * w],
                          comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=b0, bound1=b1,
                          reduce_cmd=cmd, reduce_res=res if k == 2 else None, reduce_op=nl.maximum,
                          range_start=float(k * w), on_false_value=-1e30)
    out = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_range_select_reduce_continues_the_accumulator_across_instructions():
    # range_select's page: the reduction goes through the Vector Engine's accumulator registers, which
    # reduce_cmd=reduce keeps accumulating over (the reduce_cmd page)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((16, 12)).astype(np.float32)
    lo = rng.integers(0, 6, (16, 1)).astype(np.float32)
    hi = lo + rng.integers(1, 6, (16, 1)).astype(np.float32)
    idx = np.arange(12)[None, :]
    want = np.where((idx >= lo) & (idx < hi), x, -1e30).max(axis=1, keepdims=True)
    np.testing.assert_array_equal(windowed_max(x, lo, hi), want)
