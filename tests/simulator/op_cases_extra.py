"""Op-test rows for the instruction families of issue 7 (scan, select, partition, random), merged into
``OP_TESTS`` of test_ops.py. ``cases(run_op)`` returns {opcode: case(data)}; each case draws a small fp32
case with hypothesis, runs one instruction and compares with numpy."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

F32 = np.float32


def _arr(data, shape, lo=-4.0, hi=4.0):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    return rng.uniform(lo, hi, size=shape).astype(F32)


def _shape(data):
    return (data.draw(st.sampled_from([1, 2, 8, 16]), label="P"), data.draw(st.integers(8, 24), label="F"))


def _close(got, want):
    np.testing.assert_allclose(got.astype(F32), np.asarray(want, F32), rtol=1e-6, atol=1e-6)


def cases(run_op):
    def out(shape, dt="float32"):
        return {"dst": (shape, dt, "sbuf")}

    def scan(data):
        s = _shape(data)
        a, b, init = _arr(data, s, 0, 1), _arr(data, s), _arr(data, (s[0], 1))
        got, _ = run_op("tensor_tensor_scan", "vector", out(s), {"data0": (a, "sbuf"), "data1": (b, "sbuf"),
                        "initial": (init, "sbuf")}, {"op0": "multiply", "op1": "add"})
        ref, prev = np.empty_like(a), init[:, 0]
        for j in range(s[1]):
            prev = a[:, j] * prev + b[:, j]
            ref[:, j] = prev
        _close(got["dst"], ref)

    def stt(data):
        s = _shape(data)
        x, y = _arr(data, s), _arr(data, s)
        got, _ = run_op("scalar_tensor_tensor", "vector", out(s), {"data": (x, "sbuf"), "operand1": (y, "sbuf")},
                        {"op0": "multiply", "operand0": 1.5, "op1": "add"})
        _close(got["dst"], x * F32(1.5) + y)

    def tsr(data):
        s = _shape(data)
        x = _arr(data, s)
        got, _ = run_op("tensor_scalar_reduce", "vector", {"dst": (s, "float32", "sbuf"),
                        "reduce_res": ((s[0], 1), "float32", "sbuf")}, {"data": (x, "sbuf")},
                        {"op0": "add", "operand0": 1.0, "reduce_op": "maximum", "reduce_cmd": "reset_reduce"})
        _close(got["dst"], x + 1)
        _close(got["reduce_res"], (x + 1).max(1, keepdims=True))

    def sel(data):
        s = _shape(data)
        x, p = _arr(data, s), (_arr(data, s) > 0).astype(np.uint8)
        got, _ = run_op("select_reduce", "vector", out(s), {"predicate": (p, "sbuf"), "on_true": (x, "sbuf")},
                        {"on_false": -9.0})
        _close(got["dst"], np.where(p != 0, x, -9.0))

    def rsel(data):
        s = _shape(data)
        x = _arr(data, s)
        got, _ = run_op("range_select", "vector", out(s), {"on_true_tile": (x, "sbuf")},
                        {"comp_op0": "greater_equal", "comp_op1": "less", "bound0": 2.0, "bound1": 5.0,
                         "on_false_value": 0.0})
        i = np.arange(s[1])
        _close(got["dst"], np.where((i >= 2) & (i < 5), x, 0.0))

    def top(data):
        s = _shape(data)
        x = np.random.default_rng(data.draw(st.integers(0, 99))).permutation(s[0] * s[1]).reshape(s).astype(F32)
        t = -np.sort(-x, 1)[:, :8]
        got, _ = run_op("max8", "vector", out((s[0], 8)), {"src": (x, "sbuf")})
        _close(got["dst"], t)
        got, _ = run_op("nc_find_index8", "vector", out((s[0], 8), "uint32"), {"data": (x, "sbuf"),
                        "vals": (t, "sbuf")})
        _close(np.take_along_axis(x, got["dst"].astype(np.int64), 1), t)
        return x, t, got["dst"]

    def find(data):
        top(data)

    def replace(data):
        x, t, idx = top(data)
        got, _ = run_op("nc_match_replace8", "vector", out(x.shape), {"data": (x, "sbuf"), "vals": (t, "sbuf")},
                        {"imm": -1.0})
        ref = x.copy()
        np.put_along_axis(ref, idx.astype(np.int64), -1.0, 1)
        _close(got["dst"], ref)

    def preduce(data):
        s = _shape(data)
        x = _arr(data, s)
        got, _ = run_op("tensor_partition_reduce", "gpsimd", out((1, s[1])), {"data": (x, "sbuf")},
                        {"op": "maximum"})
        _close(got["dst"], x.max(0, keepdims=True))

    def shuffle(data):
        f = data.draw(st.integers(1, 8))
        x = _arr(data, (32, f))
        mask = list(np.random.default_rng(data.draw(st.integers(0, 99))).permutation(32))
        got, _ = run_op("nc_stream_shuffle", "vector", out((32, f)), {"src": (x, "sbuf")},
                        {"shuffle_mask": [int(m) for m in mask]})
        _close(got["dst"], x[mask])

    def dtrans(data):
        s = _shape(data)
        x = _arr(data, s)
        got, _ = run_op("dma_transpose", "dma", {"dst": (s[::-1], "float32", "hbm")}, {"src": (x, "sbuf")})
        _close(got["dst"], x.T)

    def gather(data):
        s = _shape(data)
        x = _arr(data, s)
        idx = np.random.default_rng(data.draw(st.integers(0, 99))).integers(0, s[1], (s[0], 5)).astype(np.uint32)
        got, _ = run_op("nc_n_gather", "gpsimd", out((s[0], 5)), {"data": (x, "sbuf"), "indices": (idx, "sbuf")})
        _close(got["dst"], np.take_along_axis(x, idx.astype(np.int64), 1))

    def rand(data):
        s = _shape(data)
        got, _ = run_op("rand", "vector", out(s), {})
        assert got["dst"].min() >= 0 and got["dst"].max() < 1

    def seed(data):
        got, ctx = run_op("set_rng_seed", "vector", {}, {}, {"seed": 7})
        assert ctx.rng.random() == np.random.default_rng([7]).random()

    def dropout(data):
        s = _shape(data)
        x = _arr(data, s, 1, 2)
        got, _ = run_op("dropout", "vector", out(s), {"data": (x, "sbuf")}, {"prob": 0.5})
        d = got["dst"]
        assert np.all((d == 0) | (d == x))

    def exponential(data):
        s = _shape(data)
        x, m, init = _arr(data, s), _arr(data, (s[0], 1)), _arr(data, (s[0], 1))
        got, _ = run_op("exponential", "vector", {"dst": (s, "float32", "sbuf"),
                        "reduce_res": ((s[0], 1), "float32", "sbuf")},
                        {"src": (x, "sbuf"), "max_value": (m, "sbuf"), "reduce_init": (init, "sbuf")},
                        {"reduce_cmd": "load_reduce"}, target="trn3")
        ref = np.exp(x - m)
        np.testing.assert_allclose(got["dst"], ref, rtol=1e-6)
        np.testing.assert_allclose(got["reduce_res"], init + ref.sum(1, keepdims=True), rtol=1e-5)

    def activate2(data):
        s = _shape(data)
        x, b = _arr(data, s), _arr(data, (s[0], 1))
        got, _ = run_op("activate2", "scalar", {"dst": (s, "float32", "sbuf"),
                        "reduce_res": ((s[0], 1), "float32", "sbuf")}, {"data": (x, "sbuf"), "imm1": (b, "sbuf")},
                        {"op": "prelu", "op0": "multiply", "imm0": 2.0, "op1": "subtract", "reverse1": True,
                         "relu_param": 0.25, "reduce_op": "abs_max", "reduce_cmd": "reset_reduce"},
                        target="trn3")
        v = b - x * F32(2)
        ref = np.where(v >= 0, v, v * F32(0.25))
        _close(got["dst"], ref)
        _close(got["reduce_res"], np.abs(ref).max(1, keepdims=True))

    def lgather(data):
        p, f, e = 16 * data.draw(st.integers(1, 2)), data.draw(st.sampled_from([8, 32])), data.draw(
            st.sampled_from([1, 2, 4]))
        rng = np.random.default_rng(data.draw(st.integers(0, 99)))
        x = _arr(data, (p, f * e))
        idx = (rng.integers(0, f, (p, 3)) * e).astype(np.uint16)
        nv = data.draw(st.integers(1, 48))
        got, _ = run_op("local_gather", "gpsimd", out((p, nv * e)), {"src_buffer": (x, "sbuf"),
                        "index": (idx, "sbuf")}, {"num_elem_per_idx": e, "num_valid_indices": nv})
        ref = np.empty((p, nv * e), F32)
        for c in range(0, p, 16):
            i1 = idx[c:c + 16].flatten(order="F")[:nv].astype(np.int64)
            ref[c:c + 16] = np.take(x[c:c + 16].reshape(16, f, e), i1 // e, axis=1).reshape(16, -1)
        _close(got["dst"], ref)

    def seqb(data):
        n = data.draw(st.integers(2, 40))
        ids = np.sort(np.random.default_rng(data.draw(st.integers(0, 99))).integers(0, 5, n)).astype(F32)[None]
        got, _ = run_op("sequence_bounds", "gpsimd", out((1, 2, n)), {"segment_ids": (ids, "sbuf")})
        ref = np.empty((2, n), F32)
        for i, v in enumerate(ids[0]):
            same = np.flatnonzero(ids[0] == v)  # sorted ids: a segment is one run
            ref[:, i] = (n, -1) if v == 0 else (same[0], same[-1] + 1)
        _close(got["dst"], ref[None])

    def dmac(data):
        s = _shape(data)
        k = data.draw(st.integers(1, 4))
        xs = [_arr(data, s) for _ in range(k)]
        got, _ = run_op("dma_compute", "dma", {"dst": (s, "float32", "hbm")},
                        {f"src{i}": (x, "sbuf" if i % 2 else "hbm") for i, x in enumerate(xs)},
                        {"reduce_op": "add"})
        np.testing.assert_allclose(got["dst"], np.sum(xs, axis=0, dtype=F32), rtol=1e-6, atol=1e-6)

    return {"exponential": exponential, "activate2": activate2, "local_gather": lgather,
            "sequence_bounds": seqb, "dma_compute": dmac,
            "tensor_tensor_scan": scan, "scalar_tensor_tensor": stt, "tensor_scalar_reduce": tsr,
            "select_reduce": sel, "range_select": rsel, "max8": lambda d: top(d), "nc_find_index8": find,
            "nc_match_replace8": replace, "tensor_partition_reduce": preduce, "nc_stream_shuffle": shuffle,
            "dma_transpose": dtrans, "nc_n_gather": gather, "rand": rand, "set_rng_seed": seed,
            "dropout": dropout}
