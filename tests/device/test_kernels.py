"""NKI kernels on the emulated device: a library op and a plain ``@nki.jit`` kernel called on neuron
tensors run on the simulator and return neuron tensors; every call lands in the kernel log with its
cost-model estimate."""
from __future__ import annotations

import json


def test_library_op_and_jit_kernel_on_neuron_tensors(emulated):
    out = emulated("""
        import json
        import nki
        import nki.language as nl
        from nkihub.kernels.library import vit_attn
        from nkihub.kernels.torch_ops import count_calls

        q, k, v = torch.randn(3, 2, 2, 9, 16, generator=torch.Generator().manual_seed(0))
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        with count_calls() as calls:
            got = vit_attn.vit_attention(*(t.to("neuron") for t in (q, k, v)))

        @nki.jit
        def add_one(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            nl.store(out, nl.load(x) + 1.0)
            return out

        x = torch.randn(4, 8, device="neuron:1")
        y = add_one(x)
        log = nkihub.device.kernel_log()
        last = log.calls[-1]
        print(json.dumps({
            "op_device": str(got.device), "op_err": (got.cpu() - want).abs().max().item(),
            "op_calls": sum(calls.values()), "jit_device": str(y.device),
            "jit_ok": torch.equal(y.cpu(), x.cpu() + 1), "logged": [c.kernel for c in log.calls],
            "last_device": last.device, "estimate": last.estimated_s, "total": log.estimated_s(),
            "table": "total (estimate)" in log.table(), "torch_neuron_log": torch.neuron.kernel_log() is log,
        }))
    """, device_count=2)
    r = json.loads(out)
    assert r["op_device"] == "neuron:0" and r["op_err"] < 1e-5 and r["op_calls"] == 1
    assert r["jit_device"] == "neuron:1" and r["jit_ok"]
    assert r["logged"][-1] == "add_one" and "vit_attention_kernel" in r["logged"]
    assert r["last_device"] == "neuron:1" and 0 < r["estimate"] <= r["total"]
    assert r["table"] and r["torch_neuron_log"]


def test_kernel_backward_on_neuron_tensors(emulated):
    out = emulated("""
        from nkihub.kernels.library import vit_attn

        q, k, v = torch.randn(3, 1, 2, 8, 16, generator=torch.Generator().manual_seed(1))
        ref = [t.clone().requires_grad_() for t in (q, k, v)]
        torch.nn.functional.scaled_dot_product_attention(*ref).sum().backward()
        dev = [t.to("neuron").requires_grad_() for t in (q, k, v)]
        vit_attn.vit_attention(*dev).sum().backward()
        print(all(t.grad.device.type == "neuron" for t in dev),
              max((d.grad.cpu() - r.grad).abs().max().item() for d, r in zip(dev, ref)))
    """)
    on_neuron, err = out.split()
    assert on_neuron == "True" and float(err) < 1e-4
