"""The validator on hand-built Programs: engines, operand rules, and the dataflow checks (reads of
unwritten memory, writes to inputs and constants, outputs never written, loop-carried dependencies
inside affine_range with PSUM matmul accumulation excepted)."""
from __future__ import annotations

import pytest

from nkihub.simulator.errors import KernelRuleError, SourceLoc
from nkihub.simulator.program import AccessPattern, Instruction, LoopInfo, Program, TensorSpec
from nkihub.simulator.targets import TRN2
from nkihub.simulator.errors import UninitializedWarning
from nkihub.simulator.validate import check_instruction, validate


def ap(name, shape, offset=0):
    return AccessPattern.row_major(name, shape, offset)


def loc(line):
    return SourceLoc("kern.py", line, 4, None, "    x")


def build(tensors, instructions, inputs=(), outputs=(), loops=()):
    p = Program("v")
    for t in tensors:
        p.add_tensor(t)
    p.instructions += instructions
    p.inputs += list(inputs)
    p.outputs += list(outputs)
    for lp in loops:
        p.loops[lp.id] = lp
    return p


def memset(name, shape, line=1, loops=()):
    return Instruction("memset", "vector", {"dst": ap(name, shape)}, {}, {"value": 0.0}, loc(line), loops)


def copy(dst, src, shape, line=2, loops=(), engine="vector"):
    return Instruction("tensor_copy", engine, {"dst": ap(dst, shape)}, {"src": ap(src, shape)}, {}, loc(line),
                       loops)


def rule_of(program) -> KernelRuleError:
    with pytest.raises(KernelRuleError) as info:
        validate(program, TRN2)
    return info.value


T = [TensorSpec("a", (4, 4), "float32", "sbuf"), TensorSpec("b", (4, 4), "float32", "sbuf")]


def test_a_clean_program_passes():
    validate(build(T, [memset("a", (4, 4)), copy("b", "a", (4, 4))]), TRN2)


def test_read_of_unwritten_memory():
    e = rule_of(build(T, [copy("b", "a", (4, 4), line=9)], outputs=["b"]))
    assert e.rule == "read-uninitialized" and e.loc.line == 9 and e.operand == "src"
    assert "reads 16 of 16 elements of 'a'" in str(e)


def test_read_of_a_partly_written_tile():
    half = Instruction("memset", "vector", {"dst": ap("a", (2, 4))}, {}, {"value": 0.0}, loc(1))
    # computed on: an error
    neg = Instruction("tensor_scalar", "vector", {"dst": ap("b", (4, 4))}, {"data": ap("a", (4, 4))},
                      {"op0": "multiply", "operand0": -1.0}, loc(2))
    assert "reads 8 of 16" in str(rule_of(build(T, [half, neg], outputs=["b"])))
    # stored as it is into the output (AWS's masked examples store partly written tiles whole): a warning
    with pytest.warns(UninitializedWarning, match="reads 8 of 16"):
        validate(build(T, [half, copy("b", "a", (4, 4))], outputs=["b"]), TRN2)


def test_accumulating_onto_unwritten_psum_is_a_read_of_unwritten_memory():
    t = [TensorSpec("s", (4, 4), "bfloat16", "sbuf"), TensorSpec("p", (4, 4), "float32", "psum")]
    mm = Instruction("nc_matmul", "tensor", {"dst": ap("p", (4, 4))},
                     {"stationary": ap("s", (4, 4)), "moving": ap("s", (4, 4))}, {"accumulate": True}, loc(5))
    e = rule_of(build(t, [memset("s", (4, 4)), mm], outputs=["p"]))
    assert e.rule == "read-uninitialized" and e.operand == "dst"


U = T + [TensorSpec("c", (4, 4), "float32", "sbuf"), TensorSpec("o", (4, 4), "float32", "hbm"),
         TensorSpec("o2", (2, 4), "float32", "hbm")]


def test_garbage_that_is_overwritten_before_it_is_stored_is_allowed():
    """Kernels compute on whole tiles whose unwritten part they overwrite later (or never store): only
    results that reach memory the caller sees count."""
    half = Instruction("memset", "vector", {"dst": ap("a", (2, 4))}, {}, {"value": 0.0}, loc(1))
    rest = Instruction("memset", "vector", {"dst": ap("b", (2, 4), offset=8)}, {}, {"value": 1.0}, loc(4))
    program = build(U, [half, copy("b", "a", (4, 4), line=3), rest, copy("c", "b", (2, 4), line=5),
                        copy("o2", "c", (2, 4), line=6)], outputs=["o2"])
    validate(program, TRN2, rules=False)


