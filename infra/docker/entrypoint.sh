#!/bin/sh
# The worker image's entrypoint. Runs its arguments when the first one is a command (the Dask
# Kubernetes operator's KubeCluster passes `dask worker ...`/`dask-worker ...`, users `python
# ...`); else they are flags of a Dask worker (infra/k8s: args: ["--name", ...]).
set -e
if [ "$#" -gt 0 ] && command -v "$1" >/dev/null 2>&1; then
  exec "$@"
fi
exec dask worker "$@"
