"""One settings file; every knob comes from the environment with an embedded default.

On one machine nothing needs setting: SQLite and a filesystem Celery broker under var/.
A team sets DATABASE_URL (PostgreSQL) and CELERY_BROKER_URL (Redis).
"""
import ipaddress
import os
import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url
import plotly

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("V100SITE_VAR_DIR", BASE_DIR / "var"))


def envbool(name, default):
    return os.environ.get(name, default).lower() in ("1", "true", "yes", "on")


def envint(name, default):
    return int(os.environ.get(name, default))


def envsecret(name, default=None):
    """A secret from NAME, or from the file named by NAME_FILE (docker secrets)."""
    path = os.environ.get(name + "_FILE")
    if path:
        with open(path) as f:
            return f.read().strip()
    return os.environ.get(name, default)


DEBUG = envbool("DEBUG", "False")
# "production": HTTPS only (secure cookies, HSTS, redirect), a SECRET_KEY from the environment.
# "local" (default): plain http://127.0.0.1 on one machine.
DEPLOYMENT = os.environ.get("DEPLOYMENT", "local")
PRODUCTION = DEPLOYMENT == "production"
SECRET_KEY = envsecret("SECRET_KEY")
if not SECRET_KEY:
    if PRODUCTION:
        raise RuntimeError("SECRET_KEY (or SECRET_KEY_FILE) must be set when DEPLOYMENT=production")
    # A per-checkout key kept under var/ so sessions survive restarts on one machine; var/ (the key,
    # the SQLite database with its sessions and endpoint keys) is for this user alone: 0700, 0600.
    VAR_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    VAR_DIR.chmod(0o700)
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        with os.fdopen(os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(secrets.token_urlsafe(50))
    key_file.chmod(0o600)
    SECRET_KEY = key_file.read_text().strip()

# Django's own measure of a weak key (security.W009), refused rather than warned about in production:
# sessions, password resets and signed ids all rest on it.
if PRODUCTION and (len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5 or SECRET_KEY.startswith("django-insecure-")):
    raise RuntimeError("SECRET_KEY is weak (fewer than 50 characters, fewer than 5 distinct ones, or Django's "
                       "'django-insecure-' prefix): make one with python -c 'import secrets; "
                       "print(secrets.token_urlsafe(50))'")

ALLOWED_HOSTS = os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",")
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]
if PRODUCTION:
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", "True")
    SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", "31536000")
    SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", "True")
    SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", "True")
# Set only where a reverse proxy ends TLS in front of gunicorn and is the only way to it (compose:
# WEB_BIND=127.0.0.1). It must overwrite X-Forwarded-Proto and append X-Forwarded-For: both are
# believed then (https, and the client address that login throttling counts). Off, any client
# could claim https with the header.
BEHIND_TLS_PROXY = envbool("BEHIND_TLS_PROXY", "False")
if BEHIND_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
# No inline scripts anywhere (templates load static files only); Plotly sets inline styles.
CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                           "img-src 'self' data:; font-src 'self'; connect-src 'self'; object-src 'none'; "
                           "base-uri 'self'; form-action 'self'; frame-ancestors 'none'")
SITE_NAME = os.environ.get("SITE_NAME", "v100site")
# The site's address as its readers reach it: the links in alert e-mails and webhooks.
SITE_URL = os.environ.get("SITE_URL", "http://127.0.0.1:8000").rstrip("/")
# Permalinks (runs, comparisons, decisions, imports) open without login unless this is set.
PERMALINKS_REQUIRE_LOGIN = envbool("PERMALINKS_REQUIRE_LOGIN", "False")
# Anonymous readers of permalinks never see who queued a run, nor (unless this is set) the
# endpoints' base URLs and launch commands; members always do.
PUBLIC_SHOW_ENDPOINT_ADDRESSES = envbool("PUBLIC_SHOW_ENDPOINT_ADDRESSES", "False")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "axes",
    "rest_framework",
    "drf_spectacular",
    "django_celery_beat",
    "benchmarks",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "v100site.security.ContentSecurityPolicyMiddleware",
    "benchmarks.gone.RunGoneMiddleware",  # a deleted run's permalink: 410 Gone, page or JSON
    # Refuses a too-large body before anything reads it (no middleware above does; CSRF's
    # process_view and the views come later), with the headers of the middleware above.
    "benchmarks.uploads.RequestSizeLimitMiddleware",
    "axes.middleware.AxesMiddleware",  # last: turns a refused login into the lockout page
]

