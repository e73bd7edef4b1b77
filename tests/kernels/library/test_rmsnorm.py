"""neuron/rmsnorm against the torch reference and its errors."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from nkihub.kernels.library.rmsnorm import ops, rms_norm
from nkihub.kernels.library.rmsnorm.reference import rms_norm as reference

TOL = {torch.float32: 1e-4, torch.bfloat16: 3e-2}


@settings(max_examples=8, deadline=None)
@given(rows=st.integers(1, 300), f=st.integers(1, 1100), dtype=st.sampled_from([torch.float32, torch.bfloat16]),
       seed=st.integers(0, 2**16))
def test_matches_reference(rows, f, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, f, generator=g) * 2).to(dtype)
    w = torch.randn(f, generator=g).to(dtype)
    y = rms_norm(x, w, eps=1e-6)
    assert y.shape == x.shape and y.dtype == dtype
    torch.testing.assert_close(y.float(), reference(x, w, 1e-6).float(), atol=TOL[dtype], rtol=TOL[dtype])


def test_leading_dims_and_opcheck():
    x, w = torch.randn(3, 5, 70), torch.randn(70)
    torch.testing.assert_close(rms_norm(x, w), reference(x, w), atol=1e-4, rtol=1e-4)
    torch.library.opcheck(ops.rms_norm, (x.reshape(-1, 70), w, 1e-6))


@pytest.mark.parametrize("args, name", [
    ((torch.randn(4, 8), torch.randn(9)), "weight"),
    ((torch.randn(4, 8).half(), torch.randn(8).half()), "x"),
    (([[1.0]], torch.randn(1)), "x"),
    ((torch.randn(4, 8), torch.randn(8).bfloat16()), "weight"),
])
def test_bad_arguments(args, name):
    with pytest.raises(ValueError, match=f"'{name}'"):
        rms_norm(*args)
