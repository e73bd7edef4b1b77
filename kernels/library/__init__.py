"""The in-tree kernel library: the sources of the ``neuron/*`` Hub repos.

Each entry is a self-contained pure-Python package (torch-facing API, ``@nki.jit`` kernels, a torch
reference and ``kernel.json``) that the publisher turns into a Hub kernel repo.
"""

# Hub repo name -> package import path.
LIBRARY: dict[str, str] = {
    "neuron/matmul": "kernels.library.matmul",
    "neuron/layernorm": "kernels.library.layernorm",
    "neuron/rmsnorm": "kernels.library.rmsnorm",
    "neuron/softmax": "kernels.library.softmax",
    "neuron/gelu-mlp": "kernels.library.gelu_mlp",
    "neuron/vit-block": "kernels.library.vit_block",
    "neuron/vit-attn": "kernels.library.vit_attn",
    "neuron/flash-attn": "kernels.library.flash_attn",
}
