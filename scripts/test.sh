#!/usr/bin/env bash
# Command 2 of the README: set everything up, lint, type-check, check the import layers and run
# the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true .venv/bin/mkdocs build --strict --quiet --site-dir build/site  # the docs site, references generated from the code
bash scripts/check.sh           # mypy and lint-imports, on the package as it installs
# pytest, not python -m pytest: the repository's root stays off sys.path, as for a user.
# Two pytest workers (pytest-xdist), a test file each at a time: the scenario tests mostly wait on
# processes and servers, so two share 2 cores well (12.8 min against 20 min in one). Each worker
# starts its own session servers; ULTRON_TEST_WORKERS=0 runs everything in this process.
exec .venv/bin/pytest -n "${ULTRON_TEST_WORKERS:-2}" --dist loadfile "$@"
