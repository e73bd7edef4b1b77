"""Thread pinning while the simulator runs inside torch ops: a kernelized transformers ViT, with and
without pinning, alone and with a second Python thread running torch work at the same time.

    .venv/bin/python benchmarks/bench_threads.py [--repeat 5]

Prints wall times measured side by side in this run and their ratio (pinned / unpinned): these are
times of the simulator on this machine, not estimates of Trainium.
"""
from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

import torch


def build():
    import transformers

    from nkihub.kernels.layers import Mode, kernelize

    cfg = transformers.ViTConfig(hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=512, image_size=64, patch_size=8)
    torch.manual_seed(0)
    model = kernelize(transformers.ViTModel(cfg).eval(), mode=Mode.INFERENCE, device="cpu")
    return model, torch.randn(4, 3, 64, 64)


def timed(model, x, repeat: int, background: bool) -> float:
    stop = threading.Event()

    def torch_work():  # a data-loader-like neighbour keeping torch's pool busy
        a = torch.randn(512, 512)
        while not stop.is_set():
            a @ a

    worker = threading.Thread(target=torch_work, daemon=True) if background else None
    if worker:
        worker.start()
    times = []
    try:
        with torch.no_grad():
            for _ in range(repeat):
                t = time.perf_counter()
                model(x)
                times.append(time.perf_counter() - t)
    finally:
        stop.set()
        if worker:
            worker.join()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from nkihub.kernels import threads

    model, x = build()
    with torch.no_grad():
        model(x)  # trace and compile every kernel once
    print(f"cores: {os.cpu_count()}, torch threads: {torch.get_num_threads()}, BLAS threads: {threads.blas_threads()}")
    print(model.kernelize_report.table().splitlines()[0])
    print(f"{'scenario':<34}{'unpinned s':>12}{'pinned s':>12}{'pinned/unpinned':>18}")
    for background in (False, True):
        results = {}
        for label, value in (("unpinned", "0"), ("pinned", "1")):
            os.environ["NKIHUB_SIM_THREADS"] = value
            results[label] = timed(model, x, args.repeat, background)
        name = "model alone" if not background else "model + torch matmuls in a thread"
        print(f"{name:<34}{results['unpinned']:>12.3f}{results['pinned']:>12.3f}"
              f"{results['pinned'] / results['unpinned']:>18.2f}")
    os.environ.pop("NKIHUB_SIM_THREADS", None)


if __name__ == "__main__":
    main()
