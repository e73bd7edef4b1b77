"""Environment check: nkihub's wheel, installed into a fresh venv beside torch, transformers and Hugging Face's
``kernels``, lives there as an ordinary package that claims none of their names.

Builds the wheel from this checkout (pip, hatchling backend), creates a fresh venv in a temporary
directory and installs, in one pip resolution, torch 2.13.0, the wheel, transformers 5.25.0 and kernels
0.19.1. Then, one line per check (PASS/FAIL, wall time, detail):

 1. ``pip check`` is clean;
 2. ``import kernels`` is Hugging Face's (``CUDAProperties``; site-packages/kernels) and
    ``nkihub.kernels.get`` exists;
 3. the wheel holds no top-level ``nki/``, ``neuronxcc/``, ``kernels/``, ``simulator/``, ``hub_client/``
    and does hold ``nkihub-aliases.pth`` at its root;
 4. ``nki is nkihub.nki``, ``nki.language is nkihub.nki.language``, ``import neuronxcc.nki.language`` works;
 5. transformers kernelizes a tiny random Llama's ``RMSNorm`` layers through Hugging Face kernels with
    ``neuron/rmsnorm`` published to the local Hub, and the output matches the model's own;
 6. ``nkihub serve`` (a subprocess on 127.0.0.1) and ``nkihub publish .../library/vit_attn --repo-id
    neuron/vit-attn``; their ``get_kernel`` and nkihub's ``kernels.get`` both load it and ``vit_attention``
    matches ``scaled_dot_product_attention``;
 7. ``pip uninstall -y nkihub`` leaves Hugging Face kernels whole (imports; every RECORD file exists);
 8. with nkihub reinstalled and a stand-in distribution ``nki`` 0.0.99 installed, ``import nki`` is the
    stand-in and ``nkihub.nki`` still imports; uninstalling nkihub leaves the stand-in whole.

Ends with "N of M environment checks pass" and exits non-zero if any fails. Needs the package index (the
installs take about a minute) and a few minutes on 2 cores. Not part of the test suite; run from the
dev venv:

    .venv/bin/python benchmarks/env_check.py [--keep]
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import shutil
import sys
import tempfile
import time
import traceback
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # hf_env beside this file, run as a script

import hf_env  # noqa: E402

PROBES = Path(__file__).with_name("env_check_probes.py")  # runs inside the fresh venv
LIBRARY = hf_env.ROOT / "nkihub" / "kernels" / "library"
FOREIGN_TOP_LEVEL = ("nki", "neuronxcc", "kernels", "simulator", "hub_client")
STANDIN_VERSION = "0.0.99"


@dataclass
class Env:
    """The fresh environment the checks share: the work directory, the wheel, the venv, and the local Hub
    (started by the first check that needs it, stopped at the end)."""
    work: Path
    wheel: Path
    venv: hf_env.Venv
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    hub: str | None = None

    def hub_url(self) -> str:
        """The URL of ``nkihub serve`` run from the venv (started on first call)."""
        if self.hub is None:
            root = self.work / "hub"
            self.hub = self.stack.enter_context(hf_env.hub_process(self.venv, root))
        return self.hub

    def hub_env(self) -> dict[str, str]:
        """The environment of a process that talks to the local Hub (its own Hugging Face cache)."""
        return hf_env.clean_env(HF_ENDPOINT=self.hub_url(), HF_HUB_CACHE=str(self.work / "hf-cache"),
                                HF_HUB_DISABLE_PROGRESS_BARS="1")

    def probe(self, name: str, *args: str, hub: bool = False) -> str:
        """Run env_check_probes.py's ``name`` in the venv; its one line of detail."""
        env = self.hub_env() if hub else None
        return self.venv.run(PROBES, name, *args, env=env, timeout=600).stdout.strip().splitlines()[-1]

    def publish(self, package: str, repo_id: str) -> str:
        """``nkihub publish`` (the venv's console script) of the library package ``package`` of this checkout."""
        proc = hf_env.run([self.venv.exe("nkihub"), "publish", LIBRARY / package, "--repo-id", repo_id],
                          env=self.hub_env(), cwd=self.venv.cwd, timeout=600)
        return proc.stdout.strip().splitlines()[-1]


# ---- the checks: each returns its detail or raises ------------------------------------------------------
def check_pip(env: Env) -> str:
    """1. ``pip check`` finds no broken requirement."""
    return env.venv.pip("check").stdout.strip()


def check_their_kernels(env: Env) -> str:
    """2. ``import kernels`` is Hugging Face's; nkihub's kernels are ``nkihub.kernels``."""
    return env.probe("their_kernels")


def check_wheel_contents(env: Env) -> str:
    """3. The wheel's files (zip listing and RECORD) have no top-level name of another project's and
    ``nkihub-aliases.pth`` at the root, with the stand-ins it points at inside ``nkihub/_toplevel``."""
    with zipfile.ZipFile(env.wheel) as z:
        names = z.namelist()
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        recorded = [line.split(",")[0] for line in z.read(record).decode().splitlines() if line]
    top = {n.split("/")[0] for n in names + recorded}
    foreign = sorted(top & set(FOREIGN_TOP_LEVEL))
    if foreign:
        raise AssertionError(f"top-level {foreign} in the wheel")
    needed = ["nkihub-aliases.pth", "nkihub/_toplevel/nki/__init__.py", "nkihub/_toplevel/neuronxcc/__init__.py"]
    missing = [n for n in needed if n not in names or n not in recorded]
    if missing:
        raise AssertionError(f"not in the wheel (or its RECORD): {missing}")
    return f"{len(names)} files; top level {sorted(top)}"


