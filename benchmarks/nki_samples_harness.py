"""Run AWS's nki-samples kernels unmodified on the simulator, each against a reference, one row per case.

The samples are outside code: they never enter this repository. Get a checkout first:

    git clone https://github.com/aws-neuron/nki-samples /tmp/ext/samples
    .venv/bin/python benchmarks/nki_samples_harness.py                 # default checkout /tmp/ext/samples
    .venv/bin/python benchmarks/nki_samples_harness.py PATH -k mamba   # another checkout, some cases

Every case imports the sample's own module by path from the checkout (its directory goes on ``sys.path``
for the duration, so the sample's sibling imports work), calls its kernel on small legal shapes, and
compares with a reference: the sample's own numpy/torch reference where it has one that runs on a CPU,
else ours (written here, e.g. where the sample only has a JAX or torch-xla reference). The last line is
"N of M tutorial cases run unmodified and match".

More rows (``contributed/``, ``mxfp-matmul``) go in a table of their own beside ``TUTORIALS``, built from
the same ``Case`` and helpers, and registered in ``SUITES``.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

DEFAULT_CHECKOUT = Path("/tmp/ext/samples")
TUTORIALS_DIR = "src/nki_samples/tutorials"


@dataclass(frozen=True)
class Case:
    """One row: ``run(load)`` calls a sample kernel and raises (AssertionError or any error) unless it
    matches its reference. ``load(relpath)`` imports a module of the checkout by path."""
    name: str
    run: Callable[[Callable[[str], object]], None]
    reference: str = "theirs"   # "theirs": the sample's own reference; "ours": written here


class Loader:
    """Imports modules of one checkout by path, once each, with the module's folder on ``sys.path`` while
    it (and whatever it imports from its siblings) loads."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._mods: dict[Path, object] = {}

    def __call__(self, relpath: str):
        path = (self.root / relpath).resolve()
        if path not in self._mods:
            if not path.is_file():
                raise FileNotFoundError(f"{relpath} not found under {self.root}")
            name = "nki_samples_" + "_".join(path.relative_to(self.root.resolve()).with_suffix("").parts)
            spec = importlib.util.spec_from_file_location(name.replace("-", "_"), path)
            mod = importlib.util.module_from_spec(spec)
            with _on_path(path.parent), _no_bytecode():
                sys.modules[spec.name] = mod
                try:
                    spec.loader.exec_module(mod)
                except BaseException:
                    del sys.modules[spec.name]
                    raise
            self._mods[path] = mod
        return self._mods[path]


@contextlib.contextmanager
def _no_bytecode():
    # The checkout may be shared and read-only: write no __pycache__ into it.
    old, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        yield
    finally:
        sys.dont_write_bytecode = old


@contextlib.contextmanager
def _on_path(folder: Path):
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(str(folder))


# -- comparison helpers -----------------------------------------------------------------------------------
def as_f64(x) -> np.ndarray:
    """A kernel result or reference (numpy array, torch tensor, jax array) as float64 numpy."""
    if hasattr(x, "detach"):
        x = x.detach().float().numpy()
    return np.asarray(x).astype(np.float64)


def assert_close(got, want, rtol=1e-5, atol=1e-6, what="result") -> None:
    """``np.allclose(got, want, rtol, atol)`` with the worst element in the message."""
    got, want = as_f64(got), as_f64(want)
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {got.shape}, reference {want.shape}")
    bad = ~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=False)
    if bad.any():
        idx = np.unravel_index(np.argmax(np.where(bad, np.abs(got - want), -1)), got.shape)
        raise AssertionError(f"{what}: {int(bad.sum())} of {got.size} elements differ; worst at {idx}: "
                             f"{got[idx]!r} vs reference {want[idx]!r} (rtol={rtol}, atol={atol})")


def rng(seed=0) -> np.random.Generator:
    return np.random.default_rng(seed)


# -- tutorials ----------------------------------------------------------------------------------------------
T = TUTORIALS_DIR


def _tensor_add(relpath, fn_name, shape):
    def run(load):
        mod = load(f"{T}/tensor_addition/{relpath}")
        a = rng(0).random(shape).astype(np.float16)
        b = rng(1).random(shape).astype(np.float16)
        assert_close(getattr(mod, fn_name)(a, b), a + b, rtol=1e-2, atol=1e-4)  # the sample's tolerance
    return run


def _transpose2d(p, x, y, dtype):
    def run(load):
        mod = load(f"{T}/transpose2d/transpose2d_nki_kernels.py")
        a = (np.arange(p * x * y) % 127).astype(dtype).reshape(p, x * y)
        want = np.transpose(a.reshape(p, x, y), (0, 2, 1)).reshape(p, x * y)
        got = mod.tensor_transpose2D_kernel_(a, (x, y))
        assert np.array_equal(as_f64(got), as_f64(want)), "transpose differs"
    return run


def _avgpool(c, h, w, pool, dtype):
    def run(load):
        mod = load(f"{T}/average_pool2d/average_pool2d_nki_kernels.py")
        x = np.arange(c * h * w, dtype=dtype).reshape(c, h, w)
        got = mod.tensor_avgpool_kernel(x, pool)
        assert_close(got, mod.np_average_pool_2D(x, pool), rtol=1e-3, atol=1e-3)
    return run


