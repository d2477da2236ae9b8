# A stand-in for python:3.11-slim built from Debian's packages, for hosts that cannot pull the
# official image (bookworm's python3 is 3.11): `python` and `pip` on PATH from a venv, as there.
# Build it with scripts/docker-engine.sh images, then PYTHON_IMAGE=v100site-local-python:3.11.
# ca-certificates.crt in the build context: the certificate authorities the image trusts (the
# script passes the host's bundle, so that pip works behind the same TLS-inspecting proxy).
ARG BASE_IMAGE=v100site-local/debian:bookworm
FROM ${BASE_IMAGE}
ENV LANG=C.UTF-8 \
    PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
RUN python3 -m venv /opt/python && python -m pip --version
CMD ["python3"]
