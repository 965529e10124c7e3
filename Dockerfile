# syntax=docker/dockerfile:1.7
# The operator image: `specdec operator` (kopf) on a small pinned Python base, as a non-root user.
#   docker build -t <registry>/specdec-operator:<version> .
# For byte-for-byte rebuilds, also pin the base by digest (docker buildx imagetools inspect python:3.12.11-slim-bookworm).
# Optional, for an offline build from a local wheelhouse (pip reads them from the environment; unset by default):
#   --build-arg PIP_FIND_LINKS=/wheels --build-arg PIP_NO_INDEX=1, the wheelhouse mounted at /wheels
#   (podman build --volume DIR:/wheels:ro); specdec_dev.images builds this way.
ARG PYTHON_IMAGE=python:3.12.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY operator ./operator
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
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
