#!/usr/bin/env bash
# Creates .venv (Python 3.11 or newer 3.x) and installs nkihub with its test extras.
# torch is pinned to 2.13.0 here only: that is the CPU build that lies on disk on the
# project's machines; the package itself accepts a range.
# The browser tests of the Hub's pages (tests/hub_client/test_pages_browser.py) and the demo's screenshots
# need a headless Chromium: where chromium or chromedriver is missing and this runs as root with apt-get,
# Debian's chromium and chromium-driver are installed (Selenium, from the test extras, drives them).
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
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup.sh: no headless browser here; installing Debian's chromium and chromium-driver for the" \
         "Hub's browser tests (apt-get update, then apt-get install -y chromium chromium-driver)" >&2
    log=.venv/apt-chromium.log
    if (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver) >"$log" 2>&1; then
      echo "setup.sh: installed $(chromium --version 2>/dev/null | head -1) and $(chromedriver --version 2>/dev/null | cut -d' ' -f1-2)" >&2
    else
      tail -20 "$log" >&2
      echo "setup.sh: could not install chromium (log: $log); the browser tests skip, and fail under CI=true" >&2
    fi
  else
    echo "setup.sh: chromium or chromedriver is missing and this is not root with apt-get: the browser tests" \
         "skip (and fail under CI=true); install chromium and chromium-driver to run them" >&2
  fi
fi