def test_garbage_reaching_an_output_names_the_first_read():
    half = Instruction("memset", "vector", {"dst": ap("a", (2, 4))}, {}, {"value": 0.0}, loc(1))
    neg = Instruction("tensor_scalar", "vector", {"dst": ap("c", (4, 4))}, {"data": ap("b", (4, 4))},
                      {"op0": "multiply", "operand0": -1.0}, loc(5))
    program = build(U, [half, copy("b", "a", (4, 4), line=3), neg, copy("o", "c", (4, 4), line=7)], outputs=["o"])
    with pytest.raises(KernelRuleError) as info:
        validate(program, TRN2, rules=False)
    e = info.value
    assert e.rule == "read-uninitialized" and e.loc.line == 3 and "reads 8 of 16 elements of 'a'" in str(e)
    assert "reaches 'o'" in str(e) and "kern.py:7" in str(e)


def test_garbage_stored_then_overwritten_in_the_output_is_allowed():
    """A kernel may store a whole tile whose unwritten rows it then overwrites in the output (padding
    zeroed after the fact): only garbage still in the output at the end counts."""
    half = Instruction("memset", "vector", {"dst": ap("a", (2, 4))}, {}, {"value": 0.0}, loc(1))
    pad = Instruction("memset", "vector", {"dst": ap("o", (2, 4), offset=8)}, {}, {"value": 0.0}, loc(4))
    program = build(U, [half, copy("o", "a", (4, 4), line=3), pad], outputs=["o"])
    validate(program, TRN2, rules=False)
    # Without the overwrite the unwritten rows stay: moved as they are (in one copy or several), a warning
    # names the first read; computed on before the store, an error.
    for moves in ([copy("o", "a", (4, 4), line=3)], [copy("b", "a", (4, 4), line=3), copy("o", "b", (4, 4))]):
        with pytest.warns(UninitializedWarning, match="reaches 'o'"):
            validate(build(U, [half, *moves], outputs=["o"]), TRN2, rules=False)
    neg = Instruction("tensor_scalar", "vector", {"dst": ap("b", (4, 4))}, {"data": ap("a", (4, 4))},
                      {"op0": "multiply", "operand0": -1.0}, loc(3))
    program = build(U, [half, neg, copy("o", "b", (4, 4), line=4)], outputs=["o"])
    with pytest.raises(KernelRuleError) as info:
        validate(program, TRN2, rules=False)
    assert info.value.rule == "read-uninitialized" and "reaches 'o'" in str(info.value)


def _shuffle_program(mask_head, store_rows):
    """Partitions 0..31 of 'q' (32 partitions): only partition 16 written; a shuffle moves partitions by
    ``mask_head`` + 255s (left unmodified) in place; then ``store_rows`` partitions go to the output."""
    t = [TensorSpec("q", (32, 4), "float32", "sbuf"), TensorSpec("o", (1, 4), "float32", "hbm")]
    one = Instruction("memset", "vector", {"dst": ap("q", (1, 4), offset=16 * 4)}, {}, {"value": 1.0}, loc(1))
    shuffle = Instruction("nc_stream_shuffle", "vector", {"dst": ap("q", (32, 4))}, {"src": ap("q", (32, 4))},
                          {"shuffle_mask": list(mask_head) + [255] * (32 - len(mask_head))}, loc(2))
    out = Instruction("dma_copy", "dma", {"dst": ap("o", (1, 4))}, {"src": ap("q", (1, 4), offset=store_rows * 4)},
                      {}, loc(3))
    return build(t, [one, shuffle, out], outputs=["o"])


def test_a_shuffle_moves_taints_partition_by_partition():
    """nc_stream_shuffle: partition i takes partition mask[i]'s values (or keeps its own for 255), so only
    the garbage of the partitions it moves travels."""
    validate(_shuffle_program([16], 0), TRN2, rules=False)        # written partition 16 lands on 0
    validate(_shuffle_program([16], 16), TRN2, rules=False)       # 16 kept its own (mask 255)
    for program in (_shuffle_program([5], 0),                     # unwritten partition 5 lands on 0
                    _shuffle_program([16], 3)):                   # 3 kept its garbage
        with pytest.raises(KernelRuleError) as info:
            validate(program, TRN2, rules=False)
        assert info.value.rule == "read-uninitialized" and "reaches 'o'" in str(info.value)


def test_writing_an_input_is_allowed():
    """Kernels write output tensors their caller passes in (AWS NKI kernels take ``out`` arguments)."""
    t = [TensorSpec("x", (4, 4), "float32", "sbuf", "input")]
    p = build(t, [memset("x", (4, 4), line=3)], inputs=["x"])
    validate(p, TRN2)


