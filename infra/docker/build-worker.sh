#!/usr/bin/env bash
# Builds the CPU base worker image from this checkout, offline: ultron[torch,s3] pinned to the
# versions installed in PYTHON's environment (so the image runs what the tests ran), installed
# by infra/docker/worker-cpu.Dockerfile from uv's cache, or else from a wheelhouse made here.
#   bash infra/docker/build-worker.sh [IMAGE]      (default ultron-automl/worker-cpu:0.1.0)
# BASE (the OS base, infra/docker/make-base.sh), PYTHON and BUILDER may be set; WHEELS, a
# folder, keeps the wheels between runs (pip then downloads nothing it has); WHEELHOUSE=1 uses
# the wheelhouse even where uv's cache could serve. Idempotent: an
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
mkdir -p "$ctx/wheels"
"$PYTHON" -m pip freeze --exclude-editable | grep -v '^ultron-automl' > "$ctx/constraints.txt"
# Dependency markers (redis: async-timeout for python < 3.11.3) are evaluated for the image's
# Python: Debian's, which this machine has too when it runs Debian (else PYTHON's own).
TARGET=()
[ -x /usr/bin/python3.11 ] && TARGET=(--python /usr/bin/python3.11)
cp infra/docker/entrypoint.sh "$ctx/"
# uv (next to PYTHON, or on PATH) with podman or buildah: the image installs from uv's cache,
# which scripts/setup.sh filled, bind-mounted into the build with the host's uv binary, offline.
# Nothing is downloaded but what the image's interpreter needs and the host's does not (a
# rehearsal install into a throwaway venv of that interpreter puts it in the cache). 1.5 min
# on a fresh 2-core machine, where the wheelhouse below downloads 350 MB first (8+ min).
UV=${UV:-$(command -v "$(dirname "$PYTHON")/uv" || command -v uv || true)}
FIND_LINKS=()
MOUNTS=()
i=0
for dir in /opt/wheels ${PIP_FIND_LINKS:-}; do
  [ -d "$dir" ] || continue
  FIND_LINKS+=(--find-links "$dir")
  MOUNTS+=(-v "$dir:/find-links/$i:ro")
  i=$((i + 1))
done
if [ -z "${WHEELHOUSE:-}" ] && [ -n "$UV" ] && [ "$(basename "$BUILDER")" != docker ]; then
  "$PYTHON" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation \
    -w "$ctx/wheels" .
  cache=$("$UV" cache dir)
  "$UV" venv -q "${TARGET[@]}" "$ctx/rehearsal"
  "$UV" pip install -q --python "$ctx/rehearsal/bin/python" "${FIND_LINKS[@]}" \
    --find-links "$ctx/wheels" -c "$ctx/constraints.txt" "ultron-automl[torch,s3]"
  "$UV" pip freeze --python "$ctx/rehearsal/bin/python" | grep -v '^ultron-automl' \
    > "$ctx/wheels/deps.txt"
  rm -rf "$ctx/rehearsal"
  BUILD_MOUNTS=(-v "$UV:/usr/local/bin/uv-host:ro" -v "$cache:/uv-cache" "${MOUNTS[@]}")
else
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
  # Every wheel but ultron's is a dependency: their list, and its hash, make the cached layer.
  (cd "$ctx/wheels" && ls ./*.whl | grep -v '^./ultron_automl-' | sed 's|^\./|/wheels/|') \
    > "$ctx/wheels/deps.txt"
  BUILD_MOUNTS=()
fi
DEPS=$(sha256sum "$ctx/wheels/deps.txt" | cut -c1-16)
"${build[@]}" -q --layers "${BUILD_MOUNTS[@]}" -f infra/docker/worker-cpu.Dockerfile \
  --build-arg "BASE=$BASE" --build-arg "DEPS=$DEPS" -t "$IMAGE" "$ctx"
echo "built $IMAGE"
