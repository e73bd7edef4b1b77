"""Completeness of the instruction table: every opcode has engines, a docstring, operand rules (or an
explicit empty tuple), a numpy execute, a cost that is a positive number of seconds, and a row in the
op-test table of test_ops.py, so nothing silently runs unchecked or costs zero."""
from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import pytest

from nkihub.simulator.isa import ENGINES, OPS, opdef
from nkihub.simulator.isa import base
from nkihub.simulator.isa.base import register


def _op_tests() -> dict:
    # Loaded by path so this works under any pytest import mode.
    spec = importlib.util.spec_from_file_location("_nkihub_test_ops", Path(__file__).with_name("test_ops.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.OP_TESTS


OP_TESTS = _op_tests()
KNOWN_CATEGORIES = {base.ELEMENTWISE, base.REDUCE, base.DMA, base.MATMUL, base.ACCUMULATE, base.GENERATE,
                    base.DEBUG, base.INDIRECT, base.CROSS_PARTITION, base.RANDOM, base.ROUNDED}


def test_table_is_not_empty():
    assert {"nc_matmul", "dma_copy", "tensor_tensor", "activation"} <= set(OPS)


@pytest.mark.parametrize("opcode", sorted(OPS))
def test_row_is_complete(opcode):
    row = OPS[opcode]
    assert row.opcode == opcode
    assert row.engines and row.engines <= set(ENGINES), f"{opcode}: engines {row.engines}"
    assert len(row.doc) > 20, f"{opcode}: the docstring says what it computes"
    assert callable(row.execute) and list(inspect.signature(row.execute).parameters)[:4] == \
        ["ins", "src", "dst", "ctx"]
    assert callable(row.cost)
    assert isinstance(row.rules, tuple) and all(callable(r) for r in row.rules)
    assert row.categories <= KNOWN_CATEGORIES, f"{opcode}: unknown category"
    assert opcode in OP_TESTS, f"{opcode} has no row in the op-test table (tests/simulator/test_ops.py)"


def _programs_of(opcode: str) -> list:
    """Programs the op-test row of ``opcode`` runs for one generated example."""
    import nkihub.simulator.executor as ex
    from hypothesis import Phase, given, settings
    from hypothesis import strategies as st
    captured, real_init = [], ex.Executor.__init__

    def spy(self, program, *args, **kw):
        captured.append(program)
        real_init(self, program, *args, **kw)

    @settings(max_examples=1, phases=[Phase.generate], database=None, deadline=None)
    @given(st.data())
    def once(data):
        OP_TESTS[opcode](data)

    ex.Executor.__init__ = spy
    try:
        once()
    finally:
        ex.Executor.__init__ = real_init
    return captured


@pytest.mark.parametrize("opcode", sorted(set(OPS) & set(OP_TESTS)))
def test_cost_is_positive_seconds(opcode):
    """Each row's cost, on an instance its op-test row builds, is > 0 and < 1 s on every target."""
    from nkihub.simulator.targets import TARGETS
    programs = _programs_of(opcode)
    assert programs
    for target in TARGETS.values():
        for ins in programs[-1].instructions:
            seconds = OPS[ins.opcode].cost(ins, programs[-1], target)
            assert 0 < seconds < 1, f"{opcode} on {target.name}: cost {seconds}"


def test_register_requires_explicit_rules():
    with pytest.raises(ValueError, match="rules=()"):
        register("_no_rules", engines={"vector"}, execute=lambda *a: None, cost=lambda *a: 1.0)
    assert "_no_rules" not in OPS


def test_register_rejects_a_duplicate():
    row = OPS["memset"]
    with pytest.raises(ValueError, match="defined twice"):
        register("memset", engines=row.engines, execute=row.execute, cost=row.cost, rules=())


def test_unknown_opcode_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown instruction 'nc_fly'"):
        opdef("nc_fly")


def test_categories_are_sets_rules_read():
    assert base.in_category(base.ACCUMULATE) == {"nc_matmul", "nc_matmul_mx"}
    assert "dma_copy" in base.in_category(base.DMA)
