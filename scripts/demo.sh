#!/usr/bin/env bash
# The main job: set up, then run the end-to-end demo on the embedded local Hub.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m nkihub.kernels.demo "$@"
