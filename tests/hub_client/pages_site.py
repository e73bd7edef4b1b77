"""A Hub with something to look at, for the page tests: kernels signed by a trusted key, by an untrusted
one and not at all, one whose files were altered after signing, two majors of one kernel, a model with
a binary file and a plot, a dataset."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import CommitOperationAdd, HfApi

from nkihub.hub_client import signing
from nkihub.hub_client.server import serve_in_background
from nkihub.kernels.publish import publish

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "tests" / "kernels" / "fixtures" / "toy_kernel"
VIT = ROOT / "nkihub" / "kernels" / "library" / "vit_attn"
# a row as the demo writes it into the card (kernels.library.measure.Estimate.card_row)
VIT_BENCH = {"shape": "vit-b16", "dtype": "bfloat16", "trn1 estimated latency (us)": "190.9 (151.3-240.8)",
             "trn2 estimated latency (us)": "150.5 (119.3-189.9)", "bottleneck engine": "Tensor",
             "vs unfused (trn2)": "1.85x"}
EVIL = b"def scale(x, factor=2.0):\n    return x * 1000\n"


@dataclass
class Site:
    server: object
    url: str
    trusted_key_id: str
    other_key_id: str
    tampered_commit: str


def _stage(src: Path, into: Path, version: str | None = None, benchmarks=None) -> Path:
    dst = into / src.name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    spec = json.loads((dst / "kernel.json").read_text())
    if version:
        spec["version"] = version
    if benchmarks is not None:
        spec["benchmarks"] = benchmarks
    (dst / "kernel.json").write_text(json.dumps(spec, indent=2))
    return dst


def _png(width=64, height=32) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig = plt.figure(figsize=(width / 16, height / 16), dpi=16)
    plt.bar([0, 1], [1, 2])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def tamper(api: HfApi, repo: str, cache_dir: Path, variant: str = "torch-cpu") -> str:
    """What a compromised Hub does: commit altered code with a metadata.json whose digest matches it,
    leaving the publisher's signature as it was."""
    meta_path = api.hf_hub_download(repo, f"build/{variant}/metadata.json", repo_type="kernel", cache_dir=cache_dir)
    meta = json.loads(Path(meta_path).read_text())
    meta["digest"]["files"]["toy_kernel/ops.py"] = base64.b64encode(hashlib.sha256(EVIL).digest()).decode()
    ops = [CommitOperationAdd(path_in_repo=f"build/{variant}/toy_kernel/ops.py", path_or_fileobj=EVIL),
           CommitOperationAdd(path_in_repo=f"build/{variant}/metadata.json", path_or_fileobj=json.dumps(meta).encode())]
    return api.create_commit(repo, ops, commit_message="totally legit", repo_type="kernel", revision="v1").oid


def build(tmp: Path, monkeypatch) -> Site:
    """Start a Hub in ``tmp`` and publish everything above to it (a few seconds)."""
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    trusted = signing.generate_key(tmp / "publisher.key")
    other = signing.generate_key(tmp / "other.key")
    server = serve_in_background(tmp / "hub", trusted_keys={"neuron": (trusted,)})
    url = server.url
    stage = tmp / "stage"
    publish(_stage(VIT, stage / "vit", benchmarks=[VIT_BENCH]), "neuron/vit-attn", endpoint=url,
            sign=tmp / "publisher.key")
    for version in ("1.0.0", "2.0.0"):
        publish(_stage(TOY, stage / f"toy{version}", version), "neuron/toy-kernel", endpoint=url,
                sign=tmp / "publisher.key")
    publish(_stage(TOY, stage / "tampered"), "neuron/tampered", endpoint=url, sign=tmp / "publisher.key")
    publish(_stage(TOY, stage / "acme"), "acme/toy-kernel", endpoint=url, sign=tmp / "other.key")
    publish(_stage(TOY, stage / "plain"), "acme/plain-toy", endpoint=url)
    api = HfApi(endpoint=url, token=False)
    tampered = tamper(api, "neuron/tampered", tmp / "attacker-cache")
    api.create_repo("acme/tiny-model")
    api.create_commit("acme/tiny-model", [
        CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=(
            b"---\nlicense: mit\ntags:\n- vision\n---\n# Tiny model\n\nA small test model "
            b"<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\">.\n\n"
            b"![latency](plots/latency.png)\n")),
        CommitOperationAdd(path_in_repo="weights.bin", path_or_fileobj=bytes(range(256)) * 16),
        CommitOperationAdd(path_in_repo="plots/latency.png", path_or_fileobj=_png()),
        CommitOperationAdd(path_in_repo="config.json", path_or_fileobj=b'{"hidden_size": 64}\n'),
    ], commit_message="Add the tiny model")
    api.create_repo("acme/tiny-data", repo_type="dataset")
    api.upload_file(path_or_fileobj=b"# Tiny data\n\nRows of numbers.\n", path_in_repo="README.md",
                    repo_id="acme/tiny-data", repo_type="dataset")
    api.upload_file(path_or_fileobj=b"a,b\n1,2\n", path_in_repo="data.csv", repo_id="acme/tiny-data",
                    repo_type="dataset")
    return Site(server, url, signing.key_id(trusted), signing.key_id(other), tampered)
