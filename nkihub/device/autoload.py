"""torch's device-backend autoload, second half: ``nkihub._torch_autoload`` (the entry point of group
``torch.backends``, run at the end of every ``import torch``) comes here only when ``NKIHUB_EMULATE_NEURON``
is set, and this turns the emulated ``neuron`` device on when its value asks for it; otherwise nothing is
imported and the default is unchanged. An unmodified script then runs its Trainium code path with
``NKIHUB_EMULATE_NEURON=1 python train.py``."""
from __future__ import annotations


def load() -> None:
    from nkihub.device import config

    if config.emulate_requested():
        from nkihub.device.emulation import emulate

        emulate()
