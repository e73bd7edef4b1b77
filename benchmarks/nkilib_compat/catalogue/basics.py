"""Rows for the small kernels and utilities: cumsum, max, top-k, embeddings, index helpers, copies."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from nkilib_compat.rows import Case, randn, row, torch_reference

BF16 = ml_dtypes.bfloat16


@row("cumsum", kernel="core.cumsum.cumsum:cumsum", reference="core.cumsum.cumsum_torch:cumsum_torch_ref",
     source="test_cumsum.py fast (1, 256, 2, 1, float32)")
def cumsum(lib):
    kernel = lib.get("core.cumsum.cumsum:cumsum")
    ref = torch_reference(lib.get("core.cumsum.cumsum_torch:cumsum_torch_ref"))
    inputs = {"x": randn((1, 256), np.float32)}
    return Case(kernel, inputs, lambda: ref(**inputs), rtol=1e-3, atol=1e-3)


@row("cascaded_max", kernel="core.max.cascaded_max:cascaded_max",
     reference="core.max.cascaded_max_torch:cascaded_max_torch_ref",
     source="test_cascaded_max.py unit (1, 1, 1, 3168, float32)")
def cascaded_max(lib):
    kernel = lib.get("core.max.cascaded_max:cascaded_max")
    ref = torch_reference(lib.get("core.max.cascaded_max_torch:cascaded_max_torch_ref"))
    inputs = {"input_tensor": randn((1, 1, 3168), np.float32)}
    return Case(kernel, inputs, lambda: ref(**inputs), rtol=1e-5, atol=1e-5)


@row("rope", kernel="core.embeddings.rope:RoPE", reference="core.embeddings.rope_torch:rope_torch_ref",
     source="test_rope.py fast (d_head=64, B=1, n_heads=1, S=16, contiguous, no relayout)")
def rope(lib):
    kernel = lib.get("core.embeddings.rope:RoPE")
    ref = torch_reference(lib.get("core.embeddings.rope_torch:rope_torch_ref"))
    d, b, h, s = 64, 1, 1, 16
    inputs = {"x_in": randn((d, b, h, s), BF16, 1), "cos": randn((d // 2, b, s), BF16, 2),
              "sin": randn((d // 2, b, s), BF16, 3), "lnc_shard": True, "contiguous_layout": True,
              "relayout_in_sbuf": False}
    return Case(kernel, inputs, lambda: ref(**inputs), rtol=2 ** -7, atol=1e-3)


@row("rope_hf", kernel="core.embeddings.rope_hf:rope_hf", reference="core.embeddings.rope_hf_torch:rope_hf_torch_ref",
     source="test_rope_hf.py lnc (1, 32, 8, 256, 128, float32, forward), lnc=1, heads cut to 4/2")
def rope_hf(lib):
    kernel = lib.get("core.embeddings.rope_hf:rope_hf")
    ref = torch_reference(lib.get("core.embeddings.rope_hf_torch:rope_hf_torch_ref"), cast_back=np.float32)
    q, k = randn((1, 4, 256, 128), np.float32, 1), randn((1, 2, 256, 128), np.float32, 2)
    inputs = {"q": q, "k": k, "q_out": np.zeros_like(q), "k_out": np.zeros_like(k),
              "cos": randn((1, 256, 128), np.float32, 3), "sin": randn((1, 256, 128), np.float32, 4),
              "backward": False}
    return Case(kernel, inputs, lambda: ref(**inputs), rtol=1e-6, atol=1e-6)


@row("find_nonzero_indices", kernel="core.subkernels.find_nonzero_indices:find_nonzero_indices",
     reference="core.subkernels.find_nonzero_indices_torch:find_nonzero_indices_torch_ref",
     source="test_find_nonzero_indices.py fast (4096, 128, 8, 4096, int32), lnc=2")
def find_nonzero_indices(lib):
    kernel = lib.get("core.subkernels.find_nonzero_indices:find_nonzero_indices")
    ref = torch_reference(lib.get("core.subkernels.find_nonzero_indices_torch:find_nonzero_indices_torch_ref"))
    t, e, top_k = 4096, 128, 8
    k = t * top_k // e
    flat = np.random.default_rng(42).permutation(np.concatenate([np.ones(k * e), np.zeros((t - k) * e)]))
    inputs = {"input_tensor": flat.reshape(e, t).T.astype(np.int32), "chunk_size": 4096}
    return Case(kernel, inputs, lambda: ref(**inputs), lnc=2, rtol=0, atol=0)


@row("indexed_flatten", kernel="core.subkernels.indexed_flatten:indexed_flatten",
     reference="core.subkernels.indexed_flatten_torch:indexed_flatten_torch_ref",
     source="test_indexed_flatten.py fast (4096, 2, 128), lnc=2")
def indexed_flatten(lib):
    kernel = lib.get("core.subkernels.indexed_flatten:indexed_flatten")
    ref = torch_reference(lib.get("core.subkernels.indexed_flatten_torch:indexed_flatten_torch_ref"))
    t, e, f_len = 4096, 2, 128
    out_len = -(-(e * t + 1024) // 128) * 128
    inputs = {"input_tensor": np.arange(e * t, dtype=np.int32).reshape(e, t), "f_len": f_len,
              "output_len": out_len, "row_offsets": np.array([t // f_len * i for i in range(e)], np.int32),
              "row_offsets_start": None, "padding_val": -1}
    return Case(kernel, inputs, lambda: ref(**inputs), lnc=2, rtol=0, atol=0)


@row("tp_broadcast", kernel="core.utils.tp_broadcast:tp_broadcast",
     reference="the test's own (column broadcast)", source="test_tp_broadcast.py ((3, 8, 11), 1, 2, 4)")
def tp_broadcast(lib):
    import nki
    import nki.isa as nisa
    import nki.language as nl
    tp_broadcast = lib.get("core.utils.tp_broadcast:tp_broadcast")
    TensorView = lib.get("core.utils.tensor_view:TensorView")

    # A harness kernel around the utility, as the library's test has: load, broadcast, store.
    @nki.jit
    def kernel(src_hbm, src_offset, broadcast_count, src_select_index):
        src_sb = nl.ndarray(src_hbm.shape, src_hbm.dtype, nl.sbuf)
        dst_sb = nl.ndarray((broadcast_count, src_hbm.shape[0]), src_hbm.dtype, nl.sbuf)
        out = nl.ndarray((broadcast_count, src_hbm.shape[0]), src_hbm.dtype, nl.shared_hbm)
        nisa.dma_copy(src_sb, src_hbm)
        view = TensorView(src_sb).select(1, src_select_index) if src_select_index is not None else src_sb
        tp_broadcast(view, dst_sb, src_offset)
        nisa.dma_copy(out, dst_sb)
        return out

    src = randn((3, 8, 11), np.float32)
    inputs = {"src_hbm": src, "src_offset": 1, "broadcast_count": 2, "src_select_index": 4}
    want = np.repeat(src[:, 4, :].reshape(3, -1)[:, 1][None, :], 2, axis=0)
    return Case(kernel, inputs, [want], rtol=0, atol=0)


@row("cross_partition_copy", kernel="core.utils.cross_partition_copy:cross_partition_copy",
     reference="the test's own (slice copy)", source="test_cross_partition_copy.py (5, 28, 20, 8, 128)")
def cross_partition_copy(lib):
    import nki
    import nki.isa as nisa
    import nki.language as nl
    copy = lib.get("core.utils.cross_partition_copy:cross_partition_copy")

    @nki.jit
    def kernel(input_data, output, src_start, dst_start, count, free, total):
        src = nl.ndarray((total, free), dtype=input_data.dtype, buffer=nl.sbuf)
        dst = nl.ndarray((total, free), dtype=input_data.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=input_data)
        nisa.memset(dst=dst, value=0.0)
        copy(src=src, dst=dst, src_start_partition=src_start, dst_start_partition=dst_start,
             num_partitions_to_copy=count, free_dim_size=free)
        nisa.dma_copy(dst=output, src=dst)
        return output

    x = randn((128, 8), np.float32)
    want = np.zeros_like(x)
    want[28:48] = x[5:25]
    inputs = {"input_data": x, "output": np.zeros_like(x), "src_start": 5, "dst_start": 28, "count": 20,
              "free": 8, "total": 128}
    return Case(kernel, inputs, [want], rtol=1e-5, atol=1e-8)
