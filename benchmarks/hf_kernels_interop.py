"""Interop check: the 8 library kernels, published by nkihub, load and compute with Hugging Face's own
``kernels`` (0.19.1 by default, the release transformers 5.25 requires; ``--kernels`` picks another) in an
environment that has no nkihub ``kernels`` package.

1. start the local Hub in-process and publish every library kernel (``nkihub.kernels.publish_kernel``);
   download each ``v1`` snapshot (for ``get_local_kernel``);
2. create a venv (or reuse ``--venv``) with that ``kernels`` from the package index; torch 2.13.0
   (and transformers, numpy, ml_dtypes) come from this venv through a ``.pth`` line appended after the
   venv's own packages, and of nkihub only ``nkihub.nki`` and ``nkihub.simulator`` are put on its path (a
   ``nkihub`` folder of symlinks: its ``__init__``, ``aliases``, ``nki``, ``simulator`` and ``_toplevel``,
   whose ``nki`` stand-in is appended to the path as nkihub-aliases.pth does), standing in for an NKI
   installation: ``import kernels`` there is Hugging Face's, and ``nkihub.kernels`` and
   ``nkihub.hub_client`` do not exist;
3. in that venv, with ``HF_ENDPOINT`` pointing at the local Hub: their CLI ``kernels versions`` for each
   kernel, ``kernels lock`` and ``kernels download`` for a project depending on all 8; then for each
   kernel ``get_kernel(repo, version=1)`` (trusted through the Hub's organization overview),
   ``get_kernel(..., trust_remote_code=True)``, ``get_local_kernel(snapshot)``, ``load_kernel(repo,
   lockfile=...)``, each computing against torch, and their ``kernelize`` on a small transformers model
   (a ViT; a Llama for RMSNorm) with the kernel's layer, compared with the model's own output.

Prints one line per check and "N of M checks pass"; exits non-zero unless all pass. Needs the package
index for step 2 unless ``--venv`` points at a ready environment.

    .venv/bin/python benchmarks/hf_kernels_interop.py [--kernels 0.19.1] [--venv /tmp/hfk-venv] [--keep]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HF_KERNELS = "0.19.1"    # the kernels release transformers 5.25 requires (>=0.19.1,<0.20)
CHECKS = Path(__file__).with_name("hf_kernels_checks.py")  # runs inside the Hugging Face venv
# what of nkihub the Hugging Face venv gets: the language and the simulator, and the top-level nki stand-in
NKI_ONLY = ("__init__.py", "aliases.py", "nki", "simulator", "_toplevel")


def nki_installation(folder: Path) -> list[Path]:
    """(Re)build ``folder`` as the NKI installation the Hugging Face venv gets: a ``nkihub`` package of
    symlinks to this checkout's ``NKI_ONLY`` entries (no ``kernels``, ``hub_client`` or ``cli``). Returns
    the path entries it needs, in order: the folder first, then ``nkihub/_toplevel`` (the top-level
    ``nki`` stand-in), which goes last, after site-packages, as nkihub-aliases.pth puts it."""
    shutil.rmtree(folder, ignore_errors=True)   # rebuilt each time: a reused venv may hold an older layout
    package = folder / "nkihub"
    package.mkdir(parents=True)
    for name in NKI_ONLY:
        (package / name).symlink_to(ROOT / "nkihub" / name)
    return [folder, package / "_toplevel"]


def make_venv(path: Path, version: str) -> Path:
    """A venv with Hugging Face kernels ``version`` (installed unless the venv has it); this venv's packages
    (torch ...) appended, nkihub's nki + simulator (and the top-level ``nki`` stand-in) on the path."""
    py = path / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    have = subprocess.run([str(py), "-c", "from importlib.metadata import version; print(version('kernels'))"],
                          text=True, capture_output=True).stdout.strip()
    if have != version:
        subprocess.run([str(py), "-m", "pip", "install", "-q", f"kernels=={version}"], check=True)
    site = Path(subprocess.check_output([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())
    nki_only, stand_in = nki_installation(path / "nki-installation")
    # .pth lines are appended to sys.path in order, after the venv's own site-packages: Hugging Face's
    # kernels and huggingface_hub win; a path added this way has its own .pth files ignored, so nkihub's
    # editable install (a .pth naming the repo) and nkihub-aliases.pth do not come along: the last line
    # does what nkihub-aliases.pth does
    (site / "nkihub_nki_and_torch.pth").write_text(f"{nki_only}\n{sysconfig.get_paths()['purelib']}\n{stand_in}\n")
    return py


def publish_library(hub_url: str, work: Path) -> dict[str, str]:
    """Publish every library kernel; returns repo id -> local snapshot directory of v1."""
    from huggingface_hub import snapshot_download

    from nkihub import kernels
    from nkihub.kernels.library import LIBRARY

    snapshots = {}
    for repo, module in LIBRARY.items():
        package_dir = Path(importlib.import_module(module).__file__).parent
        print(f"published: {kernels.publish_kernel(package_dir, repo, endpoint=hub_url)}", flush=True)
        snapshots[repo] = snapshot_download(repo, repo_type="kernel", revision="v1", endpoint=hub_url,
                                            local_dir=work / "snapshots" / repo.split("/")[1])
    return snapshots


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", type=Path, default=None, help="reuse (or create) this venv for Hugging Face kernels")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--kernels", default=HF_KERNELS, help=f"Hugging Face kernels version (default {HF_KERNELS})")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nkihub-interop-"))
    try:
        from nkihub.hub_client.server import serve_in_background

        with serve_in_background(work / "hub", trusted_publishers=("neuron",)) as hub:
            snapshots = publish_library(hub.url, work)
            py = make_venv(args.venv or work / "venv", args.kernels)
            env = {k: v for k, v in os.environ.items()
                   if k not in ("PYTHONPATH", "KERNELS_CACHE", "LOCAL_KERNELS", "HF_TOKEN", "HF_HUB_OFFLINE")}
            # not HF_HUB_DISABLE_TELEMETRY: with it, kernels 0.17.2 (not 0.19.1) sends a User-Agent ending in "; ",
            # which httpx refuses as an illegal header value
            env.pop("HF_HUB_DISABLE_TELEMETRY", None)
            env.update(HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(work / "hf-cache"), HF_HUB_DISABLE_PROGRESS_BARS="1")
            proc = subprocess.run([str(py), str(CHECKS), json.dumps(snapshots), str(work / "project"), args.kernels],
                                  env=env, cwd=work, text=True, capture_output=True, timeout=3000)
        print(proc.stdout, end="")
        if proc.returncode not in (0, 1):
            print(proc.stderr[-4000:])
            return 2
        return proc.returncode
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
