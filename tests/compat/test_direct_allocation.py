"""Direct allocation (``ncc.sbuf.alloc`` / ``mod_alloc``, ``ncc.psum.alloc`` / ``mod_alloc``), as the NKI
Direct Allocation guide and the API pages describe it: each logical block of a [B..., P, F...] tensor goes
to the physical tile the placement function names; blocks on one tile share its bytes."""
import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
from neuronxcc.nki.language import par_dim
from nkihub.nki.errors import KernelRuleError
from nkihub.simulator.costmodel import schedule
from nkihub.simulator.targets import get_target

ncc = nki.compiler


def _direct(program):
    return [s for s in program.tensors.values() if s.pinned]


def exp_rows(tiles):
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((4, par_dim(128), 512), dtype=nl.bfloat16,
                       buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(tiles,)))
        for i in nl.affine_range(4):
            t[i, :, :] = nl.load(x[i * 128:(i + 1) * 128, :])
            nl.store(out[i * 128:(i + 1) * 128, :], nl.exp(t[i, :, :]))
        return out
    return kernel


def test_modulo_allocation_is_double_buffering():
    # The guide's example: 4 blocks of [128, 512] bf16 on 2 tiles, block i at byte (i % 2) * 1024.
    x = np.random.default_rng(0).standard_normal((512, 512)).astype(nl.bfloat16)
    kernel = exp_rows(2)
    np.testing.assert_allclose(kernel(x).astype(np.float32), np.exp(x.astype(np.float32)), rtol=1e-2)
    prog = kernel.trace(x)
    (phys,) = _direct(prog)
    assert (phys.address, phys.bytes_per_partition) == (0, 2 * 1024)   # two physical tiles, not four
    loads = [i for i in prog.instructions if i.opcode == "dma_copy" and i.dst["dst"].tensor == phys.name]
    assert [ld.dst["dst"].offset * 2 for ld in loads] == [0, 1024, 0, 1024]


def test_shared_tiles_make_the_cost_model_wait():
    # On one tile, loading block i+1 must wait until block i has been read (write after read on the same
    # bytes); with two tiles the load runs ahead.
    x = np.zeros((512, 512), nl.bfloat16)
    waits = {}
    for tiles in (1, 2):
        prog = exp_rows(tiles).trace(x)
        sch = schedule(prog, get_target("trn2"))
        loads = [k for k, i in enumerate(prog.instructions) if i.opcode == "dma_copy" and
                 prog.tensors[i.dst["dst"].tensor].pinned]
        reads = [k for k, i in enumerate(prog.instructions) if i.opcode == "activation"]
        waits[tiles] = reads[0] in sch.waits[loads[1]]
    assert waits == {1: True, 2: False}


def test_alloc_function_places_each_block():
    # Blocks in reverse order, 2 KiB apart from byte 8192.
    def place(idx, pdim_size, fdim_size):
        assert (pdim_size, fdim_size) == (64, 2048)
        return 0, 8192 + (2 - idx[0]) * fdim_size

    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((3, par_dim(64), 512), dtype=nl.float32, buffer=ncc.sbuf.alloc(place))
        for i in nl.affine_range(3):
            t[i] = nl.load(x[i])
            nl.store(out[i], nl.multiply(t[i], 2.0))
        return out

    x = np.random.default_rng(1).standard_normal((3, 64, 512)).astype(np.float32)
    np.testing.assert_allclose(kernel(x), 2 * x, rtol=1e-6)
    (phys,) = _direct(kernel.trace(x))
    assert (phys.address, phys.bytes_per_partition) == (8192, 3 * 2048)


def test_psum_modulo_allocation_takes_the_banks_it_names():
    @nki.jit
    def kernel(a, b):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        ps = nl.ndarray((4, par_dim(128), 512), dtype=nl.float32,
                        buffer=ncc.psum.mod_alloc(base_bank=2, num_bank_tiles=(2,)))
        acc = nl.zeros((128, 512), nl.float32, buffer=nl.sbuf)
        at, bt = nl.load(a), nl.load(b)
        for i in nl.affine_range(4):
            ps[i] = nl.matmul(at, bt, transpose_x=True)
            acc += ps[i]
        nl.store(out, acc)
        return out

    a = np.random.default_rng(2).standard_normal((128, 128)).astype(np.float32)
    b = np.random.default_rng(3).standard_normal((128, 512)).astype(np.float32)
    np.testing.assert_allclose(kernel(a, b), 4 * (a.T @ b), rtol=1e-4, atol=1e-3)
    (phys,) = _direct(kernel.trace(a, b))
    assert (phys.buffer, phys.address, phys.bytes_per_partition) == ("psum", 2 * 2048, 2 * 2048)


