# One image for every Loam Jobs service (gateway, queue-core, sweeper, relay; the engine
# runner's code, without the engines themselves, which need their own images): the
# repo's packages installed into the system Python. docker-compose.yml picks the
# service with the command, e.g. `loam gateway`.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY libs/common libs/common
COPY services/durable services/durable
COPY services/queue-core services/queue-core
COPY services/sweeper services/sweeper
COPY services/relay services/relay
COPY services/gateway services/gateway
COPY services/engines services/engines
COPY adapters/python adapters/python
RUN pip install './libs/common[tikv,s3]' ./services/durable ./services/queue-core ./services/sweeper \
        ./services/relay ./services/engines ./services/gateway ./adapters/python \
    && useradd --system --home-dir /var/lib/loam --create-home loam \
    && mkdir -p /var/lib/loam/blobs && chown -R loam /var/lib/loam

USER loam
WORKDIR /var/lib/loam
EXPOSE 7720 7721
CMD ["loam", "--help"]
