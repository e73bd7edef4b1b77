"""Op-test rows of the MX instructions (quantize_mx, nc_matmul_mx), merged into ``OP_TESTS`` of
test_ops.py: small cases drawn with hypothesis, checked against ``simulator.mx`` (itself checked against
the OCP reference in test_mx.py)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

from nkihub.simulator import mx


def cases(run_op):
    def quantize(data):
        p = data.draw(st.sampled_from([32, 64]), label="P")
        f = 4 * data.draw(st.integers(1, 6), label="F/4")
        dtype = data.draw(st.sampled_from(["float8_e4m3fn_x4", "float8_e5m2_x4"]), label="dtype")
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
        x = (rng.standard_normal((p, f)) * 4).astype(ml_dtypes.bfloat16)
        dst = {"dst": ((p, f // 4), dtype, "sbuf")}
        dst.update({f"dst_scale{q}": ((rows, f // 4), "uint8", "sbuf") for q, (_, rows) in enumerate(mx.scale_rows(p))})
        got, _ = run_op("quantize_mx", "vector", dst, {"src": (x, "sbuf")}, {"dst_dtype": dtype}, target="trn3")
        bits, scale = mx.quantize(x.astype(np.float32), dtype)
        np.testing.assert_array_equal(got["dst"], bits)
        np.testing.assert_array_equal(np.concatenate([got[f"dst_scale{q}"] for q in range(p // 32)]), scale)

    def matmul(data):
        k = data.draw(st.sampled_from([32, 64]), label="K")
        m, n = 2 * data.draw(st.integers(1, 4), label="M/2"), data.draw(st.integers(1, 8), label="N")
        sd = data.draw(st.sampled_from(sorted(mx.ELEMENT_MAX)), label="stationary dtype")
        md = data.draw(st.sampled_from(sorted(mx.ELEMENT_MAX)), label="moving dtype")
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
        a, sa = mx.quantize(rng.standard_normal((k, 4 * m)).astype(np.float32), sd)
        b, sb = mx.quantize(rng.standard_normal((k, 4 * n)).astype(np.float32), md)
        src = {"stationary": (a, "sbuf", sd), "moving": (b, "sbuf", md)}
        for q, (_, rows) in enumerate(mx.scale_rows(k)):
            src[f"stationary_scale{q}"] = (sa[4 * q:4 * q + rows], "sbuf")
            src[f"moving_scale{q}"] = (sb[4 * q:4 * q + rows], "sbuf")
        got, _ = run_op("nc_matmul_mx", "tensor", {"dst": ((m, n), "float32", "psum")}, src,
                        {"stationary_dtype": sd, "moving_dtype": md}, target="trn3")
        want = mx.dequantize(a, sa, sd).reshape(k, m, 4).transpose(0, 2, 1).reshape(-1, m).T.astype(np.float64) \
            @ mx.dequantize(b, sb, md).reshape(k, n, 4).transpose(0, 2, 1).reshape(-1, n)
        np.testing.assert_allclose(got["dst"], want, rtol=1e-5, atol=1e-6)

    return {"quantize_mx": quantize, "nc_matmul_mx": matmul}
