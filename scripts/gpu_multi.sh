#!/usr/bin/env bash
# One GPU against two (a machine with two NVIDIA GPUs and CUDA): the product's own launcher starts the
# CUDA llama-server from recipes on GPU 0 (--split-mode none) and on GPUs 0,1 (--split-mode layer,
# row), for a 7B-shape and a 14B-shape random-weight Q4_K_M model, measured at 1, 8 and 32 users with
# each GPU's telemetry; the probe's topology beside `nvidia-smi topo -m` (scripts/gpu_multi.py).
#   deps DIR           : here, copy the engine's pure-Python packages into DIR (scripts/gpu_lab.sh deps)
#   prepare SRC WORK   : build the CUDA llama-server and the 7B-shape Q4_K_M (scripts/gpu_check.sh), then
#                        the 14B-shape one (DeepSeek-R1-Distill-Qwen-14B: 48 layers, hidden 5120, ffn 13824,
#                        40 heads, 8 KV heads)
#   measure WORK OUT [DEPS] : run it; OUT gets gpu_multi.json, gpu_multi.txt and nvidia-smi-topo.txt (keep
#                        them in benchmarks/engine/results/ as gpu_multi_<machine>.json and .txt)
# REQUESTS (default 32) sets the requests per level (at least twice its users).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
case "${1:-}" in
  deps) "$HERE/gpu_lab.sh" deps "${2:?folder}" ;;
  prepare)
    src=${2:?llama.cpp source} work=${3:?work folder}
    "$HERE/gpu_check.sh" prepare "$src" "$work"
    python3 "$HERE/gen_qwen2_random.py" "$src" "$work/qwen2-14b-f16.gguf" --layers 48 --hidden 5120 --ffn 13824 \
      --heads 40 --kv-heads 8 >/dev/null
    "$work/build/bin/llama-quantize" "$work/qwen2-14b-f16.gguf" "$work/qwen2-14b-q4_k_m.gguf" Q4_K_M >/dev/null 2>&1
    rm -f "$work/qwen2-14b-f16.gguf"
    ls -la "$work"/*.gguf ;;
  measure)
    work=${2:?work folder} out=${3:?output folder} deps=${4:-}
    mkdir -p "$out"
    if command -v nvidia-smi >/dev/null; then nvidia-smi topo -m > "$out/nvidia-smi-topo.txt" 2>&1 || true; fi
    PYTHONPATH=${deps:+$deps:}${PYTHONPATH:-} python3 "$HERE/gpu_multi.py" --server "$work/build/bin/llama-server" \
      --model "7b=$work/qwen2-7b-q4_k_m.gguf" --model "14b=$work/qwen2-14b-q4_k_m.gguf" \
      --requests "${REQUESTS:-32}" --out "$out/gpu_multi.json" | tee "$out/gpu_multi.txt" ;;
  *) echo "usage: $0 deps DIR | prepare SRC WORK | measure WORK OUT [DEPS]" >&2; exit 2 ;;
esac
