"""Library kernels as torch ops: opcheck for every op, eager / torch.compile(fullgraph) / autograd,
thread pinning while the simulator runs, device routing, call counts."""
from __future__ import annotations

import contextlib
import importlib
import math

import nki
import nki.language as nl
import pytest
import torch

from nkihub.kernels import device, threads
from nkihub.kernels.library import LIBRARY
from nkihub.kernels.torch_ops import OpLibrary, count_calls, launch, library_of, opcheck

DTYPES = [torch.float32, torch.bfloat16]


# ---- a tiny kernel of our own: the infrastructure without the library ---------------------------------
@nki.jit
def scale_add_kernel(x, y):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.multiply(nl.load(x), 2.0), nl.load(y)))
    return out


_toy = OpLibrary("toy_scale_add", "1.0.0", __file__)


def _toy_setup(ctx, inputs, output):
    pass


def _toy_backward(ctx, grad):
    return 2 * grad, grad


@_toy.op("scale_add", fake=lambda x, y: torch.empty_like(x), backward=_toy_backward, setup_context=_toy_setup)
def _scale_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return launch(scale_add_kernel, x, y)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(8, 16), (128, 64), (3, 5)])
def test_toy_op_matches_torch_and_passes_opcheck(shape, dtype):
    x, y = torch.randn(shape, dtype=dtype), torch.randn(shape, dtype=dtype)
    out = _toy.ops.scale_add(x, y)
    assert out.dtype == dtype and out.shape == x.shape
    torch.testing.assert_close(out, (2 * x.float() + y.float()).to(dtype))
    result = opcheck(_toy.ops.scale_add.default, (x, y))
    assert set(result.values()) == {"SUCCESS"}


def test_toy_op_compiles_fullgraph_and_differentiates():
    x, y = torch.randn(16, 8), torch.randn(16, 8)
    compiled = torch.compile(lambda a, b: _toy.ops.scale_add(a, b).sin(), fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x, y), (2 * x + y).sin())
    xr, yr = x.clone().requires_grad_(), y.clone().requires_grad_()
    _toy.ops.scale_add(xr, yr).sum().backward()
    assert torch.equal(xr.grad, torch.full_like(x, 2.0)) and torch.equal(yr.grad, torch.ones_like(y))
    assert _toy.has_backward("scale_add")


def test_call_counts_see_real_calls_not_fake_ones():
    x = torch.randn(4, 4)
    with count_calls() as counts:
        _toy.ops.scale_add(x, x)
        _toy.ops.scale_add(torch.empty(4, 4, device="meta"), torch.empty(4, 4, device="meta"))  # fake only
    assert counts == {_toy.qualname("scale_add"): 1}


def test_blas_pinned_while_the_op_simulates_and_restored(monkeypatch):
    """Inside an op the simulator keeps numpy's BLAS on NKIHUB_SIM_THREADS threads while its Program
    runs (simulator.executor.blas_pinned); torch's pool and BLAS are as before once the op returns."""
    from nkihub.simulator import executor

    seen = []
    real = executor.blas_pinned

    @contextlib.contextmanager
    def spying(*args):
        with real(*args):
            seen.append((torch.get_num_threads(), threads.blas_threads()))
            yield

    monkeypatch.setattr(executor, "blas_pinned", spying)
    # controllers are built on first use: fresh ones see every BLAS loaded since (scipy brings its own)
    monkeypatch.setattr(executor, "_blas", None)
    monkeypatch.setattr(threads, "_controller", None)
    monkeypatch.delenv("NKIHUB_SIM_THREADS", raising=False)
    before_torch, before_blas = torch.get_num_threads(), threads.blas_threads()
    _toy.ops.scale_add(torch.randn(4, 4), torch.randn(4, 4))
    assert seen == [(before_torch, [1] * len(before_blas))]  # torch's pool is left alone
    assert torch.get_num_threads() == before_torch and threads.blas_threads() == before_blas
    monkeypatch.setenv("NKIHUB_SIM_THREADS", "0")  # 0: leave the pools alone
    seen.clear()
    _toy.ops.scale_add(torch.randn(4, 4), torch.randn(4, 4))
    assert seen == [(before_torch, before_blas)]


def test_pinning_is_reentrant():
    outer, outer_blas = torch.get_num_threads(), threads.blas_threads()
    with threads.pinned(1, torch_threads=True):
        with threads.pinned(1):
            assert torch.get_num_threads() == 1 and set(threads.blas_threads()) == {1}
        assert torch.get_num_threads() == 1 and set(threads.blas_threads()) == {1}
    assert torch.get_num_threads() == outer and threads.blas_threads() == outer_blas


