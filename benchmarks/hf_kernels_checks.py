"""The checks of hf_kernels_interop.py, run inside the Hugging Face ``kernels`` venv (``kernels`` is Hugging
Face's; of nkihub only ``nkihub.nki`` and ``nkihub.simulator``, behind the top-level ``nki``, are there).

    python hf_kernels_checks.py '<json: repo id -> snapshot dir>' PROJECT_DIR

Prints ``ok``/``FAIL`` per check and "N of M checks pass"; exits 0 when all pass, else 1.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

RESULTS: list[tuple[str, bool, str]] = []


def check(name: str, fn) -> None:
    try:
        detail = fn() or ""
        RESULTS.append((name, True, detail))
        print(f"ok    {name}  {detail}", flush=True)
    except Exception as exc:  # every failure is a result, not a crash
        last = traceback.format_exc().strip().splitlines()[-1]
        RESULTS.append((name, False, last))
        print(f"FAIL  {name}: {type(exc).__name__}: {str(exc)[:400]}", flush=True)


def close(got: torch.Tensor, want: torch.Tensor, tol: float = 1e-4) -> str:
    err = float((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-12))
    if not err <= tol:
        raise AssertionError(f"max relative error {err:.2e} > {tol:.0e}")
    return f"max rel err {err:.1e}"


# ---- one computation per kernel, against torch ---------------------------------------------------------
def _vit_layer():
    from transformers import ViTConfig
    from transformers.models.vit.modeling_vit import ViTLayer

    torch.manual_seed(0)
    return ViTLayer(ViTConfig(hidden_size=64, num_attention_heads=2, intermediate_size=128)).eval()


def compute(repo: str, k) -> str:
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    if repo == "neuron/matmul":
        a, b = r(130, 96), r(96, 48)
        return close(k.matmul(a, b), a @ b)
    if repo == "neuron/layernorm":
        x, w, b = r(8, 256), r(256), r(256)
        return close(k.layer_norm(x, w, b, 1e-5), F.layer_norm(x, (256,), w, b, 1e-5))
    if repo == "neuron/rmsnorm":
        x, w = r(8, 256), r(256)
        return close(k.rms_norm(x, w, 1e-6), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)
    if repo == "neuron/softmax":
        x = r(8, 256)
        return close(k.softmax(x, dim=-1), torch.softmax(x, -1))
    if repo == "neuron/gelu-mlp":
        x, w1, b1, w2, b2 = r(1, 16, 64), r(128, 64) / 8, r(128), r(64, 128) / 8, r(64)
        return close(k.gelu_mlp(x, w1, b1, w2, b2), F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2))
    if repo == "neuron/vit-block":
        layer, x = _vit_layer(), r(1, 17, 64)
        with torch.no_grad():
            return close(k.vit_block_from_layer(layer, x), layer(x))
    q, kk, v = r(1, 2, 32, 64), r(1, 2, 32, 64), r(1, 2, 32, 64)
    if repo == "neuron/vit-attn":
        return close(k.vit_attention(q, kk, v), F.scaled_dot_product_attention(q, kk, v))
    if repo == "neuron/flash-attn":
        return close(k.flash_attention(q, kk, v, causal=True), F.scaled_dot_product_attention(q, kk, v, is_causal=True))
    raise ValueError(f"no computation for {repo}")


def computed(repo: str, load) -> callable:
    def run():
        k = load()
        return f"{compute(repo, k)}; module {k.__name__}"
    return run


def locked(repo: str, lockfile: Path):
    """load_kernel after `kernels download`. kernels 0.17.2 (not 0.19.1) asks huggingface_hub for the whole cached
    snapshot of the locked commit (no allow_patterns) while `kernels download` fetched one variant, and
    huggingface_hub >= 2.2 refuses a snapshot its cached tree listing shows incomplete
    (IncompleteSnapshotError, for any Hub): the first attempt says so, then the snapshot is completed
    with huggingface_hub and the load retried."""
    from huggingface_hub import snapshot_download
    from kernels import load_kernel

    try:
        return load_kernel(repo, lockfile=lockfile)
    except FileNotFoundError as exc:
        if "IncompleteSnapshotError" not in repr(exc.__cause__):
            raise
        UPSTREAM.add(type(exc.__cause__).__name__)
    commit = json.loads(lockfile.read_text())
    commit = next(e["lock"]["commit"] for e in commit if e["dependency"]["repo-id"] == repo)
    snapshot_download(repo, repo_type="kernel", revision=commit)
    return load_kernel(repo, lockfile=lockfile)


UPSTREAM: set[str] = set()


# ---- kernelize: Hugging Face's, with the kernel's own layer -------------------------------------------------
def _tiny_vit():
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    # head dim 64: vit-attn takes 64 and 128
    return ViTModel(ViTConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256,
                              image_size=32, patch_size=8, attn_implementation="eager")).eval()


class _Classifier(torch.nn.Module):
    """A ViT with a softmax head: the small model for the Softmax layer."""

    def __init__(self):
        super().__init__()
        self.vit, self.head, self.softmax = _tiny_vit(), torch.nn.Linear(128, 10), torch.nn.Softmax(dim=-1)

    def forward(self, pixels):
        return self.softmax(self.head(self.vit(pixels).pooler_output))


def _tiny_llama():
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(0)
    return LlamaModel(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                                  num_key_value_heads=2, vocab_size=100)).eval()


def _layer_classes():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    from transformers.models.vit import modeling_vit as vit

    # layer name -> (class to mark, model factory, input)
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    tokens = torch.randint(0, 100, (1, 12), generator=torch.Generator().manual_seed(1))
    return {"ViTAttention": (vit.ViTAttention, _tiny_vit, pixels), "ViTMLP": (vit.ViTMLP, _tiny_vit, pixels),
            "ViTLayer": (vit.ViTLayer, _tiny_vit, pixels), "LayerNorm": (torch.nn.LayerNorm, _tiny_vit, pixels),
            "Linear": (torch.nn.Linear, _tiny_vit, pixels), "RMSNorm": (LlamaRMSNorm, _tiny_llama, tokens),
            "Softmax": (torch.nn.Softmax, _Classifier, pixels)}


LAYERS = {"neuron/vit-attn": "ViTAttention", "neuron/flash-attn": "ViTAttention", "neuron/gelu-mlp": "ViTMLP",
          "neuron/vit-block": "ViTLayer", "neuron/layernorm": "LayerNorm", "neuron/matmul": "Linear",
          "neuron/rmsnorm": "RMSNorm", "neuron/softmax": "Softmax"}


def kernelized(repo: str):
    def run():
        from kernels import LayerRepository, Mode, get_kernel, kernelize, replace_kernel_forward_from_hub, \
            use_kernel_mapping

        name = LAYERS[repo]
        cls, make, x = _layer_classes()[name]
        marked = cls.__dict__.get("kernel_layer_name")  # transformers marks some classes itself
        replace_kernel_forward_from_hub(cls, name)
        try:
            model = make()
            with torch.no_grad():
                out = model(x)
                want = out if isinstance(out, torch.Tensor) else out.last_hidden_state
            mapping = {name: {"cpu": LayerRepository(repo, layer_name=name, version=1)}}
            with use_kernel_mapping(mapping, inherit_mapping=False):
                kernelize(model, mode=Mode.INFERENCE, device="cpu")
            kernel = get_kernel(repo, version=1)
            replaced = [m for m in model.modules() if isinstance(m, cls)
                        and getattr(m.forward, "__func__", None) is getattr(kernel.layers, name).forward]
            before = sum(kernel._lib.calls.values())
            with torch.no_grad():
                out = model(x)
                got = out if isinstance(out, torch.Tensor) else out.last_hidden_state
        finally:  # the next model kernelizes its own layer only
            if marked is None:
                del cls.kernel_layer_name
            else:
                cls.kernel_layer_name = marked
        calls = sum(kernel._lib.calls.values()) - before
        if not replaced or calls < len(replaced):
            raise AssertionError(f"{len(replaced)} layers replaced, {calls} kernel calls")
        return f"{close(got, want, 1e-3)}; {len(replaced)} {name} replaced, {calls} kernel calls"
    return run


# ---- the CLI -------------------------------------------------------------------------------------------------
def cli(*args: str, expect: str) -> callable:
    def run():
        exe = Path(sys.executable).with_name("kernels")
        proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0 or expect not in proc.stdout + proc.stderr:
            raise AssertionError(f"exit {proc.returncode}: {(proc.stdout + proc.stderr)[-400:]}")
        return f"`kernels {' '.join(args)}` ok"
    return run


def main() -> int:
    snapshots = json.loads(sys.argv[1])
    project = Path(sys.argv[2])
    expected = sys.argv[3]
    import kernels

    def environment():
        if kernels.__version__ != expected or not hasattr(kernels, "get_kernel_variants"):
            raise AssertionError(f"kernels is {kernels.__file__} {kernels.__version__}")
        missing = [m for m in ("nkihub.kernels", "nkihub.hub_client", "hub_client", "kernels.library", "kernels.torch_ops")
                   if _findable(m)]
        if missing:
            raise AssertionError(f"nkihub modules importable here: {missing}")
        import nki  # noqa: F401  (the NKI installation: nkihub's nki + simulator only)
        return f"Hugging Face kernels {kernels.__version__}, torch {torch.__version__}, nki from {Path(nki.__file__).parent}"

    check("environment: Hugging Face kernels, torch and nki only", environment)
    for repo in snapshots:
        check(f"kernels versions {repo}", cli("versions", repo, expect="torch-cpu compatible"))
    project.mkdir(parents=True, exist_ok=True)
    deps = "\n".join(f'"{repo}" = 1' for repo in snapshots)
    (project / "pyproject.toml").write_text(f'[project]\nname = "interop"\nversion = "0"\n\n'
                                            f"[tool.kernels.dependencies]\n{deps}\n")
    check("kernels lock (all 8)", cli("lock", str(project), expect=""))
    check("kernels download (all 8)", cli("download", str(project), expect=""))

    from kernels import get_kernel, get_local_kernel, load_kernel

    for repo, snapshot in snapshots.items():
        check(f"{repo}: get_kernel(version=1), trusted org", computed(repo, lambda: get_kernel(repo, version=1)))
        check(f"{repo}: get_kernel(version=1, trust_remote_code=True)",
              computed(repo, lambda: get_kernel(repo, version=1, trust_remote_code=True)))
        check(f"{repo}: get_local_kernel(snapshot)", computed(repo, lambda: get_local_kernel(Path(snapshot))))
        check(f"{repo}: load_kernel(lockfile)", computed(repo, lambda: locked(repo, project / "kernels.lock")))
        check(f"{repo}: kernelize {LAYERS[repo]}", kernelized(repo))
    if UPSTREAM:
        print(f"\nnote: load_kernel right after `kernels download` raised {', '.join(sorted(UPSTREAM))} "
              f"(Hugging Face kernels {expected} with huggingface_hub >= 2.2, not specific to this Hub); "
              "passed once the cached snapshot was completed")
    passed = sum(ok for _, ok, _ in RESULTS)
    print(f"\n{passed} of {len(RESULTS)} checks pass")
    return 0 if passed == len(RESULTS) else 1


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


if __name__ == "__main__":
    sys.exit(main())
