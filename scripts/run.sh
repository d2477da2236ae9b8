#!/usr/bin/env bash
# Set up and run v100site on one machine: SQLite and an embedded (filesystem) Celery broker
# under var/, the web app on http://127.0.0.1:8000 and one worker. Ctrl-C stops both.
# Team settings (PostgreSQL, Redis) come from the environment: see README.md.
# PORT (default 8000) moves the web app; WORKER_QUEUES (default "runs") the worker's queues.
source "$(dirname "$0")/_venv.sh"
ensure_venv requirements.txt
PORT=${PORT:-8000}
mkdir -p var
.venv/bin/python manage.py migrate --noinput
.venv/bin/python manage.py ensure_admin
.venv/bin/celery -A v100site worker --pool solo --concurrency 1 -Q "${WORKER_QUEUES:-runs}" \
  --loglevel INFO --logfile var/worker.log &
WORKER=$!
.venv/bin/python manage.py runserver --noreload "127.0.0.1:$PORT" &
WEB=$!
# Ctrl-C or a plain `kill` of this script stops both.
trap 'kill $WEB $WORKER 2>/dev/null; wait $WEB $WORKER 2>/dev/null; exit 0' INT TERM
trap 'kill $WEB $WORKER 2>/dev/null' EXIT
echo "worker started (log: var/worker.log); open http://127.0.0.1:$PORT/"
wait $WEB
