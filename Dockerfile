# syntax=docker/dockerfile:1.7
# The operator image: `specdec operator` (kopf) on a small pinned Python base, as a non-root user.
#   docker build -t <registry>/specdec-operator:<version> .
# For byte-for-byte rebuilds, also pin the base by digest (docker buildx imagetools inspect python:3.12.11-slim-bookworm).
ARG PYTHON_IMAGE=python:3.12.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY operator ./operator
RUN python -m venv /venv \
 && /venv/bin/pip install --no-cache-dir --constraint constraints.txt . \
 && /venv/bin/specdec --help >/dev/null

FROM ${PYTHON_IMAGE}
COPY --from=build /venv /venv
RUN useradd --uid 1000 --user-group --no-create-home --home-dir /tmp specdec
ENV PATH=/venv/bin:$PATH \
    HOME=/tmp \
    PYTHONUNBUFFERED=1
USER 1000:1000
WORKDIR /tmp
EXPOSE 8080 9090
ENTRYPOINT ["specdec"]
CMD ["operator"]
