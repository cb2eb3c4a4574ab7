# The base worker image, CPU: Debian's Python 3.11 and ultron with its torch (CPU) and s3
# extras in /opt/ultron/venv, on PATH. Nothing is fetched during the build: it installs from a
# wheelhouse made on the host (reproducible, and builds here cannot reach a package index).
#   bash infra/docker/make-base.sh                 # ultron-automl/python:3.11-bookworm
#   bash infra/docker/build-worker.sh              # wheelhouse + this file
# A job's image (ultron.containerize.image) is this plus the user's package and code base.
# It runs as the non-root user 10001 (the end of this file).
ARG BASE=ultron-automl/python:3.11-bookworm
FROM ${BASE}
ENV PATH=/opt/ultron/venv/bin:/usr/local/bin:/usr/bin:/bin \
    PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
# The wheelhouse is bind-mounted, not copied: it would stay in a layer (hundreds of MB). uv
# installs it (from the wheelhouse too): 5x faster than pip here, bytecode compiled in parallel.
# Or (build-worker.sh's default where it can) the host's uv, its cache (/uv-cache) and its
# --find-links folders (/find-links/N) are bind-mounted: wheels/ then holds ultron's wheel and
# deps.txt pins, and uv installs them from that cache, offline (nothing of it stays in a layer).
# The CA bundle is made here: make-base.sh unpacks ca-certificates without running its script.
# Two layers: the dependencies (wheels/deps.txt), kept while DEPS (the hash of that list)
# stays the same, and ultron itself, the one that changes with each commit.
ARG DEPS=unknown
RUN --mount=type=bind,source=wheels,target=/wheels \
    echo "dependencies $DEPS" \
 && cat /usr/share/ca-certificates/mozilla/*.crt > /etc/ssl/certs/ca-certificates.crt \
 && python3 -m venv /opt/ultron/venv \
 && if [ -x /usr/local/bin/uv-host ]; then export UV_CACHE_DIR=/uv-cache UV_LINK_MODE=copy; \
      uv=/usr/local/bin/uv-host; \
    else /opt/ultron/venv/bin/python -m pip install -q --no-index --find-links /wheels uv; \
      uv=/opt/ultron/venv/bin/uv; fi \
 && links=$(for d in /wheels /find-links/*; do [ ! -d "$d" ] || echo "--find-links $d"; done) \
 && $uv pip install -q --python /opt/ultron/venv/bin/python --offline $links \
      --compile-bytecode -r /wheels/deps.txt
RUN --mount=type=bind,source=wheels,target=/wheels \
    if [ -x /usr/local/bin/uv-host ]; then export UV_CACHE_DIR=/uv-cache UV_LINK_MODE=copy; \
      uv=/usr/local/bin/uv-host; else uv=/opt/ultron/venv/bin/uv; fi \
 && links=$(for d in /wheels /find-links/*; do [ ! -d "$d" ] || echo "--find-links $d"; done) \
 && $uv pip install -q --python /opt/ultron/venv/bin/python --offline $links --no-deps \
      --compile-bytecode /wheels/ultron_automl-*.whl \
 && /opt/ultron/venv/bin/python -m pip check \
 && /opt/ultron/venv/bin/python -m pip freeze > /opt/ultron/requirements.lock
# A fixed non-root user, 10001:10001 (ultron.deploy.security.UID: the pods of infra/k8s run as
# it too): a trial cannot change the image's files. Its home is the one folder of its own (an
# emptyDir in the pods, whose root filesystem is read-only); /tmp is everyone's. The passwd
# entry lets libraries that ask for the user's name (getpass, torch's caches) find one.
# make-base.sh's extract has no /etc/passwd at all: root's entry is written too.
RUN { grep -qs '^root:' /etc/passwd || echo 'root:x:0:0:root:/root:/bin/sh' >> /etc/passwd; } \
 && { grep -qs '^root:' /etc/group || echo 'root:x:0:' >> /etc/group; } \
 && echo 'ultron:x:10001:10001:ultron:/home/ultron:/bin/sh' >> /etc/passwd \
 && echo 'ultron:x:10001:' >> /etc/group \
 && mkdir -p /home/ultron && chown 10001:10001 /home/ultron && chmod 0750 /home/ultron
COPY entrypoint.sh /usr/local/bin/ultron-entrypoint
ENV HOME=/home/ultron
WORKDIR /home/ultron
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/ultron-entrypoint"]
CMD ["dask", "worker", "--help"]
