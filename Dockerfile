# One image recipe, four services: `docker build --target creator|worker|cleaner|console .`
# (docker-compose.yml builds each target). Classic builder compatible: no BuildKit-only syntax.
#
# PYTHON_IMAGE lets an offline machine substitute a local base image; any Debian-based image with
# python, pip and useradd works.
ARG PYTHON_IMAGE=python:3.12-slim

FROM ${PYTHON_IMAGE} AS base

# PIP_* settings that the base image may set (certificates, timeouts) are inherited, not replaced.
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    METRICS_PORT=8000

# Unprivileged runtime user; groupadd/useradd exist on debian-slim and Debian-based images alike.
RUN groupadd --system --gid 10001 setqueue \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin setqueue

WORKDIR /src

# Dependencies first, from pyproject.toml alone: this layer is rebuilt only when the dependency
# list changes, not on every source edit. (tomllib is in the standard library from Python 3.11.)
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project'].get('dependencies', [])))" \
        > /tmp/requirements.txt \
 && pip install --no-cache-dir -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

# Then the sources: the library first (changes least often), then the four services.
# (pyproject.toml names README.md as the package's readme, so the build needs it.)
COPY README.md ./
COPY shared/ ./shared/
COPY creator/ ./creator/
COPY worker/ ./worker/
COPY cleaner/ ./cleaner/
COPY console/ ./console/
RUN pip install --no-cache-dir . \
 && rm -rf /src/build \
 && cd / && python -c "import setqueue, creator, worker, cleaner, console.app"

# Run from an empty directory so `python -m worker` imports the installed package, not /src.
WORKDIR /app
USER 10001:10001
EXPOSE 8000

# /healthz answers 200 when the service is healthy and 503 otherwise; urlopen raises on 503.
# Plain Python, so the check needs neither curl nor wget in the image.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('METRICS_PORT', '8000'), timeout=4)"]


FROM base AS creator
CMD ["python", "-m", "creator"]

FROM base AS worker
CMD ["python", "-m", "worker"]

FROM base AS cleaner
CMD ["python", "-m", "cleaner"]

# The operator console: its web pages on CONSOLE_PORT (every interface inside the container; the
# compose file publishes it on 127.0.0.1 only), /healthz there too.
FROM base AS console
ENV CONSOLE_HOST=0.0.0.0 \
    CONSOLE_PORT=8080
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('CONSOLE_PORT', '8080'), timeout=4)"]
CMD ["python", "-m", "console"]
