# runonce container image: `runonce serve` on $PORT (default 8080) as a non-root user.
#
# Two stages on the same base: the first builds a virtualenv in /opt/venv (pip, wheels and build
# back-ends stay there), the second copies only that venv. The base needs `python3` with the `venv`
# module, nothing else, so the same file builds on python:3.12-slim and on a plain Debian with
# python3-venv:  podman build --build-arg PYTHON_IMAGE=localhost/debian-base:bookworm .
#
# Build for linux/amd64 (`docker build --platform linux/amd64`): Cloud Run runs the Linux x86_64 ABI.
#
# The base is pinned by digest, so a rebuild gets the same base: python:3.12-slim's multi-platform
# index digest sha256:78387bc3881b8273120a12ebe6c1ab22b018ccc2c9adf565ae1ac9b536e184ea.
# To move to a newer base: docker buildx imagetools inspect python:3.12-slim  (the "Digest:" line).
ARG PYTHON_IMAGE=python:3.12-slim@sha256:78387bc3881b8273120a12ebe6c1ab22b018ccc2c9adf565ae1ac9b536e184ea

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv
WORKDIR /src
# Dependencies first, in their own layer, from the lock file alone (every file's sha256 verified;
# `make lock` writes it from pyproject.toml): a change to the code, the README or pyproject.toml's
# other tables does not reinstall them.
COPY requirements/runtime.txt requirements/runtime.txt
RUN /opt/venv/bin/python -m pip install --require-hashes --no-deps -r requirements/runtime.txt
# Then runonce itself (with runonce_store_url, the store-URL reading it shares with runonce-guard),
# built with the locked setuptools and nothing downloaded (bytecode is compiled
# at install: no writes at start-up), and pip and setuptools out of the venv: nothing in the final
# image can install or build.
COPY pyproject.toml README.md ./
COPY runonce ./runonce
COPY guard/runonce_store_url ./guard/runonce_store_url
RUN /opt/venv/bin/python -m pip install --no-deps --no-build-isolation --no-index . \
    && /opt/venv/bin/python -m pip uninstall --yes pip setuptools

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="runonce" \
      org.opencontainers.image.description="Idempotent proxy between Cloud Scheduler / Cloud Tasks and Google Cloud APIs" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed numeric UID/GID so that `runAsNonRoot` policies can verify it without /etc/passwd.
RUN groupadd --gid 10001 runonce \
    && useradd --no-log-init --no-create-home --uid 10001 --gid 10001 --home-dir /var/lib/runonce \
       --shell /usr/sbin/nologin runonce \
    && mkdir -p /var/lib/runonce \
    && chown 10001:10001 /var/lib/runonce
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PORT=8080
# The working directory is the only writable place: the default `sqlite:///runonce.db` store lands
# here for a single-instance run; production sets RUNONCE_STORE=firestore.
WORKDIR /var/lib/runonce
USER 10001:10001
EXPOSE 8080
# Exec form: uvicorn is PID 1 and gets Cloud Run's SIGTERM directly. --port is left out so that
# $PORT (set by Cloud Run) decides.
CMD ["runonce", "serve", "--host", "0.0.0.0"]
