#!/usr/bin/env bash
# Command 1 of the README: install what the quickstart job needs (ultron with its torch extra;
# no browser, SLURM or image builder) and run it on the embedded defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
ULTRON_EXTRAS=${ULTRON_EXTRAS:-torch} ULTRON_TEST_TOOLS=0 bash scripts/setup.sh
exec .venv/bin/ultron run examples/quickstart/job.yaml "$@"
