# A stand-in for redis:7 built from Debian's packages (bookworm: Redis 7.0), for hosts that
# cannot pull the official image. Like it: the working directory /data (append-only file and
# dump), the unprivileged user redis, redis-server and redis-cli on PATH.
ARG BASE_IMAGE=v100site-local/debian:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data && chown redis:redis /data
WORKDIR /data
USER redis
EXPOSE 6379
CMD ["redis-server", "--protected-mode", "no"]
