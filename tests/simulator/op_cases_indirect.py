"""Op-test rows of the indirect DMA (``dma_copy_indirect``): a gather of rows through per-row offsets and
a scatter moved by one run-time offset (out-of-bounds elements skipped), each against numpy indexing."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

F32 = np.float32


def cases(run_op):
    def gather(data):
        rows, cols, n = data.draw(st.integers(2, 12)), data.draw(st.integers(1, 8)), data.draw(st.integers(1, 8))
        table = np.arange(rows * cols, dtype=F32).reshape(rows, cols)
        idx = np.asarray(data.draw(st.lists(st.integers(0, rows - 1), min_size=n, max_size=n)), np.int32)[:, None]
        attrs = {"mode": "vector", "stride": cols, "offset": 0, "pattern": [[cols, n], [1, cols]], "oob": "error"}
        got, _ = run_op("dma_copy_indirect", "dma", {"dst": ((n, cols), "float32", "sbuf")},
                        {"table": (table, "hbm"), "offsets": (idx, "sbuf")}, attrs)
        np.testing.assert_array_equal(got["dst"], table[idx[:, 0]])

    def scatter(data):
        rows, cols = data.draw(st.integers(2, 10)), data.draw(st.integers(1, 6))
        start = data.draw(st.integers(0, rows + 2))              # may run past the end: skipped
        n = data.draw(st.integers(1, rows))
        src = np.arange(1, n * cols + 1, dtype=F32).reshape(n, cols)
        init = np.zeros((rows, cols), F32)
        attrs = {"mode": "scalar", "stride": cols, "offset": 0, "pattern": [[cols, n], [1, cols]], "oob": "skip"}
        got, _ = run_op("dma_copy_indirect", "dma", {"table": ((rows, cols), "float32", "hbm")},
                        {"src": (src, "sbuf"), "offsets": (np.array([[start]], np.int32), "sbuf")}, attrs,
                        init={"table": init})
        want = init.copy()
        keep = min(n, max(0, rows - start))
        want[start:start + keep] = src[:keep]
        np.testing.assert_array_equal(got["table"], want)

    def both(data):
        (gather if data.draw(st.booleans(), label="gather") else scatter)(data)
    return {"dma_copy_indirect": both}