def test_same_build_twice_shares_ops_and_versions_live_side_by_side():
    again = OpLibrary("toy_scale_add", "1.0.0", __file__)
    assert again.namespace == _toy.namespace and "scale_add" in again.registered
    other = OpLibrary("toy_scale_add", "2.0.0", __file__)
    assert other.namespace != _toy.namespace


def test_ops_on_other_devices_are_refused():
    with pytest.raises(ValueError, match="share one device"):
        device.backend_of([torch.empty(1), torch.empty(1, device="meta")])
    with pytest.raises(ValueError, match="CPU .simulator. or a Neuron device"):
        device.backend_of([torch.empty(1, device="meta")])


def test_neuron_op_must_launch_on_the_device(monkeypatch):
    """An op on Neuron tensors hands its kernels to the device runner; an op that simulates anyway fails."""
    ran = []
    monkeypatch.setattr(device, "backend_of", lambda tensors: device.NEURON)
    monkeypatch.setattr(device, "neuron_runner", lambda kernel: lambda *a: ran.append(kernel) or a[0].clone())
    x = torch.randn(4, 4)
    _toy.ops.scale_add(x, x)
    assert ran == [scale_add_kernel]

    lib = OpLibrary("toy_direct", "1.0.0", __file__)

    @lib.op("direct", fake=lambda x: torch.empty_like(x))
    def _direct(x: torch.Tensor) -> torch.Tensor:
        return scale_add_kernel(x, x)  # straight to the simulator: must not pass silently on Neuron

    with pytest.raises(RuntimeError, match="ran no kernel on the Neuron device"):
        lib.ops.direct(x)


# ---- the library ------------------------------------------------------------------------------------------
def _rand(*shape, dtype):
    return torch.randn(*shape, dtype=dtype)


def _attn(dtype, b, h, s, d, hkv=None):
    return (_rand(b, h, s, d, dtype=dtype), _rand(b, hkv or h, s, d, dtype=dtype), _rand(b, hkv or h, s, d, dtype=dtype))


def _flash_bwd(dtype, b, h, s, d):
    q, k, v = _attn(dtype, b, h, s, d)
    return (q, k, v, _rand(b, h, s, d, dtype=dtype), _rand(b, h, s, d, dtype=dtype),
            torch.randn(b, h, s), torch.zeros(b, h, s), False, 1 / math.sqrt(d))


def _vit_block_args(dtype, *, b, s, d, hidden, heads):
    shapes = [(d,), (d,)] + [(d, d), (d,)] * 4 + [(d,), (d,), (hidden, d), (hidden,), (d, hidden), (d,)]
    params = [_rand(*sh, dtype=dtype) * 0.1 for sh in shapes]
    params[0], params[10] = params[0] + 1, params[10] + 1  # LayerNorm weights near 1
    return (_rand(b, s, d, dtype=dtype), *params, heads, 1e-6)


# op name -> shape cases -> args(dtype). The first case of each op is the quick one; the rest are slow.
SAMPLES = {
    "layer_norm": [lambda dt: (_rand(4, 32, dtype=dt), _rand(32, dtype=dt), _rand(32, dtype=dt), 1e-5),
                   lambda dt: (_rand(2, 3, 96, dtype=dt), _rand(96, dtype=dt), _rand(96, dtype=dt), 1e-6)],
    "rms_norm": [lambda dt: (_rand(4, 32, dtype=dt), _rand(32, dtype=dt), 1e-6),
                 lambda dt: (_rand(2, 3, 96, dtype=dt), _rand(96, dtype=dt), 1e-5)],
    "softmax": [lambda dt: (_rand(4, 32, dtype=dt),), lambda dt: (_rand(2, 3, 600, dtype=dt),)],
    "matmul": [lambda dt: (_rand(16, 32, dtype=dt), _rand(32, 24, dtype=dt)),
               lambda dt: (_rand(130, 20, dtype=dt), _rand(20, 70, dtype=dt))],
    "flash_attention_with_lse": [lambda dt: (*_attn(dt, 1, 2, 8, 16), False, 0.25),
                                 lambda dt: (*_attn(dt, 2, 4, 40, 32, hkv=2), True, 0.2)],
    "flash_attention_backward": [lambda dt: _flash_bwd(dt, 1, 2, 8, 16)],
    "vit_attention": [lambda dt: (*_attn(dt, 1, 2, 17, 64), 0.125),
                      lambda dt: (*_attn(dt, 2, 3, 40, 128), 0.09)],
    "vit_attention_with_lse": [lambda dt: (*_attn(dt, 1, 2, 17, 64), 0.125)],
    "vit_attention_backward": [lambda dt: _flash_bwd(dt, 1, 2, 17, 64)[:7] + (0.125,)],
    "gelu_mlp": [lambda dt: (_rand(2, 5, 32, dtype=dt), _rand(64, 32, dtype=dt), _rand(64, dtype=dt),
                             _rand(32, 64, dtype=dt), _rand(32, dtype=dt)),
                 lambda dt: (_rand(130, 64, dtype=dt), _rand(200, 64, dtype=dt), _rand(200, dtype=dt),
                             _rand(64, 200, dtype=dt), _rand(64, dtype=dt))],
    "vit_block": [lambda dt: _vit_block_args(dt, b=1, s=5, d=64, hidden=128, heads=2)],
}


