"""More rows for benchmarks/nki_samples_harness.py: the nki-samples ``contributed/`` kernels and the
``mxfp-matmul`` tutorial (MX matmuls of NeuronCore-v4), each run unmodified from the checkout.

Two stand-ins make the samples importable on a CPU (both are environment, not kernel code): a
``torch_xla`` module whose ``device()`` is the CPU (the samples move tensors with ``.to(device)``), and the
mxfp tutorial's ``setup_compiler_workdir`` (it creates a neuronx-cc work folder inside the checkout) is a
no-op. The contributed rows call each kernel as the sample's ``check_correct()`` does (``nki.baremetal``)
on smaller legal shapes (theirs take minutes on the simulator) and apply its comparison to its reference;
the mxfp tutorial's own test functions run as they are and print ``np.allclose pass?``: a row passes when
the sample says True. ``contributed/pipelined_attention.py`` launches its kernel at import on its fixed
16K-token shape (the kernel says it runs only there) and checks it against its own numpy reference: its
row runs the file unmodified as a script (``np.random`` seeded), launch ``flash_fwd[0](...)`` included
(neuronxcc launches ``kernel[0]`` as one program, and so does nkihub's old dialect); it takes minutes and
about 8 GB.
"""
from __future__ import annotations

import contextlib
import io
import sys
import types

import numpy as np

MXFP_DIR = "src/nki_samples/tutorials/mxfp-matmul"


def rng(seed=0) -> np.random.Generator:
    return np.random.default_rng(seed)


def torch_xla_stand_in() -> None:
    """Install a ``torch_xla`` whose device is the CPU (``torch_xla.device()``, ``xm.xla_device()``)."""
    if "torch_xla" in sys.modules:
        return
    import torch
    xla = types.ModuleType("torch_xla")
    xla.device = lambda *a, **k: torch.device("cpu")
    core = types.ModuleType("torch_xla.core")
    xm = types.ModuleType("torch_xla.core.xla_model")
    xm.xla_device = xla.device
    xm.mark_step = lambda *a, **k: None
    xla.core, core.xla_model = core, xm
    sys.modules.update({"torch_xla": xla, "torch_xla.core": core, "torch_xla.core.xla_model": xm})


def _baremetal(mod, fn_name):
    """The sample's kernel as its check_correct() runs it (``nki.baremetal()(kernel)``)."""
    return mod.nki.baremetal()(getattr(mod, fn_name))


def _matmul(k, m, n):
    def run(load):
        mod = load("contributed/matmul.py")
        a = rng(0).random((k, m)).astype(np.float16)
        b = rng(1).random((k, n)).astype(np.float16)
        z = _baremetal(mod, "matmul")(a, b)
        # check_correct(): np.all(np.isclose(Z, A.T @ B, atol=1e-4, rtol=1e-2))
        assert np.all(np.isclose(z, a.T @ b, atol=1e-4, rtol=1e-2)), "Is close? False"
    return run


def _maxpool(h, w, pool):
    def run(load):
        import torch
        import torch.nn.functional as F
        mod = load("contributed/maxpooling.py")
        x = torch.rand(h, w, dtype=torch.float32, generator=torch.Generator().manual_seed(0))
        got = torch.from_numpy(_baremetal(mod, "max_pooling_2d_stride_1")(x.numpy(), pool))[None, None]
        want = F.max_pool2d(x.reshape(1, 1, h, w), kernel_size=pool, stride=1, padding=0)
        assert torch.allclose(got, want, rtol=1.3e-6, atol=1e-5), "Is close? False"   # check_correct()'s test
    return run


def _interpolate(relpath, fn_name, shape, mode):
    def run(load):
        import torch
        torch_xla_stand_in()
        mod = load(f"contributed/{relpath}")
        x = rng(2).random(shape).astype(np.float32)
        got = torch.from_numpy(_baremetal(mod, fn_name)(x))
        want = torch.nn.functional.interpolate(torch.from_numpy(x), scale_factor=2, mode=mode)
        assert torch.allclose(got, want, atol=1e-4, rtol=1e-2), "Is close: False"   # check_correct()'s test
    return run


