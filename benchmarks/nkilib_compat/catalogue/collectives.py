"""Rows for the collectives kernels: the library's ``collective_ranks=N`` tests run N ranks of a kernel that
talk through ``nki.collectives`` (a multi-rank row), and the top-k reduction of an all-to-all buffer (one
launch)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from nkilib_compat.rows import Case, row, torch_reference

BF16 = ml_dtypes.bfloat16


def _global(shape, dtype, seed=42):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32).astype(dtype)


@row("allgather_sb2sb", kernel="experimental.collectives.sb2sb_allgather:allgather_sb2sb",
     reference="the test's own (concatenation over ranks along the free axis)",
     source="test_sb2sb_allgather.py m128_k512_bf16_tp8 (lnc 1)", needs="collectives")
def allgather_sb2sb(lib):
    from nki.collectives import ReplicaGroup
    kernel = lib.get("experimental.collectives.sb2sb_allgather:allgather_sb2sb")
    m, k, tp = 128, 512, 8
    x = _global((tp, m, k), BF16)
    group = ReplicaGroup([list(range(tp))])
    ranks = [{"inp": x[r], "replica_groups": group, "tp_degree": tp} for r in range(tp)]
    gathered = np.concatenate(list(x), axis=1)
    return Case(kernel, {}, lambda: [gathered] * tp, ranks=ranks, rtol=1e-3, atol=1e-3)


@row("fine_grained_allgather", kernel="experimental.collectives.fg_allgather:fine_grained_allgather",
     reference="the test's own (every rank gets the whole lhs)",
     source="test_fg_allgather.py m1024_K4096_bf16_tp4_lnc2, m cut to 256 and K to 1024", needs="collectives")
def fine_grained_allgather(lib):
    kernel = lib.get("experimental.collectives.fg_allgather:fine_grained_allgather")
    m, k, tp = 256, 1024, 4
    lhs = _global((m * tp, k), BF16)
    ranks = [{"lhs": lhs[r * m:(r + 1) * m], "tp_degree": tp, "num_groups": 1, "force_hbm_cc": False}
             for r in range(tp)]
    return Case(kernel, {}, lambda: [lhs] * tp, lnc=2, ranks=ranks, rtol=1e-3, atol=1e-3)


@row("allgather_compute_matmul", kernel="experimental.collectives.fgcc:allgather_compute_matmul",
     reference="the test's own (gathered lhs @ this rank's rhs columns, rounded to bf16)",
     source="test_fgcc.py m1024_K4096_N4096_bf16_tp4_lnc2, m cut to 256, K and N to 1024", needs="collectives")
def allgather_compute_matmul(lib):
    kernel = lib.get("experimental.collectives.fgcc:allgather_compute_matmul")
    m, k, n, tp = 256, 1024, 1024, 4
    lhs, rhs = _global((m * tp, k), BF16, 42), _global((k, n), BF16, 43)
    result = (lhs.astype(np.float32) @ rhs.astype(np.float32)).astype(BF16)
    cols = n // tp
    ranks = [{"lhs": lhs[r * m:(r + 1) * m], "rhs": rhs[:, r * cols:(r + 1) * cols], "tp_degree": tp,
              "num_groups": 1, "force_hbm_cc": False} for r in range(tp)]
    return Case(kernel, {}, lambda: [result[:, r * cols:(r + 1) * cols] for r in range(tp)], lnc=2,
                ranks=ranks, rtol=1e-2, atol=1e-2)


@row("topk_reduce", kernel="experimental.collectives.topk_reduce:topk_reduce",
     reference="experimental.collectives.topk_reduce_torch:topk_reduce_torch_ref",
     source="test_topk_reduce.py (lnc 1, 8 source ranks, T 4, K 4, H 2880); the test imports the kernel from "
            "experimental.subkernels, which this snapshot no longer has")
def topk_reduce(lib):
    kernel = lib.get("experimental.collectives.topk_reduce:topk_reduce")
    ref = torch_reference(lib.get("experimental.collectives.topk_reduce_torch:topk_reduce_torch_ref"),
                          cast_back=BF16)
    src_ranks, t, k, h = 8, 4, 4, 2880
    # The test's buffer: T*K rows of values, each carrying its token index as an int32 packed into two
    # bf16 columns, scattered among rows of -1 padding.
    rng = np.random.default_rng(42)
    buf = np.full((src_ranks * t, h + 2), -1, dtype=BF16)
    values = rng.standard_normal((t * k, h)).astype(np.float32).astype(BF16)
    token = np.arange(t, dtype=np.int32).repeat(k).reshape(t * k, 1).view(BF16)
    buf[rng.permutation(src_ranks * t)[:t * k]] = np.concatenate([values, token], axis=1)
    inputs = {"input": buf, "T": t, "K": k}
    return Case(kernel, inputs, lambda: ref(**inputs), rtol=5e-2, atol=5e-2)
