"""neuron/softmax against the torch reference, incl. rows streamed twice from HBM, and its errors."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from nkihub.kernels.library.softmax import ops, softmax
from nkihub.kernels.library.softmax.nki_kernels import softmax_kernel
from nkihub.kernels.library.softmax.reference import softmax as reference

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


@settings(max_examples=8, deadline=None)
@given(rows=st.integers(1, 260), f=st.integers(1, 3000), dtype=st.sampled_from([torch.float32, torch.bfloat16]),
       seed=st.integers(0, 2**16))
def test_matches_reference(rows, f, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, f, generator=g) * 4).to(dtype)
    y = softmax(x)
    assert y.shape == x.shape and y.dtype == dtype
    torch.testing.assert_close(y.float(), reference(x).float(), atol=TOL[dtype], rtol=TOL[dtype])


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 140), f=st.integers(2, 900), chunk=st.integers(32, 300),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]))
def test_streamed_rows_longer_than_chip(rows, f, chunk, dtype):
    # resident_bytes=0 forces the two-pass online path that long rows take
    x = (torch.randn(rows, f) * 5 + torch.linspace(-20, 20, f)).to(dtype)
    y = softmax_kernel(x, chunk, 0)
    torch.testing.assert_close(y.float(), reference(x).float(), atol=TOL[dtype], rtol=TOL[dtype])


def test_other_dim_and_opcheck():
    x = torch.randn(3, 40, 5)
    torch.testing.assert_close(softmax(x, dim=1), torch.softmax(x, 1), atol=1e-5, rtol=1e-5)
    torch.library.opcheck(ops.softmax, (torch.randn(6, 33),))


def test_bad_arguments():
    with pytest.raises(ValueError, match="'dim'"):
        softmax(torch.randn(3, 4), dim=2)
    with pytest.raises(ValueError, match="'x'"):
        softmax(torch.randn(3, 4, dtype=torch.float64))
