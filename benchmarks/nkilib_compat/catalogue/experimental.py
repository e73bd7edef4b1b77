"""Rows for the library's experimental kernels: convolutions, dynamic shapes, losses, index helpers."""
from __future__ import annotations

import ml_dtypes
import numpy as np

import nki.language as nl

from nkilib_compat.rows import Case, randn, row, torch_reference

BF16 = ml_dtypes.bfloat16


@row("find_nonzero_indices_with_count",
     kernel="experimental.benchmark.find_nonzero_indices_with_count:find_nonzero_indices_with_count",
     reference="the test's own (nonzero positions, padding, count last)",
     source="test_find_nonzero_indices_with_count.py (128, 5/32)")
def find_nonzero_indices_with_count(lib):
    kernel = lib.get("experimental.benchmark.find_nonzero_indices_with_count:find_nonzero_indices_with_count")
    t = 128
    rng = np.random.default_rng(0)
    x = np.zeros((1, t), np.float32)
    x[0, rng.choice(t, size=t * 5 // 32, replace=False)] = rng.uniform(0.01, 1.0, t * 5 // 32)
    nz = np.nonzero(x[0])[0]
    want = np.full((1, t + 1), -1, np.int32)
    want[0, :len(nz)] = nz
    want[0, -1] = len(nz)
    return Case(kernel, {"input_tensor": x}, [want], rtol=0, atol=0)


@row("conv1d", kernel="experimental.conv.conv1d:conv1d", reference="experimental.conv.conv1d_torch:conv1d_torch_ref",
     source="test_conv1d.py basic (1, 16, 32, 20, 3, 1, 0, 0, 1, bias, SiLU, no lnc shard, float32)")
def conv1d(lib):
    kernel = lib.get("experimental.conv.conv1d:conv1d")
    Act = lib.get("core.utils.common_types:ActFnType")
    ref = torch_reference(lib.get("experimental.conv.conv1d_torch:conv1d_torch_ref"))
    inputs = {"x_in": randn((1, 16, 20), np.float32, 1), "filters": randn((3, 16, 32), np.float32, 2),
              "bias": randn((32,), np.float32, 3), "stride": 1, "padding": (0, 0), "dilation": 1,
              "activation_fn": Act.SiLU, "lnc_shard": False}
    return Case(kernel, inputs, lambda: ref(**inputs), rtol=1e-5, atol=1e-5)


@row("depthwise_conv1d", kernel="experimental.conv.depthwise_conv1d:depthwise_conv1d_implicit_gemm",
     reference="the test's golden (torch grouped conv2d)",
     source="test_depthwise_conv1d.py fast [1, 16, 512, 64, (1, 1), no padding, bf16], lnc=2", needs="lnc2")
def depthwise_conv1d(lib):
    import torch
    kernel = lib.get("experimental.conv.depthwise_conv1d:depthwise_conv1d_implicit_gemm")
    b, c, w, k = 1, 16, 512, 64
    img, filt = randn((b, c, 1, w), BF16, 1), randn((c, 1, 1, k), BF16, 2)
    inputs = {"img_ref": img, "filter_ref": filt, "padding": ((0, 0), (0, 0)), "stride": (1, 1),
              "rhs_dilation": (1, 1), "lhs_dilation": (1, 1), "feature_group_count": c, "batch_group_count": 1}

    def expected():
        out = torch.nn.functional.conv2d(torch.from_numpy(img.astype(np.float32)),
                                         torch.from_numpy(filt.astype(np.float32)), stride=(1, 1), groups=c)
        return [out.numpy().astype(BF16)]
    return Case(kernel, inputs, expected, lnc=2, rtol=1e-2, atol=1e-5)


@row("dynamic_elementwise_add", kernel="experimental.dynamic_shapes.dynamic_elementwise_add:dynamic_elementwise_add",
     reference="experimental.dynamic_shapes.dynamic_elementwise_add_torch:dynamic_elementwise_add_torch_ref",
     source="test_dynamic_elementwise_add.py fast (m 256, h 512)")
def dynamic_elementwise_add(lib):
    kernel = lib.get("experimental.dynamic_shapes.dynamic_elementwise_add:dynamic_elementwise_add")
    ref_fn = lib.get("experimental.dynamic_shapes.dynamic_elementwise_add_torch:dynamic_elementwise_add_torch_ref")
    m, h = 256, 512
    a, b = randn((m, h), BF16, 1), randn((m, h), BF16, 2)
    inputs = {"input_a": a, "input_b": b, "num_m_tiles": np.array([[m // 128]], np.int32)}
    ref = torch_reference(ref_fn, cast_back=BF16)
    return Case(kernel, inputs, lambda: ref(input_a=a, input_b=b), rtol=1e-2, atol=1e-3)


@row("cross_entropy_forward", kernel="experimental.loss.cross_entropy:cross_entropy_forward",
     reference="experimental.loss.cross_entropy_torch:cross_entropy_forward_torch_ref",
     source="test_cross_entropy_forward.py switch_transformers fast [1, 1, 32128, bf16, 1, 32128]")
def cross_entropy_forward(lib):
    import torch
    kernel = lib.get("experimental.loss.cross_entropy:cross_entropy_forward")
    ref = lib.get("experimental.loss.cross_entropy_torch:cross_entropy_forward_torch_ref")
    n, v = 1, 32128
    logits = randn((n, v), BF16, 1)
    targets = np.random.default_rng(42).integers(0, v, n).astype(np.int32)
    inputs = {"logits_hbm": logits, "targets_hbm": targets, "positions_per_batch": 1, "chunk_size": v,
              "dtype": BF16}

    def expected():
        loss, lse = ref(torch.from_numpy(logits.astype(np.float32)).to(torch.bfloat16),
                        torch.from_numpy(targets).long())
        return [loss.float().numpy().astype(BF16), lse.float().numpy().astype(BF16)]
    return Case(kernel, inputs, expected, rtol=1e-2, atol=1e-2)


@row("cross_entropy_backward", kernel="experimental.loss.cross_entropy:cross_entropy_backward",
     reference="experimental.loss.cross_entropy_torch:cross_entropy_backward_torch_ref",
     source="test_cross_entropy_backward.py switch_transformers fast [1, 1, 32128, bf16, 1, 16384, mean]")
def cross_entropy_backward(lib):
    import torch
    kernel = lib.get("experimental.loss.cross_entropy:cross_entropy_backward")
    fwd = lib.get("experimental.loss.cross_entropy_torch:cross_entropy_forward_torch_ref")
    bwd = lib.get("experimental.loss.cross_entropy_torch:cross_entropy_backward_torch_ref")
    n, v = 1, 32128
    logits = randn((n, v), BF16, 1)
    targets = np.random.default_rng(42).integers(0, v, n).astype(np.int32)
    lt = torch.from_numpy(logits.astype(np.float32)).to(torch.bfloat16)
    tt = torch.from_numpy(targets).long()
    lse = fwd(lt, tt)[1].float().numpy().astype(BF16)
    inputs = {"logits_hbm": logits, "targets_hbm": targets, "lse_state_hbm": lse, "reduction": "mean",
              "positions_per_batch": 1, "chunk_size": 16384, "dtype": BF16}
    return Case(kernel, inputs, lambda: [bwd(lt, tt, "mean").float().numpy().astype(BF16)], rtol=1e-2, atol=1e-2)
