# The base worker image, CUDA: NVIDIA's CUDA runtime, Python 3.11 and ultron with the CUDA
# build of torch, in /opt/ultron/venv, on PATH. Same layout, entrypoint and wheelhouse install
# as worker-cpu.Dockerfile, so a job's image builds on either.
#
# It CANNOT be built on our CI machines: they reach no image registry (no nvidia/cuda base)
# and no PyTorch CUDA wheel index. Build it where both are reachable:
#   python3.12 -m pip wheel -w ctx/wheels --extra-index-url https://download.pytorch.org/whl/cu128 \
#       "torch==2.13.0" ".[s3]" && cp infra/docker/entrypoint.sh ctx/
#   podman build -f infra/docker/worker-cuda.Dockerfile -t ultron-automl/worker-cuda:0.1.0 ctx
# Worker pods need the NVIDIA device plugin on their nodes (nvidia.com/gpu limits).
ARG BASE=docker.io/nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04
FROM ${BASE}
ENV PATH=/opt/ultron/venv/bin:/usr/local/bin:/usr/bin:/bin \
    PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
# Ubuntu 24.04 ships Python 3.12 (ultron needs 3.11+): make the wheelhouse with a 3.12.
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
RUN --mount=type=bind,source=wheels,target=/wheels \
    python3 -m venv /opt/ultron/venv \
 && /opt/ultron/venv/bin/python -m pip install -q --find-links /wheels \
      "ultron-automl[torch,s3]" \
 && /opt/ultron/venv/bin/python -m pip check \
 && /opt/ultron/venv/bin/python -m pip freeze > /opt/ultron/requirements.lock
# The non-root user of worker-cpu.Dockerfile (10001:10001, home /home/ultron), made the same way.
RUN echo 'ultron:x:10001:10001:ultron:/home/ultron:/bin/sh' >> /etc/passwd \
 && echo 'ultron:x:10001:' >> /etc/group \
 && mkdir -p /home/ultron && chown 10001:10001 /home/ultron && chmod 0750 /home/ultron
COPY entrypoint.sh /usr/local/bin/ultron-entrypoint
ENV HOME=/home/ultron
WORKDIR /home/ultron
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/ultron-entrypoint"]
CMD ["dask", "worker", "--help"]
