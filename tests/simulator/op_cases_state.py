"""Op-test rows of rand2, the random generator state (rand_get_state, rand_set_state) and
tensor_scalar_cumulative, merged into ``OP_TESTS`` of test_ops.py."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st


def cases(run_op):
    def rand2(data):
        p, f = data.draw(st.sampled_from([1, 8, 32]), label="P"), data.draw(st.integers(1, 64), label="F")
        lo = data.draw(st.floats(-10, 10), label="min")
        got, _ = run_op("rand2", "vector", {"dst": ((p, f), "float32", "sbuf")}, {}, {"min": lo, "max": lo + 2.5},
                        target="trn3")
        assert ((got["dst"] >= np.float32(lo)) & (got["dst"] <= np.float32(lo + 2.5))).all()

    def get_state(data):
        engine = data.draw(st.sampled_from(["gpsimd", "vector"]), label="engine")
        words = {"gpsimd": 6, "vector": 24}[engine]
        got, _ = run_op("rand_get_state", engine, {"dst": ((4, words), "uint32", "sbuf")}, {}, target="trn3")
        assert got["dst"].dtype == np.uint32 and got["dst"].shape == (4, words)

    def set_state(data):
        seeds = np.arange(12, dtype=np.uint32).reshape(2, 6) + data.draw(st.integers(0, 1000), label="seed")
        _, ctx = run_op("rand_set_state", "gpsimd", {}, {"src_seeds": (seeds, "sbuf")})
        assert ctx.rng.random() == np.random.default_rng(seeds.reshape(-1).tolist()).random()

    def cumulative(data):
        p, f = data.draw(st.sampled_from([1, 8, 32]), label="P"), data.draw(st.integers(1, 40), label="F")
        op1 = data.draw(st.sampled_from(["add", "multiply", "maximum", "minimum", "subtract"]), label="op1")
        load = data.draw(st.booleans(), label="load_reduce")
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
        x = rng.uniform(0.5, 1.5, (p, f)).astype(np.float32)
        attrs = {"op0": "multiply", "imm0": 2.0, "op1": op1, "reduce_cmd": "load_reduce" if load else "reset_reduce"}
        if load:
            attrs["imm1"] = 3.0
        got, _ = run_op("tensor_scalar_cumulative", "vector", {"dst": ((p, f), "float32", "sbuf")},
                        {"src": (x, "sbuf")}, attrs)
        fn = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum,
              "subtract": lambda a, r: a - r}[op1]
        reg = np.full((p,), 3.0 if load else {"add": 0.0, "subtract": 0.0, "multiply": 1.0,
                                              "maximum": -np.inf, "minimum": np.inf}[op1], np.float32)
        want = np.empty_like(x)
        for i in range(f):
            reg = fn(x[:, i] * np.float32(2.0), reg).astype(np.float32)
            want[:, i] = reg
        np.testing.assert_allclose(got["dst"], want, rtol=1e-6)

    return {"rand2": rand2, "rand_get_state": get_state, "rand_set_state": set_state,
            "tensor_scalar_cumulative": cumulative}
