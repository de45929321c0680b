# parkgate application image: the API (`parkgate api`), workers (`parkgate worker`)
# and the one-shot migration (`parkgate db upgrade`) all run from this image.
FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY dispatcher ./dispatcher
COPY workflows ./workflows
COPY activities ./activities
COPY migrations ./migrations
RUN python -m venv /opt/parkgate \
    && /opt/parkgate/bin/pip install --upgrade pip \
    && /opt/parkgate/bin/pip install .

FROM python:3.11-slim

# The shell tool runs commands in the workspace; give it the usual utilities.
RUN apt-get update \
    && apt-get install -y --no-install-recommends git ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 parkgate \
    && mkdir -p /data /workspaces \
    && chown parkgate:parkgate /data /workspaces

COPY --from=build /opt/parkgate /opt/parkgate

ENV PATH=/opt/parkgate/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PARKGATE_DATA_DIR=/data \
    PARKGATE_WORKSPACE_ROOTS='["/workspaces"]' \
    PARKGATE_API_HOST=0.0.0.0

WORKDIR /app
USER parkgate
EXPOSE 8420

ENTRYPOINT ["parkgate"]
CMD ["api"]
