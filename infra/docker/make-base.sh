#!/usr/bin/env bash
# Makes the OS base of the worker images here, without any image registry: Debian bookworm's
# Python 3.11 (the interpreter the host-built cp311 wheels need), extracted by mmdebstrap from
# the Debian mirror and imported as ultron-automl/python:3.11-bookworm.
#   bash infra/docker/make-base.sh [IMAGE]
# Needs root, mmdebstrap and a builder (podman, buildah, or docker with a daemon). Idempotent:
# an IMAGE made by this very script is kept. The "extract" variant unpacks the packages without running their
# maintainer scripts: 5x faster than a minbase install (15-30 s, not 1.5-2 min), and enough for
# Python; the CA bundle that ca-certificates' script would make is made in worker-cpu.Dockerfile.
set -euo pipefail
IMAGE=${1:-ultron-automl/python:3.11-bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
BUILDER=${BUILDER:-$(command -v podman || command -v buildah || command -v docker)}
# The image is labelled with this script's hash: a changed recipe makes it again.
RECIPE=$(sha256sum "$0" | cut -c1-16)
recipe_of() {
  case "$(basename "$BUILDER")" in
    buildah) buildah inspect --type image \
               --format '{{index .OCIv1.Config.Labels "org.ultron.recipe"}}' "$1" ;;
    *) "$BUILDER" image inspect --format '{{index .Config.Labels "org.ultron.recipe"}}' "$1" ;;
  esac 2>/dev/null
}
if [ "$(recipe_of "$IMAGE")" = "$RECIPE" ]; then
  echo "$IMAGE exists"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mmdebstrap --quiet --variant=extract --format=tar \
  --include=python3,python3-venv,libstdc++6,dash,coreutils,ca-certificates,tzdata \
  bookworm "$work/rootfs.tar" "$MIRROR"
case "$(basename "$BUILDER")" in
  buildah) ctr=$(buildah from scratch)
           buildah add "$ctr" "$work/rootfs.tar" /
           buildah config --env PATH=/usr/local/bin:/usr/bin:/bin --env LANG=C.UTF-8 \
             --label "org.ultron.recipe=$RECIPE" "$ctr"
           buildah commit -q "$ctr" "$IMAGE" && buildah rm "$ctr" >/dev/null ;;
  *) "$BUILDER" import --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
       --change 'ENV LANG=C.UTF-8' --change "LABEL org.ultron.recipe=$RECIPE" \
       "$work/rootfs.tar" "$IMAGE" >/dev/null ;;
esac
echo "made $IMAGE"
