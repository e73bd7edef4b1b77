"""neuron/layernorm against the torch reference (hypothesis shapes, both dtypes) and its errors."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from nkihub.kernels.library.layernorm import layer_norm, ops
from nkihub.kernels.library.layernorm.reference import layer_norm as reference

TOL = {torch.float32: 1e-4, torch.bfloat16: 3e-2}


@settings(max_examples=8, deadline=None)
@given(rows=st.integers(1, 300), f=st.integers(1, 1100), dtype=st.sampled_from([torch.float32, torch.bfloat16]),
       seed=st.integers(0, 2**16))
def test_matches_reference(rows, f, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, f, generator=g) * 3 + 1).to(dtype)
    w, b = torch.randn(f, generator=g).to(dtype), torch.randn(f, generator=g).to(dtype)
    y = layer_norm(x, w, b, eps=1e-5)
    assert y.shape == x.shape and y.dtype == dtype
    torch.testing.assert_close(y.float(), reference(x, w, b, 1e-5).float(), atol=TOL[dtype], rtol=TOL[dtype])


def test_leading_dims_and_opcheck():
    x = torch.randn(2, 3, 130)
    w, b = torch.randn(130), torch.randn(130)
    torch.testing.assert_close(layer_norm(x, w, b), reference(x, w, b), atol=1e-4, rtol=1e-4)
    torch.library.opcheck(ops.layer_norm, (x.reshape(-1, 130), w, b, 1e-5))


@pytest.mark.parametrize("args, name", [
    ((torch.randn(4, 8), torch.randn(7), torch.randn(8)), "weight"),
    ((torch.randn(4, 8), torch.randn(8), torch.randn(8, 1)), "bias"),
    ((torch.randn(4, 8).double(), torch.randn(8).double(), torch.randn(8).double()), "x"),
    ((torch.randn(4, 8), torch.randn(8).bfloat16(), torch.randn(8)), "weight"),
])
def test_bad_arguments(args, name):
    with pytest.raises(ValueError, match=f"'{name}'"):
        layer_norm(*args)


def test_bad_eps():
    with pytest.raises(ValueError, match="'eps'"):
        layer_norm(torch.randn(2, 4), torch.ones(4), torch.zeros(4), eps=0.0)
