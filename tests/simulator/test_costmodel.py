"""The cost model's properties a kernel engineer relies on (no timings of this machine are asserted)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nki
from cost_kernels import BF16, arrays, make_matmul, resident_matmul, two_engines
from nkihub.simulator import cost_rules as cr
from nkihub.simulator.costmodel import schedule
from nkihub.simulator.program import AccessPattern, Instruction, Program, TensorSpec
from nkihub.simulator.targets import get_target


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch):
    monkeypatch.setenv("NKI_CACHE_DIR", "off")


def _matmul_flops_s(K, M, N, dtype, target):
    return 2 * K * M * N / get_target(target).tensor_peak_flops[dtype]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(target=st.sampled_from(["trn1", "trn2", "trn3"]), fp32=st.booleans(), hoist=st.booleans(),
       kt=st.integers(1, 2), mt=st.integers(1, 2), nt=st.integers(1, 2), tile_n=st.sampled_from([128, 512]),
       extra=st.integers(0, 2), act=st.booleans())
def test_estimate_never_beats_the_roofline(target, fp32, hoist, kt, mt, nt, tile_n, extra, act):
    K, M, N = 128 * kt, 128 * mt, tile_n * nt
    dtype = np.float32 if fp32 else BF16
    kernel = make_matmul(hoist=hoist, tile_n=tile_n, extra_vector=extra, activation=act)
    r = nki.profile(kernel, *arrays((K, M), (K, N), dtype=dtype), target=target)
    tgt = get_target(target)
    flops_s = _matmul_flops_s(K, M, N, "float32" if fp32 else "bfloat16", target)
    itemsize = 4 if fp32 else 2
    hbm_bytes = itemsize * (K * M * (1 if hoist else N // tile_n) + K * N * mt + M * N)
    assert r.hbm_bytes == hbm_bytes
    assert r.flops == 2 * K * M * N
    assert r.latency_s >= flops_s * (1 - 1e-9)
    assert r.latency_s >= hbm_bytes / tgt.hbm_bytes_per_s * (1 - 1e-9)
    assert r.latency_s >= r.roofline_s * (1 - 1e-9)
    assert 0 < r.mfu <= 1 and r.mfu <= r.hfu + 1e-12


def test_large_matmul_scales_with_flops_tiny_one_is_overhead_bound():
    small = nki.profile(resident_matmul, *arrays((512, 1024), (512, 1024)), target="trn2")
    large = nki.profile(resident_matmul, *arrays((1024, 1024), (1024, 1024)), target="trn2")
    ratio = large.latency_s / small.latency_s
    assert 1.6 < ratio <= 2.05, ratio       # twice the flops, about twice the time
    assert large.bottleneck == "tensor"
    tiny = nki.profile(resident_matmul, *arrays((128, 128), (128, 512)), target="trn2")
    assert tiny.latency_s > 20 * _matmul_flops_s(128, 128, 512, "bfloat16", "trn2")
    assert tiny.latency_s > 2 * cr.DMA_FIXED_LATENCY_S   # a load and a store, each with its fixed latency
    assert tiny.bottleneck == "dma" and tiny.mfu < 0.1


def test_well_tiled_matmul_keeps_the_tensor_engine_busy():
    r = nki.profile(resident_matmul, *arrays((1024, 1024), (1024, 2048)), target="trn2")
    assert r.engine_active["tensor"] > 0.6 and r.mfu > 0.6


def test_back_to_back_matmuls_sustain_the_documented_trn2_tensor_engine_peak():
    """The Trainium2 architecture page: 79 BF16 and 20 FP32 dense TFLOPS per NeuronCore-v3. Back-to-back
    128x128x512 matmuls accumulating in PSUM, the stationary loaded behind the previous moving tensor (fast
    weight load), keep the Tensor Engine at that rate: its busy time is the flops at the peak (within the
    page's rounding)."""
    K, M, N = 1024, 1024, 2048
    for dtype, peak in ((BF16, 79e12), (np.float32, 20e12)):
        r = nki.profile(resident_matmul, *arrays((K, M), (K, N), dtype=dtype), target="trn2")
        assert r.engine_busy_s["tensor"] == pytest.approx(2 * K * M * N / peak, rel=0.02)


def test_hoisting_loads_out_of_the_inner_loop_lowers_the_estimate():
    args = arrays((512, 256), (512, 1024))
    for target in ("trn1", "trn2"):
        naive = nki.profile(make_matmul(hoist=False), *args, target=target)
        hoisted = nki.profile(make_matmul(hoist=True), *args, target=target)
        assert hoisted.latency_s < naive.latency_s
        assert hoisted.hbm_bytes < naive.hbm_bytes and hoisted.dma_count < naive.dma_count


def test_fp32_matmul_is_about_four_times_slower_on_the_tensor_engine():
    bf = nki.profile(resident_matmul, *arrays((512, 512), (512, 1024)), target="trn2")
    f32 = nki.profile(resident_matmul, *arrays((512, 512), (512, 1024), dtype=np.float32), target="trn2")
    assert f32.engine_busy_s["tensor"] / bf.engine_busy_s["tensor"] == pytest.approx(cr.FP32_MATMUL_SLOWDOWN)
    assert f32.latency_s > 2 * bf.latency_s


def test_trn1_and_trn2_differ_as_their_tables_do():
    args = arrays((512, 512), (512, 1024))
    r1 = nki.profile(resident_matmul, *args, target="trn1")
    r2 = nki.profile(resident_matmul, *args, target="trn2")
    t1, t2 = get_target("trn1"), get_target("trn2")
    assert r2.engine_busy_s["tensor"] / r1.engine_busy_s["tensor"] == pytest.approx(t1.tensor_clock_hz / t2.tensor_clock_hz)
    assert r2.engine_busy_s["vector"] / r1.engine_busy_s["vector"] == pytest.approx(t1.vector_clock_hz / t2.vector_clock_hz)
    assert r1.hbm_bytes == r2.hbm_bytes
    assert r1.hbm_bandwidth_use == pytest.approx(r1.hbm_bytes / t1.hbm_bytes_per_s / r1.latency_s)
    # A DMA-bound copy: the faster DMA engines of trn2 finish sooner.
    copy1 = nki.profile(two_engines, *arrays((128, 8192), (128, 8192)), dependent=False, target="trn1")
    copy2 = nki.profile(two_engines, *arrays((128, 8192), (128, 8192)), dependent=False, target="trn2")
    assert copy2.engine_busy_s["dma"] < copy1.engine_busy_s["dma"]


def test_independent_engines_overlap_and_dependent_ones_wait():
    a, b, c, d = (_tile(n, 8192 * k, shape=(128, 1024)) for k, n in enumerate("abcd"))

    def prog(scalar_reads):
        p = Program("two", {t.name: t for t in (a, b, c, d)}, meta={"target": "trn2"})
        p.instructions = [
            Instruction("tensor_scalar", "vector", {"dst": _ap(c)}, {"data": _ap(a)}, {"op0": "add", "operand0": 1.0}),
            Instruction("activation", "scalar", {"dst": _ap(d)}, {"data": _ap(scalar_reads)}, {"op": "exp"})]
        return p

    free, dep = schedule(prog(b)), schedule(prog(c))
    assert free.queue == ["vector", "scalar"]
    assert free.start == [0.0, 0.0] and free.waits[1] == ()          # both engines run at once
    assert free.latency_s == pytest.approx(max(free.cost))
    gap = cr.ACCESS_START_CYCLES / get_target("trn2").scalar_clock_hz
    assert dep.start[1] == pytest.approx(dep.end[0] + gap)           # waits for the result, then the access
    assert dep.waits[1] == (0,) and dep.pred[1] == 0                 # a semaphore edge vector -> scalar
    assert dep.latency_s == pytest.approx(sum(dep.cost) + gap)


def test_a_kernel_consumer_waits_for_its_producer():
    x = np.zeros((128, 512), np.float32)
    prog = nki.compile(two_engines, x, x, dependent=True, target="trn2")
    sch = schedule(prog)
    ops = {ins.opcode: i for i, ins in enumerate(prog.instructions) if ins.engine != "dma"}
    assert sch.start[ops["activation"]] > sch.end[ops["tensor_scalar"]]
    loads = [i for i, ins in enumerate(prog.instructions) if ins.opcode == "dma_copy"][:2]
    assert sch.start[ops["tensor_scalar"]] > sch.end[loads[0]]


def _tile(name, address, shape=(128, 64), dtype="float32", buffer="sbuf", kind="internal"):
    return TensorSpec(name, shape, dtype, buffer, kind, None, address)


def _ap(spec):
    return AccessPattern(spec.name, 0, ((spec.shape[1], spec.shape[0]), (1, spec.shape[1])))


def _reuse_program(second_address):
    a, b, c = _tile("a", 0), _tile("b", 4096), _tile("c", second_address)
    prog = Program("reuse", {t.name: t for t in (a, b, c)}, meta={"target": "trn2"})
    prog.instructions = [
        Instruction("memset", "vector", {"dst": _ap(a)}, {}, {"value": 1.0}),
        Instruction("activation", "scalar", {"dst": _ap(b)}, {"data": _ap(a)}, {"op": "exp"}),
        Instruction("memset", "gpsimd", {"dst": _ap(c)}, {}, {"value": 2.0}),
    ]
    return prog


def test_address_reuse_creates_a_false_dependency():
    shared = schedule(_reuse_program(0))      # c reuses a's bytes: must wait until the Scalar read ends
    apart = schedule(_reuse_program(8192))
    assert shared.start[2] >= shared.end[1]
    assert 1 in shared.waits[2]
    assert apart.start[2] == 0.0 and apart.waits[2] == ()


def _blocks_program(block_addresses):
    """A tensor of two 256 B blocks: block 0 written then read by the Scalar Engine, block 1 written by
    GpSimd; whether the last write waits depends only on where the blocks were placed."""
    t = TensorSpec("blk", (128, 2, 64), "float32", "sbuf", address=block_addresses[0], block_bytes=256,
                   block_addresses=block_addresses)
    out = _tile("out", 4096)
    b0, b1 = (AccessPattern("blk", b * 64, ((128, 128), (1, 64))) for b in (0, 1))
    prog = Program("blocks", {"blk": t, "out": out}, meta={"target": "trn2"})
    prog.instructions = [
        Instruction("memset", "vector", {"dst": b0}, {}, {"value": 1.0}),
        Instruction("activation", "scalar", {"dst": _ap(out)}, {"data": b0}, {"op": "exp"}),
        Instruction("memset", "gpsimd", {"dst": b1}, {}, {"value": 2.0}),
    ]
    return prog


def test_blocks_depend_through_their_own_addresses():
    shared = schedule(_blocks_program((0, 0)))       # block 1 placed where block 0 was: a false dependency
    apart = schedule(_blocks_program((0, 8192)))
    assert 1 in shared.waits[2] and shared.start[2] >= shared.end[1]
    assert apart.start[2] == 0.0 and apart.waits[2] == ()


def test_partition_halves_are_independent():
    a = _tile("a", 0)
    lo = AccessPattern("a", 0, ((64, 64), (1, 64)))
    hi = AccessPattern("a", 64 * 64, ((64, 64), (1, 64)))
    prog = Program("halves", {"a": a}, meta={"target": "trn2"})
    prog.instructions = [Instruction("memset", "vector", {"dst": lo}, {}, {"value": 1.0}),
                         Instruction("memset", "gpsimd", {"dst": hi}, {}, {"value": 1.0})]
    s = schedule(prog)
    assert s.start[1] == 0.0


def test_a_chain_of_dependent_tiny_instructions_costs_about_100_cycles_a_link():
    a = _tile("a", 0, shape=(128, 8))
    prog = Program("chain", {"a": a}, meta={"target": "trn2"})
    ap = _ap(a)
    prog.instructions = [Instruction("memset", "vector", {"dst": ap}, {}, {"value": 1.0})] + [
        Instruction("tensor_scalar", "vector", {"dst": ap}, {"data": ap}, {"op0": "add", "operand0": 1.0})
        for _ in range(10)]
    s = schedule(prog)
    per_link = (s.end[-1] - s.end[0]) / 10 * get_target("trn2").vector_clock_hz
    assert 0.7 * cr.DEPENDENT_TINY_CYCLES < per_link < 1.5 * cr.DEPENDENT_TINY_CYCLES


def test_switching_the_activation_table_costs_extra():
    a, b = _tile("a", 0), _tile("b", 4096)
    def prog(ops):
        p = Program("act", {"a": a, "b": b}, meta={"target": "trn2"})
        p.instructions = [Instruction("memset", "vector", {"dst": _ap(a)}, {}, {"value": 1.0})] + [
            Instruction("activation", "scalar", {"dst": _ap(b)}, {"data": _ap(a)}, {"op": op}) for op in ops]
        return p
    same, switch = schedule(prog(["exp", "exp", "exp"])), schedule(prog(["exp", "tanh", "exp"]))
    extra = cr.ACT_TABLE_LOAD_CYCLES / get_target("trn2").scalar_clock_hz
    assert switch.latency_s == pytest.approx(same.latency_s + 2 * extra)


@nki.jit
def _copies(x, loads_first: bool, dge: str = "unknown"):
    """x -> out through SBUF in 128-row tiles: every load then every store, or load/store per tile; every
    DMA with ``dge_mode`` ``dge``."""
    mode = getattr(nisa.dge_mode, dge)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tiles = []
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :], dge_mode=mode)
        if not loads_first:
            nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=t, dge_mode=mode)
        tiles.append(t)
    for i, t in enumerate(tiles):
        if loads_first:
            nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=t, dge_mode=mode)
    return out


