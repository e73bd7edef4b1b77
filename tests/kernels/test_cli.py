"""The ``kernels`` command: thin subcommands, one-line errors, non-zero exits."""

from __future__ import annotations

import pytest

from nkihub.cli import main

REPO = "neuron/toy-kernel"


def test_publish_versions_info_verify(kernels_env, make_kernel, capsys):
    assert main(["publish", str(make_kernel("1.0.0")), "--repo-id", REPO]) == 0
    assert "published" in capsys.readouterr().out
    assert main(["publish", str(make_kernel("1.0.0")), "--repo-id", REPO]) == 0
    assert "unchanged (no new commit)" in capsys.readouterr().out
    assert main(["publish", str(make_kernel("2.0.0", 3.0))]) == 0  # repo id defaults to neuron/<name>
    assert main(["versions", REPO]) == 0
    out = capsys.readouterr().out
    assert "v1:" in out and "v1.0.0" in out and "v2:" in out and "(latest)" in out
    assert main(["info", REPO, "--version", "1"]) == 0
    out = capsys.readouterr().out
    assert "torch-cpu" in out and "chosen" in out and "torch-neuron" in out and "rejected" in out
    assert main(["verify", REPO]) == 0
    assert "verified" in capsys.readouterr().out


def test_verify_fails_on_a_bad_digest(kernels_env, make_kernel, capsys):
    from huggingface_hub import HfApi

    main(["publish", str(make_kernel()), "--repo-id", REPO])
    HfApi(endpoint=kernels_env.url, token=False).upload_file(
        path_or_fileobj=b"x = 1\n", path_in_repo="build/torch-neuron/toy_kernel/ops.py", repo_id=REPO,
        repo_type="kernel", commit_message="break", revision="v1")
    assert main(["verify", REPO, "--version", "1"]) == 1
    out = capsys.readouterr().out
    assert "torch-neuron: 1 mismatch" in out and "FAILED" in out


def test_errors_are_one_line_with_a_debug_hint(kernels_env, capsys, monkeypatch):
    assert main(["versions", "neuron/nope"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("nkihub versions: error:") and "NKIHUB_DEBUG=1" in err[1] and len(err) == 2
    assert main(["publish", "/nonexistent/dir"]) == 1
    assert "has no kernel.json" in capsys.readouterr().err
    monkeypatch.setenv("NKIHUB_DEBUG", "1")
    with pytest.raises(Exception):
        main(["versions", "neuron/nope"])


def test_lock_and_download(kernels_env, make_kernel, tmp_path, capsys):
    main(["publish", str(make_kernel()), "--repo-id", REPO])
    (tmp_path / "pyproject.toml").write_text(f'[tool.kernels.dependencies]\n"{REPO}" = 1\n')
    assert main(["lock", str(tmp_path)]) == 0
    assert (tmp_path / "kernels.lock").is_file()
    assert main(["download", str(tmp_path), "--all-variants"]) == 0
    assert capsys.readouterr().out.strip().endswith("build")


def test_benchmark_without_benchmark_py_says_so(kernels_env, make_kernel, capsys):
    pkg = make_kernel()
    assert main(["benchmark", str(pkg)]) == 0
    assert "ships no benchmark.py" in capsys.readouterr().out
    (pkg / "benchmark.py").write_text("def main():\n    print('bench ran')\n    return 0\n")
    assert main(["benchmark", str(pkg)]) == 0
    assert "bench ran" in capsys.readouterr().out


def test_serve_runs_a_hub_that_huggingface_hub_can_use(tmp_path):
    import socket
    import subprocess
    import sys
    import time

    from huggingface_hub import HfApi

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "nkihub.cli", "serve", "--root", str(tmp_path / "root"),
                             "--port", str(port), "--token", "t0k"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        api = HfApi(endpoint=f"http://127.0.0.1:{port}", token="t0k")
        # `nkihub` imports torch before it listens: seconds when idle, more on a loaded 2-core machine
        deadline = time.monotonic() + 90  # a bound for a loaded machine, not a timing check
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                api.create_repo("neuron/served", repo_type="kernel")
                break
            except Exception:
                time.sleep(0.1)
        assert api.repo_exists("neuron/served", repo_type="kernel")
        assert (tmp_path / "root" / "repos" / "kernel" / "neuron" / "served" / "refs.json").is_file()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_versions_and_info_without_a_version_say_nothing_about_a_default(kernels_env, make_kernel, capsys, caplog):
    """``info`` without --version describes the newest version and says so; neither command logs the
    loader's "no version given, using vN" warning (meant for kernels.get in a program, not for a listing)."""
    import logging
    caplog.set_level(logging.DEBUG)
    assert main(["publish", str(make_kernel("1.0.0")), "--repo-id", REPO]) == 0
    assert main(["publish", str(make_kernel("2.0.0", 3.0)), "--repo-id", REPO]) == 0
    capsys.readouterr()
    assert main(["versions", REPO]) == 0
    assert main(["info", REPO]) == 0
    out, err = capsys.readouterr()
    assert f"{REPO} @ v2" in out and "newest" in out
    assert "no version given" not in out + err + caplog.text
