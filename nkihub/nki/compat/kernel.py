"""Kernel entry points of the neuronxcc dialect: ``nki.jit``, ``nki.baremetal``, ``nki.benchmark``,
``nki.profile``, ``nki.simulate_kernel``, SPMD grids ``kernel[gx, gy]``.

Old kernels either return the outputs they allocate (``nl.shared_hbm``) or write into output arrays
passed as arguments (``nki.baremetal(k)(a, b, out)``). The second style is traced like the first: tensor
arguments the kernel writes become outputs, and their results are copied back into the caller's arrays.
Everything runs on the same simulator as ``@nki.jit``; benchmark and profile latencies come from the
cost model and are estimates.
"""
from __future__ import annotations

from nkihub.nki.jit import JitKernel
from nkihub.nki.tensor import NkiTensor


class CompatKernel(JitKernel):
    """A ``neuronxcc.nki`` kernel: ``@nki.jit`` semantics (output arguments written in place included)."""

    def _trace(self, bound, target, **kw):
        program = super()._trace(bound, target, **kw)
        program.meta["issue"] = "list"   # neuronxcc schedules the instructions itself (simulator.issue)
        return program

    def __getitem__(self, grid):
        # kernel[0]: neuronxcc launches such a kernel as it launches one without a grid, one program with
        # program_id 0 (nki-samples' pipelined_attention is launched flash_fwd[0](...) on one batch and
        # checks that program's output); any other grid is the SPMD launch of prod(grid) programs.
        if grid == 0 or grid == (0,) or grid == [0]:
            return type(self)(self.fn, (), self._cache, **self.options)
        return super().__getitem__(grid)

    def _set_outputs(self, program, ret) -> None:
        # This dialect's simulator hands back an on-chip tile a kernel returns (AWS's range_select example
        # returns its SBUF result): its values are stored into an HBM output of its shape at the end.
        def spill(t):
            if not isinstance(t, NkiTensor) or not t.spec.on_chip:
                return t
            from nkihub.nki import language as nl
            out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm, name=f"{t.name}_out")
            nl.store(out, t)
            return out
        if isinstance(ret, (tuple, list)):
            ret = type(ret)(spill(t) for t in ret)
        else:
            ret = spill(ret)
        super()._set_outputs(program, ret)


def _wrap(kernel, **options) -> CompatKernel:
    fn = kernel.fn if isinstance(kernel, JitKernel) else kernel
    return CompatKernel(fn, **options)


def jit(func=None, mode="auto", platform_target=None, **kwargs):
    """``@nki.jit`` of the neuronxcc dialect (every ``mode`` runs on the simulator); ``platform_target``
    ("trn1", "trn2", "trn3") is the target the kernel is traced for unless a call names another."""
    options = {"platform_target": platform_target} if platform_target else {}
    if func is None:
        return lambda f: _wrap(f, **options)
    return _wrap(func, **options)


def baremetal(kernel=None, **kwargs):
    """``nki.baremetal(kernel)(*arrays)``: run on the simulator with numpy arrays."""
    if kernel is None:
        return lambda k: _wrap(k)
    return _wrap(kernel)


def simulate_kernel(kernel, *args, **kwargs):
    """Run ``kernel`` (decorated or not) on the simulator with numpy arrays; returns its outputs."""
    k = kernel if isinstance(kernel, CompatKernel) else _wrap(kernel)
    if isinstance(kernel, JitKernel) and kernel.grid:
        k = k[kernel.grid]
    return k(*args, **kwargs)


class LatencyResult:
    """Latency of a benchmarked kernel (``get_latency_percentile(p)`` in microseconds). The simulator is
    deterministic, so every percentile is the cost model's single estimate."""

    def __init__(self, latency_us: float, iters: int):
        self.latency_us = float(latency_us)
        self.iters = int(iters)

    def get_latency_percentile(self, percentile) -> float:
        """The estimated latency in microseconds (equal for every ``percentile`` in 0..100)."""
        if not 0 <= float(percentile) <= 100:
            raise ValueError(f"percentile must be in [0, 100], got {percentile}")
        return self.latency_us

    def __repr__(self) -> str:
        return f"LatencyResult(estimate={self.latency_us:.3f} us)"


class BenchmarkResult:
    """What ``nki.benchmark`` leaves on the kernel: ``nc_latency`` (a :class:`LatencyResult`)."""

    def __init__(self, latency_us: float, iters: int):
        self.nc_latency = LatencyResult(latency_us, iters)


def estimate_latency_s(program, target) -> float:
    """Seconds the cost model estimates for ``program``: the scheduler's timeline when it is available,
    else the busiest engine's summed instruction costs (a lower bound)."""
    try:
        from nkihub.simulator.costmodel import schedule
    except ImportError:
        schedule = None
    if schedule is not None:
        return schedule(program, target).latency_s
    from nkihub.simulator.isa import opdef
    busy: dict[str, float] = {}
    for ins in program.instructions:
        busy[ins.engine] = busy.get(ins.engine, 0.0) + opdef(ins.opcode).cost(ins, program, target)
    return max(busy.values(), default=0.0)


class BenchmarkKernel(CompatKernel):
    """A kernel wrapped by ``nki.benchmark``/``nki.profile``: runs once on the simulator and records the
    cost model's latency estimate in ``benchmark_result``."""

    def __init__(self, fn, grid=(), cache=None, **options):
        super().__init__(fn, grid, cache, **options)
        self.benchmark_result = None
        self._launcher = None   # the kernel ``kernel[gx, gy]`` was taken from: it shows the result too

    def __getitem__(self, grid):
        k = super().__getitem__(grid)
        k.benchmark_result = None
        k._launcher = self
        return k

    def run(self, *args, target=None, **kwargs):
        out = super().run(*args, target=target, **kwargs)
        compiled = self.specialize(*args, target=target, **kwargs)
        latency = estimate_latency_s(compiled.program, compiled.target) * 1e6
        result = BenchmarkResult(latency, int(self.options.get("iters", 1)))
        k = self
        while k is not None:   # ``bench = nki.benchmark(...)(kernel); bench[2, 2](...)``: bench sees it
            k.benchmark_result = result
            k = k._launcher
        return out


def benchmark(kernel=None, **kwargs):
    """``nki.benchmark(warmup=, iters=, ...)(kernel)``: after a call, ``kernel.benchmark_result.nc_latency
    .get_latency_percentile(p)`` is the cost model's latency estimate in microseconds. File options
    (``save_neff_name``, ``save_trace_name``) are accepted and ignored."""
    def wrap(k):
        fn = k.fn if isinstance(k, JitKernel) else k
        return BenchmarkKernel(fn, **{key: v for key, v in kwargs.items() if key == "iters"})
    return wrap if kernel is None else wrap(kernel)


def profile(func=None, **kwargs):
    """``nki.profile(...)(kernel)``: run on the simulator and record the cost model's estimate, as
    ``nki.benchmark`` does (no NEFF/NTFF files are written)."""
    return benchmark(func, **kwargs)