def mamba_reference(delta, u, A, B, C) -> np.ndarray:
    """Selective scan (float64): h_t = exp(delta_t * A) * h_{t-1} + delta_t * B_t * u_t; y = sum_s C_t h_t.
    delta, u [batch, channels, seq]; A [channels, state]; B, C [batch, state, seq] -> [batch, channels, seq]."""
    delta, u, A, B, C = (np.asarray(t, np.float64) for t in (delta, u, A, B, C))
    dA = np.exp(delta[:, :, None, :] * A[None, :, :, None])
    dBu = delta[:, :, None, :] * B[:, None, :, :] * u[:, :, None, :]
    h = np.zeros(dA.shape[:-1])
    out = np.zeros_like(delta)
    for t in range(delta.shape[-1]):
        h = dA[..., t] * h + dBu[..., t]
        out[..., t] = (h * C[:, None, :, t]).sum(-1)
    return out


def _mamba(version, batch, channels, seq, state):
    def run(load):
        mod = load(f"{T}/fused_mamba/mamba_nki_kernels.py")
        r = rng(2)
        delta = (r.random((batch, channels, seq)) * 0.5).astype(np.float32)
        u = r.standard_normal((batch, channels, seq)).astype(np.float32)
        A = -r.random((channels, state)).astype(np.float32)   # negative, as the sample chooses
        B = r.standard_normal((batch, state, seq)).astype(np.float32)
        C = r.standard_normal((batch, state, seq)).astype(np.float32)
        got = getattr(mod, version)(delta, u, A, B, C)
        assert_close(got, mamba_reference(delta, u, A, B, C), rtol=1e-2, atol=1e-2)  # the sample's tolerance
    return run


def _matmul(fn_name, m, k, n, **meta):
    def run(load):
        import torch
        mod = load(f"{T}/matrix_multiplication/matrix_multiplication_nki_kernels.py")
        g = torch.Generator().manual_seed(0)
        lhs = torch.rand((m, k), generator=g).to(torch.bfloat16)
        rhs = torch.rand((k, n), generator=g).to(torch.bfloat16)
        got = getattr(mod, fn_name)(lhs.T.contiguous(), rhs, **meta)
        # The sample's check: torch.allclose(torch.matmul(lhs, rhs), out, atol=1e-4, rtol=1e-2).
        assert_close(got, torch.matmul(lhs, rhs), rtol=1e-2, atol=1e-4)
    return run


def _attention(version, seqlen, dtype=np.float32):
    def run(load):
        ref = load(f"{T}/attention_fwd_performance/test_attention.py")   # numpy_attention, and the kernels
        r = rng(3)
        q, k, v = ((r.random((128, seqlen)) - 0.5) * 2 for _ in range(3))
        q, k, v = (t.astype(dtype) for t in (q, k, v))
        kernel = getattr(ref, version)
        # v9/v10 take SBUF addresses from a module-level counter the sample never resets; a launch in a
        # fresh process (as the sample's test runs) starts it at 0.
        alloc = getattr(sys.modules.get(getattr(kernel, "__module__", ""), None), "allocator", None)
        if hasattr(alloc, "offset"):
            alloc.offset = 0
        got = kernel(q, k, v)
        assert_close(got, ref.numpy_attention(q, k, v), rtol=1e-5, atol=1e-2)  # np.allclose(.., atol=1e-2)
    return run


def _attention_benchmark(version):
    def run(load):
        ref = load(f"{T}/attention_fwd_performance/test_attention.py")
        ref.test_attn_tutorial("benchmark", getattr(ref, version))   # the sample's own benchmark path
    return run


