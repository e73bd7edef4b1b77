"""The Program: access patterns, tensor specs, a versioned serialisation and a stable content hash."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from nkihub.simulator.errors import SourceLoc
from nkihub.simulator.program import (FORMAT_VERSION, AccessPattern, Instruction, LoopInfo, Program, TensorSpec)


def small_program() -> Program:
    loc = SourceLoc("k.py", 3, 4, 10, "    x = nl.load(a)")
    p = Program("k", meta={"target": "trn2"})
    p.add_tensor(TensorSpec("a", (4, 8), "bfloat16", "hbm", "input", loc))
    p.add_tensor(TensorSpec("t", (4, 8), "float32", "sbuf", loc=loc, address=128))
    p.add_tensor(TensorSpec("c", (2,), "float32", "hbm", "constant", data=np.arange(2, dtype=np.float32).tobytes()))
    p.inputs.append("a")
    p.loops[0] = LoopInfo(0, "affine", 2, loc)
    p.instructions.append(Instruction("dma_copy", "dma", {"dst": AccessPattern("t", 0, ((8, 4), (1, 8)))},
                                      {"src": AccessPattern("a", 0, ((8, 4), (1, 8)))}, {"dge_mode": "none"},
                                      loc, ((0, 1),)))
    return p


def test_access_pattern_shape_size_and_extent():
    ap = AccessPattern("t", 10, ((16, 4), (2, 3)))
    assert ap.shape == (4, 3) and ap.size == 12
    assert ap.extent() == (10, 10 + 16 * 3 + 2 * 2 + 1)
    assert AccessPattern("t", 10, ((-1, 3),)).extent() == (8, 11)   # negative steps walk down
    assert AccessPattern("t", 5, ((1, 0),)).extent() == (5, 5)      # empty


def test_tensor_spec_geometry():
    spec = TensorSpec("t", (128, 4, 8), "bfloat16", "sbuf")
    assert spec.size == 128 * 32 and spec.free_size == 32 and spec.bytes_per_partition == 64
    assert spec.on_chip and not TensorSpec("h", (2,), "float32", "shared_hbm").on_chip
    assert TensorSpec("v", (128,), "float32", "sbuf").free_size == 1


def test_round_trip_keeps_everything():
    p = small_program()
    q = Program.loads(p.dumps())
    assert q.to_json() == p.to_json()
    assert q.tensors["c"].data == p.tensors["c"].data
    assert q.instructions[0].loc == p.instructions[0].loc and q.instructions[0].loops == ((0, 1),)
    assert q.tensors["t"].address == 128 and q.loops[0].kind == "affine"


def test_block_allocation_round_trips():
    spec = TensorSpec("qk", (128, 4, 512), "float32", "psum", block_bytes=2048, block_addresses=(0, 4096, 2048, 0))
    assert spec.blocks == 4 and TensorSpec("t", (128, 8), "float32", "sbuf").blocks == 1
    back = TensorSpec.from_json(json.loads(json.dumps(spec.to_json())))
    assert back == spec and "block_bytes" not in TensorSpec("t", (1,), "float32", "sbuf").to_json()


def test_box_covers_an_access_pattern_per_row():
    row = 16   # elements per partition
    assert AccessPattern("t", 2 * row + 3, ((1, 5),)).box(row) == (2, 3, 3, 8)          # inside one row
    assert AccessPattern("t", 4, ((row, 3), (1, 4))).box(row) == (0, 3, 4, 8)           # same columns, 3 rows
    assert AccessPattern("t", 12, ((row, 2), (1, 8))).box(row) == (0, 3, 0, row)        # wraps: whole rows


def test_save_and_load(tmp_path):
    p = small_program()
    path = p.save(tmp_path / "sub" / "k.nkiprog")
    assert Program.load(path).digest() == p.digest()
    assert [f.name for f in path.parent.iterdir()] == ["k.nkiprog"]  # no temp file left behind


def test_digest_is_stable_and_content_sensitive():
    a, b = small_program(), small_program()
    assert a.digest() == b.digest() and len(a.digest()) == 64
    b.instructions[0].attrs["dge_mode"] = "hwdge"
    assert a.digest() != b.digest()


def test_digest_is_the_same_in_another_process():
    code = ("import sys; sys.path.insert(0, '.'); sys.path.insert(0, 'tests/simulator');"
            "from test_program import small_program; print(small_program().digest())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""}, cwd=str(__import__("pathlib").Path(__file__)
                                                                            .resolve().parents[2]))
    assert out.stdout.strip() == small_program().digest()


def test_serialisation_is_versioned():
    d = small_program().to_json()
    assert d["format"] == "nkihub-program" and d["version"] == FORMAT_VERSION
    with pytest.raises(ValueError, match="version 999 is not supported"):
        Program.from_json({**d, "version": 999})
    with pytest.raises(ValueError, match="not an nkihub program"):
        Program.from_json({**d, "format": "other"})


def test_canonical_json_is_sorted_and_compact():
    text = small_program().dumps()
    assert ", " not in text and json.loads(text)["name"] == "k"
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def test_duplicate_tensor_is_rejected():
    p = small_program()
    with pytest.raises(ValueError, match="already exists"):
        p.add_tensor(TensorSpec("a", (1,), "float32", "hbm"))


def test_summary_counts_engines():
    assert small_program().summary() == "Program k: 1 instructions (dma=1), 3 tensors"
