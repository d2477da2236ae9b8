"""Container health check for the v100site image.

    python docker/healthcheck.py [web|worker|auto]

web     GET /accounts/login/ on 127.0.0.1:8000 (gunicorn inside the container), with a Host
        header taken from ALLOWED_HOSTS (else Django answers 400) and X-Forwarded-Proto: https
        (so that an HTTPS redirect, when one is configured, is not what we measure); healthy on
        2xx or 3xx.
worker  settings load, the database answers and the Celery broker accepts a connection.
        Not `celery inspect ping`: a --pool solo worker answers no remote-control command
        while it measures a run (runs take minutes to hours), so a ping would call it
        unhealthy exactly when it is busy doing its job.
auto    (the default, used by the image's HEALTHCHECK) web when PID 1 is gunicorn, worker
        when it is celery, healthy otherwise (migrate and other one-shot manage.py commands).

Exit status 0 = healthy, 1 = unhealthy (what Docker expects); one line on stdout says why.
"""
from __future__ import annotations

import http.client
import os
import sys
from pathlib import Path

WEB_PORT = 8000
WEB_PATH = "/accounts/login/"
TIMEOUT_S = 5


def host_header(allowed_hosts: str) -> str:
    """A Host value that ALLOWED_HOSTS accepts: its first usable entry."""
    for entry in allowed_hosts.split(","):
        entry = entry.strip()
        if not entry or entry == "*":
            continue
        return entry.lstrip(".")  # ".example.org" allows example.org and its subdomains
    return "localhost"


def check_web() -> str:
    host = host_header(os.environ.get("ALLOWED_HOSTS", "localhost"))
    conn = http.client.HTTPConnection("127.0.0.1", WEB_PORT, timeout=TIMEOUT_S)
    try:
        conn.request("GET", WEB_PATH, headers={"Host": host, "X-Forwarded-Proto": "https"})
        status = conn.getresponse().status
    finally:
        conn.close()
    if not 200 <= status < 400:
        raise RuntimeError(f"GET {WEB_PATH} (Host: {host}) answered {status}")
    return f"web: GET {WEB_PATH} -> {status}"


def check_worker() -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "v100site.settings")
    import django

    django.setup()
    from django.db import connection

    connection.ensure_connection()
    connection.close()

    from v100site.celery import app

    with app.connection_for_write() as broker:
        broker.ensure_connection(max_retries=1, interval_start=0, timeout=TIMEOUT_S)
        where = broker.as_uri()  # the password is masked
    return f"worker: database and broker ({where}) answer"


def pid1_role(cmdline: str = "/proc/1/cmdline") -> str:
    """web / worker / other, from PID 1's command line (docker-init's included)."""
    try:
        args = Path(cmdline).read_bytes().split(b"\0")
    except OSError:
        return "other"
    names = {os.path.basename(a.decode(errors="replace")) for a in args if a}
    if "gunicorn" in names:
        return "web"
    if "celery" in names:
        return "worker"
    return "other"


def main(argv: list[str]) -> int:
    role = argv[1] if len(argv) > 1 else "auto"
    if role == "auto":
        role = pid1_role()
    checks = {"web": check_web, "worker": check_worker}
    if role not in checks:
        print(f"{role}: nothing to check (one-shot)")
        return 0
    try:
        print(checks[role]())
        return 0
    except Exception as exc:  # any failure is "unhealthy", with its cause
        print(f"{role}: unhealthy: {exc.__class__.__name__}: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
