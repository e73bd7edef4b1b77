"""nki.compile: validated, allocated and scheduled Programs; versioned artifacts; the on-disk cache."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import nki
from nkihub.simulator.program import Program

KERNEL = textwrap.dedent('''
    import nki
    import nki.isa as nisa
    import nki.language as nl

    @nki.jit
    def scale(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        u = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=u, data=t, op0=nl.multiply, operand0=3.0)
        nisa.dma_copy(dst=out, src=u)
        return out
''')


def _load(tmp_path, name="kmod"):
    path = tmp_path / f"{name}.py"
    path.write_text(KERNEL)
    sys.path.insert(0, str(tmp_path))
    try:
        import importlib
        return importlib.import_module(name), path
    finally:
        sys.path.remove(str(tmp_path))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("NKI_CACHE_DIR", str(d))
    return d


def test_compile_returns_a_scheduled_program(tmp_path, cache):
    mod, _ = _load(tmp_path, "kmod_a")
    prog = nki.compile(mod.scale, np.zeros((128, 256), np.float32), target="trn1")
    assert isinstance(prog, Program) and prog.meta["target"] == "trn1"
    info = prog.meta["compile"]
    order = [i for q in info["queues"].values() for i in q]
    assert sorted(order) == list(range(len(prog.instructions)))      # every instruction on one queue
    assert set(info["queues"]) >= {"vector"} and any(q.startswith("dma") for q in info["queues"])
    queue_of = {i: q for q, idx in info["queues"].items() for i in idx}
    assert info["semaphores"] and all(queue_of[a] != queue_of[b] and a < b for a, b in info["semaphores"])
    assert all(t.address is not None for t in prog.tensors.values() if t.on_chip)


def test_artifact_saves_and_loads(tmp_path, cache):
    mod, _ = _load(tmp_path, "kmod_b")
    prog = nki.compile(mod.scale, np.zeros((128, 64), np.float32), target="trn2")
    path = prog.save(tmp_path / "scale.json")
    again = Program.load(path)
    assert again.digest() == prog.digest()
    data = json.loads(path.read_text())
    assert data["version"] >= 1 and data["meta"]["compile"]["version"] >= 1
    data["version"] = 999
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="version"):
        Program.load(path)


def test_second_compile_loads_from_disk_without_tracing(tmp_path, cache, monkeypatch):
    mod, _ = _load(tmp_path, "kmod_c")
    x = np.zeros((128, 64), np.float32)
    first = nki.compile(mod.scale, x, target="trn2")
    files = list(cache.glob("*.json"))
    assert len(files) == 1
    from nkihub.nki.jit import JitKernel

    def no_trace(*a, **k):
        raise AssertionError("traced although the artifact was cached")

    monkeypatch.setattr(JitKernel, "_trace", no_trace)
    fresh = JitKernel(mod.scale.fn)                    # a new kernel object: empty in-memory cache
    assert nki.compile(fresh, x, target="trn2").digest() == first.digest()
    np.testing.assert_array_equal(fresh(x + 1), 3 * (x + 1))   # and it runs from the loaded program
    with pytest.raises(AssertionError, match="traced"):
        nki.compile(fresh, x, target="trn1")             # another target is another key


def test_a_second_process_compiles_nothing(tmp_path, cache):
    _, path = _load(tmp_path, "kmod_d")
    script = textwrap.dedent(f'''
        import sys, numpy as np
        sys.path.insert(0, {str(tmp_path)!r})
        from nkihub.nki.jit import JitKernel
        import kmod_d
        if sys.argv[1] == "second":
            def boom(*a, **k):
                raise SystemExit("traced")
            JitKernel._trace = boom
        import nki
        p = nki.compile(kmod_d.scale, np.zeros((128, 32), np.float32), target="trn2")
        print(p.digest())
    ''')
    run = lambda arg: subprocess.run([sys.executable, "-c", script, arg], capture_output=True, text=True,
                                     cwd=str(Path(__file__).resolve().parents[2]), timeout=120)
    a, b = run("first"), run("second")
    assert a.returncode == 0, a.stderr
    assert b.returncode == 0, b.stderr
    assert a.stdout == b.stdout


def test_cache_key_depends_on_source_shapes_and_target(tmp_path, cache):
    from nkihub.nki.compile import cache_key
    from nkihub.nki.jit import _signature_key
    from nkihub.simulator.targets import get_target
    mod, path = _load(tmp_path, "kmod_e")
    sig = lambda shape: _signature_key(mod.scale._bind((np.zeros(shape, np.float32),), {}))
    k1 = cache_key(mod.scale, sig((128, 8)), get_target("trn2"))
    assert k1 == cache_key(mod.scale, sig((128, 8)), get_target("trn2"))
    assert k1 != cache_key(mod.scale, sig((128, 16)), get_target("trn2"))
    assert k1 != cache_key(mod.scale, sig((128, 8)), get_target("trn1"))
    path.write_text(KERNEL + "\n# edited\n")
    assert k1 != cache_key(mod.scale, sig((128, 8)), get_target("trn2"))


def test_cache_can_be_disabled(tmp_path, monkeypatch):
    monkeypatch.setenv("NKI_CACHE_DIR", "off")
    mod, _ = _load(tmp_path, "kmod_f")
    nki.compile(mod.scale, np.zeros((128, 8), np.float32))
    assert not (tmp_path / "cache").exists()
    from nkihub.nki import config
    assert config.cache_dir() is None
    monkeypatch.delenv("NKI_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert config.cache_dir() == tmp_path / "xdg" / "nkihub" / "nki"


def test_kernel_rule_errors_surface_from_compile(tmp_path, cache):
    mod, _ = _load(tmp_path, "kmod_g")
    with pytest.raises(nki.KernelRuleError) as info:
        nki.compile(mod.scale, np.zeros((256, 8), np.float32))
    assert info.value.rule == "partition-dim-limit" and "kmod_g.py" in str(info.value)


def test_editing_a_helper_module_the_kernel_imports_changes_the_cache_key(tmp_path, cache):
    # A kernel built from helpers in another file must not come back stale from the disk cache after
    # the helper file changes.
    import importlib

    from nkihub.nki.compile import cache_key
    from nkihub.simulator.targets import get_target

    (tmp_path / "kmod_helpers.py").write_text("import nki.language as nl\n\ndef times(t):\n"
                                             "    return nl.multiply(t, 3.0)\n")
    (tmp_path / "kmod_user.py").write_text(
        "import nki\nimport nki.language as nl\nfrom kmod_helpers import times\n\n@nki.jit\ndef k(x):\n"
        "    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)\n"
        "    nl.store(out, times(nl.load(x)))\n    return out\n")
    sys.path.insert(0, str(tmp_path))
    try:
        user = importlib.import_module("kmod_user")
    finally:
        sys.path.remove(str(tmp_path))
    sig = (("x", "T", (128, 4), "float32"),)
    before = cache_key(user.k, sig, get_target("trn2"))
    (tmp_path / "kmod_helpers.py").write_text("import nki.language as nl\n\ndef times(t):\n"
                                             "    return nl.multiply(t, 4.0)\n")
    assert cache_key(user.k, sig, get_target("trn2")) != before
