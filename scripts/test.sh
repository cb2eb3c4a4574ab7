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
exec .venv/bin/pytest "$@"
