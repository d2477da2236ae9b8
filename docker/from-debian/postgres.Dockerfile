# A stand-in for postgres:16 built from Debian's packages (bookworm: PostgreSQL 15), for hosts
# that cannot pull the official image. Like it: POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB
# create the cluster on first start (postgres.entrypoint.sh), data in /var/lib/postgresql/data,
# password logins over TCP, SIGINT (fast shutdown) to stop.
ARG BASE_IMAGE=v100site-local/debian:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15 \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o postgres -g postgres -m 700 /var/lib/postgresql/data
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data
COPY postgres.entrypoint.sh /usr/local/bin/postgres-entrypoint
USER postgres
STOPSIGNAL SIGINT
EXPOSE 5432
ENTRYPOINT ["postgres-entrypoint"]
CMD ["postgres"]
