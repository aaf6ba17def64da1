# syntax=docker/dockerfile:1
# aibom-rollup: one image for both processes (`webhook`, `annotator`) and the
# offline commands. ENTRYPOINT is the console script; the Deployments in
# manifests/ pass the subcommand and its flags as args.
#
#   docker build -t aibom-rollup:0.1.0 .
#   docker run --rm aibom-rollup:0.1.0 scan < dump.json
#
# Both stages use the same base image: the venv's interpreter is a symlink to
# the base image's /usr/local/bin/python3.11. Pin it by digest for
# reproducible builds: --build-arg PYTHON_IMAGE=python:3.11-slim@sha256:...
ARG PYTHON_IMAGE=python:3.11-slim

# -- builder: wheels for the package and every dependency, pinned ------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY aibom_core/ aibom_core/
COPY aibom_edge/ aibom_edge/
COPY aibom_rollup/ aibom_rollup/
COPY webhook/ webhook/
COPY annotator/ annotator/
COPY certs/ certs/
# certs/templates/mutatingwebhook.yaml links to the manifest (one copy in the repo).
COPY manifests/webhook/mutatingwebhook.yaml manifests/webhook/mutatingwebhook.yaml
# Runtime dependencies at exactly the versions constraints.txt pins (the ones
# the tests ran with). Only the build backend (setuptools, in pip's isolated
# build environment) floats: it is not part of the image that runs.
RUN pip wheel --wheel-dir /wheels -c constraints.txt .
# A venv without pip, filled from those wheels only (no index), compiled to
# bytecode here because the running container cannot write .pyc files.
RUN python -m venv --without-pip /opt/aibom-rollup \
 && pip --python /opt/aibom-rollup/bin/python install --no-index --find-links /wheels \
        -c constraints.txt aibom-rollup \
 && /opt/aibom-rollup/bin/python -m compileall -q /opt/aibom-rollup/lib \
 && /opt/aibom-rollup/bin/aibom-rollup --version

# -- runtime: the venv and nothing to build with ------------------------------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="aibom-rollup" \
      org.opencontainers.image.description="One AI workload, one AIBOM: Kubernetes admission webhook + annotator" \
      org.opencontainers.image.licenses="Apache-2.0"
# No pip, setuptools or wheel in the image that runs; a numeric non-root user
# (the manifests' runAsUser) so the kubelet can enforce runAsNonRoot.
RUN python -m pip uninstall --yes --no-cache-dir pip setuptools wheel \
 && groupadd --gid 65532 aibom \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin aibom
COPY --from=builder /opt/aibom-rollup /opt/aibom-rollup
# Read-only root filesystem: nothing writes to the venv or a home directory.
# HOME is /tmp, where the Deployments mount a small emptyDir.
ENV PATH=/opt/aibom-rollup/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
USER 65532:65532
WORKDIR /tmp
# webhook HTTPS (/mutate, /healthz, /readyz, /metrics); annotator /metrics, probes.
EXPOSE 8443 8080 8081
ENTRYPOINT ["aibom-rollup"]
CMD ["--help"]
