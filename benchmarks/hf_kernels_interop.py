"""Interop check: the 8 library kernels, published by nkihub, load and compute with Hugging Face's own
``kernels`` (0.19.1, the release transformers 5.25 requires) in a separate venv where nkihub is installed
as an ordinary package from its wheel.

1. build nkihub's wheel from this checkout; create a venv (or reuse ``--venv``) and pip-install there, in
   one resolution, torch 2.13.0, transformers 5.25.0, Hugging Face ``kernels`` and that wheel (nothing on
   ``PYTHONPATH``, no path tricks: ``import kernels`` there is theirs, ``import nki`` is nkihub's stand-in,
   the NKI installation the repos' code imports);
2. run the local Hub from that venv (``nkihub serve`` on 127.0.0.1, ``neuron`` a trusted publisher) and
   publish every library kernel to it (``nkihub.kernels.publish_kernel`` from this checkout); download each
   ``v1`` snapshot (for ``get_local_kernel``);
3. in the venv, with ``HF_ENDPOINT`` pointing at the Hub (hf_kernels_checks.py): the environment; their CLI
   ``kernels versions`` for each kernel, ``kernels lock`` and ``kernels download`` for a project depending
   on all 8; then for each kernel their ``get_kernel(repo, version=1)`` (trusted through the Hub's
   organization overview), ``get_kernel(..., trust_remote_code=True)``, ``get_local_kernel(snapshot)``,
   ``load_kernel(repo, lockfile=...)``, each computing against torch from the repo's build (not from
   nkihub's own library package), and their ``kernelize`` on a small transformers model (a ViT; a Llama for
   RMSNorm) with the kernel's layer, compared with the model's own output and the kernel's call count.

Prints one line per check and "N of M checks pass" (51); exits non-zero unless all pass. Needs the package
index for step 1 (about a minute) unless ``--venv`` names a ready environment (then only the wheel is
reinstalled). Run from the dev venv:

    .venv/bin/python benchmarks/hf_kernels_interop.py [--venv /tmp/hfk-venv] [--keep]
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # hf_env beside this file, run as a script

import hf_env  # noqa: E402

CHECKS = Path(__file__).with_name("hf_kernels_checks.py")  # runs inside the venv


def publish_library(hub_url: str, work: Path) -> dict[str, str]:
    """Publish every library kernel of this checkout; returns repo id -> local snapshot directory of v1."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import disable_progress_bars

    from nkihub import kernels
    from nkihub.kernels.library import LIBRARY

    disable_progress_bars()
    snapshots = {}
    for repo, module in LIBRARY.items():
        package_dir = Path(importlib.import_module(module).__file__).parent
        print(f"published: {kernels.publish_kernel(package_dir, repo, endpoint=hub_url)}", flush=True)
        snapshots[repo] = snapshot_download(repo, repo_type="kernel", revision="v1", endpoint=hub_url,
                                            local_dir=work / "snapshots" / repo.split("/")[1])
    return snapshots


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", type=Path, default=None, help="reuse (or create) this venv")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--kernels", default=hf_env.HF_KERNELS,
                    help=f"Hugging Face kernels version (default {hf_env.HF_KERNELS}; nkihub requires >=0.19.1)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nkihub-interop-"))
    try:
        wheel = hf_env.build_wheel(work / "dist")
        print(f"built {wheel.name}", flush=True)
        venv = hf_env.interop_venv(args.venv or work / "venv", wheel, args.kernels)
        (work / "hub").mkdir()
        with hf_env.hub_process(venv, work / "hub") as url:
            snapshots = publish_library(url, work)
            env = hf_env.clean_env(HF_ENDPOINT=url, HF_HUB_CACHE=str(work / "hf-cache"),
                                   HF_HUB_DISABLE_PROGRESS_BARS="1")
            proc = venv.run(CHECKS, json.dumps(snapshots), work / "project", args.kernels, env=env, timeout=3000,
                            check=False)
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
