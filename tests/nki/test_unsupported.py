"""Names and forms AWS NKI has and nkihub does not simulate fail with an error that says so, names the
public module (``neuronxcc.nki...`` for the old dialect) and points at the kernel line; unknown names
get an AttributeError/ImportError naming the public module, never an internal one. Launch grids without
programs are errors."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import neuronxcc.nki as old_nki
import neuronxcc.nki.language as old_nl
import nki
import nki.language as nl
from nkihub.nki.errors import KernelRuleError, NotSimulatedError

X = np.ones((4, 4), np.float32)


def _line_of(fn, text):
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


@pytest.fixture
def without_dynamic_loops(monkeypatch):
    """Every documented name of the current dialect is simulated now: take a few away to see what a kernel
    meets when a documented name is missing."""
    for name in ("dynamic_range", "fori_loop", "while_loop"):
        monkeypatch.delattr(nl, name)


def test_a_documented_name_that_is_not_simulated_says_so_at_the_kernel_line(without_dynamic_loops):
    @nki.jit
    def k(x):
        for _ in nl.dynamic_range(3):   # taken away by the fixture
            pass
    with pytest.raises(NotSimulatedError) as info:
        k(X)
    err = info.value
    assert err.rule == "not-simulated" and err.loc.line == _line_of(k.fn, "nl.dynamic_range(3)")
    assert "nki.language.dynamic_range is part of AWS NKI but nkihub does not simulate it" in str(err)
    assert isinstance(err, AttributeError) and isinstance(err, NotImplementedError)


def test_the_old_dialect_names_its_own_modules():
    with pytest.raises(NotSimulatedError, match=r"neuronxcc\.nki\.isa\.builtin_custom_op is part of AWS NKI"):
        old_nki.isa.builtin_custom_op("f", "lib.so", 1, 1, srcs=[], dsts=[])
    with pytest.raises(AttributeError) as info:
        old_nl.no_such_function
    assert str(info.value) == "module 'neuronxcc.nki.language' has no attribute 'no_such_function'"
    assert "nkihub.nki.compat" not in str(info.value)


def test_imports_of_missing_names_name_the_public_module(without_dynamic_loops):
    with pytest.raises(ImportError) as info:
        exec("from nki.language import fori_loop", {})
    assert isinstance(info.value, NotSimulatedError) and "nki.language.fori_loop" in str(info.value)
    with pytest.raises(ImportError, match=r"cannot import name 'nothing_here' from 'nki\.isa'$"):
        exec("from nki.isa import nothing_here", {})


def test_feature_detection_still_works(without_dynamic_loops):
    assert getattr(nl, "fori_loop", None) is None and not hasattr(nl, "while_loop")
    assert hasattr(nl, "affine_range")


def test_unsupported_forms_carry_the_kernel_line():
    @old_nki.jit
    def k(x):
        out = old_nl.ndarray((4, 4), dtype=old_nl.float32, buffer=old_nl.shared_hbm)
        i_p, i_f = old_nl.arange(4)[:, None], old_nl.arange(4)[None, :]
        old_nl.store(out[i_p, i_f], value=old_nl.load(x), mask=(i_p + i_f < 4))
        return out
    with pytest.raises(NotSimulatedError) as info:
        k(X)
    assert info.value.loc.line == _line_of(k.fn, "mask=(i_p + i_f < 4)")
    assert "mask term over several index axes" in str(info.value)


@pytest.mark.parametrize("grid", [0, (2, 0), ()])
def test_a_launch_grid_without_programs_is_an_error(grid):
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x))
        return out
    with pytest.raises(KernelRuleError) as info:
        k[grid](X)
    assert info.value.rule == "launch-grid" and info.value.loc.file == __file__
    old = old_nki.jit(k.fn)
    if grid == 0:   # neuronxcc launches kernel[0] as a launch without a grid: one program
        np.testing.assert_array_equal(old[grid](X), X)
        return
    with pytest.raises(KernelRuleError, match="launch-grid"):
        old[grid](X)


def test_an_import_of_a_documented_module_nkihub_lacks_says_so(monkeypatch):
    from nkihub.nki import unsupported
    documented = dict(unsupported._documented())
    documented["nki.not_here_yet"] = frozenset({"f"})
    monkeypatch.setattr(unsupported, "_documented", lambda: documented)
    with pytest.raises(ImportError) as info:
        import nki.not_here_yet  # noqa: F401
    assert isinstance(info.value, NotSimulatedError) and info.value.loc.file == __file__
    assert "nki.not_here_yet is part of AWS NKI" in str(info.value)
    with pytest.raises(ModuleNotFoundError):
        import nki.not_documented_anywhere  # noqa: F401
