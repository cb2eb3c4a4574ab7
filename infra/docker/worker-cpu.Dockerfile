# Base worker image: Python, ultron and the core stack. A job image adds the user's code base:
#   podman build -f infra/docker/worker-cpu.Dockerfile --build-arg CODE=examples/quickstart/code .
FROM python:3.11-slim
ARG CODE=""
WORKDIR /opt/ultron
COPY pyproject.toml README.md ./
COPY ultron ultron
COPY algorithms algorithms
COPY tasks tasks
COPY flows flows
COPY datamanager datamanager
RUN pip install --no-cache-dir ".[s3]"
COPY ${CODE:-pyproject.toml} /opt/code/
RUN if [ -n "$CODE" ]; then pip install --no-cache-dir /opt/code; fi
ENTRYPOINT ["dask", "worker"]