TUTORIALS: list[Case] = [
    Case("tensor_addition nki_tensor_add", _tensor_add("tensor_addition_nki_kernels.py", "nki_tensor_add",
                                                       (256, 1024))),
    Case("tensor_addition spmd nki_tensor_add", _tensor_add("spmd_tensor_addition_nki_kernels.py",
                                                            "nki_tensor_add", (256, 1024))),
    Case("tensor_addition spmd nki_tensor_add_nc2", _tensor_add("spmd_multiple_nc_tensor_addition_nki_kernels.py",
                                                                "nki_tensor_add_nc2", (512, 2048))),
    Case("transpose2d int8 5x(3x4)", _transpose2d(5, 3, 4, np.int8)),
    Case("transpose2d float32 5x(37x44)", _transpose2d(5, 37, 44, np.float32)),
    Case("average_pool2d float16 2x6x6/2", _avgpool(2, 6, 6, 2, np.float16)),
    Case("average_pool2d float32 128x16x24/4", _avgpool(128, 16, 24, 4, np.float32)),
    Case("fused_mamba mamba_v1", _mamba("mamba_v1", 1, 256, 64, 4), "ours"),
    Case("fused_mamba mamba_v2", _mamba("mamba_v2", 2, 256, 64, 4), "ours"),
    Case("fused_mamba mamba_v3", _mamba("mamba_v3", 1, 128, 1024, 3), "ours"),
    Case("matrix_multiplication nki_matmul_basic_", _matmul("nki_matmul_basic_", 64, 128, 512), "ours"),
    Case("matrix_multiplication nki_matmul_tiled_", _matmul("nki_matmul_tiled_", 256, 256, 1024), "ours"),
    Case("matrix_multiplication nki_matmul_hoist_load_", _matmul("nki_matmul_hoist_load_", 256, 256, 1024),
         "ours"),
    Case("matrix_multiplication nki_matmul_block_free_dimension_",
         _matmul("nki_matmul_block_free_dimension_", 512, 256, 2048), "ours"),
    Case("matrix_multiplication nki_matmul_fully_optimized_ (blocks 2x2x2)",
         _matmul("nki_matmul_fully_optimized_", 512, 512, 2048, TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=2,
                 TILES_IN_BLOCK_K=2), "ours"),
    Case("matrix_multiplication nki_matmul_fully_optimized_ (default blocks)",
         _matmul("nki_matmul_fully_optimized_", 2048, 1024, 1024), "ours"),
] + [
    Case(f"attention_fwd_performance attn_fwd_{v}", _attention(f"attn_fwd_{v}", 128 if v in ("v1", "v2") else 512))
    for v in ("v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v8a", "v9", "v10", "v11")
] + [
    # The sample's own accuracy test runs v3 and later at 4096 tokens.
    Case(f"attention_fwd_performance attn_fwd_{v} at 4096", _attention(f"attn_fwd_{v}", 4096))
    for v in ("v3", "v4", "v5", "v6", "v7", "v8", "v8a", "v9", "v10", "v11")
] + [
    Case("attention_fwd_performance test_attn_tutorial benchmark v1", _attention_benchmark("attn_fwd_v1")),
]

SUITES: dict[str, tuple[str, list[Case]]] = {
    "tutorials": ("tutorial cases", TUTORIALS),
}


def _more_suites() -> dict:
    # contributed/ and mxfp-matmul rows live beside this file (loaded by path: run as a script or imported).
    spec = importlib.util.spec_from_file_location("nki_samples_more", Path(__file__).with_name("nki_samples_more.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.suites(Case)


SUITES.update(_more_suites())


def _reset_peak() -> bool:
    """Reset this process's peak resident memory (Linux ``clear_refs`` 5); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_gb() -> float:
    """This process's peak resident memory since the last reset (``VmHWM``), GB; else ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / (1 << 20)
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)


def run_cases(root: Path, cases: list[Case], out=sys.stdout, verbose=False) -> int:
    """Run ``cases`` against the checkout at ``root``; print one row each (status, wall seconds, the
    process's peak resident memory during the case, reference); return how many passed. The peak is reset
    before each case where Linux allows it, else it is the process's peak so far (marked ``>=``)."""
    load = Loader(root)
    passed = 0
    width = max((len(c.name) for c in cases), default=10)
    for case in cases:
        exact = _reset_peak()
        t0 = time.perf_counter()
        printed = io.StringIO()   # what the sample prints goes with its row (-v), not between rows
        try:
            with contextlib.redirect_stdout(printed):
                case.run(load)
            status, detail = "ok", ""
            passed += 1
        except Exception as exc:  # noqa: BLE001  (a row reports whatever the sample raised)
            status = "MISMATCH" if isinstance(exc, AssertionError) else "FAIL"
            detail = f"{type(exc).__name__}: {str(exc).strip()}"
            if verbose:
                detail += "\n" + traceback.format_exc()
        if verbose and printed.getvalue():
            detail += "\n  printed: " + printed.getvalue().strip().replace("\n", "\n  printed: ")
        secs = time.perf_counter() - t0
        ref = f"[ref {case.reference}]"
        peak = f"{'' if exact else '>='}{_peak_gb():.2f} GB"
        print(f"{case.name:<{width}}  {status:<8} {secs:6.1f}s {peak:>9} {ref:<12} {detail}".rstrip(), file=out,
              flush=True)
    return passed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout", nargs="?", default=str(DEFAULT_CHECKOUT),
                    help=f"path to an aws-neuron/nki-samples checkout (default {DEFAULT_CHECKOUT})")
    ap.add_argument("--suite", choices=sorted(SUITES), default="tutorials")
    ap.add_argument("-k", dest="match", default="", help="run only cases whose name contains this")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the traceback of failing cases")
    args = ap.parse_args(argv)
    root = Path(args.checkout)
    if not (root / TUTORIALS_DIR).is_dir():
        ap.error(f"{root} is not an nki-samples checkout (no {TUTORIALS_DIR}); "
                 "get one with: git clone https://github.com/aws-neuron/nki-samples " + str(root))
    label, cases = SUITES[args.suite]
    cases = [c for c in cases if args.match in c.name]
    passed = run_cases(root, cases, verbose=args.verbose)
    print(f"{passed} of {len(cases)} {label} run unmodified and match")
    return 0 if passed == len(cases) else 1


if __name__ == "__main__":
    sys.exit(main())