def test_many_independent_dmas_pipeline_across_queues():
    """16 small loads, then 16 stores: in flight together, far less than 32 fixed latencies in a row."""
    one = cr.DMA_FIXED_LATENCY_S + cr.DMA_DESCRIPTOR_S
    r = nki.profile(_copies, np.zeros((128 * 16, 16), BF16), True, target="trn2")
    assert r.dma_count == 32
    assert 2 * one < r.latency_s < 4 * one
    assert r.engine_active["dma"] > 0.9


def test_a_hardware_dge_generates_one_dmas_descriptors_at_a_time():
    """v3+, dge_mode=hwdge: each DMA takes about 600 ns of a DGE (Trainium2 architecture page), so the 32 DMAs
    of one trigger stream start at least DMA_DESCRIPTOR_S apart; a list-scheduled (neuronxcc) kernel may use
    both of the core's DGEs. Descriptors made before the run (the default here) pace nothing."""
    x = np.zeros((128 * 16, 16), BF16)
    program = nki.compile(_copies, x, True, "hwdge", target="trn2", cache=False)
    sch = schedule(program, "trn2")
    starts = sorted(sch.start[i] for i, ins in enumerate(program.instructions) if ins.engine == "dma")
    assert len(starts) == 32
    assert all(b - a >= cr.DMA_DESCRIPTOR_S * 0.999 for a, b in zip(starts, starts[1:]))
    assert sch.latency_s > 31 * cr.DMA_DESCRIPTOR_S
    program.meta["issue"] = "list"
    both = schedule(program, "trn2").latency_s
    assert 15 * cr.DMA_DESCRIPTOR_S < both < sch.latency_s
    default = nki.profile(_copies, x, True, target="trn2").latency_s
    assert default < 4 * (cr.DMA_FIXED_LATENCY_S + cr.DMA_DESCRIPTOR_S) < sch.latency_s
    assert nki.profile(_copies, x, True, "hwdge", target="trn1").latency_s == pytest.approx(
        nki.profile(_copies, x, True, target="trn1").latency_s)   # v2 has no DGE


