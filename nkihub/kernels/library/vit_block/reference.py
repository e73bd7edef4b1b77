"""Torch reference of neuron/vit-block: the pre-norm ViTLayer math in fp32, result in x's dtype."""
import torch
import torch.nn.functional as F

from nkihub.kernels.library.gelu_mlp.reference import ACTIVATIONS


def vit_block(x, ln1_weight, ln1_bias, q_weight, q_bias, k_weight, k_bias, v_weight, v_bias, o_weight, o_bias,
              ln2_weight, ln2_bias, fc1_weight, fc1_bias, fc2_weight, fc2_bias, *, num_heads, eps=1e-12, activation="gelu"):
    """x [..., S, D] -> x + attn(ln1(x)); then + mlp(ln2(.)); ``activation`` the GELU ("gelu" exact,
    "gelu_tanh", "quick_gelu"); non-causal attention."""
    f = lambda t: t.float()  # noqa: E731
    xf = x.float()
    d = xf.shape[-1]
    h = F.layer_norm(xf, (d,), f(ln1_weight), f(ln1_bias), eps)

    def heads(t):
        return t.unflatten(-1, (num_heads, d // num_heads)).transpose(-3, -2)
    q, k, v = (heads(F.linear(h, f(w), f(b))) for w, b in ((q_weight, q_bias), (k_weight, k_bias),
                                                             (v_weight, v_bias)))
    a = F.scaled_dot_product_attention(q, k, v).transpose(-3, -2).flatten(-2)
    h1 = xf + F.linear(a, f(o_weight), f(o_bias))
    m = F.linear(ACTIVATIONS[activation](F.linear(F.layer_norm(h1, (d,), f(ln2_weight), f(ln2_bias), eps), f(fc1_weight),
                                 f(fc1_bias))), f(fc2_weight), f(fc2_bias))
    return (h1 + m).to(x.dtype)