ROOT_URLCONF = "v100site.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
WSGI_APPLICATION = "v100site.wsgi.application"

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
        conn_max_age=envint("DB_CONN_MAX_AGE", "0"),
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # The web server and a worker write to one file. WAL lets readers go on beside a writer; a
    # transaction takes the write lock when it begins (IMMEDIATE), so one that read first never has
    # to upgrade its lock, which SQLite refuses at once ("database is locked") rather than waiting;
    # and every wait for the lock lasts up to `timeout` seconds (a fixed setting: the containers
    # use PostgreSQL, so only the embedded default ever reads it).
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        timeout=30, transaction_mode="IMMEDIATE",
        init_command="PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Login throttling (django-axes): after LOGIN_FAILURE_LIMIT wrong passwords for one user name
# from one address, that pair is refused for LOGIN_LOCKOUT_S (each new try restarts the wait);
# a successful login clears the count. `manage.py axes_reset` lifts every lockout.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = envint("LOGIN_FAILURE_LIMIT", "10")
AXES_COOLOFF_TIME = timedelta(seconds=envint("LOGIN_LOCKOUT_S", "900"))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_CLIENT_IP_CALLABLE = "v100site.security.client_ip"
AXES_DISABLE_ACCESS_LOG = True  # keep failures only, not a row per successful login
AXES_VERBOSE = False
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "run-list"
LOGOUT_REDIRECT_URL = "run-list"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [
    BASE_DIR / "static",
    # Plotly's own bundle from the installed plotly package: served by us, never a CDN.
    ("plotly", Path(plotly.__file__).parent / "package_data"),
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Finders serve static files straight from their source folders (one machine, tests: no
# collectstatic needed). The Docker image collects them at build time and sets this false.
WHITENOISE_USE_FINDERS = envbool("WHITENOISE_USE_FINDERS", "True")
STATIC_ROOT.mkdir(parents=True, exist_ok=True)

# Celery: an embedded filesystem broker by default, Redis (or any kombu URL) for a team.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = VAR_DIR / "broker"
    for sub in ("queue", "processed", "control"):
        (_broker_dir / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),  # else a relative "control/" in the cwd
        "store_processed": False,
    }
else:
    # Redis redelivers an unacknowledged task after this long; a run may take hours.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": envint("CELERY_VISIBILITY_TIMEOUT", "43200")}
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_DEFAULT_QUEUE", "runs")
CELERY_TASK_IGNORE_RESULT = True
# Load-generator workers (benchmarks/loadgen.py): a level spread over several machines runs
# its shards as tasks on this queue ("" = none: every level is measured by the run's worker).
# Their results come back through the result backend (Redis: the broker's, unless set).
LOADGEN_QUEUE = os.environ.get("LOADGEN_QUEUE", "")
LOADGEN_START_LEAD_S = float(os.environ.get("LOADGEN_START_LEAD_S", "5"))
# Load modes of a site's own (benchmarks/engine/load_modes/base.py), each "module.path:ClassName",
# comma-separated: registered beside the built-in ones in the web app and every worker.
LOAD_MODES_EXTRA = [m.strip() for m in os.environ.get("LOAD_MODES_EXTRA", "").split(",") if m.strip()]
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND") or (
    CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) else None)
# Route each run to its host's queue (a worker per GPU host). Off on one machine, where one
# worker consumes the shared queue.
HOST_QUEUES = envbool("HOST_QUEUES", "False")
CELERY_TASK_ACKS_LATE = True  # a task whose worker died is delivered again, not lost
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Scheduled runs: Celery beat reads the schedules from the database (django-celery-beat). Its
# firings and the regression alerts go to their own queue, so that they never wait behind a run
# measured for hours: scripts/run.sh and the compose `beat` service run a worker for it with beat
# embedded (`celery worker -B`).
CELERY_TIMEZONE = TIME_ZONE
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
HOUSEKEEPING_QUEUE = os.environ.get("HOUSEKEEPING_QUEUE", "housekeeping")
CELERY_TASK_ROUTES = {"benchmarks.schedule_fire": {"queue": HOUSEKEEPING_QUEUE},
                      "benchmarks.alert_deliver": {"queue": HOUSEKEEPING_QUEUE}}
