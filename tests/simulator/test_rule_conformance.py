"""Conformance of the documented operand rules, generated from the instruction table.

Every rule on a row that carries a ``rule`` name and ``roles`` (a rule stated on an AWS API page, its
``source``) gets, for each role and both dialects (``nki.isa`` and the old ``neuronxcc.nki.isa``), a kernel
that breaks it -- refused with that rule's name at the author's call line -- and one that keeps it, which
runs and computes the documented result (each rule names the operand shapes that break and keep it:
``rule.breaking``, ``rule.keeping``, for data of shape (128, 64)). A documented rule without a case fails the test. Shared engine
rules (``COMPUTE_RULES``) are checked by test_validate.py; ``UNCASED`` lists them so a new rule can be
neither cased nor listed.

A property test drives the same instructions with arbitrary operand shapes: a kernel mistake surfaces as
the project's ``NkiError`` with a rule and a line, never as numpy's broadcasting ``ValueError``.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nkihub import nki
from nkihub.nki import isa as nisa, language as nl
from nkihub.nki.compat import isa as old_isa
from nkihub.simulator import rules as shared
from nkihub.simulator.errors import KernelRuleError, NkiError
from nkihub.simulator.isa import OPS

P, F = 128, 64


def _line() -> int:
    """The caller's next line: the nisa call a case makes."""
    return inspect.currentframe().f_back.f_lineno + 1


# (opcode, role) -> case(operand tile, lines) that calls the instruction with ``operand`` as ``role`` and
# returns the kernel output; with the expected numpy result for a keeping operand.
def _ts0(new, y_t, x_t, o, lines):
    if new:
        lines.append(_line())
        nisa.tensor_scalar(dst=o, data=x_t, op0=nl.multiply, operand0=y_t)
        return o
    lines.append(_line())
    return old_isa.tensor_scalar(data=x_t, op0=np.multiply, operand0=y_t)


def _ts1(new, y_t, x_t, o, lines):
    if new:
        lines.append(_line())
        nisa.tensor_scalar(dst=o, data=x_t, op0=nl.add, operand0=1.0, op1=nl.multiply, operand1=y_t)
        return o
    lines.append(_line())
    return old_isa.tensor_scalar(data=x_t, op0=np.add, operand0=1.0, op1=np.multiply, operand1=y_t)


def _stt0(new, y_t, x_t, o, lines):
    if new:
        lines.append(_line())
        nisa.scalar_tensor_tensor(dst=o, data=x_t, op0=nl.multiply, operand0=y_t, op1=nl.add, operand1=x_t)
        return o
    lines.append(_line())
    return old_isa.scalar_tensor_tensor(data=x_t, op0=np.multiply, operand0=y_t, op1=np.add, operand1=x_t)


def _tsr0(new, y_t, x_t, o, lines):
    r = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    if new:
        lines.append(_line())
        nisa.tensor_scalar_reduce(dst=o, data=x_t, op0=nl.multiply, operand0=y_t, reduce_op=nl.add,
                                  reduce_res=r)
        return o
    lines.append(_line())
    return old_isa.tensor_scalar_reduce(data=x_t, op0=np.multiply, operand0=y_t, reduce_op=np.add,
                                        reduce_res=r)


def _act(role):
    def case(new, y_t, x_t, o, lines):
        kw = {role: y_t, **({"bias": None} if role == "scale" else {})}
        if new:
            lines.append(_line())
            nisa.activation(dst=o, op=nl.copy, data=x_t, **kw)
            return o
        lines.append(_line())
        return old_isa.activation(op=np.copy, data=x_t, **kw)
    return case


def _tt2(new, y_t, x_t, o, lines):
    if new:
        lines.append(_line())
        nisa.tensor_tensor(dst=o, data1=x_t, data2=y_t, op=nl.add)
        return o
    lines.append(_line())
    return old_isa.tensor_tensor(data1=x_t, data2=y_t, op=np.add)


def _stt1(new, y_t, x_t, o, lines):
    if new:
        lines.append(_line())
        nisa.scalar_tensor_tensor(dst=o, data=x_t, op0=nl.multiply, operand0=2.0, op1=nl.add, operand1=y_t)
        return o
    lines.append(_line())
    return old_isa.scalar_tensor_tensor(data=x_t, op0=np.multiply, operand0=2.0, op1=np.add, operand1=y_t)


CASES = {
    ("tensor_tensor", "data2"): (_tt2, lambda x, y: x + y),
    ("scalar_tensor_tensor", "operand1"): (_stt1, lambda x, y: 2 * x + y),
    ("activation", "scale"): (_act("scale"), lambda x, y: x * y),
    ("activation", "bias"): (_act("bias"), lambda x, y: x + y),
    ("tensor_scalar", "operand0"): (_ts0, lambda x, y: x * y),
    ("tensor_scalar", "operand1"): (_ts1, lambda x, y: (x + 1) * y),
    ("scalar_tensor_tensor", "operand0"): (_stt0, lambda x, y: x * y + x),
    ("tensor_scalar_reduce", "operand0"): (_tsr0, lambda x, y: x * y),
}

