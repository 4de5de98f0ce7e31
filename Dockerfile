# runonce container image: `runonce serve` on $PORT (default 8080) as a non-root user.
#
# Two stages on the same base: the first builds a virtualenv in /opt/venv (pip, wheels and build
# back-ends stay there), the second copies only that venv. The base needs `python3` with the `venv`
# module, nothing else, so the same file builds on python:3.12-slim and on a plain Debian with
# python3-venv:  podman build --build-arg PYTHON_IMAGE=localhost/debian-base:bookworm .
ARG PYTHON_IMAGE=python:3.12-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv
WORKDIR /src
# Dependencies first, in their own layer, so that a code change does not reinstall them: install the
# project from its metadata with a placeholder package, then drop the placeholder.
COPY pyproject.toml README.md ./
RUN mkdir app && touch app/__init__.py \
    && /opt/venv/bin/python -m pip install . \
    && /opt/venv/bin/python -m pip uninstall --yes runonce
COPY app ./app
# Then the code itself (bytecode is compiled at install: no writes at start-up), and pip and
# setuptools out of the venv: nothing in the final image can install or build.
RUN /opt/venv/bin/python -m pip install --no-deps . \
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
