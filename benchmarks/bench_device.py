"""What the emulated neuron device costs: the same tiny transformers models run on the CPU and on the
emulated device in this process (eager, no kernels), and the same ops counted; plus the kernel log's
estimate for a kernelized ViT.

    .venv/bin/python benchmarks/bench_device.py [--repeat 5]

Prints wall times measured side by side in this run and their ratio (neuron / cpu), and the per-op
overhead: the emulation's cost on this machine. None of it is a time on Trainium; the kernel log's figure
is the cost model's estimate of the kernels alone.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch


def models():
    import transformers

    torch.manual_seed(0)
    vit = transformers.ViTModel(transformers.ViTConfig(
        hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256, image_size=32,
        patch_size=8)).eval()
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2)).eval()
    return {"tiny ViT": (vit, torch.randn(2, 3, 32, 32)), "tiny Llama": (llama, torch.randint(0, 256, (2, 32)))}


def timed(model, x, repeat: int) -> float:
    with torch.no_grad():
        model(x)   # warm up
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            model(x)
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def count_ops(model, x) -> int:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Count():
        model(x)
    return Count.n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    import nkihub.device

    nkihub.device.emulate()
    print(f"{'model':<12} {'aten ops':>8} {'cpu ms':>8} {'neuron ms':>10} {'ratio':>6} {'us/op added':>12}")
    for name, (model, x) in models().items():
        ops = count_ops(model, x)
        cpu = timed(model, x, args.repeat)
        model.to("neuron")
        neuron = timed(model, x.to("neuron"), args.repeat)
        print(f"{name:<12} {ops:>8} {cpu * 1e3:>8.2f} {neuron * 1e3:>10.2f} {neuron / cpu:>6.1f} "
              f"{(neuron - cpu) / ops * 1e6:>12.1f}")
    from nkihub.kernels.layers import Mode, kernelize

    vit, x = models()["tiny ViT"]
    kernelize(vit.to("neuron"), mode=Mode.INFERENCE, device="neuron")
    log = nkihub.device.kernel_log()
    log.clear()
    with torch.no_grad():
        vit(x.to("neuron"))
    print("\nkernelized tiny ViT on the emulated device, one forward (estimates: the cost model, trn2):")
    print(log.table())


if __name__ == "__main__":
    main()