def _as_script(relpath):
    """Run the file as a script, unmodified (its module-level launch ``flash_fwd[0](...)`` and its own assert
    included): neuronxcc launches ``kernel[0]`` as it launches the kernel without a grid, and so does
    nkihub's old dialect."""
    def run(load):
        path = load.root / relpath
        np.random.seed(0)   # the file draws its inputs from np.random
        sys.path.insert(0, str(path.parent))
        try:
            exec(compile(path.read_text(), str(path), "exec"),
                 {"__name__": "nki_samples_" + path.stem, "__file__": str(path)})
        finally:
            sys.path.remove(str(path.parent))
    return run


def _says_true(printed: str, marker: str) -> None:
    lines = [ln for ln in printed.splitlines() if marker in ln]
    if not lines or not all(ln.rstrip().endswith("True") for ln in lines):
        raise AssertionError(f"the sample's own check: {lines or 'no ' + repr(marker) + ' line printed'}")


def _mxfp(fn_name: str, *args):
    def run(load):
        import ml_dtypes
        import torch
        torch_xla_stand_in()
        mod = load(f"{MXFP_DIR}/mx_toplevel.py")
        mod.device, mod.cpu = torch.device("cpu"), torch.device("cpu")
        mod.setup_compiler_workdir = lambda test_name: None
        np.random.seed(0)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            getattr(mod, fn_name)(*(getattr(ml_dtypes, a) if isinstance(a, str) else a for a in args))
        _says_true(out.getvalue(), "np.allclose pass?")
    return run


def suites(Case) -> dict:
    """{suite name: (label, cases)} for the harness's SUITES."""
    contributed = [
        Case("contributed matmul (K, M, N) = (1024, 512, 2048) fp16", _matmul(1024, 512, 2048)),
        Case("contributed maxpooling 448x448 pool 3", _maxpool(448, 448, 3)),
        Case("contributed interpolate_bilinear_2x_fwd (2, 64, 24, 16)",
             _interpolate("interpolate_bilinear_fwd.py", "interpolate_bilinear_2x_fwd", (2, 64, 24, 16), "bilinear")),
        Case("contributed interpolate_trilinear_2x_fwd (2, 64, 7, 6, 5)",
             _interpolate("interpolate_trilinear_fwd.py", "interpolate_trilinear_2x_fwd", (2, 64, 7, 6, 5),
                          "trilinear")),
        Case("contributed pipelined_attention (as the file runs it: 16K tokens, d=128)",
             _as_script("contributed/pipelined_attention.py")),
    ]
    mxfp = [
        Case("mxfp-matmul offline quantized fp8 e5m2", _mxfp("run_offline_quantized_matmul_mx_test", "float8_e5m2")),
        Case("mxfp-matmul offline quantized fp4 e2m1", _mxfp("run_offline_quantized_matmul_mx_test", "float4_e2m1fn")),
        Case("mxfp-matmul on-device quantize fp4 @ fp8",
             _mxfp("run_on_device_quantize_matmul_mx_test", "float4_e2m1fn", "float8_e5m2")),
        Case("mxfp-matmul on-device quantize fp8 @ fp8",
             _mxfp("run_on_device_quantize_matmul_mx_test", "float8_e5m2", "float8_e5m2")),
        Case("mxfp-matmul copy strided (tensor_copy)", _mxfp("run_copy_strided_test", "float8_e5m2", True)),
        Case("mxfp-matmul copy strided (DMA)", _mxfp("run_copy_strided_test", "float8_e5m2", False)),
    ]
    return {"contributed": ("contributed kernels", contributed), "mxfp": ("mxfp-matmul cases", mxfp)}
