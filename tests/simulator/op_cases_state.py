"""Op-test rows of rand2 and the random generator state (rand_get_state, rand_set_state), merged into
``OP_TESTS`` of test_ops.py."""
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

    return {"rand2": rand2, "rand_get_state": get_state, "rand_set_state": set_state}
