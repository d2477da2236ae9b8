#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, CUDA and PyTorch: build llama-server with CUDA from the
# llama.cpp source vendored in the llama-cpp-python sdist, write a random-weight Qwen2 GGUF of
# the DeepSeek-R1-Distill-Qwen-7B shape (same size and speed as the real Q4_K_M; no download),
# serve it like the V100 write-up (-c 8192 --parallel 8 -ngl 99 --metrics) and measure it with
# the product's engine (scripts/gpu_check.py).
#   prepare SRC WORK : build into WORK and write WORK/qwen2-7b-q4_k_m.gguf (SRC: llama.cpp tree;
#                      CMAKE_EXTRA: more cmake flags, e.g. -DGGML_CUDA_FA=OFF for a build in minutes)
#   measure WORK OUT : serve and measure; the result JSON goes to OUT/
#   quality WORK OUT : the quality step's speed: perplexity by teacher forcing through the
#                      Q4_K_M server (--parallel 1, 8, 16), then against a Q8_0 reference of the
#                      same weights (both served at once); one JSON per pass in OUT/
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
case "${1:-}" in
  prepare)
    src=$2 work=$3; mkdir -p "$work"
    cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF ${CMAKE_EXTRA:-} >/dev/null
    cmake --build "$work/build" --target llama-server llama-quantize -j"$(nproc)" >/dev/null
    python3 "$HERE/gen_qwen2_random.py" "$src" "$work/qwen2-7b-f16.gguf" >/dev/null
    "$work/build/bin/llama-quantize" "$work/qwen2-7b-f16.gguf" "$work/qwen2-7b-q4_k_m.gguf" Q4_K_M >/dev/null 2>&1
    if [ -n "${WITH_Q8:-}" ]; then
      "$work/build/bin/llama-quantize" "$work/qwen2-7b-f16.gguf" "$work/qwen2-7b-q8_0.gguf" Q8_0 >/dev/null 2>&1
    fi
    rm -f "$work/qwen2-7b-f16.gguf"
    ls -la "$work"/*.gguf ;;
  measure)
    work=$2 out=$3
    "$work/build/bin/llama-server" -m "$work/qwen2-7b-q4_k_m.gguf" --host 127.0.0.1 --port 8090 \
      -c 8192 --parallel 8 -ngl 99 --metrics > "$out/llama-server.log" 2>&1 &
    pid=$!
    for _ in $(seq 120); do curl -sf http://127.0.0.1:8090/health >/dev/null && break; sleep 1; done
    python3 "$HERE/gpu_check.py" http://127.0.0.1:8090 --levels 1,8 --requests 16 --out "$out/gpu_check.json"
    kill $pid ;;
  quality)
    work=$2 out=$3
    serve() {  # PORT MODEL PARALLEL LOG
      "$work/build/bin/llama-server" -m "$2" --host 127.0.0.1 --port "$1" -c $((1024 * $3)) --parallel "$3" \
        -ngl 99 > "$4" 2>&1 &
      echo $!
      for _ in $(seq 180); do curl -sf "http://127.0.0.1:$1/health" >/dev/null && return; sleep 1; done
      echo "server on $1 did not start: $(tail -5 "$4")" >&2; exit 1
    }
    cd "$HERE/.."
    for parallel in ${PARALLELS:-1 8 16}; do
      pid=$(serve 8090 "$work/qwen2-7b-q4_k_m.gguf" "$parallel" "$out/server-p$parallel.log" | tail -1)
      python3 -m benchmarks.engine.quality http://127.0.0.1:8090 --backend llamacpp --json \
        > "$out/quality-p$parallel.json" || tail -20 "$out/server-p$parallel.log"
      kill "$pid"; wait "$pid" 2>/dev/null || true
    done
    if [ -f "$work/qwen2-7b-q8_0.gguf" ]; then
      a=$(serve 8090 "$work/qwen2-7b-q4_k_m.gguf" 8 "$out/server-q4.log" | tail -1)
      b=$(serve 8091 "$work/qwen2-7b-q8_0.gguf" 8 "$out/server-q8.log" | tail -1)
      python3 -m benchmarks.engine.quality http://127.0.0.1:8090 --backend llamacpp --json \
        --reference http://127.0.0.1:8091 > "$out/quality-vs-q8.json" || true
      kill "$a" "$b"
    fi ;;
  *) echo "usage: $0 prepare SRC WORK | measure WORK OUT | quality WORK OUT" >&2; exit 2 ;;
esac