def test_nki_dmas_are_triggered_in_program_order():
    """The NKI compiler keeps program order, DMAs included (one sequencer triggers them): with each tile's
    store written before the next tile's load, that load waits for the store, which waits for its own
    load, so the 16 pairs run one after another. The neuronxcc compiler starts each load when it can."""
    one = cr.DMA_FIXED_LATENCY_S + cr.DMA_DESCRIPTOR_S
    x = np.zeros((128 * 16, 16), BF16)
    r = nki.profile(_copies, x, False, target="trn2")
    assert r.dma_count == 32 and r.latency_s > 16 * one
    program = nki.compile(_copies, x, False, target="trn2", cache=False)
    program.meta["issue"] = "list"
    assert schedule(program, "trn2").latency_s < 4 * one


# -- v2 shared ports (hardware.md "Engines") ---------------------------------------------------------------

def _port_program(first, second):
    """Two independent instructions (engine, src buffer, dst buffer) on disjoint tiles."""
    tiles = {}

    def tile(buffer):
        spec = _tile(f"t{len(tiles)}", 8192 * len(tiles), shape=(128, 512), buffer=buffer)
        tiles[spec.name] = spec
        return _ap(spec)

    ins = [Instruction("tensor_copy", eng, {"dst": tile(dst)}, {"src": tile(src)}, {}) for eng, src, dst in (first, second)]
    return Program("ports", tiles, ins)


