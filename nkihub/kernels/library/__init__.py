"""The in-tree kernel library: the sources of the ``neuron/*`` Hub repos.

Each entry is a self-contained pure-Python package (torch-facing API, ``@nki.jit`` kernels, a torch
reference and ``kernel.json``) that the publisher turns into a Hub kernel repo.
"""

# Hub repo name -> package import path.
LIBRARY: dict[str, str] = {
    "neuron/matmul": "nkihub.kernels.library.matmul",
    "neuron/layernorm": "nkihub.kernels.library.layernorm",
    "neuron/rmsnorm": "nkihub.kernels.library.rmsnorm",
    "neuron/softmax": "nkihub.kernels.library.softmax",
    "neuron/gelu-mlp": "nkihub.kernels.library.gelu_mlp",
    "neuron/vit-block": "nkihub.kernels.library.vit_block",
    "neuron/vit-attn": "nkihub.kernels.library.vit_attn",
    "neuron/flash-attn": "nkihub.kernels.library.flash_attn",
}
