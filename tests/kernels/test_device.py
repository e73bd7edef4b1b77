"""Neuron detection (torch_neuronx, or an XLA device whose hardware is NEURON), robust to broken installs;
CPU runs the simulator; asking for Neuron where there is none is a clear error, never a fallback."""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

import pytest
import torch

from nkihub.kernels import device


@pytest.fixture(autouse=True)
def fresh_probe():
    device.neuron_status(refresh=True)
    yield
    device.neuron_status(refresh=True)


def _fake_module(monkeypatch, name, **attrs):
    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    for k, v in attrs.items():
        setattr(mod, k, v)
    monkeypatch.setitem(sys.modules, name, mod)
    return mod


def _fake_xla(monkeypatch, hardware):
    _fake_module(monkeypatch, "torch_xla")
    _fake_module(monkeypatch, "torch_xla.core")
    _fake_module(monkeypatch, "torch_xla.core.xla_model", xla_device=lambda: "xla:0",
                 xla_device_hw=lambda dev: hardware)


def _no_toolchain(monkeypatch):
    for name in ("torch_neuronx", "torch_xla"):
        monkeypatch.setitem(sys.modules, name, None)  # import (and find_spec) of these fails


def test_cpu_is_the_simulator():
    assert device.backend_of([torch.zeros(2), torch.ones(3)]) == device.SIMULATOR
    assert device.resolve_device("cpu") == "cpu" and device.resolve_device(torch.device("cpu")) == "cpu"


def test_no_neuron_means_clear_errors(monkeypatch):
    _no_toolchain(monkeypatch)
    status = device.neuron_status(refresh=True)
    assert not status.available
    assert device.resolve_device(None) == "cpu"
    with pytest.raises(device.NeuronUnavailableError, match="no Neuron device.*device='cpu'"):
        device.resolve_device("neuron")
    with pytest.raises(device.NeuronUnavailableError, match="not fall back"):
        device.neuron_runner(lambda x: x)
    with pytest.raises(ValueError, match="device"):
        device.resolve_device("cuda:0")


def test_torch_neuronx_makes_neuron_available(monkeypatch):
    _fake_module(monkeypatch, "torch_neuronx", __version__="2.9.0", nki_jit=lambda fn: ("launcher", fn))
    status = device.neuron_status(refresh=True)
    assert status.available and "torch_neuronx 2.9.0" in status.how
    assert device.resolve_device(None) == "neuron" and device.resolve_device("xla:0") == "neuron"

    def kernel(x):
        return x

    assert device.neuron_runner(kernel) == ("launcher", kernel)


@pytest.mark.parametrize("hardware, available", [("NEURON", True), ("CPU", False), ("GPU", False)])
def test_xla_device_counts_only_with_neuron_hardware(monkeypatch, hardware, available):
    monkeypatch.setitem(sys.modules, "torch_neuronx", None)
    _fake_xla(monkeypatch, hardware)
    status = device.neuron_status(refresh=True)
    assert status.available is available
    if not available:
        assert f"{hardware!r}, not 'NEURON'" in str(status)


class _BrokenFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds torch_neuronx but fails to import it, as a half-installed SDK does."""

    def find_spec(self, name, path=None, target=None):
        return importlib.machinery.ModuleSpec(name, self) if name == "torch_neuronx" else None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise ImportError("libnrt.so.1: cannot open shared object file")


def test_broken_install_is_a_reason_not_a_crash(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch_neuronx", raising=False)
    monkeypatch.setitem(sys.modules, "torch_xla", None)
    monkeypatch.setattr(sys, "meta_path", [_BrokenFinder(), *sys.meta_path])
    status = device.neuron_status(refresh=True)
    assert not status.available
    assert "libnrt.so.1" in str(status)
    with pytest.raises(device.NeuronUnavailableError, match="libnrt.so.1"):
        device.require_neuron()


def test_detection_is_lazy():
    import subprocess

    code = ("import sys; import nkihub.kernels.device as d; assert 'torch' not in sys.modules; "
            "assert d._status is None; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


def test_tensors_on_other_devices_are_refused():
    with pytest.raises(ValueError, match="share one device"):
        device.backend_of([torch.zeros(1), torch.zeros(1, device="meta")])
    with pytest.raises(ValueError, match="got 'meta'"):
        device.backend_of([torch.zeros(1, device="meta")])