@pytest.mark.parametrize("first, second", [
    (("vector", "sbuf", "sbuf"), ("gpsimd", "sbuf", "sbuf")),      # the SBUF port: Vector / GpSimd
    (("vector", "psum", "sbuf"), ("scalar", "psum", "sbuf")),      # the PSUM port: Vector / Scalar
    (("scalar", "psum", "sbuf"), ("vector", "psum", "sbuf")),
])
def test_v2_shared_ports_serialise_what_v3_overlaps(first, second):
    on2, on1 = schedule(_port_program(first, second), "trn2"), schedule(_port_program(first, second), "trn1")
    assert on2.start == [0.0, 0.0]                                  # lifted on v3: both at once
    assert on1.start[0] == 0.0 and on1.start[1] == pytest.approx(on1.end[0])
    assert on1.pred[1] == 0 and on1.reason[1] == "port"
    assert on1.waits[1] == ()                                       # arbitration, not a semaphore


def test_v2_engines_without_a_shared_port_still_overlap():
    # Scalar and Vector share only the PSUM port, GpSimd and Scalar share nothing.
    for pair in ((("vector", "sbuf", "sbuf"), ("scalar", "sbuf", "sbuf")),
                 (("gpsimd", "sbuf", "sbuf"), ("scalar", "psum", "sbuf"))):
        assert schedule(_port_program(*pair), "trn1").start == [0.0, 0.0]


