"""The embedded default (SQLite, no DATABASE_URL) under the web server and a worker writing at once:
transactions that read and then write, from two connections, all complete (none fails with
"database is locked"), and the file is in WAL mode. Run in a child process with the real settings,
so what is checked is what `scripts/run.sh` gets."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, threading, django
from django.db import connections, transaction
django.setup()
from django.conf import settings
with connections["default"].cursor() as c:
    c.execute("CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER)")
    c.execute("INSERT INTO counter VALUES (1, 0)")
    mode = c.execute("PRAGMA journal_mode").fetchone()[0]
connections["default"].close()
errors, done = [], []

def writer():
    try:
        for _ in range(40):
            with transaction.atomic():  # read, then write: the pattern SQLite refuses to upgrade
                with connections["default"].cursor() as c:
                    n = c.execute("SELECT n FROM counter WHERE id = 1").fetchone()[0]
                    c.execute("UPDATE counter SET n = %s WHERE id = 1", [n + 1])
            done.append(1)
    except Exception as e:
        errors.append(f"{type(e).__name__}: {e}")
    finally:
        connections["default"].close()

threads = [threading.Thread(target=writer) for _ in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
with connections["default"].cursor() as c:
    n = c.execute("SELECT n FROM counter WHERE id = 1").fetchone()[0]
print(json.dumps({"mode": mode, "errors": errors, "done": len(done), "n": n,
                  "engine": settings.DATABASES["default"]["ENGINE"]}))
"""


def test_the_embedded_default_never_fails_a_write_on_the_lock(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(V100SITE_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="v100site.settings")
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["engine"].endswith("sqlite3")
    assert result["errors"] == []
    assert result["mode"] == "wal"
    # every increment landed: no transaction lost another's write
    assert result["done"] == 160 and result["n"] == 160
