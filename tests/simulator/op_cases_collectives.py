"""Op-test rows of the instructions between cores and ranks (collectives, core_barrier, sendrecv), merged
into ``OP_TESTS`` of test_ops.py: n participants' operands ``p{i}_src0`` / ``p{i}_dst0`` in one
instruction, checked against numpy."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

F32 = np.float32


def cases(run_op):
    def setup(data, shape_of=lambda n, p, f: ((p, f), (p, f))):
        n = data.draw(st.integers(2, 4), label="ranks")
        p, f = data.draw(st.sampled_from([1, 4, 8]), label="P"), n * data.draw(st.integers(1, 4), label="F/n")
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
        s_shape, d_shape = shape_of(n, p, f)
        xs = [rng.uniform(-4, 4, s_shape).astype(F32) for _ in range(n)]
        src = {f"p{i}_src0": (x, "sbuf") for i, x in enumerate(xs)}
        dst = {f"p{i}_dst0": (d_shape, "float32", "sbuf") for i in range(n)}
        return n, xs, src, dst

    def outs(got, n):
        return [got[f"p{i}_dst0"] for i in range(n)]

    def all_reduce(data):
        n, xs, src, dst = setup(data)
        op = data.draw(st.sampled_from(["add", "maximum", "minimum"]), label="op")
        got, _ = run_op("all_reduce", "dma", dst, src, {"n": n, "op": op})
        want = {"add": np.sum, "maximum": np.max, "minimum": np.min}[op](np.stack(xs), axis=0)
        for o in outs(got, n):
            np.testing.assert_allclose(o, want, rtol=1e-6)

    def all_gather(data):
        n, xs, src, dst = setup(data, lambda n, p, f: ((p, f), (p, n * f)))
        got, _ = run_op("all_gather", "dma", dst, src, {"n": n, "collective_dim": 1})
        for o in outs(got, n):
            np.testing.assert_array_equal(o, np.concatenate(xs, axis=1))

    def reduce_scatter(data):
        n, xs, src, dst = setup(data, lambda n, p, f: ((p, f), (p, f // n)))
        got, _ = run_op("reduce_scatter", "dma", dst, src, {"n": n, "collective_dim": 1, "op": "add"})
        for i, o in enumerate(outs(got, n)):
            np.testing.assert_allclose(o, np.split(np.sum(xs, axis=0), n, axis=1)[i], rtol=1e-6)

    def all_to_all(data):
        n, xs, src, dst = setup(data)
        got, _ = run_op("all_to_all", "dma", dst, src, {"n": n, "collective_dim": 1})
        for i, o in enumerate(outs(got, n)):
            np.testing.assert_array_equal(o, np.concatenate([np.split(x, n, axis=1)[i] for x in xs], axis=1))

    def permute(data):
        n, xs, src, dst = setup(data)
        pairs = [[i, (i + 1) % n] for i in range(n)]
        got, _ = run_op("collective_permute", "dma", dst, src, {"n": n, "pairs": pairs})
        for i, o in enumerate(outs(got, n)):
            np.testing.assert_array_equal(o, xs[(i - 1) % n])

    def ring(data):
        n, xs, src, dst = setup(data)
        ys = [x * 2 for x in xs]
        src.update({f"p{i}_srcb0": (y, "sbuf") for i, y in enumerate(ys)})
        got, _ = run_op("collective_permute_implicit", "dma", dst, src, {"n": n, "op": "add"})
        for i, o in enumerate(outs(got, n)):
            np.testing.assert_allclose(o, xs[(i - 1) % n] + ys[(i - 1) % n], rtol=1e-6)

    def sendrecv(data):
        n, xs, src, dst = setup(data)
        got, _ = run_op("sendrecv", "dma", dst, src, {"n": n, "pairs": [[i, n - 1 - i] for i in range(n)]})
        for i, o in enumerate(outs(got, n)):
            np.testing.assert_array_equal(o, xs[n - 1 - i])

    def gather_v(data):
        n = data.draw(st.integers(2, 3), label="ranks")
        counts = [data.draw(st.integers(1, 4), label="count") for _ in range(n)]
        xs = [np.arange(8, dtype=F32) + 10 * i for i in range(n)]
        metas = [np.array([[c] * n, [1] * n, counts, [0] * n], np.uint32) for c in counts]
        src = {f"p{i}_src0": (x, "hbm") for i, x in enumerate(xs)}
        src.update({f"p{i}_meta": (m, "hbm") for i, m in enumerate(metas)})
        dst = {f"p{i}_dst0": ((4 * n,), "float32", "hbm") for i in range(n)}
        got, _ = run_op("all_gather_v", "dma", dst, src, {"n": n},
                        init={r: np.zeros(4 * n, F32) for r in dst})
        for o in outs(got, n):
            for s in range(n):
                np.testing.assert_array_equal(o[4 * s:4 * s + counts[s]], xs[s][1:1 + counts[s]])

    def to_all_v(data):
        n = data.draw(st.integers(2, 3), label="ranks")
        xs = [np.arange(6, dtype=F32) + 10 * i for i in range(n)]
        metas = [np.array([[2] * n, [2 * r for r in range(n)]], np.uint32) for _ in range(n)]
        src = {f"p{i}_src0": (x, "hbm") for i, x in enumerate(xs)}
        src.update({f"p{i}_meta": (m, "hbm") for i, m in enumerate(metas)})
        dst = {f"p{i}_dst0": ((2 * n,), "float32", "hbm") for i in range(n)}
        got, _ = run_op("all_to_all_v", "dma", dst, src, {"n": n}, init={r: np.zeros(2 * n, F32) for r in dst})
        for r, o in enumerate(outs(got, n)):
            np.testing.assert_array_equal(o, np.concatenate([xs[s][2 * r:2 * r + 2] for s in range(n)]))

    def barrier(data):
        x = np.ones((4, 4), F32)
        got, _ = run_op("core_barrier", "gpsimd", {}, {"p0_data": (x, "hbm"), "p1_data": (x, "hbm")}, {"n": 2})
        assert got == {}

    return {"all_reduce": all_reduce, "all_gather": all_gather, "reduce_scatter": reduce_scatter,
            "all_to_all": all_to_all, "collective_permute": permute, "collective_permute_implicit": ring,
            "sendrecv": sendrecv, "all_gather_v": gather_v, "all_to_all_v": to_all_v, "core_barrier": barrier}