def test_v2_port_lets_the_other_engine_use_a_gap():
    """Vector copy, then a Vector copy waiting for a DMA: a later GpSimd copy uses the SBUF port in between
    (program order is not time order across queues), and no two SBUF users ever overlap."""
    prog = _port_program(("vector", "sbuf", "sbuf"), ("gpsimd", "sbuf", "sbuf"))
    x = TensorSpec("x", (128, 512), "float32", "hbm", "input")
    landed = _tile("landed", 4 * 8192, shape=(128, 512))
    out = _tile("out", 5 * 8192, shape=(128, 512))
    prog.tensors.update(x=x, landed=landed, out=out)
    gp = prog.instructions.pop()
    prog.instructions += [
        Instruction("dma_copy", "dma", {"dst": _ap(landed)}, {"src": _ap(x)}, {}),
        Instruction("tensor_copy", "vector", {"dst": _ap(out)}, {"src": _ap(landed)}, {}),
        gp]
    s = schedule(prog, "trn1")
    assert s.start[2] >= s.end[1] > s.end[0]                        # Vector #2 waits for the DMA
    assert s.start[3] == pytest.approx(s.end[0])                    # GpSimd fits before it
    assert s.end[3] <= s.start[2] and s.reason[3] == "port"
    assert schedule(prog, "trn2").start[3] == 0.0


# -- innermost strides over 16 bytes halve bandwidth ------------------------------------------------------

def _strided_program(engine, stride, dtype="float32"):
    """One ``engine`` copy of 512 elements per partition read with innermost ``stride`` (elements)."""
    a = _tile("a", 0, shape=(128, 4096), dtype=dtype)
    b = _tile("b", 32768, shape=(128, 512), dtype=dtype)
    src = AccessPattern("a", 0, ((4096, 128), (stride, 512)))
    return Program("strided", {"a": a, "b": b},
                   [Instruction("tensor_copy", engine, {"dst": _ap(b)}, {"src": src}, {})])


@pytest.mark.parametrize("engine", ["vector", "scalar", "gpsimd"])
def test_innermost_strides_over_16_bytes_halve_the_streaming_rate(engine):
    cost = lambda stride, dtype="float32": schedule(_strided_program(engine, stride, dtype), "trn2").cost[0]
    assert cost(4) == cost(1)                  # 16 bytes: not over the limit
    assert cost(8, "bfloat16") == cost(1, "bfloat16")
    assert cost(5) > cost(1) and cost(8) == cost(5)
    hz = get_target("trn2").clock_hz(engine)
    fixed = cr.GPSIMD_FIXED_CYCLES / hz if engine == "gpsimd" else 0.0
    # Double the streaming cycles, keep the fixed part (GpSimd's 150 cycles).
    assert cost(8) - fixed == pytest.approx(cr.STRIDE_PENALTY_SLOWDOWN * (cost(1) - fixed))
    assert cost(8) / cost(1) == pytest.approx(2.0, rel=0.25)