# A schedule pauses itself after this many consecutive failed runs (or firings that could not
# queue a run), and says why on its page.
SCHEDULE_PAUSE_AFTER_FAILURES = envint("SCHEDULE_PAUSE_AFTER_FAILURES", "3")
# The shortest interval an "every N minutes" schedule may have.
SCHEDULE_MIN_INTERVAL_S = envint("SCHEDULE_MIN_INTERVAL_S", "900")

# Regressions (benchmarks/history.py, engine/regression.py): each finished run's headline figures
# against the last REGRESSION_WINDOW comparable runs (same model, variant, workload and GPU),
# flagged when worse by more than REGRESSION_Z standard deviations of those runs and by at least
# REGRESSION_MIN_CHANGE_PCT percent; tested only with REGRESSION_MIN_HISTORY runs or more. The
# spread is taken as at least REGRESSION_NOISE_FLOOR_PCT of the mean (runs of identical figures).
REGRESSION_WINDOW = envint("REGRESSION_WINDOW", "10")
REGRESSION_MIN_HISTORY = envint("REGRESSION_MIN_HISTORY", "3")
REGRESSION_Z = float(os.environ.get("REGRESSION_Z", "3"))
REGRESSION_MIN_CHANGE_PCT = float(os.environ.get("REGRESSION_MIN_CHANGE_PCT", "5"))
REGRESSION_NOISE_FLOOR_PCT = float(os.environ.get("REGRESSION_NOISE_FLOOR_PCT", "1"))
# Alerts on a regression: e-mail through Django's mail (the EMAIL_* settings below) and webhooks,
# delivered by a task tried ALERT_ATTEMPTS times, waiting ALERT_RETRY_BACKOFF_S, then twice, four
# times as long... between tries. Webhook URLs pass the
# endpoints' address policy (no link-local or metadata address) and go to public addresses only:
# loopback, private and other internal addresses only inside the networks WEBHOOK_ALLOWED_NETWORKS
# names (a member's hook must not probe the site's own network).
ALERT_ATTEMPTS = envint("ALERT_ATTEMPTS", "5")
ALERT_RETRY_BACKOFF_S = float(os.environ.get("ALERT_RETRY_BACKOFF_S", "30"))
ALERT_TIMEOUT_S = float(os.environ.get("ALERT_TIMEOUT_S", "10"))
WEBHOOK_ALLOWED_NETWORKS = [n.strip() for n in os.environ.get("WEBHOOK_ALLOWED_NETWORKS", "").split(",") if n.strip()]
for _network in WEBHOOK_ALLOWED_NETWORKS:
    ipaddress.ip_network(_network)
# Where alert e-mails come from and how they leave: SMTP when EMAIL_HOST is set, else the
# console (the worker's log) on one machine.
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "v100site@localhost")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "")
if EMAIL_HOST:
    EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    EMAIL_PORT = envint("EMAIL_PORT", "587")
    EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
    EMAIL_HOST_PASSWORD = envsecret("EMAIL_HOST_PASSWORD", "")
    EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", "True")
else:
    EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"

# Limits on what one run may ask for.
MAX_CONCURRENCY = envint("MAX_CONCURRENCY", "512")
MAX_REQUESTS_PER_LEVEL = envint("MAX_REQUESTS_PER_LEVEL", "10000")
MAX_TOKENS = envint("MAX_TOKENS", "131072")
MAX_REQUEST_RATE = float(os.environ.get("MAX_REQUEST_RATE", "1000"))
MIN_REQUEST_RATE = float(os.environ.get("MIN_REQUEST_RATE", "0.01"))  # and a run must fit RUN_TIME_LIMIT_S
MAX_REQUESTS_PER_RUN = envint("MAX_REQUESTS_PER_RUN", "100000")  # endpoints × levels × requests
MAX_RUNS_IN_FLIGHT = envint("MAX_RUNS_IN_FLIGHT", "5")  # queued or running, per user
# The networks endpoints may be on (comma-separated CIDRs, e.g. "10.0.0.0/8,fd00::/8"); empty:
# anywhere but the blocked ranges (link-local and cloud metadata addresses, 0.0.0.0/8,
# multicast, reserved). Checked when an endpoint is saved and whenever a worker connects.
ENDPOINT_ALLOWED_NETWORKS = [n.strip() for n in os.environ.get("ENDPOINT_ALLOWED_NETWORKS", "").split(",") if n.strip()]
for _network in ENDPOINT_ALLOWED_NETWORKS:
    ipaddress.ip_network(_network)  # a typo fails at start, not at the first run

