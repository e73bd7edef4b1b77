"""nkihub: write NeuronCore (Trainium) kernels in the NKI tile language, verify and time them on a numpy
simulator, and share them through a Hugging Face Hub.

    from nkihub import kernels          # kernels.get("neuron/vit-attn"), publish, kernelize
    from nkihub import nki              # nki.jit, nki.language, nki.isa (also `import nki` without AWS's)

The rooms: ``nkihub.simulator`` (the machine), ``nkihub.nki`` (the language), ``nkihub.hub_client`` (the
Hub), ``nkihub.kernels`` (what model users import). Importing ``nkihub`` loads none of them.
"""

__version__ = "0.2.0"


def _torch_autoload() -> None:
    """torch's device-backend autoload hook (entry point group ``torch.backends``, run at the end of every
    ``import torch``): hands over to :mod:`nkihub.device.autoload` only when ``NKIHUB_EMULATE_NEURON`` is
    set, so otherwise it reads one environment variable and imports nothing (a partial install of nkihub
    can never break ``import torch``)."""
    import os

    if os.environ.get("NKIHUB_EMULATE_NEURON", "").strip():
        from nkihub.device.autoload import load

        load()
