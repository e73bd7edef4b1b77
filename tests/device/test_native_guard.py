"""The optional C++ part (device guard and allocator): with it, C++ resolves a bare "neuron" to the current
core, autograd runs a backward on any emulated core and C++ can allocate neuron storages; without a compiler, requiring it is a clear error and the default
falls back to the pure-Python guard with a warning."""
from __future__ import annotations

import json
import shutil

import pytest

needs_toolchain = pytest.mark.skipif(not (shutil.which("c++") and shutil.which("ninja")),
                                     reason="no C++ compiler or ninja to build the native guard")


@needs_toolchain
def test_native_guard_follows_set_device(run_python):
    out = run_python("""
        import json, torch, nkihub.device
        nkihub.device.emulate(device_count=2, native_guard=True)
        torch.neuron.set_device(1)
        x = torch.ones(2)
        r = {"to": str(x.to("neuron").device), "module": str(torch.nn.Linear(2, 2).to("neuron").weight.device),
             "accelerator": [torch.accelerator.device_count(), torch.accelerator.current_device_index()]}
        torch.accelerator.set_device_index(0)
        r["set_by_accelerator"] = torch.neuron.current_device()
        with torch.neuron.device(1):
            r["in_ctx"] = str(x.to("neuron").device)
        a = torch.randn(3, device="neuron:1", requires_grad=True)
        (a * a).sum().backward()
        r["grad"] = [str(a.grad.device), torch.equal(a.grad.cpu(), 2 * a.detach().cpu())]
        torch.neuron.set_device(1)
        storage = torch.UntypedStorage(16, device="neuron")   # C++ allocates it: the native allocator
        r["storage"] = [str(storage.device), storage.nbytes()]
        t = torch.arange(4.0, device="neuron")
        t.untyped_storage().resize_(32)                      # the native hooks resize in place
        grown = t.untyped_storage().nbytes()
        t.untyped_storage().resize_(0)
        r["resize"] = [grown, t.untyped_storage().nbytes(), nkihub.device.native_part()]
        print(json.dumps(r))
    """)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout)
    assert r == {"to": "neuron:1", "module": "neuron:1", "accelerator": [2, 1], "set_by_accelerator": 0,
                 "in_ctx": "neuron:1", "grad": ["neuron:1", True], "storage": ["neuron:1", 16],
                 "resize": [32, 0, True]}


def test_without_a_compiler(run_python):
    code = """
        import torch, warnings, nkihub.device
        try:
            nkihub.device.emulate(native_guard=True)
        except nkihub.device.EmulationError as exc:
            print("required:", "C++ compiler" in str(exc))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            nkihub.device.emulate()
        print("auto:", torch.ones(1, device="neuron").device, any("pure-Python" in str(w.message) for w in caught))
    """
    out = run_python(code, env={"CXX": "/nonexistent/c++", "NKIHUB_NEURON_NATIVE_GUARD": "auto"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["required:", "True", "auto:", "neuron:0", "True"]
