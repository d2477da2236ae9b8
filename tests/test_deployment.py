"""The Docker deployment (docker/): what can be checked without a Docker engine.

The compose files are parsed with PyYAML; with a `docker compose` / `docker-compose` binary on
PATH they also go through `config`, and with `hadolint` on PATH the Dockerfile is linted.
No Django, no database: runs with `-p no:django`.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is needed: add it to requirements-test.txt")

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
SETTINGS = ROOT / "v100site" / "settings.py"
README = DOCKER / "README.md"
DOCKERFILE = DOCKER / "Dockerfile"
TEAM = "compose.yml"
GPU = "compose.gpu-worker.yml"
SERVERS = "compose.v100-servers.yml"
COMPOSE_FILES = [TEAM, GPU, SERVERS]
APP_SERVICES = {TEAM: ["migrate", "web", "worker", "beat"], GPU: ["gpu-worker"]}

# Variables of the app containers that other programs read.
OTHER_READERS = {
    "WEB_CONCURRENCY", "FORWARDED_ALLOW_IPS", "GUNICORN_CMD_ARGS",  # gunicorn
    "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_VISIBLE_DEVICES",  # NVIDIA Container Toolkit
}
# Settings that only change how the web app serves pages: a worker needs none of them.
WEB_ONLY = re.compile(r"^(HTTPS|BEHIND_TLS_PROXY|SECURE_|SESSION_COOKIE_|CSRF_COOKIE_|WHITENOISE_|LOGIN_|API_|CACHE_URL)")


# --- helpers ---------------------------------------------------------------------------------

def load(name: str) -> dict:
    return yaml.safe_load((DOCKER / name).read_text())


def services(name: str) -> dict:
    return load(name)["services"]


def settings_env_vars() -> set[str]:
    """Every environment variable settings.py reads, from its source."""
    src = SETTINGS.read_text()
    names = set(re.findall(r'\b(?:envbool|envint|envsecret)\(\s*["\']([A-Z][A-Z0-9_]*)["\']', src))
    names |= set(re.findall(r'os\.environ\.get\(\s*["\']([A-Z][A-Z0-9_]*)["\']', src))
    names |= set(re.findall(r'os\.environ\[\s*["\']([A-Z][A-Z0-9_]*)["\']\s*\]', src))
    names |= set(re.findall(r'os\.getenv\(\s*["\']([A-Z][A-Z0-9_]*)["\']', src))
    # envsecret(NAME) also reads NAME_FILE (docker secrets).
    names |= {n + "_FILE" for n in re.findall(r'\benvsecret\(\s*["\']([A-Z][A-Z0-9_]*)["\']', src)}
    return names


def interpolated_vars(text: str) -> set[str]:
    """${VAR...} that compose interpolates ($${VAR} is a literal for the container's shell)."""
    return set(re.findall(r"(?<!\$)\$\{([A-Z_][A-Z0-9_]*)", text))


def resolve_defaults(value: str) -> str:
    """${VAR:-default} / ${VAR-default} -> default (innermost first)."""
    pattern = re.compile(r"(?<!\$)\$\{[A-Z_][A-Z0-9_]*:?-([^{}]*)\}")
    while pattern.search(value):
        value = pattern.sub(lambda m: m.group(1), value)
    return value


def command_list(service: dict) -> list[str]:
    cmd = service.get("command") or []
    return cmd.split() if isinstance(cmd, str) else [str(c) for c in cmd]


def option(args: list[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines, current = [], ""
    for raw in DOCKERFILE.read_text().splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        lines.append(current)
        current = ""
    out = []
    for line in lines:
        instr, _, args = line.partition(" ")
        out.append((instr.upper(), args.strip()))
    return out


def all_services() -> list[tuple[str, str, dict]]:
    return [(f, name, svc) for f in COMPOSE_FILES for name, svc in services(f).items()]


def load_healthcheck_module():
    spec = importlib.util.spec_from_file_location("v100site_healthcheck", DOCKER / "healthcheck.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the compose files -----------------------------------------------------------------------

@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_file_parses_and_names_its_project(name):
    data = load(name)
    assert isinstance(data, dict) and data.get("services"), f"{name} has no services"
    assert data.get("name"), f"{name} sets no project name (it would be 'docker', the folder)"


def test_team_stack_has_the_expected_services():
    assert set(services(TEAM)) == {"db", "redis", "migrate", "web", "worker", "beat"}
    assert set(services(GPU)) == {"gpu-worker"}
    assert {"llamacpp", "vllm"} <= set(services(SERVERS))


@pytest.mark.parametrize("file,name,svc", all_services(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_service_has_a_healthcheck_or_is_a_one_shot(file, name, svc):
    check = svc.get("healthcheck") or {}
    if check.get("disable"):
        assert svc.get("restart") == "no", f"{file}:{name} has no healthcheck but is not a one-shot"
        return
    test = check.get("test")
    assert test and test != ["NONE"], f"{file}:{name} has no healthcheck"
    assert check.get("interval") and check.get("retries"), f"{file}:{name}: healthcheck without interval/retries"


@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_depends_on_waits_for_health_or_a_finished_one_shot(file):
    svcs = services(file)
    for name, svc in svcs.items():
        deps = svc.get("depends_on")
        if deps is None:
            continue
        assert isinstance(deps, dict), f"{file}:{name}: depends_on as a list does not wait for health"
        for dep, spec in deps.items():
            condition = (spec or {}).get("condition")
            target = svcs[dep]
            if condition == "service_completed_successfully":
                assert target.get("restart") == "no", f"{file}:{name} waits for {dep} to finish, but it restarts"
            else:
                assert condition == "service_healthy", f"{file}:{name} -> {dep}: {condition}"
                assert (target.get("healthcheck") or {}).get("test"), f"{dep} has no healthcheck to wait for"


def test_web_and_worker_wait_for_db_redis_and_migrations():
    svcs = services(TEAM)
    for name in ("web", "worker"):
        deps = svcs[name]["depends_on"]
        assert deps["db"]["condition"] == "service_healthy"
        assert deps["redis"]["condition"] == "service_healthy"
        assert deps["migrate"]["condition"] == "service_completed_successfully"
    migrate = svcs["migrate"]
    assert migrate["restart"] == "no"
    assert command_list(migrate)[-2:] == ["migrate", "--noinput"]
    assert migrate["depends_on"]["db"]["condition"] == "service_healthy"


def test_web_runs_the_image_default_gunicorn_on_8000():
    web = services(TEAM)["web"]
    assert "command" not in web or "gunicorn" in command_list(web)
    assert any(str(p).endswith(":8000") for p in web["ports"]), web["ports"]
    assert web["healthcheck"]["test"][-1] == "web"


def test_postgres_healthcheck_uses_tcp():
    # During first-start initialisation the temporary server only listens on the Unix socket.
    test = " ".join(services(TEAM)["db"]["healthcheck"]["test"])
    assert "pg_isready" in test and "-h 127.0.0.1" in test


def test_redis_healthcheck_looks_for_pong():
    redis = services(TEAM)["redis"]
    assert "PONG" in " ".join(redis["healthcheck"]["test"])  # redis-cli exits 0 on NOAUTH
    assert "--requirepass" in command_list(redis)
    assert "--appendonly" in command_list(redis)


@pytest.mark.parametrize("file,name,svc", [s for s in all_services() if "celery" in command_list(s[2])],
                         ids=lambda x: x if isinstance(x, str) else "")
def test_workers_measure_one_run_at_a_time(file, name, svc):
    args = command_list(svc)
    assert args[:4] == ["celery", "-A", "v100site", "worker"]
    assert option(args, "--pool") == "solo"
    assert option(args, "--concurrency") == "1"
    assert option(args, "-Q"), f"{file}:{name} names no queue"
    assert svc["healthcheck"]["test"][-1] == "worker"
    assert svc.get("stop_grace_period"), "a worker needs time to finish its run on stop"


def test_team_worker_consumes_the_shared_queue():
    queues = resolve_defaults(option(command_list(services(TEAM)["worker"]), "-Q"))
    assert queues.split(",") == ["runs"]


def test_one_beat_fires_the_schedules_from_the_database_on_the_housekeeping_queue():
    """Beat embedded in the housekeeping queue's worker: the schedules' firings and the alerts go
    there (settings.CELERY_TASK_ROUTES), never behind a run on `runs`; one service, not scaled."""
    from django.conf import settings

    beat = services(TEAM)["beat"]
    args = command_list(beat)
    assert "-B" in args and option(args, "--scheduler") == settings.CELERY_BEAT_SCHEDULER
    assert resolve_defaults(option(args, "-Q")) == settings.HOUSEKEEPING_QUEUE
    assert {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()} == {settings.HOUSEKEEPING_QUEUE}
    assert "deploy" not in beat and "scale" not in beat
    for dep in ("db", "redis"):
        assert beat["depends_on"][dep]["condition"] == "service_healthy"
    assert beat["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_gpu_worker_requests_an_nvidia_gpu_and_consumes_its_host_queue():
    svc = services(GPU)["gpu-worker"]
    devices = svc["deploy"]["resources"]["reservations"]["devices"]
    assert any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", []) for d in devices)
    queue_arg = option(command_list(svc), "-Q")
    assert "host-${HOST_NAME" in queue_arg and queue_arg.endswith(",runs}"), queue_arg
    env = svc["environment"]
    assert "utility" in resolve_defaults(env["NVIDIA_DRIVER_CAPABILITIES"])  # NVML
    assert "NVIDIA_VISIBLE_DEVICES" not in env  # Docker sets it from the reservation
    assert env["DATABASE_URL"].startswith("${DATABASE_URL:?")
    assert env["CELERY_BROKER_URL"].startswith("${CELERY_BROKER_URL:?")
    assert resolve_defaults(env["HOST_QUEUES"]) == "true"


def test_team_settings_defaults():
    env = services(TEAM)["web"]["environment"]
    assert resolve_defaults(env["DEBUG"]) == "false"
    assert resolve_defaults(env["HOST_QUEUES"]) == "true"
    # Plain http on port 8000 unless a TLS proxy is put in front (DEPLOYMENT=production).
    assert resolve_defaults(env["DEPLOYMENT"]) == "local"
    assert resolve_defaults(services(GPU)["gpu-worker"]["environment"]["DEPLOYMENT"]) == "local"
    assert env["SECRET_KEY_FILE"] == "${SECRET_KEY_FILE-/run/secrets/secret_key}"
    assert "postgres://" in env["DATABASE_URL"] and "@db:5432/" in env["DATABASE_URL"]
    assert "redis://" in env["CELERY_BROKER_URL"] and "@redis:6379/" in env["CELERY_BROKER_URL"]
    for name in APP_SERVICES[TEAM]:
        assert "secret_key" in services(TEAM)[name]["secrets"]
    for file in (TEAM, GPU):
        assert resolve_defaults(load(file)["secrets"]["secret_key"]["file"]) == "./secrets/secret_key"


def test_proxy_headers_are_believed_only_where_a_proxy_is_configured():
    # No compose file puts a TLS proxy in front of gunicorn, so none turns on BEHIND_TLS_PROXY
    # (trust in X-Forwarded-Proto and -For): passed from docker/.env only, default off.
    for file, name, svc in all_services():
        env = svc.get("environment") or {}
        if isinstance(env, list):
            env = dict(item.partition("=")[::2] for item in env)
        assert env.get("BEHIND_TLS_PROXY") is None, f"{file}:{name}"
    assert 'BEHIND_TLS_PROXY = envbool("BEHIND_TLS_PROXY", "False")' in SETTINGS.read_text()
    readme = README.read_text()
    assert "BEHIND_TLS_PROXY=true" in readme and "WEB_BIND=127.0.0.1" in readme


def test_llamacpp_runs_the_writeup_flags_with_metrics():
    svc = services(SERVERS)["llamacpp"]
    args = command_list(svc)
    assert option(args, "-ngl") == "99"
    assert "--metrics" in args
    assert option(args, "-c") == "8192"
    assert option(args, "--parallel") == "8"
    assert option(args, "--port") == "8001" and option(args, "--host") == "0.0.0.0"
    assert resolve_defaults(option(args, "-m")).endswith("Q4_K_M.gguf")
    assert "http://127.0.0.1:8001/health" in svc["healthcheck"]["test"]
    assert svc["build"]["args"]["CUDA_DOCKER_ARCH"] == "${LLAMACPP_CUDA_ARCH:-70}"
    assert resolve_defaults(svc["build"]["args"]["CUDA_VERSION"]).startswith("12.")
    assert any(d.get("driver") == "nvidia" for d in svc["deploy"]["resources"]["reservations"]["devices"])


def test_vllm_runs_the_writeup_flags_behind_a_profile_with_the_v100_caveat():
    svc = services(SERVERS)["vllm"]
    args = command_list(svc)
    assert option(args, "--quantization") == "fp8"
    assert option(args, "--tensor-parallel-size") == "1"
    assert option(args, "--max-model-len") == "8192"
    assert option(args, "--gpu-memory-utilization") == "0.92"
    assert option(args, "--dtype") == "float16"
    assert svc["profiles"] == ["vllm-fp8"]
    assert "/health" in " ".join(svc["healthcheck"]["test"])
    assert any(d.get("driver") == "nvidia" for d in svc["deploy"]["resources"]["reservations"]["devices"])
    text = (DOCKER / SERVERS).read_text()
    assert "8.0" in text and "7.5" in text and "29901" in text and "V100" in text


def test_images_are_pinned():
    for file, name, svc in all_services():
        image = resolve_defaults(svc["image"])
        repo, _, tag = image.rpartition(":")
        assert repo and tag and "/" not in tag, f"{file}:{name}: {image} has no tag"
        assert tag != "latest", f"{file}:{name}: {image}"
    team = services(TEAM)
    # The official images by default; POSTGRES_IMAGE / REDIS_IMAGE name stand-ins.
    assert re.fullmatch(r"\$\{POSTGRES_IMAGE:-postgres:16(\.\d+)*(-[a-z0-9]+)?\}", team["db"]["image"])
    assert re.fullmatch(r"\$\{REDIS_IMAGE:-redis:7(\.\d+)*(-[a-z0-9]+)?\}", team["redis"]["image"])
    for file in (TEAM, GPU):
        builds = [svc["build"] for svc in services(file).values() if "build" in svc and svc["build"]["dockerfile"] == "docker/Dockerfile"]
        assert builds and all(resolve_defaults(b["args"]["PYTHON_IMAGE"]) == "python:3.11-slim" for b in builds)


def test_the_app_image_is_built_by_one_service_only():
    # Three build sections for one tag build it three times over (compose builds them in parallel).
    team = services(TEAM)
    assert [name for name, svc in team.items() if "build" in svc] == ["migrate"]
    assert len({team[name]["image"] for name in APP_SERVICES[TEAM]}) == 1


@pytest.mark.parametrize("file,name,svc", all_services(), ids=lambda x: x if isinstance(x, str) else "")
def test_long_running_services_have_an_init(file, name, svc):
    # Python as PID 1 ignores SIGTERM: without an init, `stop` / `down` wait 10 s and SIGKILL.
    if svc.get("restart") == "no":
        return
    assert svc.get("init") is True, f"{file}:{name} has no init: true"


# --- environment variables -------------------------------------------------------------------

def test_settings_reads_the_variables_we_expect():
    # Guards the regex: if it finds nothing, every "documented" check below is vacuous.
    found = settings_env_vars()
    assert {"DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY", "SECRET_KEY_FILE", "ALLOWED_HOSTS",
            "CSRF_TRUSTED_ORIGINS", "HOST_QUEUES", "DEBUG"} <= found


def test_every_settings_variable_is_documented():
    readme = README.read_text()
    missing = sorted(n for n in settings_env_vars() if f"`{n}`" not in readme)
    assert not missing, f"docker/README.md does not document {missing}"


@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_every_compose_variable_is_documented(file):
    readme = README.read_text()
    missing = sorted(n for n in interpolated_vars((DOCKER / file).read_text()) if f"`{n}`" not in readme)
    assert not missing, f"{file} uses {missing}, not in docker/README.md"


def test_every_settings_variable_reaches_the_app_containers():
    dockerfile_env = set()
    for instr, args in dockerfile_instructions():
        if instr == "ENV":
            dockerfile_env |= set(re.findall(r"([A-Z][A-Z0-9_]*)=", args))
    for file, names in APP_SERVICES.items():
        for name in names:
            env = services(file)[name]["environment"]
            for var in settings_env_vars():
                if var in dockerfile_env or (file == GPU and WEB_ONLY.match(var)):
                    continue
                assert var in env, f"{file}:{name} does not pass {var}"


def test_app_containers_pass_only_variables_someone_reads():
    known = settings_env_vars() | OTHER_READERS
    for file, names in APP_SERVICES.items():
        for name in names:
            unknown = set(services(file)[name]["environment"]) - known
            assert not unknown, f"{file}:{name} passes {unknown}, which nothing reads (a typo?)"


def test_example_env_files_cover_the_required_variables():
    team = (DOCKER / "env.example").read_text()
    for var in ("POSTGRES_PASSWORD", "REDIS_PASSWORD"):
        assert re.search(rf"^{var}=$", team, re.M), f"env.example: {var}= (empty, to fill in)"
    gpu = (DOCKER / "gpu-worker.env.example").read_text()
    for var in ("HOST_NAME", "DATABASE_URL", "CELERY_BROKER_URL"):
        assert re.search(rf"^{var}=", gpu, re.M), f"gpu-worker.env.example lacks {var}"


# --- secrets ---------------------------------------------------------------------------------

SECRETISH = re.compile(r"PASSWORD|SECRET|TOKEN|API_KEY|AUTH", re.I)
PLACEHOLDER = re.compile(r"placeholder|dummy|build-only|not-a-secret|dev-only|example|change-?me", re.I)


def _is_interpolated_or_secret_path(value) -> bool:
    if value is None or value == "":
        return True
    value = str(value)
    return bool(re.fullmatch(r"\$\{[A-Z_][A-Z0-9_]*[^}]*\}", value)) or value.startswith("/run/secrets/")


def _url_passwords(text: str) -> list[str]:
    return re.findall(r"[a-z][a-z0-9+.-]*://[^:/@\s]*:([^@\s]+)@", text)


@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_no_secret_is_hard_coded_in_compose(file):
    for name, svc in services(file).items():
        env = svc.get("environment") or {}
        for key, value in env.items():
            if SECRETISH.search(key):
                assert _is_interpolated_or_secret_path(value), f"{file}:{name}: {key}={value!r}"
            for password in _url_passwords(str(value or "")):
                assert password.startswith("${"), f"{file}:{name}: {key} has a literal password"
        args = command_list(svc)
        for flag in ("--requirepass", "--api-key"):
            if flag in args:
                assert option(args, flag).startswith("${"), f"{file}:{name}: {flag} literal"


def test_no_secret_is_hard_coded_in_the_dockerfile():
    for instr, args in dockerfile_instructions():
        for key, value in re.findall(r"\b([A-Z][A-Z0-9_]*)=(\S+)", args):
            if SECRETISH.search(key):
                assert PLACEHOLDER.search(value), f"{instr} {key}={value}: not a clear placeholder"
            for password in _url_passwords(value):
                assert PLACEHOLDER.search(password), f"{instr} {key}: a literal password"


def test_example_env_files_hold_no_secret():
    for name in ("env.example", "gpu-worker.env.example"):
        for line in (DOCKER / name).read_text().splitlines():
            if line.startswith("#") or "=" not in line:
                continue
            key, value = line.split("=", 1)
            if SECRETISH.search(key):
                assert value == "", f"{name}: {key} must be left empty"
            for password in _url_passwords(value):
                assert re.fullmatch(r"[A-Z_]+", password), f"{name}: {key} holds a password"


def test_secrets_stay_out_of_git_and_the_image():
    assert (DOCKER / "secrets" / ".gitignore").read_text().split("\n")[-3:-1] == ["*", "!.gitignore"]
    assert {".env", "*.env"} <= set((DOCKER / ".gitignore").read_text().split())
    # At the root, where the legacy builder reads it too (BuildKit would prefer a
    # docker/Dockerfile.dockerignore: there must be none, or the two would differ).
    assert not (DOCKER / "Dockerfile.dockerignore").exists()
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", "var", "docker/secrets", "docker/.env"} <= ignored


# --- the Dockerfile --------------------------------------------------------------------------

def test_dockerfile_base_image_is_pinned_python_311_slim():
    instrs = dockerfile_instructions()
    args = dict(a.split("=", 1) for instr, a in instrs if instr == "ARG" and "=" in a)
    froms = [re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], a) for instr, a in instrs if instr == "FROM"]
    assert froms and all(":" in f and not f.split(":")[1].startswith("latest") for f in froms)
    assert froms[-1].split()[0].startswith("python:3.11-slim")


def test_dockerfile_runs_as_non_root_after_building():
    instrs = dockerfile_instructions()
    users = [i for i, (instr, _) in enumerate(instrs) if instr == "USER"]
    assert users, "no USER: the app would run as root"
    user = instrs[users[-1]][1].split(":")[0]
    assert user not in ("root", "0")
    last_run = max(i for i, (instr, _) in enumerate(instrs) if instr == "RUN")
    assert users[-1] > last_run, "USER comes before the last RUN"


def test_dockerfile_has_a_healthcheck_and_runs_gunicorn():
    instrs = dict((instr, args) for instr, args in dockerfile_instructions())
    assert "HEALTHCHECK" in instrs and "NONE" not in instrs["HEALTHCHECK"]
    assert "healthcheck.py" in instrs["HEALTHCHECK"]
    command = instrs.get("CMD", "") + instrs.get("ENTRYPOINT", "")
    assert "gunicorn" in command and "v100site.wsgi" in command
    assert "0.0.0.0:8000" in command


def test_dockerfile_collects_static_files_with_a_placeholder_key():
    runs = [args for instr, args in dockerfile_instructions() if instr == "RUN"]
    collect = [r for r in runs if "collectstatic" in r]
    assert collect, "no collectstatic at build time"
    assert re.search(r"SECRET_KEY=\S*(placeholder|dummy)", collect[0])
    assert any("requirements.txt" in r for r in runs)


# --- the health check script -----------------------------------------------------------------

def test_healthcheck_host_header_comes_from_allowed_hosts():
    hc = load_healthcheck_module()
    assert hc.host_header("localhost,127.0.0.1") == "localhost"
    assert hc.host_header(".example.org,foo") == "example.org"
    assert hc.host_header("*") == "localhost"
    assert hc.host_header(" ,*, v100.example.org") == "v100.example.org"
    assert hc.host_header("[::1]") == "[::1]"


@pytest.mark.parametrize("cmdline,role", [
    ([b"gunicorn", b"v100site.wsgi", b"--bind", b"0.0.0.0:8000"], "web"),
    ([b"/usr/local/bin/python3.11", b"/usr/local/bin/gunicorn", b"v100site.wsgi"], "web"),
    ([b"celery", b"-A", b"v100site", b"worker"], "worker"),
    ([b"/sbin/docker-init", b"--", b"celery", b"-A", b"v100site", b"worker"], "worker"),
    ([b"python", b"manage.py", b"migrate", b"--noinput"], "other"),
])
def test_healthcheck_auto_role_from_pid1(tmp_path, cmdline, role):
    path = tmp_path / "cmdline"
    path.write_bytes(b"\0".join(cmdline) + b"\0")
    assert load_healthcheck_module().pid1_role(str(path)) == role


def test_healthcheck_one_shot_is_healthy(capsys):
    assert load_healthcheck_module().main(["healthcheck.py", "migrate"]) == 0


# --- the README ------------------------------------------------------------------------------

def test_readme_has_the_team_commands():
    readme = README.read_text()
    for text in ("docker compose -f docker/compose.yml up -d",
                 "docker compose -f docker/compose.yml exec web python manage.py createsuperuser",
                 "docker/compose.gpu-worker.yml", "register_endpoint", "NVIDIA_VISIBLE_DEVICES",
                 "NVIDIA_DRIVER_CAPABILITIES", "compute,utility", "CMAKE_CUDA_ARCHITECTURES=70"):
        assert text in readme, text


# --- real tools, where this machine has them -------------------------------------------------

def _compose_command() -> list[str] | None:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    if legacy:
        out = subprocess.run([legacy, "version"], capture_output=True, text=True).stdout
        if re.search(r"v2\.", out):  # the Python docker-compose 1.x does not know this format
            return [legacy]
    return None


@pytest.mark.parametrize("files,profile", [([TEAM], None), ([GPU], None), ([SERVERS], "vllm-fp8"),
                                           ([GPU, SERVERS], "vllm-fp8")])
def test_docker_compose_config_accepts_the_files(tmp_path, files, profile):
    compose = _compose_command()
    if compose is None:
        pytest.skip("no docker compose v2 binary on PATH")
    env_file = tmp_path / "test.env"
    env_file.write_text("POSTGRES_PASSWORD=x\nREDIS_PASSWORD=y\nHOST_NAME=gpu1\n"
                        "DATABASE_URL=postgres://v100site:x@team:5432/v100site\n"
                        "CELERY_BROKER_URL=redis://:y@team:6379/0\n")
    cmd = compose + ["--env-file", str(env_file)]
    for f in files:
        cmd += ["-f", str(DOCKER / f)]
    if profile:
        cmd += ["--profile", profile]
    clean_env = {k: v for k, v in os.environ.items() if not re.fullmatch(r"[A-Z0-9_]+", k)
                 or k in ("PATH", "HOME", "DOCKER_HOST", "DOCKER_CONFIG")}

    def config_errors() -> str:
        result = subprocess.run(cmd + ["config", "-q"], capture_output=True, text=True, env=clean_env)
        # Some wrappers of the compose binary exit 0 on errors: read stderr too.
        failed = result.returncode != 0 or re.search(r"error|invalid|required", result.stderr, re.I)
        return result.stderr if failed else ""

    assert config_errors() == ""
    if TEAM in files:
        # Without the required passwords compose refuses to start, naming what is missing.
        env_file.write_text("")
        assert "PASSWORD" in config_errors()


def test_hadolint_accepts_the_dockerfile():
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("no hadolint on PATH")
    result = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
