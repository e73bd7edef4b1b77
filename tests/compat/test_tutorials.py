"""Old-dialect (neuronxcc.nki) kernels written the way the public NKI tutorials write them, run
unmodified against numpy references."""
import math

import numpy as np
import pytest

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc.nki.typing import tensor


# -- tensor addition on an SPMD grid -----------------------------------------------------------------------
@nki.jit
def add_kernel(a_input, b_input):
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iy = nl.program_id(1) * 64 + nl.arange(64)[None, :]
    a_tile = nl.load(a_input[ix, iy])
    b_tile = nl.load(b_input[ix, iy])
    nl.store(c_output[ix, iy], value=a_tile + b_tile)
    return c_output


def test_spmd_tensor_addition():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 128)).astype(np.float32)
    b = rng.standard_normal((256, 128)).astype(np.float32)
    out = add_kernel[a.shape[0] // 128, a.shape[1] // 64](a, b)
    np.testing.assert_allclose(out, a + b, rtol=1e-6)
    out2 = nki.simulate_kernel(add_kernel[2, 2], a, b)
    np.testing.assert_allclose(out2, a + b, rtol=1e-6)


# -- 2-D transpose with arange indices ---------------------------------------------------------------------
@nki.jit
def transpose2d_kernel(in_tensor, shape2D):
    out_tensor = nl.ndarray(in_tensor.shape, dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    sz_p, _ = in_tensor.shape
    in_tile = nl.load(in_tensor)
    sz_f1, sz_f2 = shape2D
    i_p0 = nl.arange(sz_p)[:, None, None]
    i_f1 = nl.arange(sz_f1)[None, :, None]
    i_f2 = nl.arange(sz_f2)[None, None, :]
    out_tile = nl.ndarray(shape=(sz_p, sz_f2 * sz_f1), dtype=out_tensor.dtype)
    out_tile[i_p0, i_f2 * sz_f1 + i_f1] = nl.copy(in_tile[i_p0, i_f1 * sz_f2 + i_f2])
    nl.store(out_tensor, value=out_tile)
    return out_tensor


def test_transpose2d():
    P, X, Y = 5, 3, 4
    a = np.arange(P * X * Y, dtype=np.int8).reshape((P, X * Y))
    out = transpose2d_kernel(a, (X, Y))
    np.testing.assert_array_equal(out, a.reshape(P, X, Y).transpose(0, 2, 1).reshape(P, X * Y))


# -- average pooling with 4-D free-dim access ---------------------------------------------------------------
@nki.jit
def avgpool_kernel(in_tensor, pool_size):
    sz_cin, sz_hin, sz_win = in_tensor.shape
    sz_hout, sz_wout = sz_hin // pool_size, sz_win // pool_size
    out_tensor = nl.ndarray((sz_cin, sz_hout, sz_wout), dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    sz_p, sz_pool = sz_cin, pool_size
    i0, i1, i2, i3, i4 = nl.mgrid[0:sz_p, 0:sz_hin // sz_pool, 0:sz_pool, 0:sz_win // sz_pool, 0:sz_pool]
    in_tile: tensor[sz_p, sz_hin, sz_win] = nl.load(in_tensor)
    out_tile: tensor[sz_p, sz_hout, sz_wout] = nl.sum(in_tile[i0, sz_pool * i1 + i2, sz_pool * i3 + i4],
                                                      axis=[2, 4]) / (pool_size * pool_size)
    nl.store(out_tensor, value=out_tile)
    return out_tensor


def test_average_pool():
    c, h, w, k = 2, 6, 8, 2
    x = np.arange(c * h * w, dtype=np.float16).reshape(c, h, w)
    out = avgpool_kernel(x, k)
    ref = x.astype(np.float32).reshape(c, h // k, k, w // k, k).mean(axis=(2, 4))
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=2e-3)


# -- layernorm with bn_stats / bn_aggr, baremetal with an output argument ----------------------------------
def layernorm_kernel(input_tensor, epsilon, gamma_vector, beta_vector, output_tensor):
    i_p_io = nl.arange(nl.tile_size.pmax)[:, None]
    i_f_io = nl.arange(input_tensor.shape[1])[None, :]
    i_p_param = nl.arange(1)[:, None]
    num_rows = input_tensor.shape[0]
    gamma_sb = nl.load(gamma_vector.reshape((1, gamma_vector.shape[0]))[i_p_param, i_f_io])
    beta_sb = nl.load(beta_vector.reshape((1, beta_vector.shape[0]))[i_p_param, i_f_io])
    gamma_b = gamma_sb.broadcast_to((nl.tile_size.pmax, gamma_vector.shape[0]))
    beta_b = beta_sb.broadcast_to((nl.tile_size.pmax, beta_vector.shape[0]))
    for i in nl.affine_range(math.ceil(input_tensor.shape[0] / nl.tile_size.pmax)):
        rows = i * nl.tile_size.pmax + i_p_io
        input_sb = nl.load(input_tensor[rows, i_f_io], mask=(rows < num_rows))
        i_f_bn = nl.arange(nl.tile_size.bn_stats_fmax)[None, :]
        i_f_stats = nl.arange(6)[None, :]
        n_stats = math.ceil(input_tensor.shape[1] / nl.tile_size.bn_stats_fmax)
        stats = nl.ndarray((nl.tile_size.pmax, 6 * n_stats), dtype=np.float32)
        for j in nl.affine_range(n_stats):
            cols = j * nl.tile_size.bn_stats_fmax + i_f_bn
            stats[i_p_io, j * 6 + i_f_stats] = nisa.bn_stats(input_sb[i_p_io, cols],
                                                             mask=(cols < input_tensor.shape[1]),
                                                             dtype=np.float32)
        mean_var = nisa.bn_aggr(stats[i_p_io, nl.arange(6 * n_stats)[None, :]])
        mean = mean_var[i_p_io, 0]
        var = mean_var[i_p_io, 1]
        scale_var = nl.rsqrt(var + epsilon)
        shifted = nisa.tensor_scalar(data=input_sb, op0=np.subtract, operand0=mean, op1=np.multiply,
                                     operand1=scale_var)
        output_sb = shifted * gamma_b + beta_b
        nl.store(output_tensor[rows, i_f_io], value=output_sb, mask=(rows < num_rows))


def test_layernorm_bn_stats_baremetal():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((256, 640)).astype(np.float32)
    gamma = rng.random(640).astype(np.float32)
    beta = rng.random(640).astype(np.float32)
    out = np.empty_like(x)
    nki.baremetal(layernorm_kernel)(x, 1e-5, gamma, beta, out)
    ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * gamma + beta
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


# -- Mamba-style selective scan with tensor_tensor_scan, par_dim block tiles and += in affine_range -------
@nki.jit
def mamba_kernel(delta, u, A, B, C):
    batch_size, channels, seq_len = delta.shape
    output = nl.ndarray((batch_size, channels, seq_len), dtype=delta.dtype, buffer=nl.shared_hbm)
    _, state_size = A.shape
    psize = nl.tile_size.pmax
    n_tiles = channels // psize
    for i_batch in nl.affine_range(batch_size):
        acc = nl.zeros((n_tiles, nl.par_dim(psize), seq_len), dtype=delta.dtype)
        for i_state in nl.affine_range(state_size):
            for t in nl.affine_range(n_tiles):
                c0 = t * psize
                delta_i = nl.load(delta[i_batch, c0:c0 + psize, 0:seq_len])
                A_i = nl.load(A[c0:c0 + psize, i_state])
                deltaA = nisa.activation(op=nl.exp, data=delta_i, scale=A_i)
                u_i = nl.load(u[i_batch, c0:c0 + psize, 0:seq_len])
                B_i = nl.load(B[i_batch, i_state:i_state + 1, 0:seq_len])
                deltaU = nisa.tensor_tensor(delta_i, u_i, op=nl.multiply)
                deltaBu = nisa.tensor_tensor(deltaU, B_i.broadcast_to((psize, seq_len)), op=nl.multiply)
                scan_res = nki.isa.tensor_tensor_scan(deltaA, deltaBu, initial=0, op0=np.multiply, op1=np.add)
                C_i = nl.load(C[i_batch, i_state:i_state + 1, 0:seq_len])
                scanC = nisa.tensor_tensor(scan_res, C_i.broadcast_to((psize, seq_len)), op=nl.multiply)
                acc[t, 0:psize, 0:seq_len] += scanC
        for t in nl.affine_range(n_tiles):
            c0 = t * psize
            nl.store(output[i_batch, c0:c0 + psize, 0:seq_len], acc[t, 0:psize, 0:seq_len])
    return output


def mamba_ref(delta, u, A, B, C):
    batch, channels, seq = delta.shape
    out = np.zeros_like(delta)
    for b in range(batch):
        for s in range(A.shape[1]):
            dA = np.exp(delta[b] * A[:, s:s + 1])
            dBu = delta[b] * u[b] * B[b, s][None, :]
            h = np.zeros(channels, np.float32)
            for i in range(seq):
                h = dA[:, i] * h + dBu[:, i]
                out[b, :, i] += h * C[b, s, i]
    return out


def test_mamba_selective_scan():
    rng = np.random.default_rng(2)
    batch, channels, seq, state = 1, 256, 32, 3
    delta = rng.random((batch, channels, seq)).astype(np.float32) * 0.5
    u = rng.standard_normal((batch, channels, seq)).astype(np.float32)
    A = -rng.random((channels, state)).astype(np.float32)
    B = rng.standard_normal((batch, state, seq)).astype(np.float32)
    C = rng.standard_normal((batch, state, seq)).astype(np.float32)
    out = mamba_kernel(delta, u, A, B, C)
    np.testing.assert_allclose(out, mamba_ref(delta, u, A, B, C), rtol=1e-4, atol=1e-4)
