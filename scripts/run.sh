#!/usr/bin/env bash
# Set up and run v100site on one machine: SQLite and an embedded (filesystem) Celery broker
# under var/, the web app on http://127.0.0.1:8000, one worker for the runs and one for the
# schedules and alerts with Celery beat embedded (-B: scheduled runs, from the database). Ctrl-C
# stops them all.
# Team settings (PostgreSQL, Redis) come from the environment: see docs/operating.md.
# PORT (default 8000) moves the web app; WORKER_QUEUES (default "runs") the worker's queues.
source "$(dirname "$0")/_venv.sh"
ensure_venv requirements.txt
PORT=${PORT:-8000}
# Alert e-mails and webhooks link to the site where it serves (unless SITE_URL says otherwise).
export SITE_URL=${SITE_URL:-http://127.0.0.1:$PORT}
# var/ holds the key, the database (sessions, endpoints' API keys) and the broker's messages: for this
# user alone, new files too (and an older var/ tightened).
umask 077
mkdir -p var && chmod -R go-rwx var
.venv/bin/python manage.py migrate --noinput
.venv/bin/python manage.py ensure_admin
# The lab, ready where the cached llama-server and model exist (scripts/try-llamacpp.sh makes them):
# the run worker, as this machine's host, may start that server on loopback from the cache's folder,
# and the recipe llama-cpu-gemma3-lab (--parallel 1 or 4) is registered. Settings of your own win.
LAB_WORKER_ENV=()
if CACHED=$(bash scripts/llm-servers.sh cached 2>/dev/null); then
  read -r LAB_BIN LAB_GGUF <<<"$CACHED"
  LAB_HOST=${WORKER_HOST:-$(hostname)}
  # llama-perplexity beside it scores the quality step of the servers the lab starts from GGUF files.
  LAB_WORKER_ENV=(WORKER_HOST="$LAB_HOST" LAB_EXECUTABLES="${LAB_EXECUTABLES:-$LAB_BIN,$(dirname "$LAB_BIN")/llama-perplexity}"
                  LAB_MODEL_DIRS="${LAB_MODEL_DIRS:-$(dirname "$LAB_GGUF")}")
  .venv/bin/python manage.py register_recipe --name llama-cpu-gemma3-lab --host "$LAB_HOST" --backend llamacpp \
    --executable "$LAB_BIN" --model-path "$LAB_GGUF" --sweep '{"--parallel": [1, 4]}' \
    --args '["-m", "{model}", "--host", "{host}", "--port", "{port}", "-c", "4096", "--metrics"]' \
    --model gemma-3-270m --variant Q4_K_M --quantization gguf_q4_k_m ||
    echo "run.sh: the lab's recipe was not registered (above: why); the app runs without it" >&2
fi
# Only the run worker takes a host's queue (WORKER_HOST): runs of recipes and GPU hosts wait for it.
env "${LAB_WORKER_ENV[@]}" .venv/bin/celery -A v100site worker --pool solo --concurrency 1 -Q "${WORKER_QUEUES:-runs}" \
  --loglevel INFO --logfile var/worker.log &
WORKER=$!
# Beat fires the schedules (django-celery-beat's database scheduler); their firings and the alerts
# go to the housekeeping queue, so they never wait behind a run being measured.
env -u WORKER_HOST .venv/bin/celery -A v100site worker -B --pool solo --concurrency 1 -Q "${HOUSEKEEPING_QUEUE:-housekeeping}" \
  -n housekeeping@%h --scheduler django_celery_beat.schedulers:DatabaseScheduler \
  --loglevel INFO --logfile var/beat.log &
BEAT=$!
.venv/bin/python manage.py runserver --noreload "127.0.0.1:$PORT" &
WEB=$!
# Ctrl-C or a plain `kill` of this script stops both.
trap 'kill $WEB $WORKER $BEAT 2>/dev/null; wait $WEB $WORKER $BEAT 2>/dev/null; exit 0' INT TERM
trap 'kill $WEB $WORKER $BEAT 2>/dev/null' EXIT
echo "workers started (logs: var/worker.log, var/beat.log); open http://127.0.0.1:$PORT/"
wait $WEB