def check_aliases(env: Env) -> str:
    """4. ``nki`` and ``neuronxcc.nki`` are nkihub's stand-ins (no AWS package here)."""
    return env.probe("aliases")


def check_kernelize_llama(env: Env) -> str:
    """5. Publish neuron/rmsnorm; transformers kernelizes a tiny Llama with it through Hugging Face kernels."""
    published = env.publish("rmsnorm", "neuron/rmsnorm")
    return f"{published}; {env.probe('kernelize_llama', hub=True)}"


def check_hub_vit_attn(env: Env) -> str:
    """6. ``nkihub publish`` neuron/vit-attn to ``nkihub serve``; both loaders load it and it computes."""
    published = env.publish("vit_attn", "neuron/vit-attn")
    return f"Hub {env.hub_url()}; {published}; {env.probe('vit_attn', hub=True)}"


def check_uninstall_keeps_theirs(env: Env) -> str:
    """7. ``pip uninstall -y nkihub`` leaves Hugging Face kernels whole."""
    env.venv.pip("uninstall", "-y", "nkihub")
    return env.probe("their_kernels_whole")


def check_standin_nki(env: Env) -> str:
    """8. Another distribution's ``nki`` wins over nkihub's stand-in, and uninstalling nkihub leaves it whole."""
    env.venv.pip("install", "-q", "--no-deps", env.wheel)
    env.venv.pip("install", "-q", "--no-deps", standin_wheel(env.work / "standin"))
    with_nkihub = env.probe("standin", "yes")
    env.venv.pip("uninstall", "-y", "nkihub")
    return f"with nkihub: {with_nkihub}; after uninstalling nkihub: {env.probe('standin', 'no')}"


CHECKS = (check_pip, check_their_kernels, check_wheel_contents, check_aliases, check_kernelize_llama,
          check_hub_vit_attn, check_uninstall_keeps_theirs, check_standin_nki)


def standin_wheel(out_dir: Path) -> Path:
    """A wheel of a distribution named ``nki`` (version STANDIN_VERSION) holding only ``nki/__init__.py`` with
    ``STANDIN = True``: another project's ``nki``, written directly as a zip (no build backend needed)."""
    dist_info = f"nki-{STANDIN_VERSION}.dist-info"
    files = {
        "nki/__init__.py": "STANDIN = True\n",
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: nki\nVersion: {STANDIN_VERSION}\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: env_check\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    files[f"{dist_info}/RECORD"] = "\n".join(record + [f"{dist_info}/RECORD,,"]) + "\n"
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"nki-{STANDIN_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return wheel


def setup(work: Path) -> Env:
    """Build the wheel and install the fresh venv, printing each step's wall time."""
    t = time.monotonic()
    wheel = hf_env.build_wheel(work / "dist")
    print(f"setup: built {wheel.name} ({time.monotonic() - t:.1f} s)", flush=True)
    t = time.monotonic()
    venv = hf_env.interop_venv(work / "venv", wheel)
    print(f"setup: fresh venv {venv.path} with torch {hf_env.TORCH}, {wheel.name}, transformers "
          f"{hf_env.TRANSFORMERS}, kernels {hf_env.HF_KERNELS} ({time.monotonic() - t:.1f} s)", flush=True)
    return Env(work, wheel, venv)


def run_check(number: int, check, env: Env) -> bool:
    """Run one check; print PASS/FAIL, its title, wall time and detail (the reason when it fails)."""
    title = " ".join(check.__doc__.split()).split(". ", 1)[1].replace("``", "`")  # the docstring after "N. "
    t = time.monotonic()
    try:
        detail, ok = check(env), True
    except Exception as exc:  # every failure is a result, not a crash
        detail, ok = f"{type(exc).__name__}: {exc}".strip(), False
        if not isinstance(exc, (AssertionError, hf_env.CommandError)):
            detail += "\n" + traceback.format_exc(limit=-3)
    print(f"{'PASS' if ok else 'FAIL'}  {number}. {title} ({time.monotonic() - t:.1f} s)\n      {detail}",
          flush=True)
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (venv, wheel, Hub)")
    args = ap.parse_args()
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="nkihub-envcheck-"))
    passed = 0
    try:
        try:
            env = setup(work)
        except Exception as exc:
            print(f"FAIL  setup: {type(exc).__name__}: {exc}")
        else:
            with env.stack:
                passed = sum(run_check(i, check, env) for i, check in enumerate(CHECKS, 1))
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n{passed} of {len(CHECKS)} environment checks pass ({time.monotonic() - start:.0f} s in all)")
    return 0 if passed == len(CHECKS) else 1


if __name__ == "__main__":
    sys.exit(main())
