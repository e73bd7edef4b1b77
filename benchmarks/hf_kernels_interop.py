"""Interop check: a repo published by nkihub loads with Hugging Face's own ``kernels`` (0.17).

Both packages are called ``kernels``, so Hugging Face's runs in a separate virtual environment:

1. start the local Hub in-process and publish a tiny torch kernel with ``kernels.publish``;
2. download the ``v1`` snapshot with huggingface_hub;
3. create a venv (or reuse ``--venv``), ``pip install "kernels==0.17.*"`` there, and make this
   venv's torch importable through a ``.pth`` line (torch is not installed twice);
4. in that venv: ``get_local_kernel(snapshot)`` must import the package and run it, and the
   variant's ``metadata.json`` digest must validate with Hugging Face's own ``Digest`` code;
   then ``get_kernel(repo, version=1, trust_remote_code=True)`` straight from the local Hub.

Prints one line per check and exits non-zero if a required check fails. Needs network access to
the package index for step 3 (unless ``--venv`` points at a ready environment).

    .venv/bin/python benchmarks/hf_kernels_interop.py [--venv /tmp/hfk-venv] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

KERNEL_INIT = '''"""Interop toy kernel."""
import torch

__version__ = "1.0.0"


def scale(x: torch.Tensor, factor: float = 2.0) -> torch.Tensor:
    return x * factor
'''
KERNEL_JSON = {"name": "interop-toy", "package": "interop_toy", "version": "1.0.0",
               "description": "Interop check kernel", "functions": ["scale"], "dtypes": ["float32"], "shapes": "any"}

CHECK = r'''
import json, sys
from pathlib import Path
import torch
import kernels
from kernels import get_local_kernel
from kernels._rust import Digest, Metadata

snap, endpoint, repo = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
out = {"kernels_version": kernels.__version__}
m = get_local_kernel(snap)
out["local_result"] = m.scale(torch.ones(2)).tolist()
variant = snap / "build" / "torch-cpu"
md = Metadata.read_from_file(variant / "metadata.json")
md.digest.validate(Digest.hash_variant(md.digest.algorithm, variant))
out["digest_ok"] = True
out["metadata"] = {"name": str(md.name), "version": md.version, "backend": str(md.backend.backend_type)}
try:
    from kernels import get_kernel
    r = get_kernel(repo, version=1, trust_remote_code=True)
    out["hub_result"] = r.scale(torch.ones(2)).tolist()
except Exception as e:  # reported, not required
    out["hub_error"] = f"{type(e).__name__}: {e}"[:300]
print("RESULT " + json.dumps(out))
'''


def make_venv(path: Path) -> Path:
    py = path / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "kernels==0.17.*"], check=True)
    site = Path(subprocess.check_output([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())
    # torch from this venv, appended after the venv's own site-packages: its kernels/huggingface_hub win
    (site / "nkihub_torch.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return py


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", type=Path, default=None, help="reuse (or create) this venv for Hugging Face kernels")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nkihub-interop-"))
    try:
        from huggingface_hub import snapshot_download

        from hub_client.server import serve_in_background
        from kernels.publish import publish

        pkg = work / "src" / "interop_toy"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(KERNEL_INIT)
        (pkg / "kernel.json").write_text(json.dumps(KERNEL_JSON))
        repo = "neuron/interop-toy"
        with serve_in_background(work / "hub") as hub:
            result = publish(pkg, repo, endpoint=hub.url, token=False)
            print(f"published: {result}")
            snap = Path(snapshot_download(repo, repo_type="kernel", revision="v1", endpoint=hub.url,
                                          cache_dir=work / "hf-cache"))
            py = make_venv(args.venv or work / "venv")
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KERNELS_CACHE", "LOCAL_KERNELS")}
            env.update(HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(work / "hf-kernels-cache"), HF_HUB_DISABLE_PROGRESS_BARS="1")
            proc = subprocess.run([str(py), "-c", CHECK, str(snap), hub.url, repo], capture_output=True, text=True,
                                  env=env, cwd=work, timeout=600)
        line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
        if proc.returncode != 0 or line is None:
            print("FAIL: Hugging Face kernels could not load the snapshot")
            print(proc.stderr[-3000:])
            return 1
        out = json.loads(line[len("RESULT "):])
        print(f"Hugging Face kernels {out['kernels_version']}")
        ok = out["local_result"] == [2.0, 2.0] and out["digest_ok"]
        print(f"get_local_kernel(snapshot): {out['local_result']}  {'ok' if ok else 'WRONG'}")
        print(f"metadata.json digest validated by kernels._rust.Digest: ok  {out['metadata']}")
        if "hub_result" in out:
            print(f"get_kernel({repo!r}, version=1) from the local Hub: {out['hub_result']}  ok")
        else:
            print(f"get_kernel from the local Hub (informational): {out['hub_error']}")
        return 0 if ok else 1
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