# Imports: a result file may be up to MAX_IMPORT_MIB MiB and hold MAX_IMPORT_LEVELS levels. A request
# larger than the file limit plus 1 MiB for the other fields is refused before its body is read;
# a file part stops being received (and written to FILE_UPLOAD_TEMP_DIR) at the limit.
MAX_IMPORT_MIB = envint("MAX_IMPORT_MIB", "20")
MAX_IMPORT_LEVELS = envint("MAX_IMPORT_LEVELS", "1000")
# The quality step's evaluation texts: an uploaded text may be up to this many MiB of UTF-8.
MAX_EVALUATION_TEXT_MIB = envint("MAX_EVALUATION_TEXT_MIB", "2")
# A run's uploaded prompts (JSONL): up to this many MiB, stored with the run.
MAX_DATASET_MIB = envint("MAX_DATASET_MIB", "4")
# A body read into memory (the API's JSON) may carry a dataset of up to MAX_DATASET_MIB as a JSON
# string, where escaping can double it, plus the other fields (Django's default, 2.5 MiB, refused it).
DATA_UPLOAD_MAX_MEMORY_SIZE = (2 * MAX_DATASET_MIB + 1) * 1024 * 1024
FILE_UPLOAD_HANDLERS = ["benchmarks.uploads.FileSizeLimitHandler",
                        "django.core.files.uploadhandler.MemoryFileUploadHandler",
                        "django.core.files.uploadhandler.TemporaryFileUploadHandler"]

# The inventory name of the host this worker runs on: its GPUs are probed at start and
# sampled during runs of endpoints on this host. Leave empty on a web-only or remote worker.
WORKER_HOST = os.environ.get("WORKER_HOST", "")
GPU_SAMPLE_INTERVAL_S = float(os.environ.get("GPU_SAMPLE_INTERVAL_S", "0.2"))
METRICS_SAMPLE_INTERVAL_S = float(os.environ.get("METRICS_SAMPLE_INTERVAL_S", "0.5"))

# The lab: servers this host's worker may start itself from recipes. Decided here, on the host,
# never in the database: the executables it may start and the folders models (and any path in a
# recipe's arguments) may come from, comma-separated absolute paths; the addresses a server may
# listen on; the ports it owns. A recipe outside them is refused with the reason. What it
# started is recorded under LAB_STATE_DIR, so the next worker stops a server a killed one left.
LAB_EXECUTABLES = os.environ.get("LAB_EXECUTABLES", "")
LAB_MODEL_DIRS = os.environ.get("LAB_MODEL_DIRS", "")
LAB_LISTEN_ADDRESSES = os.environ.get("LAB_LISTEN_ADDRESSES", "127.0.0.1,::1")
LAB_PORTS = os.environ.get("LAB_PORTS", "18100-18199")
# The GPUs (NVML indices) a recipe may give a server, comma-separated; blank: any the host has.
LAB_GPUS = os.environ.get("LAB_GPUS", "")
# Environment variables a recipe may set beyond those its backend documents as safe (thread
# counts, offline switches, vLLM's VLLM_CPU_KVCACHE_SPACE...), comma-separated names. A path in a
# value must lie under LAB_MODEL_DIRS; code loaders (LD_*, PYTHON*, PATH), the GPU variables and
# llama.cpp's LLAMA_ARG_* (flags by another door) are refused whatever this says.
LAB_ENV_ALLOWED = os.environ.get("LAB_ENV_ALLOWED", "")
# A recipe that gives an allowed Python or shell its program inline (`python -c CODE`, `sh -c CODE`)
# runs what no flag check can judge: refused unless this host is a test bench that starts stand-in
# servers that way ("1").
LAB_ALLOW_INLINE_CODE = os.environ.get("LAB_ALLOW_INLINE_CODE", "") == "1"
# The user started servers run as (the worker must be root, or hold CAP_SETUID and CAP_SETGID);
# blank: the worker's own user, whose environment (database and broker credentials) and files a
# server could then read. Set it on any shared host: an unprivileged user of its own, with read
# access to LAB_EXECUTABLES and LAB_MODEL_DIRS only. A worker that cannot switch refuses every recipe, saying why.
LAB_RUN_AS = os.environ.get("LAB_RUN_AS", "")
LAB_STATE_DIR = Path(os.environ.get("LAB_STATE_DIR", VAR_DIR / "lab"))
LAB_START_TIMEOUT_S = float(os.environ.get("LAB_START_TIMEOUT_S", "900"))  # start -> /health
LAB_STOP_GRACE_S = float(os.environ.get("LAB_STOP_GRACE_S", "30"))  # SIGTERM -> SIGKILL
LAB_FREED_TIMEOUT_S = float(os.environ.get("LAB_FREED_TIMEOUT_S", "60"))  # stopped -> memory given back

