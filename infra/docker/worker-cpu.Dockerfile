# The base worker image, CPU: Debian's Python 3.11 and ultron with its torch (CPU) and s3
# extras in /opt/ultron/venv, on PATH. Nothing is fetched during the build: it installs from a
# wheelhouse made on the host (reproducible, and builds here cannot reach a package index).
#   bash infra/docker/make-base.sh                 # ultron-automl/python:3.11-bookworm
#   bash infra/docker/build-worker.sh              # wheelhouse + this file
# A job's image (ultron.containerize.image) is this plus the user's package and code base.
ARG BASE=ultron-automl/python:3.11-bookworm
FROM ${BASE}
ENV PATH=/opt/ultron/venv/bin:/usr/local/bin:/usr/bin:/bin \
    PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
# The wheelhouse is bind-mounted, not copied: it would stay in a layer (hundreds of MB). uv
# installs it (from the wheelhouse too): 5x faster than pip here, bytecode compiled in parallel.
# The CA bundle is made here: make-base.sh unpacks ca-certificates without running its script.
# Two layers: the dependencies (wheels/deps.txt), kept while DEPS (the hash of that list)
# stays the same, and ultron itself, the one that changes with each commit.
ARG DEPS=unknown
RUN --mount=type=bind,source=wheels,target=/wheels \
    echo "dependencies $DEPS" \
 && cat /usr/share/ca-certificates/mozilla/*.crt > /etc/ssl/certs/ca-certificates.crt \
 && python3 -m venv /opt/ultron/venv \
 && /opt/ultron/venv/bin/python -m pip install -q --no-index --find-links /wheels uv \
 && /opt/ultron/venv/bin/uv pip install -q --python /opt/ultron/venv/bin/python --offline \
      --no-index --find-links /wheels --compile-bytecode -r /wheels/deps.txt
RUN --mount=type=bind,source=wheels,target=/wheels \
    /opt/ultron/venv/bin/uv pip install -q --python /opt/ultron/venv/bin/python --offline \
      --no-index --find-links /wheels --compile-bytecode "ultron-automl[torch,s3]" \
 && /opt/ultron/venv/bin/python -m pip check \
 && /opt/ultron/venv/bin/python -m pip freeze > /opt/ultron/requirements.lock
COPY entrypoint.sh /usr/local/bin/ultron-entrypoint
WORKDIR /opt/ultron
ENTRYPOINT ["/usr/local/bin/ultron-entrypoint"]
CMD ["dask", "worker", "--help"]