# Rules without a generated case yet: the shared engine rules (exercised by test_validate.py) and the
# row-specific rules that predate the documented-rule cases. Listed by function name so a new rule must
# either carry a case or be added here on purpose.
UNCASED = {r.__name__ for r in shared.COMPUTE_RULES} | {"rule"}


def documented():
    """(opcode, rule, role) of every documented rule in the table."""
    for opcode, row in sorted(OPS.items()):
        for rule in row.rules:
            if hasattr(rule, "roles"):
                for role in rule.roles:
                    yield opcode, rule, role


DOCUMENTED = list(documented())


def test_the_table_states_documented_rules_with_sources():
    assert {("tensor_scalar", "operand0"), ("tensor_scalar", "operand1"), ("scalar_tensor_tensor", "operand0"),
            ("scalar_tensor_tensor", "operand1"), ("tensor_tensor", "data2"),
            ("activation", "bias")} <= {(o, r) for o, _, r in DOCUMENTED}
    for _, rule, _ in DOCUMENTED:
        assert rule.source.startswith("nki.isa.") and rule.rule


@pytest.mark.parametrize("opcode,rule,role", DOCUMENTED, ids=[f"{o}-{r.rule}-{x}" for o, r, x in DOCUMENTED])
def test_every_documented_rule_has_a_case(opcode, rule, role):
    assert (opcode, role) in CASES, f"{opcode}: documented rule {rule.rule} on '{role}' has no conformance case"


def test_every_rule_is_cased_or_listed():
    for opcode, row in OPS.items():
        for rule in row.rules:
            assert hasattr(rule, "roles") or getattr(rule, "__name__", "") in UNCASED or \
                getattr(rule, "__name__", "").startswith("_"), f"{opcode}: rule {rule} neither cased nor listed"


def _kernel(case, new: bool, lines: list):
    @nki.jit
    def kernel(x, y):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        x_t = nl.load(x)
        y_t = nl.load(y)
        o = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nl.store(out, case(new, y_t, x_t, o, lines))
        return out
    return kernel


CASED = [(o, r, x, new) for o, r, x in DOCUMENTED if (o, x) in CASES for new in (True, False)]


@pytest.mark.parametrize("opcode,rule,role,new", CASED,
                         ids=[f"{o}-{x}-{'nki.isa' if n else 'neuronxcc'}" for o, _, x, n in CASED])
@pytest.mark.parametrize("which", [0, 1])
def test_breaking_the_rule_is_refused_at_the_authors_line(opcode, rule, role, new, which):
    case, _ = CASES[(opcode, role)]
    lines: list = []
    x = np.ones((P, F), np.float32)
    with pytest.raises(KernelRuleError) as err:
        _kernel(case, new, lines)(x, np.ones(rule.breaking[which], np.float32))
    assert err.value.rule == rule.rule and err.value.operand == role
    assert err.value.loc.line == lines[-1] and err.value.loc.file == __file__
    assert "'y_t'" in str(err.value) and rule.source in str(err.value)


@pytest.mark.parametrize("opcode,rule,role,new", CASED,
                         ids=[f"{o}-{x}-{'nki.isa' if n else 'neuronxcc'}" for o, _, x, n in CASED])
def test_keeping_the_rule_runs(opcode, rule, role, new):
    case, expect = CASES[(opcode, role)]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((P, F)).astype(np.float32)
    y = rng.standard_normal(rule.keeping).astype(np.float32)
    out = np.asarray(_kernel(case, new, [])(x, y))
    np.testing.assert_allclose(out, expect(x, y), rtol=1e-6, atol=1e-6)


@st.composite
def shapes(draw):
    return tuple(draw(st.sampled_from(s)) for s in ([1, 64, 128], [1, 3, 64]))


@settings(max_examples=25, deadline=None)
@given(data=shapes(), operand=shapes(), which=st.sampled_from(sorted(CASES)))
def test_kernel_mistakes_surface_as_rule_errors(data, operand, which):
    case, _ = CASES[which]
    x = np.ones(data, np.float32)
    try:
        _kernel(case, True, [])(x, np.ones(operand, np.float32))
    except NkiError as e:
        assert e.rule and e.loc is not None, e
    except Exception as e:   # numpy's broadcasting ValueError, an IndexError, a TypeError...
        pytest.fail(f"raw {type(e).__name__} reached the author for data {data}, operand {operand}: {e}")
