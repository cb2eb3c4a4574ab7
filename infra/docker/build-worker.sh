#!/usr/bin/env bash
# Builds the CPU base worker image from this checkout, offline: a wheelhouse of
# ultron[torch,s3] made on the host (pinned to the versions installed in PYTHON's environment,
# so the image runs what the tests ran), then infra/docker/worker-cpu.Dockerfile over it.
#   bash infra/docker/build-worker.sh [IMAGE]      (default ultron-automl/worker-cpu:0.1.0)
# BASE (the OS base, infra/docker/make-base.sh), PYTHON and BUILDER may be set; WHEELS, a
# folder, keeps the wheels between runs (pip then downloads nothing it has). Idempotent: an
# existing IMAGE is kept (FORCE=1 builds it again).
set -euo pipefail
cd "$(dirname "$0")/../.."
IMAGE=${1:-ultron-automl/worker-cpu:0.1.0}
BASE=${BASE:-ultron-automl/python:3.11-bookworm}
PYTHON=${PYTHON:-.venv/bin/python}
BUILDER=${BUILDER:-$(command -v podman || command -v buildah || command -v docker)}
case "$(basename "$BUILDER")" in
  buildah) inspect=(buildah inspect --type image) build=(buildah build) ;;
  *) inspect=("$BUILDER" image inspect) build=("$BUILDER" build) ;;
esac
if [ -z "${FORCE:-}" ] && "${inspect[@]}" "$IMAGE" >/dev/null 2>&1; then
  echo "$IMAGE exists"
  exit 0
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
"$PYTHON" -m pip freeze --exclude-editable | grep -v '^ultron-automl' > "$ctx/constraints.txt"
# Dependency markers (redis: async-timeout for python < 3.11.3) are evaluated for the image's
# Python: Debian's, which this machine has too when it runs Debian (else PYTHON's own).
TARGET=()
[ -x /usr/bin/python3.11 ] && TARGET=(--python /usr/bin/python3.11)
kept=${WHEELS:-$ctx/kept}
mkdir -p "$kept"
wheel() {
  "$PYTHON" -m pip "${TARGET[@]}" wheel -q --disable-pip-version-check -w "$ctx/wheels" \
    --find-links "$kept" -c "$ctx/constraints.txt" "$@" ".[torch,s3]" uv
}
# Offline from the kept wheels when they have everything; else from the package index. The
# context gets exactly the resolved set; the kept folder gets any new wheel for next time.
wheel --no-index 2>/dev/null || wheel 2> >(grep -v "^WARNING: Location" >&2)
cp -n "$ctx"/wheels/*.whl "$kept"/
cp infra/docker/entrypoint.sh "$ctx/"
# Every wheel but ultron's is a dependency: their list, and its hash, make the cached layer.
(cd "$ctx/wheels" && ls ./*.whl | grep -v '^./ultron_automl-' | sed 's|^\./|/wheels/|') \
  > "$ctx/wheels/deps.txt"
DEPS=$(sha256sum "$ctx/wheels/deps.txt" | cut -c1-16)
"${build[@]}" -q --layers -f infra/docker/worker-cpu.Dockerfile --build-arg "BASE=$BASE" \
  --build-arg "DEPS=$DEPS" -t "$IMAGE" "$ctx"
echo "built $IMAGE"
