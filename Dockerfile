# A small image for the memindex processes (docker-compose.yml runs watcher, worker, writer from it).
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    OPENCLAW_STATE_DIR=/state

WORKDIR /app
COPY pyproject.toml README.md ./
COPY pipeline ./pipeline
COPY workers ./workers
COPY producers ./producers
RUN pip install . && useradd --create-home --uid 1000 memindex && mkdir -p /state && chown memindex /state

USER memindex
VOLUME ["/state"]
CMD ["memindex", "watch", "--all"]
