"""scripts/llm-servers.sh: a server that dies at start says why (its log tail and its exit
code or signal). A cache folder of its own holds stand-in binaries, so these run in seconds."""
import os
import stat
import subprocess
from pathlib import Path

import pytest

from conftest import LLM_SERVERS, free_port


def flavour() -> str:
    out = subprocess.run(["bash", "-c", f"source <(sed -n '/^cpu_flavour()/,/^}}/p' {LLM_SERVERS}); cpu_flavour"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pytest.fixture
def cache(tmp_path):
    """A cache whose build and model are 'done', with llama-server replaced by `script`."""
    version = "0.3.36"
    bindir = tmp_path / f"llama.cpp-{version}-{flavour()}" / "bin"
    bindir.mkdir(parents=True)
    (bindir / ".complete").touch()
    (tmp_path / "gemma-3-270m-q4_k_m.gguf").write_bytes(b"GGUF")

    def with_server(script: str) -> Path:
        for tool in ("llama-server", "llama-perplexity", "llama-quantize"):
            path = bindir / tool
            path.write_text("#!/bin/sh\n" + script if tool == "llama-server" else "#!/bin/sh\n")
            path.chmod(path.stat().st_mode | stat.S_IEXEC)
        return tmp_path
    return with_server


def serve(cache_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "LLM_SERVERS_CACHE": str(cache_dir), "LLAMA_CPP_PYTHON_VERSION": "0.3.36"}
    return subprocess.run(["bash", str(LLM_SERVERS), "serve", str(free_port())], env=env,
                          capture_output=True, text=True, timeout=60)


def test_a_server_killed_by_an_illegal_instruction_says_so_with_its_log(cache):
    # What a binary built for another CPU does: it starts, then the CPU refuses an instruction.
    done = serve(cache('echo "load_backend: loaded CPU backend from libggml-cpu.so"\nkill -ILL $$\n'))
    assert done.returncode != 0
    assert "died while starting" in done.stderr
    assert "load_backend: loaded CPU backend" in done.stderr  # the log tail
    assert "killed by signal SIGILL (4)" in done.stderr
    assert "built for another CPU" in done.stderr


def test_a_server_that_refuses_its_flags_shows_the_reason_and_code(cache):
    done = serve(cache('echo "error: invalid argument: --bogus" >&2\nexit 1\n'))
    assert done.returncode != 0
    assert "error: invalid argument: --bogus" in done.stderr
    assert "exited with code 1" in done.stderr
