#!/usr/bin/env bash
# Type-check (mypy) and check the import layers (lint-imports) on the package as it installs.
#
# The repository keeps flows/, tasks/, algorithms/ and datamanager/ at its top and installs them
# as ultron.flows, ultron.tasks, ... (setuptools package-dir). Neither tool follows the import
# hook of an editable install, so both read a copy of the installed layout under
# build/namespace/; file names in their output are mapped back to the repository's.
set -euo pipefail
cd "$(dirname "$0")/.."
TREE=build/namespace
rm -rf "$TREE"
mkdir -p "$TREE"
cp -r ultron "$TREE/ultron"
for folder in flows tasks algorithms datamanager; do
  cp -r "$folder" "$TREE/ultron/$folder"
done
find "$TREE" -name __pycache__ -prune -exec rm -rf {} +
back() {  # build/namespace/ultron/flows/x.py -> flows/x.py; build/namespace/ultron/y -> ultron/y
  sed -E "s#$TREE/ultron/(flows|tasks|algorithms|datamanager)/#\\1/#g; s#$TREE/ultron/#ultron/#g"
}
status=0
(cd "$TREE" && ../../.venv/bin/mypy --config-file ../../pyproject.toml) 2>&1 | back || status=1
(cd "$TREE" && PYTHONPATH=. ../../.venv/bin/lint-imports --config ../../pyproject.toml) 2>&1 \
  | back || status=1
exit "$status"
