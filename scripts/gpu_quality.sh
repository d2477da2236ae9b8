#!/usr/bin/env bash
# On the GPU machine: build llama-perplexity and llama-quantize with CUDA (sm_90) from ${LLAMA_SRC:-var/llsrc},
# then (step 2) a random-weight 7B-shaped Qwen2 GGUF as Q4_K_M and Q8_0, and time the lab's quality
# step by llama-perplexity on them with the default text and windows (16 of 512): the reference's
# file with --kl-divergence-base, the Q4_K_M with --kl-divergence.
set -euo pipefail
step=$1; W=/root/gq; mkdir -p $W
case $step in
  build)
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    t=$SECONDS
    cmake -S ${LLAMA_SRC:-var/llsrc} -B $W/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
      -DLLAMA_BUILD_APP=OFF > $W/cmake.log 2>&1 || { tail -30 $W/cmake.log; exit 1; }
    cmake --build $W/build --target llama-perplexity llama-quantize -j16 > $W/build.log 2>&1 || { tail -30 $W/build.log; exit 1; }
    echo "build $((SECONDS - t)) s"; ls $W/build/bin ;;
  measure)
    t=$SECONDS
    PYTHONPATH=${LLAMA_SRC:-var/llsrc}/gguf-py python3 scripts/gen_qwen2_random.py ${LLAMA_SRC:-var/llsrc} $W/f16.gguf > $W/gen.log 2>&1 || { tail -20 $W/gen.log; exit 1; }
    echo "f16 written $((SECONDS - t)) s"
    $W/build/bin/llama-quantize $W/f16.gguf $W/q4.gguf Q4_K_M > $W/q4.log 2>&1
    $W/build/bin/llama-quantize $W/f16.gguf $W/q8.gguf Q8_0 > $W/q8.log 2>&1
    rm -f $W/f16.gguf; ls -la $W/*.gguf; echo "quantized $((SECONDS - t)) s"
    PYTHONPATH=. python3 - <<'PY' | tee $OUT/gpu_quality_tool.json
import json, os, time
from benchmarks.engine import llama_perplexity as lp
from benchmarks.engine.quality import builtin_text, DEFAULT_CTX, DEFAULT_CHUNKS
W = "/root/gq"
text = W + "/text.txt"; open(text, "w", encoding="utf-8").write(builtin_text().text)
tool = W + "/build/bin/llama-perplexity"; base = W + "/base.kld"
out = {"what": "The lab's quality step by llama-perplexity on an NVIDIA H200: a random-weight Qwen2 of the "
               "DeepSeek-R1-Distill-Qwen-7B shape as Q8_0 (the reference, --kl-divergence-base) and Q4_K_M "
               "(--kl-divergence), the built-in text, the default windows; -ngl 99",
       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "passes": {}}
for name, model, compare in (("q8_0 (reference)", W + "/q8.gguf", False), ("q4_k_m", W + "/q4.gguf", True)):
    argv = lp.command(tool, model, text, DEFAULT_CTX, DEFAULT_CHUNKS, base=base, compare=compare) + ["-ngl", "99"]
    s = lp.run(argv, timeout_s=600)
    out["passes"][name] = {"seconds": round(s.seconds, 2), "perplexity": s.perplexity, "tokens_scored": s.tokens_scored,
                           "kl_mean": s.kl_mean, "kl_p99": s.kl_p99, "same_top_share": s.same_top_share,
                           "command": " ".join(argv[1:]).replace(W, "W")}
out["base_file_mib"] = round(os.path.getsize(base) / 2**20, 1)
print(json.dumps(out, indent=1))
PY
    ;;
esac
