"""Op-test row of topk (GpSimd), merged into ``OP_TESTS`` of test_ops.py: random bf16 snakes, any n and k
the API page allows at small sizes, against a reference that sorts (value, slot) pairs."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

BF16 = ml_dtypes.bfloat16


def _reference(x: np.ndarray, n: int, k: int, descending: bool):
    """Per 16-partition group: (values, slots) of the k largest of the first n snake slots."""
    out = []
    for g in range(0, x.shape[0], 16):
        snake = [(float(x[g + s % 16, s // 16]), s) for s in range(n)]
        best = sorted(snake, key=lambda vs: (-vs[0], vs[1]))[:k]
        out.append(best if descending else best[::-1])
    return out


def cases(run_op):
    def topk(data):
        groups = data.draw(st.integers(1, 3), label="groups")
        f = data.draw(st.integers(1, 6), label="F")
        n = data.draw(st.integers(8, 16 * f), label="n")
        k = data.draw(st.integers(1, min(n, 40)), label="k")
        descending = data.draw(st.booleans(), label="sorted")
        seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
        # Few distinct values, so ties are common.
        x = np.random.default_rng(seed).integers(-6, 6, (16 * groups, f)).astype(np.float32).astype(BF16)
        got, _ = run_op("topk", "gpsimd", {"val_dst": ((16 * groups, k), "bfloat16", "sbuf"),
                                           "idx_dst": ((16 * groups, k), "uint32", "sbuf")},
                        {"src": (x, "sbuf")}, {"n": n, "sorted": descending})
        cols = math.ceil(k / 16)
        for g, best in enumerate(_reference(x, n, k, descending)):
            vals = got["val_dst"][16 * g:16 * g + 16, :cols].T.reshape(-1)
            idx = got["idx_dst"][16 * g:16 * g + 16, :cols].T.reshape(-1)
            np.testing.assert_array_equal(vals[:k].astype(np.float32), [v for v, _ in best])
            np.testing.assert_array_equal(idx[:k], [s for _, s in best])
            assert np.isnan(vals[k:].astype(np.float32)).all()   # the rest of the last written position

    return {"topk": topk}
