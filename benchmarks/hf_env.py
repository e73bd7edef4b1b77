"""Fresh environments for the checks that run nkihub beside Hugging Face's stack (env_check.py,
hf_kernels_interop.py): build nkihub's wheel from the checkout, make a venv, install into it with pip, run
commands there, and run the local Hub there as ``nkihub serve``.

Everything here talks to the venv through subprocesses whose working directory is outside the checkout
(a ``python -c`` run from the checkout would import the checkout's ``nkihub`` instead of the installed one)
and whose environment has no ``PYTHONPATH``: what the venv imports is what pip installed into it.
"""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TORCH = "2.13.0"          # the CPU build that lies on this project's machines (any other pulls CUDA wheels)
TRANSFORMERS = "5.25.0"   # the first transformers that requires Hugging Face kernels (>=0.19.1,<0.20)
HF_KERNELS = "0.19.1"

# Variables of the calling shell that would change what the venv loads or where it looks
_DROPPED = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "KERNELS_CACHE", "LOCAL_KERNELS", "HF_TOKEN",
            "HF_HUB_OFFLINE", "NKIHUB_DEBUG",
            # with it, kernels 0.17.2 sent a User-Agent ending in "; ", which httpx refuses
            "HF_HUB_DISABLE_TELEMETRY")


class CommandError(RuntimeError):
    """A command in the venv exited non-zero; the message ends with the tail of its output."""


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the variables that would leak into a venv's imports (PYTHONPATH,
    kernel caches, Hub tokens), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED}
    env.update(extra)
    return env


def run(cmd: list, *, env: dict | None = None, cwd: Path | None = None, timeout: float = 900,
        check: bool = True) -> subprocess.CompletedProcess:
    """Run ``cmd`` (output captured as text) in ``cwd`` with ``env`` (default: :func:`clean_env`); raise
    :class:`CommandError` with the last lines of its output when ``check`` and it exits non-zero."""
    proc = subprocess.run([str(c) for c in cmd], env=env if env is not None else clean_env(), cwd=cwd,
                          text=True, capture_output=True, timeout=timeout)
    if check and proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise CommandError(f"`{' '.join(map(str, cmd))}` exited {proc.returncode}:\n{tail}")
    return proc


def build_wheel(out_dir: Path, root: Path = ROOT) -> Path:
    """Build nkihub's wheel from the checkout ``root`` into ``out_dir`` (pip's isolated build with the
    hatchling backend of pyproject.toml, no dependencies); returns the wheel's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("nkihub-*.whl"):
        old.unlink()
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", out_dir, root], cwd=out_dir)
    (wheel,) = out_dir.glob("nkihub-*.whl")
    return wheel


class Venv:
    """A virtual environment at ``path``; commands run with ``cwd`` (outside the checkout) and a clean
    environment."""

    def __init__(self, path: Path, cwd: Path | None = None):
        self.path = Path(path)
        self.cwd = Path(cwd) if cwd is not None else self.path.parent
        self.python = self.path / "bin" / "python"

    @classmethod
    def create(cls, path: Path, cwd: Path | None = None) -> "Venv":
        """Create the venv with this interpreter's Python unless one exists at ``path``."""
        venv = cls(path, cwd)
        if not venv.python.exists():
            run([sys.executable, "-m", "venv", venv.path], cwd=venv.cwd)
        return venv

    def exe(self, name: str) -> Path:
        """The console script ``name`` of this venv (``nkihub``, ``kernels``, ``pip``)."""
        return self.path / "bin" / name

    def run(self, *args, env: dict | None = None, timeout: float = 900, check: bool = True):
        """``python ARGS`` in the venv; see :func:`run`."""
        return run([self.python, *args], env=env, cwd=self.cwd, timeout=timeout, check=check)

    def code(self, source: str, *, env: dict | None = None, timeout: float = 900, check: bool = True):
        """``python -c SOURCE`` in the venv."""
        return self.run("-c", source, env=env, timeout=timeout, check=check)

    def pip(self, *args, check: bool = True, timeout: float = 1800):
        """``python -m pip ARGS`` in the venv."""
        return self.run("-m", "pip", *args, check=check, timeout=timeout)

    def version(self, dist: str) -> str | None:
        """The installed version of distribution ``dist``, or None."""
        proc = self.code(f"from importlib.metadata import version; print(version({dist!r}))", check=False)
        return proc.stdout.strip() if proc.returncode == 0 else None


def interop_venv(path: Path, wheel: Path, kernels_version: str = HF_KERNELS) -> Venv:
    """A venv at ``path`` with torch, transformers, Hugging Face kernels ``kernels_version`` and the nkihub
    ``wheel``, installed as ordinary packages in one pip resolution. A venv that already has those versions
    is reused, with only the wheel reinstalled (the checkout may have changed since)."""
    venv = Venv.create(path)
    want = {"torch": TORCH, "transformers": TRANSFORMERS, "kernels": kernels_version}
    if all((venv.version(d) or "").split("+")[0] == v for d, v in want.items()) and venv.version("nkihub"):
        venv.pip("install", "-q", "--no-deps", "--force-reinstall", wheel)
    else:
        venv.pip("install", "-q", f"torch=={TORCH}", f"transformers=={TRANSFORMERS}",
                 f"kernels=={kernels_version}", wheel)
    return venv


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def hub_process(venv: Venv, root: Path, port: int | None = None, trusted: tuple[str, ...] = ("neuron",),
                timeout: float = 60):
    """Run ``nkihub serve --root ROOT --port PORT`` from ``venv`` on 127.0.0.1 while the block runs; yields
    the Hub's URL once it answers. The server is terminated (and waited for) on exit."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [venv.exe("nkihub"), "serve", "--root", root, "--host", "127.0.0.1", "--port", str(port)]
    for org in trusted:
        cmd += ["--trusted-publisher", org]
    log = open(root.parent / f"hub-{port}.log", "w")
    proc = subprocess.Popen([str(c) for c in cmd], cwd=venv.cwd, env=clean_env(), stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/organizations/neuron/overview", timeout=2).close()
                break
            except urllib.error.HTTPError:  # it answered
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise CommandError(f"`nkihub serve` did not answer on {url}: "
                                       f"{Path(log.name).read_text()[-1500:]}") from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
