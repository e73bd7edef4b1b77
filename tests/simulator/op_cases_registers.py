"""Op-test rows of the register instructions: a register is a one-element int32 tile; moves take an
immediate or another register, loads truncate floats toward zero, stores convert to the tile's dtype."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

I32 = np.int32


def cases(run_op):
    reg = {"reg": ((1, 1), "int32", "sbuf")}

    def move(data):
        value = data.draw(st.integers(-2**31, 2**31 - 1))
        if data.draw(st.booleans(), label="from register"):
            got, _ = run_op("register_move", "gpsimd", reg, {"src": (np.array([[value]], I32), "sbuf")})
        else:
            got, _ = run_op("register_move", "gpsimd", reg, {}, {"imm": value})
        assert got["reg"].reshape(-1)[0] == value

    def load(data):
        x = data.draw(st.floats(-1e6, 1e6, width=32))
        buf = data.draw(st.sampled_from(["sbuf", "hbm"]))
        got, _ = run_op("register_load", "gpsimd", reg, {"src": (np.array([[x]], np.float32), buf)})
        assert got["reg"].reshape(-1)[0] == int(np.trunc(np.float32(x)))

    def store(data):
        dtype = data.draw(st.sampled_from(["int32", "float32", "bfloat16"]))
        value = data.draw(st.integers(-256, 256))          # integers bf16 holds exactly
        got, _ = run_op("register_store", "gpsimd", {"dst": ((1, 1), dtype, "sbuf")},
                        {"reg": (np.array([[value]], I32), "sbuf")})
        assert float(np.asarray(got["dst"], np.float64).reshape(-1)[0]) == value
    return {"register_move": move, "register_load": load, "register_store": store}
