#!/usr/bin/env bash
# Creates .venv (Python 3.11 or newer 3.x) and installs nkihub with its test extras.
# torch is pinned to 2.13.0 here only: that is the CPU build that lies on disk on the
# project's machines; the package itself accepts a range.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.nkihub-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q "torch==2.13.0"
  .venv/bin/python -m pip install -q -e ".[test]"
  touch "$stamp"
fi
