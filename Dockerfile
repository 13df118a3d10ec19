# A small image for the memindex processes. docker-compose.yml runs every Procfile process from it
# (watcher, worker, compute, batch, writer0, writer1: each service's `command` is its Procfile line,
# tests/test_pipeline_deploy.py checks both); without a command the container is the watcher.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    OPENCLAW_STATE_DIR=/state

WORKDIR /app
# Exactly what the wheel needs: pyproject.toml maps the import name `memindex` onto these four
# folders (memindex/ holds the package root: a build without it fails). The test builds a wheel
# from the files these COPY lines name, so a folder added to pyproject.toml and not here fails it.
COPY pyproject.toml README.md ./
COPY memindex ./memindex
COPY pipeline ./pipeline
COPY workers ./workers
COPY producers ./producers
RUN pip install . && useradd --create-home --uid 1000 memindex && mkdir -p /state && chown memindex /state

USER memindex
VOLUME ["/state"]
CMD ["memindex", "watch", "--all"]
