"""The generated API coverage table is current, every gap says why, and implemented functions accept the
documented parameter names."""
from pathlib import Path

import pytest

from nkihub.nki.compat import coverage

DOC = Path(__file__).resolve().parents[2] / "docs" / "api_coverage.md"


def test_committed_table_is_current():
    assert DOC.read_text() == coverage.render(), "regenerate: python -m nkihub.nki.compat.coverage > docs/api_coverage.md"


def test_inventory_covers_both_dialects():
    entries = coverage.inventory()
    mods = {e.module for e in entries}
    assert {"nki.language", "nki.isa", "neuronxcc.nki.language", "neuronxcc.nki.isa"} <= mods
    assert len(entries) > 350


def test_every_gap_has_a_reason_and_no_parameter_mismatch():
    for e, status, why in coverage.rows():
        assert why != "not implemented", f"{e.module}.{e.name} is missing without a reason"
        assert not why.startswith("missing parameters"), f"{e.module}.{e.name}: {why}"


@pytest.mark.parametrize("module,name", [("nki.isa", "tensor_tensor_scan"), ("nki.isa", "range_select"),
                                         ("neuronxcc.nki.isa", "scalar_tensor_tensor"),
                                         ("neuronxcc.nki.language", "exp"), ("nki.language", "rms_norm")])
def test_documented_parameters_accepted(module, name):
    entry = next(e for e in coverage.inventory() if e.module == module and e.name == name)
    obj = coverage.resolve(entry)
    assert obj is not None and coverage.missing_params(entry, obj) == []


def test_every_present_row_says_how_it_is_simulated_and_costed():
    for e, status, _ in coverage.rows():
        sim, cost = coverage.how(e, status)
        if status == "gap":
            continue
        assert sim and sim != "-" and cost and cost != "-", f"{e.module}.{e.name}"


@pytest.mark.parametrize("module,name,instruction,engine_rule", [
    ("nki.language", "exp", "`activation`", "Scalar"), ("nki.isa", "nc_matmul", "`nc_matmul`", "Tensor"),
    ("nki.isa", "quantize_mx", "`quantize_mx`", "Vector"), ("nki.collectives", "all_gather", "`all_gather`", "ring"),
    ("neuronxcc.nki.language", "loop_reduce", "`tensor_tensor`", "Vector"),
    ("nki.language", "affine_range", "trace time", "no cost"),
])
def test_how_a_name_is_simulated_comes_from_its_code(module, name, instruction, engine_rule):
    entry = next(e for e in coverage.inventory() if e.module == module and e.name == name)
    sim, cost = coverage.how(entry, "implemented")
    assert instruction in sim and engine_rule in cost


def test_old_dialect_is_complete():
    old = [s for e, s, _ in coverage.rows() if e.dialect == "old"]
    assert old and all(s in ("implemented", "not simulated") for s in old)
