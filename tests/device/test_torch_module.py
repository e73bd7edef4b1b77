"""``torch.neuron`` under emulation: the device-module functions transformers, accelerate and
torch.distributed call, and the refusal where torch_neuronx is installed."""
from __future__ import annotations

import json


def test_device_module_functions(emulated):
    out = emulated("""
        import json
        m = torch.neuron
        r = {"available": m.is_available(), "count": m.device_count(), "current": m.current_device(),
             "bf16": m.is_bf16_supported(), "name": m.get_device_name(1)}
        m.set_device(1)
        r["after_set"] = m.current_device()
        r["default_index"] = torch.ones(1, device="neuron").device.index
        with m.device(0):
            r["in_ctx"] = m.current_device()
        r["after_ctx"] = m.current_device()
        m.synchronize(); m.empty_cache()
        m.reset_peak_memory_stats(1)
        before = m.memory_allocated(1)
        x = torch.empty(1000, device="neuron:1")
        r["alloc"] = m.memory_allocated(1) - before
        del x
        r["freed"] = m.memory_allocated(1) - before
        r["peak"] = m.max_memory_allocated(1) - before
        r["stats"] = m.memory_stats(1)["allocated_bytes.all.peak"] >= 4000
        free, total = m.mem_get_info(1)
        r["mem_info"] = 0 < free <= total
        m.manual_seed_all(3)
        states = m.get_rng_state_all()
        a = torch.rand(3, device="neuron:0")
        m.set_rng_state_all(states)
        r["rng_all"] = torch.equal(a.cpu(), torch.rand(3, device="neuron:0").cpu())
        r["initial_seed"] = m.initial_seed()
        s = m.Stream(); e = m.Event(enable_timing=True); e.record(s); s.synchronize()
        r["stream"] = [s.query(), e.query(), m.current_stream() is m.default_stream()]
        with m.stream(s):
            pass
        r["props"] = m.get_device_properties(0).total_memory > 0
        r["emulated"] = [m.is_emulated(), nkihub.device.emulated()]
        try:
            torch.ones(1, device="neuron:2")
        except Exception as exc:
            r["beyond"] = "emulates 2 NeuronCore" in str(exc)
        nkihub.device.emulate(device_count=3)
        r["recount"] = m.device_count()
        print(json.dumps(r))
    """, device_count=2)
    r = json.loads(out)
    assert r["available"] and r["count"] == 2 and r["current"] == 0 and r["bf16"]
    assert r["name"].startswith("NeuronCore-") and "emulated" in r["name"]
    assert r["after_set"] == 1 and r["default_index"] == 1 and r["in_ctx"] == 0 and r["after_ctx"] == 1
    assert r["alloc"] == 4000 and r["freed"] == 0 and r["peak"] == 4000 and r["stats"] and r["mem_info"]
    assert r["rng_all"] and r["initial_seed"] == 3
    assert r["stream"] == [True, True, True] and r["props"] and r["emulated"] == [True, True]
    assert r["beyond"] and r["recount"] == 3


def test_refused_where_torch_neuronx_is_installed(run_python, tmp_path):
    fake = tmp_path / "torch_neuronx"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    out = run_python("""
        import torch, nkihub.device
        try:
            nkihub.device.emulate()
        except nkihub.device.EmulationError as exc:
            print("refused:", "torch_neuronx" in str(exc), hasattr(torch, "neuron"))
    """, env={"PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["refused:", "True", "False"]


def test_env_var_with_torch_neuronx_fails_loudly(run_python, tmp_path):
    fake = tmp_path / "torch_neuronx"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    out = run_python("import torch", env={"PYTHONPATH": str(tmp_path), "NKIHUB_EMULATE_NEURON": "1"})
    assert out.returncode != 0 and "torch_neuronx" in out.stderr and "EmulationError" in out.stderr


def test_kernels_device_probe_sees_the_emulation(emulated):
    out = emulated("""
        import json
        from nkihub.kernels import device
        print(json.dumps([device.neuron_available(), device.emulated(), device.resolve_device("neuron"),
                          device.backend_of([torch.ones(1, device="neuron")])]))
    """)
    assert json.loads(out) == [True, True, "neuron", "simulator"]
