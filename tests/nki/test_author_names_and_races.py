"""Errors speak the author's names (a tile by the variable its line bound, an HBM tensor by its parameter),
and the affine_range dependency check refuses every order-dependent in-place update, exempting exactly
the associative accumulations docs/simulator.md lists."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nkihub import nki
from nkihub.nki import isa as nisa, language as nl
from nkihub.simulator.errors import KernelRuleError
from nkihub.simulator.program import bound_name
from nkihub.simulator.validate import REDUCTION_OPS

X = np.ones((128, 64), np.float32)


@pytest.mark.parametrize("line,name", [
    ("y_t = nl.load(y)", "y_t"), ("    acc = nl.ndarray((128, 1), dtype=nl.float32)", "acc"),
    ("acc: object = nl.zeros((128, 1))", "acc"), ("nisa.memset(dst=acc, value=0.0)", None),
    ("    dst=o,", None), ("a, b = f()", None), ("t[0] = x", None), ("a == b", None), ("", None)])
def test_bound_name(line, name):
    assert bound_name(line) == name


def _update(kind):
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        acc = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        for i in nl.affine_range(4):
            t = nl.load(x)
            if kind == "stt-mul-add":
                nisa.scalar_tensor_tensor(dst=acc, data=acc, op0=nl.multiply, operand0=0.5, op1=nl.add, operand1=t)
            elif kind == "stt-add-add":
                nisa.scalar_tensor_tensor(dst=acc, data=acc, op0=nl.add, operand0=0.5, op1=nl.add, operand1=t)
            elif kind == "stt-into-operand1":
                nisa.scalar_tensor_tensor(dst=acc, data=t, op0=nl.multiply, operand0=0.5, op1=nl.add, operand1=acc)
            elif kind == "tt-subtract":
                nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.subtract)
            elif kind == "tt-max":
                nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.maximum)
            elif kind == "ts-add-multiply":
                nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=1.0, op1=nl.multiply, operand1=2.0)
        nl.store(out, acc)
        return out
    return kernel


@pytest.mark.parametrize("kind", ["stt-mul-add", "tt-subtract", "ts-add-multiply"])
def test_order_dependent_in_place_updates_are_refused(kind):
    with pytest.raises(KernelRuleError) as err:
        _update(kind)(X)
    assert err.value.rule == "loop-carried-dependency"
    assert "'acc' (" in str(err.value) and "'sbuf'" not in str(err.value)
    # the message lists the exempt operators docs/simulator.md lists
    assert all(op in str(err.value) for op in REDUCTION_OPS) and "nc_matmul accumulating into PSUM" in str(err.value)


@pytest.mark.parametrize("kind,expect", [("stt-add-add", 4 * 1.5), ("stt-into-operand1", 4 * 0.5),
                                         ("tt-max", 1.0)])
def test_associative_accumulations_run(kind, expect):
    np.testing.assert_allclose(np.asarray(_update(kind)(X)), np.full(X.shape, expect, np.float32))


def test_docs_list_the_exempt_operators():
    doc = (Path(__file__).parents[2] / "docs" / "simulator.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith("| `loop-carried-dependency`"))
    assert all(op in row for op in REDUCTION_OPS) and "nc_matmul" in row


def test_hbm_operand_is_named_by_its_parameter():
    @nki.jit
    def kernel(alpha):
        out = nl.ndarray(alpha.shape, dtype=alpha.dtype, buffer=nl.shared_hbm)
        o = nl.ndarray(alpha.shape, dtype=alpha.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=alpha)
        nl.store(out, o)
        return out
    with pytest.raises(KernelRuleError) as err:
        kernel(X)
    assert err.value.rule == "engine-buffer" and err.value.tensor == "'alpha'"


def test_uninitialized_read_names_the_variable():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        scratch = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nl.store(out, scratch)
        return out
    with pytest.raises(KernelRuleError) as err:
        kernel(X)
    assert err.value.rule == "read-uninitialized" and "'scratch' (" in str(err.value)
