"""torch's device-backend autoload hook (entry point group ``torch.backends``): runs at the end of every
``import torch`` in an environment where nkihub is installed, and turns the emulated ``neuron`` device on
only when ``NKIHUB_EMULATE_NEURON=1``; otherwise it does nothing (and imports nothing but this module), so
the default is unchanged. An unmodified script then runs its Trainium code path with
``NKIHUB_EMULATE_NEURON=1 python train.py``."""
from __future__ import annotations


def load() -> None:
    from nkihub.device import config

    if config.emulate_requested():
        from nkihub.device.emulation import emulate

        emulate()