# Fault tolerance (seconds).
RUN_HEARTBEAT_S = float(os.environ.get("RUN_HEARTBEAT_S", "5"))
RUN_HEARTBEAT_STALE_S = float(os.environ.get("RUN_HEARTBEAT_STALE_S", "60"))
RUN_REQUEUE_AFTER_S = float(os.environ.get("RUN_REQUEUE_AFTER_S", "300"))
RUN_SWEEP_EVERY_S = float(os.environ.get("RUN_SWEEP_EVERY_S", "30"))
RUN_TIME_LIMIT_S = float(os.environ.get("RUN_TIME_LIMIT_S", "21600"))
RUN_MAX_ATTEMPTS = envint("RUN_MAX_ATTEMPTS", "3")
# Before a run the worker reads its host's CPUs for RUN_HOST_CHECK_S (0: not at all) and, while
# other work keeps them busy, waits up to RUN_HOST_QUIET_WAIT_S for it to pass (engine.host_check).
RUN_HOST_CHECK_S = float(os.environ.get("RUN_HOST_CHECK_S", "1"))
RUN_HOST_QUIET_WAIT_S = float(os.environ.get("RUN_HOST_QUIET_WAIT_S", "60"))
# Per request: connecting, the longest silence between two chunks, and the whole request.
REQUEST_CONNECT_TIMEOUT_S = float(os.environ.get("REQUEST_CONNECT_TIMEOUT_S", "10"))
REQUEST_READ_TIMEOUT_S = float(os.environ.get("REQUEST_READ_TIMEOUT_S", "300"))
REQUEST_TOTAL_TIMEOUT_S = float(os.environ.get("REQUEST_TOTAL_TIMEOUT_S", "900"))

# The REST API (/api/v1/, benchmarks/api/): bearer tokens or a browser session, JSON only, and
# per-token rate limits counted in the cache (CACHE_URL: Redis, so that every web process counts
# the same requests; without it each process counts its own).
API_RATE_LIMIT = os.environ.get("API_RATE_LIMIT", "300/min")
if os.environ.get("CACHE_URL", "").startswith(("redis://", "rediss://")):
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                          "LOCATION": os.environ["CACHE_URL"], "KEY_PREFIX": "v100site"}}
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["benchmarks.api.tokens.BearerTokenAuthentication",
                                       "benchmarks.api.tokens.SessionAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_THROTTLE_CLASSES": ["benchmarks.api.tokens.PerTokenRateThrottle"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "EXCEPTION_HANDLER": "benchmarks.api.conventions.json_errors",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "v100site API", "VERSION": "1",
    "DESCRIPTION": "Submit benchmark runs, follow them and read their results; ask for a deployment decision. "
                   "Authenticate with `Authorization: Bearer <token>` (make one on the API tokens page).",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SCHEMA_PATH_PREFIX": "/api/v1",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    # One line per request from httpx would cost the measuring worker time and flood its log.
    "loggers": {"httpx": {"level": "WARNING"}, "httpcore": {"level": "WARNING"},
                "axes": {"level": "WARNING"}},  # failed logins and lockouts only
}