def test_write_to_a_constant():
    t = [TensorSpec("c", (4, 4), "float32", "sbuf", "constant", data=bytes(64))]
    assert rule_of(build(t, [memset("c", (4, 4))])).rule == "write-to-constant"


def test_output_never_written():
    out_loc = loc(4)
    t = [TensorSpec("o", (4, 4), "float32", "shared_hbm", "output", out_loc)]
    e = rule_of(build(t, [], outputs=["o"]))
    assert e.rule == "output-not-written" and e.loc == out_loc and "16 of 16 elements" in str(e)


def _loop_program(kind):
    """for i in <kind>(2): a = copy(a)  -- iteration 1 reads what iteration 0 wrote."""
    lp = LoopInfo(0, kind, 2, loc(10))
    return build(T, [memset("a", (4, 4)),
                     copy("b", "a", (4, 4), line=11, loops=((0, 0),)), copy("a", "b", (4, 4), line=12, loops=((0, 0),)),
                     copy("b", "a", (4, 4), line=11, loops=((0, 1),)), copy("a", "b", (4, 4), line=12, loops=((0, 1),))],
                 loops=[lp])


def test_loop_carried_dependency_in_affine_range():
    e = rule_of(_loop_program("affine"))
    assert e.rule == "loop-carried-dependency" and e.loc.line == 11
    assert "iteration 1 of the affine_range at kern.py:10" in str(e) and "written at kern.py:12" in str(e)


@pytest.mark.parametrize("kind", ["sequential", "static"])
def test_loop_carried_values_are_legal_in_sequential_loops(kind):
    validate(_loop_program(kind), TRN2)


def test_psum_matmul_accumulation_across_affine_range_is_legal():
    t = [TensorSpec("s", (4, 4), "bfloat16", "sbuf"), TensorSpec("p", (4, 4), "float32", "psum"),
         TensorSpec("o", (4, 4), "float32", "sbuf")]
    body = [memset("s", (4, 4))]
    for k in range(3):
        body.append(Instruction("nc_matmul", "tensor", {"dst": ap("p", (4, 4))},
                                {"stationary": ap("s", (4, 4)), "moving": ap("s", (4, 4))},
                                {"accumulate": k > 0}, loc(20), ((0, k),)))
    body.append(copy("o", "p", (4, 4)))
    validate(build(t, body, loops=[LoopInfo(0, "affine", 3, loc(19))]), TRN2)


def test_engine_must_be_one_the_instruction_runs_on():
    with pytest.raises(KernelRuleError, match=r"tensor_copy cannot run on the tensor engine \(it runs on: "
                                              r"gpsimd, scalar, vector\)") as info:
        check_instruction(copy("b", "a", (4, 4), engine="tensor"), build(T, []), TRN2)
    assert info.value.rule == "engine"


def test_operand_rules_run_first():
    t = [TensorSpec("h", (4, 4), "float32", "hbm"), TensorSpec("b", (4, 4), "float32", "sbuf")]
    e = rule_of(build(t, [copy("b", "h", (4, 4))]))
    assert e.rule == "engine-buffer" and e.buffer == "hbm"


def test_rules_false_runs_only_the_dataflow_checks():
    t = [TensorSpec("h", (4, 4), "float32", "hbm"), TensorSpec("b", (4, 4), "float32", "sbuf")]
    program = build(t, [Instruction("memset", "vector", {"dst": ap("h", (4, 4))}, {}, {"value": 1.0}),
                        copy("b", "h", (4, 4))])
    validate(program, TRN2, rules=False)


def test_reduce_mode_reads_reduce_res_but_not_a_fresh_destination():
    # activation with reduce_cmd='reduce' accumulates into reduce_res; its main destination is only
    # written, so a fresh dst is fine while a fresh reduce_res is a read of memory nothing wrote.
    import numpy as np

    import nki
    import nki.isa as nisa
    import nki.language as nl

    def make(init_acc: bool):
        @nki.jit
        def k(x):
            out = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
            t = nl.load(x)
            acc = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
            if init_acc:
                nisa.memset(acc, 0.0)
            y = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
            nisa.activation(y, nl.exp, t, reduce_res=acc, reduce_cmd=nisa.reduce_cmd.reduce)
            nl.store(out, acc)
            return out
        return k

    x = np.zeros((128, 8), np.float32)
    np.testing.assert_allclose(make(True)(x), np.full((128, 1), 8.0, np.float32))
    with pytest.raises(KernelRuleError) as info:
        make(False)(x)
    assert info.value.rule == "read-uninitialized" and "acc" in str(info.value)