def _library_modules():
    mods = []
    for repo_id, path in sorted(LIBRARY.items()):
        try:
            mod = importlib.import_module(path)
            library_of(mod)
        except (ImportError, ValueError):
            continue  # not written yet (an empty package directory exposes no ops)
        mods.append(mod)
    return mods


def _library_cases():
    for mod in _library_modules():
        lib = library_of(mod)
        for name in sorted(lib.registered):
            for i, make in enumerate(SAMPLES.get(name, [])):
                for dt in DTYPES:
                    marks = [pytest.mark.slow] if i > 0 else []
                    yield pytest.param(lib, name, make, dt, marks=marks,
                                       id=f"{mod.__name__.rsplit('.', 1)[-1]}.{name}-{i}-{str(dt)[6:]}")


def test_every_library_op_has_opcheck_samples():
    missing = [lib.qualname(n) for lib in map(library_of, _library_modules()) for n in lib.registered
               if n not in SAMPLES]
    assert not missing, f"add sample inputs to SAMPLES for {missing}"


@pytest.mark.parametrize("lib, name, make, dtype", list(_library_cases()))
def test_library_op_opcheck(lib, name, make, dtype):
    torch.manual_seed(0)
    args = make(dtype)
    result = opcheck(getattr(lib.ops, name).default, args)
    assert set(result.values()) == {"SUCCESS"}


def _flash():
    try:
        return importlib.import_module("nkihub.kernels.library.flash_attn")
    except ImportError:
        pytest.skip("nkihub.kernels.library.flash_attn is not there")


@pytest.mark.parametrize("dtype", DTYPES)
def test_flash_attention_compiles_without_graph_breaks_and_matches_sdpa(dtype):
    fa = _flash()
    q, k, v = _attn(dtype, 1, 2, 24, 32)
    fn = torch.compile(lambda q, k, v: fa.flash_attention(q, k, v, scale=0.2) * 2, fullgraph=True, backend="eager")
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=0.2) * 2
    tol = dict(atol=3e-2, rtol=3e-2) if dtype == torch.bfloat16 else dict(atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(fn(q, k, v).float(), ref, **tol)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_gradients_match_torch(causal):
    fa = _flash()
    torch.manual_seed(0)
    q, k, v = (t.requires_grad_() for t in _attn(torch.float32, 1, 4, 20, 16, hkv=2))
    out = fa.flash_attention(q, k, v, causal=causal)
    grad = torch.randn_like(out)
    out.backward(grad)
    got = [t.grad.clone() for t in (q, k, v)]
    rq, rk, rv = (t.detach().clone().requires_grad_() for t in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(rq, rk, rv, is_causal=causal, enable_gqa=True)
    ref.backward(grad)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    for g, r in zip(got, (rq.grad, rk.grad, rv.grad)):
        torch.testing.assert_close(g, r, atol=1e-4, rtol=1e-4)


def test_flash_attention_compiled_backward():
    fa = _flash()
    q, k, v = (t.requires_grad_() for t in _attn(torch.float32, 1, 2, 8, 16))
    fn = torch.compile(lambda q, k, v: fa.flash_attention(q, k, v).sum(), fullgraph=True, backend="aot_eager")
    fn(q, k, v).backward()
    rq, rk, rv = (t.detach().clone().requires_grad_() for t in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(rq, rk, rv).sum().backward()
    torch.testing.assert_close(q.grad, rq.grad, atol=1e-4, rtol=1e-4)
