"""Op-test row of nonzero_with_count: one GpSimd core's first partition, against numpy's flatnonzero."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st


def cases(run_op):
    def nonzero(data):
        t = data.draw(st.integers(1, 40))
        x = np.asarray(data.draw(st.lists(st.sampled_from([0.0, 0.0, 1.0, -2.5, 3.0]), min_size=t, max_size=t)),
                       np.float32)[None, :]
        offset, pad = data.draw(st.integers(0, 1000)), data.draw(st.integers(-5, -1))
        got, _ = run_op("nonzero_with_count", "gpsimd", {"dst": ((1, t + 1), "int32", "sbuf")},
                        {"src": (x, "sbuf")}, {"index_offset": offset, "padding_val": pad})
        nz = np.flatnonzero(x[0])
        want = np.concatenate([nz + offset, np.full(t - nz.size, pad), [nz.size]])
        np.testing.assert_array_equal(got["dst"][0], want)
    return {"nonzero_with_count": nonzero}
