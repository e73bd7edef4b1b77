"""The emulated neuron device as PyTorch sees it: tensors on device="neuron" in host memory, every aten op
through the CPU kernels, views sharing storage, copies, resizes, autograd, random numbers, device checks,
and the default (emulation off) unchanged."""
from __future__ import annotations

import json


def test_off_by_default_nothing_changes(run_python):
    out = run_python("""
        import sys, json, torch
        untouched = "nkihub.device" not in sys.modules   # torch's autoload hook imported nothing of it
        import nkihub.device
        print(json.dumps([untouched, hasattr(torch, "neuron"), torch._C._get_privateuse1_backend_name(),
                          nkihub.device.emulated()]))
    """)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [True, False, "privateuseone", False]


def test_env_var_turns_it_on_at_import_torch(run_python):
    # torch's device-backend autoload runs nkihub's entry point: no nkihub import in the script
    out = run_python("""
        import torch
        x = torch.ones(2, device="neuron")
        print(x.device, torch.neuron.device_count(), torch.neuron.is_emulated())
    """, env={"NKIHUB_EMULATE_NEURON": "1", "NKIHUB_NEURON_DEVICE_COUNT": "2"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["neuron:0", "2", "True"]


def test_tensors_ops_and_methods(emulated):
    out = emulated("""
        import json
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
        n = x.to("neuron")
        lin = torch.nn.Linear(4, 5)
        want = lin(x)
        lin.neuron()
        checks = {
            "device": str(n.device), "is_neuron": n.is_neuron, "neuron()": str(x.neuron().device),
            "roundtrip": torch.equal(n.cpu(), x),
            "math": torch.equal((n * 2 + 1).softmax(-1).cpu(), (x * 2 + 1).softmax(-1)),
            "linear": torch.equal(lin(n).cpu(), want), "param": str(lin.weight.device),
            "factory": torch.arange(6, device="neuron").reshape(2, 3).sum().item(),
            "accelerator": str(torch.accelerator.current_accelerator()),
            "item": n[0, 0].item() == x[0, 0].item(),
            "print": "device='neuron:0'" in repr(torch.zeros(1, device="neuron")),
            "bf16": str((n.to(torch.bfloat16) @ n.t().to(torch.bfloat16)).dtype),
        }
        print(json.dumps(checks))
    """)
    checks = json.loads(out)
    assert checks == {"device": "neuron:0", "is_neuron": True, "neuron()": "neuron:0", "roundtrip": True,
                      "math": True, "linear": True, "param": "neuron:0", "factory": 15,
                      "accelerator": "neuron", "item": True, "print": True, "bf16": "torch.bfloat16"}


def test_views_share_storage_and_inplace_ops_write_through(emulated):
    out = emulated("""
        n = torch.zeros(3, 4, device="neuron")
        v = n.view(12)
        v[0] = 7.0
        n[:, 1:3].add_(1.0)
        t = n.t()
        n.t_()
        same = v.untyped_storage().data_ptr() == n.untyped_storage().data_ptr()
        print(same, t.is_contiguous(), tuple(n.shape), n.sum().item(), n.cpu()[0, 0].item(), v._base is n)
    """)
    assert out.split() == ["True", "False", "(4,", "3)", "13.0", "7.0", "True"]


def test_out_resize_and_device_index(emulated):
    out = emulated("""
        a = torch.ones(2, 3, device="neuron:1")
        e = torch.empty(0, device="neuron:1")
        torch.cat([a, a], out=e)
        r = torch.full((2,), 3.0, device="neuron:1")
        r.resize_(6)
        print(e.device, tuple(e.shape), e.sum().item(), r.device, r[:2].tolist(), tuple(r.shape),
              (a + 1).device, torch.ones(1).to("neuron:1").device)
    """, device_count=2)
    assert out.split() == ["neuron:1", "(4,", "3)", "12.0", "neuron:1", "[3.0,", "3.0]", "(6,)", "neuron:1",
                           "neuron:1"]


def test_autograd_matches_cpu(emulated):
    out = emulated("""
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                                    torch.nn.Linear(16, 2))
        x = torch.randn(5, 8)
        model(x).pow(2).sum().backward()
        want = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model.to("neuron")
        model(x.to("neuron")).pow(2).sum().backward()
        got = [p.grad for p in model.parameters()]
        print(all(g.device.type == "neuron" for g in got),
              max((g.cpu() - w).abs().max().item() for g, w in zip(got, want)))
    """)
    on_neuron, err = out.split()
    assert on_neuron == "True" and float(err) == 0.0


def test_mixing_devices_is_an_error_as_on_a_real_device(emulated):
    out = emulated("""
        n = torch.ones(2, 2, device="neuron")
        try:
            torch.mm(n, torch.ones(2, 2))
        except RuntimeError as exc:
            print("error:", "same device" in str(exc))
        print((n + torch.tensor(1.0)).device)   # a 0-dim CPU scalar is allowed, as on CUDA
    """)
    assert out.split() == ["error:", "True", "neuron:0"]


def test_random_numbers_follow_the_neuron_generator(emulated):
    out = emulated("""
        torch.manual_seed(0)
        a = torch.randn(4, device="neuron")
        torch.neuron.manual_seed(0)
        b = torch.randn(4, device="neuron")
        state = torch.neuron.get_rng_state()
        c = torch.randn(4, device="neuron")
        torch.neuron.set_rng_state(state)
        d = torch.randn(4, device="neuron")
        torch.neuron.manual_seed(1)
        drop = torch.nn.functional.dropout(torch.ones(64, device="neuron"), 0.5)
        print(torch.equal(a.cpu(), b.cpu()), torch.equal(c.cpu(), d.cpu()), torch.equal(b.cpu(), c.cpu()),
              sorted(set(drop.cpu().tolist())))
    """)
    assert out.split() == ["True", "True", "False", "[0.0,", "2.0]"]


def test_autocast_runs_matmuls_in_bf16(emulated):
    out = emulated("""
        lin = torch.nn.Linear(4, 4).neuron()
        x = torch.randn(2, 4, device="neuron")
        with torch.autocast("neuron"):
            y = lin(x)
            s = torch.softmax(y, -1)
        print(y.dtype, s.dtype)
    """)
    assert out.split() == ["torch.bfloat16", "torch.float32"]


def test_save_and_load_onto_the_device(emulated):
    out = emulated("""
        import io
        x = torch.arange(6.0).reshape(2, 3).neuron()
        buf = io.BytesIO()
        torch.save({"x": x, "view": x[:, 1:]}, buf)
        buf.seek(0)
        back = torch.load(buf)
        buf.seek(0)
        on_cpu = torch.load(buf, map_location="cpu")
        buf = io.BytesIO()
        torch.save(torch.ones(3), buf)
        buf.seek(0)
        mapped = torch.load(buf, map_location="neuron:1")
        print(back["x"].device, back["view"].tolist(), on_cpu["x"].device, mapped.device, mapped.sum().item())
    """, device_count=2)
    assert out.split() == ["neuron:0", "[[1.0,", "2.0],", "[4.0,", "5.0]]", "cpu", "neuron:1", "3.0"]