def test_a_strided_matmul_moving_operand_is_slower_and_a_strided_stationary_is_not():
    @nki.jit
    def mm(lhsT, rhs, every: int, stationary_every: int):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        st = nl.ndarray((128, 128 * stationary_every), dtype=lhsT.dtype, buffer=nl.sbuf)
        mv = nl.ndarray((128, 512 * every), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=st, src=lhsT[:, 0:128 * stationary_every])
        nisa.dma_copy(dst=mv, src=rhs[:, 0:512 * every])
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=st[:, ::stationary_every], moving=mv[:, ::every])
        res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out, src=res)
        return out

    args = arrays((128, 128 * 16), (128, 512 * 16))
    busy = lambda every, st_every: nki.profile(mm, *args, every=every, stationary_every=st_every,
                                               target="trn2").engine_busy_s["tensor"]
    assert busy(8, 1) == pytest.approx(busy(1, 1))                 # bf16 every 8th: 16 bytes
    assert busy(16, 1) == pytest.approx(cr.STRIDE_PENALTY_SLOWDOWN * busy(1, 1))
    assert busy(1, 16) == pytest.approx(busy(1, 1))               # LoadStationary is modelled as hidden


import nki.isa as nisa          # noqa: E402  (used by the kernel above)
import nki.language as nl       # noqa: E402


# -- scalar_tensor_tensor with a PSUM input streams at N --------------------------------------------------

def _stt_program(data_buffer: str):
    """One Vector scalar_tensor_tensor of 512 fp32 columns: data in ``data_buffer``, operand1 in SBUF."""
    d = _tile("d", 0, shape=(128, 512), buffer=data_buffer)
    o = _tile("o", 4096, shape=(128, 512))
    y = _tile("y", 8192, shape=(128, 512))
    attrs = {"op0": "multiply", "operand0": 2.0, "op1": "add"}
    return Program("stt", {"d": d, "o": o, "y": y},
                   [Instruction("scalar_tensor_tensor", "vector", {"dst": _ap(y)},
                                {"data": _ap(d), "operand1": _ap(o)}, attrs)])


def test_scalar_tensor_tensor_with_a_psum_input_runs_at_n_not_2n():
    hz = get_target("trn2").clock_hz("vector")
    sbuf = schedule(_stt_program("sbuf"), "trn2").cost[0]
    psum = schedule(_stt_program("psum"), "trn2").cost[0]
    assert sbuf == pytest.approx(2 * 512 / hz)     # two tensor inputs in SBUF: 2N
    assert psum == pytest.approx(512 / hz)         # one of them in PSUM: N (hardware.md)


# -- dma_transpose on v3+ (Trainium2 architecture page, "DMA Transpose") -----------------------------------

@nki.jit
def _transposed_load(x):
    """x [512, 128] bf16 in HBM -> its transpose [128, 512] in SBUF by the DMA engines, stored back."""
    t = nl.ndarray((x.shape[1], x.shape[0]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=x)
    out = nl.ndarray(t.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def _transposed_in_sbuf(x):
    """x [128, 128] bf16 loaded to SBUF, transposed SBUF to SBUF by the DMA engines, stored."""
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=a)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def _cost_of(kernel, x, opcode, target):
    program = nki.compile(kernel, x, target=target, cache=False)
    i = next(i for i, ins in enumerate(program.instructions) if ins.opcode == opcode)
    return schedule(program, target).cost[i]


def test_dma_transpose_runs_at_90_percent_of_the_dma_bandwidth_from_hbm_50_from_sbuf_on_trn2():
    engines = get_target("trn2").dma_bytes_per_s_per_engine * 16
    x = np.zeros((512, 128), BF16)
    assert _cost_of(_transposed_load, x, "dma_transpose", "trn2") == pytest.approx(x.nbytes / (engines * 0.9))
    y = np.zeros((128, 128), BF16)
    assert _cost_of(_transposed_in_sbuf, y, "dma_transpose", "trn2") == pytest.approx(y.nbytes / (engines * 0.5))
    # v2: a copy's cost (contiguous rows at the full rate of the engines it spreads over).
    assert _cost_of(_transposed_load, x, "dma_transpose", "trn1") == pytest.approx(
        cr.dma_transfer_s(x.nbytes, 128, x.nbytes, get_target("trn1")))
