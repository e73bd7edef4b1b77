"""Published kernels stand alone: nkihub publish carries the nkihub modules a package imports into it,
refuses anything else by name, and the result runs where nkihub's `kernels` package does not exist."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from nkihub.kernels.library import LIBRARY
from nkihub.kernels.publish import PublishError, build_repo
from nkihub.kernels.vendor import ROOT, VendorError, check_standalone, python_depends, vendor_package

LIBRARY_DIRS = {repo: ROOT.joinpath(*module.split(".")) for repo, module in LIBRARY.items()}


@pytest.mark.parametrize("repo", sorted(LIBRARY))
def test_every_library_kernel_builds_a_standalone_package(repo, tmp_path):
    src = LIBRARY_DIRS[repo]
    spec = build_repo(src, tmp_path, repo)
    for variant in ("torch-cpu", "torch-neuron"):
        pkg = tmp_path / "build" / variant / spec["package"]
        check_standalone(pkg)  # every import: stdlib, torch, numpy, public nki, or the package's own
        imported = {n.module if isinstance(n, ast.ImportFrom) else a.name
                    for p in pkg.rglob("*.py") for n in ast.walk(ast.parse(p.read_text()))
                    if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
        assert not {m for m in imported if m and m.split(".")[0] in ("kernels", "simulator", "hub_client")}
        meta = json.loads((tmp_path / "build" / variant / "metadata.json").read_text())
        assert set(meta["nkihub"]["vendored"].values()) <= {p.name for p in pkg.glob("_*.py")}
        assert "_torch_ops.py" in meta["nkihub"]["vendored"].values()  # the op-registration helper
        assert (pkg / "layers.py").is_file()
    assert json.loads((tmp_path / "build/torch-neuron/metadata.json").read_text())["python-depends"] == ["nki"]
    assert json.loads((tmp_path / "build/torch-cpu/metadata.json").read_text())["python-depends"] == []
    assert not [p for p in src.glob("_*.py") if p.name != "__init__.py"], "the in-tree source stays free of copies"


def test_vit_attn_carries_the_flash_attention_backward(tmp_path):
    build_repo(LIBRARY_DIRS["neuron/vit-attn"], tmp_path, "neuron/vit-attn")
    vendored = json.loads((tmp_path / "build/torch-cpu/metadata.json").read_text())["nkihub"]["vendored"]
    assert vendored["nkihub.kernels.library.flash_attn.nki_backward"] == "_flash_attn_nki_backward.py"
    assert "nkihub.kernels.library.flash_attn" not in vendored  # not flash-attn's own ops
    own = (tmp_path / "build/torch-cpu/vit_attn/_flash_attn_nki_kernels.py").read_text()
    assert "from .nki_kernels import Ring" in own  # vit-attn's own module, not a second copy


def _package(tmp_path, body: str, name="bad_kernel") -> Path:
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import torch\n\n" + textwrap.dedent(body))
    (pkg / "kernel.json").write_text(json.dumps({"name": name.replace("_", "-"), "package": name,
                                                 "version": "1.0.0"}))
    return pkg


@pytest.mark.parametrize("body, named", [
    ("from nkihub.simulator.executor import run_program\n", "nkihub.simulator.executor"),
    ("def f():\n    import scipy\n", "scipy"),
    ("from nki.jit import JitKernel\n", "nki.jit"),
    ("import nkihub.kernels.torch_ops\n", "nkihub.kernels.torch_ops"),
    ("from nkihub.kernels.loading import get\n", "nkihub.hub_client"),
])
def test_publish_refuses_an_import_outside_the_rules_and_names_it(tmp_path, body, named):
    pkg = _package(tmp_path, body)
    with pytest.raises(PublishError, match=named.replace(".", r"\.")) as err:
        build_repo(pkg, tmp_path / "out", "neuron/bad-kernel")
    assert "may import only the standard library, torch, numpy, the public NKI API" in str(err.value)


def test_error_names_file_and_line(tmp_path):
    pkg = _package(tmp_path, "x = 1\nimport transformers\n")
    with pytest.raises(PublishError, match=r"bad_kernel/__init__\.py:4: imports transformers"):
        build_repo(pkg, tmp_path / "out", "neuron/bad-kernel")


def test_check_standalone_catches_relative_imports_out_of_the_package(tmp_path):
    pkg = _package(tmp_path, "from .. import sibling\n")
    with pytest.raises(VendorError, match="outside the package"):
        check_standalone(pkg)
    (pkg / "__init__.py").write_text("from .missing import x\n")
    with pytest.raises(VendorError, match="does not have"):
        check_standalone(pkg)


def test_a_third_party_package_gets_the_helpers_it_imports(tmp_path):
    pkg = _package(tmp_path, """\
        from nkihub.kernels.library import common
        from nkihub.kernels.torch_ops import OpLibrary

        _lib = OpLibrary("bad_kernel", "1.0.0", __file__)
        """)
    carried = vendor_package(pkg, tmp_path / "out" / "bad_kernel", "bad_kernel")
    assert set(carried.vendored) == {"nkihub.kernels.library.common", "nkihub.kernels.torch_ops", "nkihub.kernels.device", "nkihub.kernels.tuned"}
    assert carried.requires == {"torch", "nki"}  # common's kernel launcher reaches nki lazily
    assert "from . import _common as common" in (tmp_path / "out/bad_kernel/__init__.py").read_text()


def test_python_depends_is_what_hugging_face_knows_per_backend():
    assert python_depends({"nki", "torch"}, "neuron") == ["nki"]
    assert python_depends({"nki", "torch"}, "cpu") == []  # their cpu backend has no name for nki


def test_published_packages_run_without_nkihub_kernels(tmp_path):
    """The torch-cpu packages of matmul and vit-attn (with its carried flash backward) import and compute,
    forward and backward, in a process where only `nki` (nkihub.nki) and nkihub.simulator are importable from nkihub."""
    for repo in ("neuron/matmul", "neuron/vit-attn"):
        build_repo(LIBRARY_DIRS[repo], tmp_path / repo.split("/")[1], repo)
    site = tmp_path / "site"
    (site / "nkihub").mkdir(parents=True)
    for name in ("__init__.py", "aliases.py", "nki", "simulator", "_toplevel"):
        (site / "nkihub" / name).symlink_to(ROOT / "nkihub" / name)
    script = textwrap.dedent("""
        import importlib.util, sys
        from pathlib import Path
        import torch
        assert importlib.util.find_spec("nkihub.kernels") is None and importlib.util.find_spec("nkihub.hub_client") is None

        def load(path, name):
            spec = importlib.util.spec_from_file_location(name, Path(path) / "__init__.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            return module

        mm = load(sys.argv[1], "_mm_cpu")
        a, b = torch.randn(130, 70), torch.randn(70, 33)
        torch.testing.assert_close(mm.matmul(a, b), a @ b, atol=1e-4, rtol=1e-4)
        vit = load(sys.argv[2], "_vit_cpu")
        q, k, v = (torch.randn(1, 2, 16, 64, requires_grad=True) for _ in range(3))
        out = vit.vit_attention(q, k, v)
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
        out.sum().backward()
        dq = q.grad.clone(); q.grad = None
        ref.sum().backward()
        torch.testing.assert_close(dq, q.grad, atol=1e-4, rtol=1e-4)
        assert issubclass(vit.layers.ViTAttention, torch.nn.Module)
        print("standalone ok")
        """)
    # -S: no site processing, so nkihub's editable install (a .pth line naming the repo) is not on the path;
    # torch and numpy come from this venv's site-packages, nkihub's nki and simulator from the symlinks (the
    # stand-in `nki` package on the path as nkihub-aliases.pth puts it)
    paths = [str(site), sysconfig.get_paths()["purelib"], str(site / "nkihub" / "_toplevel")]
    args = [str(tmp_path / "matmul/build/torch-cpu/matmul"), str(tmp_path / "vit-attn/build/torch-cpu/vit_attn")]
    boot = (f"import sys; sys.path[:0] = {paths!r}; sys.argv[1:] = {args!r}; "
            f"exec(compile({script!r}, 'standalone', 'exec'))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-S", "-c", boot], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "standalone ok" in proc.stdout