def test_blocks_live_at_once_on_one_tile_are_an_error_at_the_line():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((128, 512), x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((2, par_dim(128), 512), dtype=nl.float32,
                       buffer=ncc.sbuf.mod_alloc(base_addr=1024, num_free_tiles=(1,)))
        t[0] = nl.load(x[0:128, :])
        t[1] = nl.load(x[128:256, :])            # overwrites block 0, which the add still reads
        nl.store(out, nl.add(t[0], t[1]))
        return out

    with pytest.raises(KernelRuleError, match="direct-allocation-overlap") as err:
        kernel(np.ones((256, 512), np.float32))
    assert err.value.loc.text.strip().startswith("t[1] = nl.load")
    assert "block (0,)" in err.value.message and "block (1,)" in err.value.message


def test_two_tensors_on_the_same_bytes():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((128, 64), x.dtype, buffer=nl.shared_hbm)
        a = nl.ndarray((par_dim(128), 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        b = nl.ndarray((par_dim(128), 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=128))
        a[...] = nl.load(x)
        b[...] = nl.exp(a)                       # b's bytes 128..383 cover the second half of a's 0..255
        nl.store(out, nl.add(a, b))
        return out

    with pytest.raises(KernelRuleError, match="direct-allocation-overlap"):
        kernel(np.ones((128, 64), np.float32))


def test_reading_a_shared_tile_before_writing_the_block():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((128, 64), x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((2, par_dim(128), 64), dtype=nl.float32,
                       buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(1,)))
        t[0] = nl.load(x)
        nl.store(out, t[0])
        nl.store(out, t[1])                      # block 1 was never written: its bytes hold block 0
        return out

    with pytest.raises(KernelRuleError, match="read-uninitialized"):
        kernel(np.ones((128, 64), np.float32))


@pytest.mark.parametrize("buffer, rule", [
    (lambda: ncc.sbuf.mod_alloc(base_addr=190 * 1024), "sbuf-capacity"),      # past SBUF (and its reserve)
    (lambda: ncc.psum.mod_alloc(base_bank=8), "psum-capacity"),                # banks are 0..7
    (lambda: ncc.sbuf.mod_alloc(base_addr=0, base_partition=32), "start-partition"),
])
def test_placements_outside_the_memory_name_the_declaration(buffer, rule):
    @nki.jit
    def kernel(x):
        t = nl.ndarray((par_dim(128), 512), dtype=nl.float32, buffer=buffer())
        t[...] = nl.load(x)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    with pytest.raises(KernelRuleError, match=rule) as err:
        kernel.run(np.ones((128, 512), np.float32), target="trn1")
    assert "nl.ndarray((par_dim(128), 512)" in err.value.loc.text


def test_a_psum_tile_fits_one_bank():
    @nki.jit
    def kernel(x):
        t = nl.ndarray((par_dim(128), 1024), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))
        t[...] = nl.load(x)
        return t

    with pytest.raises(KernelRuleError, match="psum-capacity"):
        kernel(np.ones((128, 1024), np.float32))


def test_automatic_tiles_go_around_direct_ones():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        keep = nl.ndarray((par_dim(128), 2048), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        keep[...] = nl.load(x)
        e = nl.exp(keep)                          # intermediate tiles: placed by nkihub
        nl.store(out, nl.add(e, keep))
        return out

    x = np.random.default_rng(4).standard_normal((128, 2048)).astype(np.float32)
    np.testing.assert_allclose(kernel(x), np.exp(x) + x, rtol=1e-5)
    prog = kernel.trace(x)
    (phys,) = _direct(prog)
    others = [s for s in prog.tensors.values() if s.buffer == "sbuf" and not s.pinned and s.address is not None]
    assert others and all(s.address >= 2048 * 4 for s in others)
    assert ncc.sbuf.auto_alloc() == nl.sbuf and ncc.psum.auto_alloc() == nl.psum


def test_a_declaration_in_a_loop_body_is_placed_once():
    # neuronxcc traces a loop body once: a tensor declared in it gets one placement, even when the kernel
    # advances an address counter in the body (as nki-samples' pipelined_attention does).
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        addr = 0
        for i in nl.sequential_range(x.shape[0] // 128):
            t = nl.ndarray((par_dim(128), 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=addr))
            addr += 100 * 1024                    # a second placement would leave SBUF
            t[...] = nl.load(x[i * 128:(i + 1) * 128, :])
            nl.store(out[i * 128:(i + 1) * 128, :], t)
        return out

    x = np.random.default_rng(5).standard_normal((384, 64)).astype(np.float32)
    np.testing.assert_array_equal(kernel.run(x, target="trn1"), x)
    assert [(s.address, s.bytes_per_partition) for s in _direct(kernel.trace(x, target="trn1"))] == [(0, 256)]
