# The evb image: the orderer (`evb serve`) and the operator (`kopf run -m evb_operator.handlers`).
#   docker build -t evb:0.1.0 .
# Two stages: the build stage compiles the Cython core and generates the gRPC stubs while it
# installs evb into a virtual environment; the runtime stage copies that environment and nothing
# else (no wheels, caches or compilers: a `COPY` of wheels followed by `rm` would keep them in a
# layer), and runs as an unprivileged user.
# Every package is pinned by constraints.txt, the one list make's install and CI use too.

# Checks of the field (checkov) that do not apply, with their reasons:
# checkov:skip=CKV_DOCKER_7: the base image is a versioned tag (python:3.11-slim-bookworm) given by the ARG below, which checkov does not resolve
# checkov:skip=CKV_DOCKER_2: Kubernetes ignores HEALTHCHECK; the pods the operator makes carry their own probes
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY constraints.txt pyproject.toml setup.py README.md ./
COPY proto/ proto/
COPY orderer/ orderer/
COPY operator/ operator/
# PIP_CONSTRAINT (not only -c) so that the isolated build of evb (Cython, numpy, grpcio-tools)
# is pinned as well.
RUN python -m venv /opt/evb/venv \
    && PIP_CONSTRAINT=/src/constraints.txt /opt/evb/venv/bin/pip install --no-cache-dir '.[operator]'

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OPENBLAS_NUM_THREADS=1 \
    PATH=/opt/evb/venv/bin:${PATH}
COPY --from=build /opt/evb/venv /opt/evb/venv
RUN groupadd --system --gid 10001 evb \
    && useradd --system --uid 10001 --gid evb --home-dir /nonexistent --shell /usr/sbin/nologin evb \
    && mkdir -p /data && chown evb:evb /data
USER 10001:10001
WORKDIR /data
EXPOSE 50051 9090 8080
# The operator's Deployment overrides this with `kopf run -m evb_operator.handlers ...`.
ENTRYPOINT ["evb"]
CMD ["serve", "--listen", "[::]:50051", "--data-dir", "/data", "--metrics-port", "9090"]
