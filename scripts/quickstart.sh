#!/usr/bin/env bash
# Command 1 of the README: set everything up and run the quickstart HPO job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/ultron run examples/quickstart/job.yaml "$@"
