# syntax=docker/dockerfile:1
#
# slo-gateway image: `slo-gateway serve` on port 8080, as an unprivileged user.
#
#   docker build -t slo-gateway:0.1.0 .
#   docker run --rm -p 8080:8080 \
#     -v "$PWD/config.yaml:/etc/slo-gateway/config.yaml:ro" \
#     -e GATEWAY_REDIS_URL=redis://redis:6379/0 -e OPENAI_API_KEY \
#     slo-gateway:0.1.0
#
# Config: the YAML file at /etc/slo-gateway/config.yaml (mount it; the image ships none, since
# endpoints and tenants are per deployment). It names the env vars that hold keys, never the keys.
# Environment:
#   GATEWAY_CONFIG     config path (default /etc/slo-gateway/config.yaml; or `serve --config PATH`)
#   GATEWAY_HOST       bind address (default 0.0.0.0 in this image)
#   GATEWAY_PORT       port for the API, /healthz, /readyz and /metrics (default 8080)
#   GATEWAY_REDIS_URL  shared state for several replicas (or REDIS_URL); unset = in-memory store
#   GATEWAY_LOG_LEVEL  debug, info, warning, error (default info)
#   plus the env vars the config names in api_key_env and server.admin_key_env.
# The image runs with a read-only root filesystem: it writes nothing outside /tmp.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: install the package and its runtime dependencies into a venv -----------------------
FROM ${PYTHON_IMAGE} AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /src
# Metadata first so the dependency layer is cached while only the code changes.
COPY pyproject.toml README.md ./
COPY policies ./policies
COPY gateway ./gateway
# No test, load or plot extras: the runtime dependencies only, compiled to bytecode at install
# (the runtime filesystem is read-only, so Python could not write .pyc files there).
RUN pip install --no-cache-dir --compile . \
    && pip uninstall --yes pip \
    && slo-gateway --help > /dev/null

# ---- runtime: the venv on a clean base, no compiler, no build tools ----------------------------
FROM ${PYTHON_IMAGE} AS runtime

LABEL org.opencontainers.image.title="slo-gateway" \
      org.opencontainers.image.description="OpenAI-compatible LLM gateway with SLO-aware routing" \
      org.opencontainers.image.licenses="Apache-2.0"

RUN groupadd --system --gid 10001 gateway \
    && useradd --system --uid 10001 --gid gateway --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin gateway

COPY --from=build /opt/venv /opt/venv

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    GATEWAY_CONFIG=/etc/slo-gateway/config.yaml \
    GATEWAY_HOST=0.0.0.0 \
    GATEWAY_PORT=8080 \
    GATEWAY_LOG_LEVEL=info

USER 10001:10001
WORKDIR /tmp
EXPOSE 8080

# The slim base has no curl: probe /healthz with the interpreter the image already carries.
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('GATEWAY_PORT', '8080') + '/healthz', timeout=2)"]

ENTRYPOINT ["slo-gateway"]
CMD ["serve"]
