#!/usr/bin/env bash
# The lab on a machine with an NVIDIA GPU and CUDA: the product's own launcher (Django-free) starts
# the CUDA llama-server from a recipe, swept over --parallel, and writes start-up, memory (pynvml) and
# speed per setting, plus one recipe that cannot fit (what "did not start" records), to OUT/gpu_lab.json.
#   deps DIR           : here, copy the engine's pure-Python packages (httpx and what it needs, pynvml,
#                        prometheus_client) from this venv into DIR, and httptools' wheel for the GPU
#                        machine's Python (TARGET_PYTHON, default 3.12), for a GPU machine without network
#   prepare SRC WORK   : build the CUDA llama-server and the random-weight 7B Q4_K_M GGUF (scripts/gpu_check.sh)
#   measure WORK OUT [DEPS] : run scripts/gpu_lab.py against them (DEPS: the folder `deps` made)
# PARALLEL (default 1,8) and REQUESTS (default 16) set the sweep and the requests per level; NO_FAILURE=1
# leaves out the recipe that cannot fit.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
case "${1:-}" in
  deps)
    dir=${2:?folder}; mkdir -p "$dir"
    site=$("${PYTHON:-$HERE/../.venv/bin/python}" -c "import httpx, os; print(os.path.dirname(os.path.dirname(httpx.__file__)))")
    for p in httpx httpcore h11 anyio sniffio idna certifi prometheus_client pynvml.py; do
      [ -e "$site/$p" ] && cp -r "$site/$p" "$dir/"
    done
    # httptools (the engine's HTTP/1.1 client) is compiled: its wheel for the GPU machine's Python
    # (TARGET_PYTHON, default 3.12), unpacked beside the pure-Python packages.
    version=$(grep -E '^httptools==' "$HERE/../requirements.txt" | cut -d= -f3)
    "${PYTHON:-$HERE/../.venv/bin/python}" -m pip download -q "httptools==$version" --only-binary=:all: \
      --python-version "${TARGET_PYTHON:-3.12}" --platform manylinux_2_17_x86_64 --platform manylinux_2_5_x86_64 \
      -d "$dir/.wheels"
    "${PYTHON:-$HERE/../.venv/bin/python}" -c "import glob, sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in glob.glob(sys.argv[1] + '/.wheels/httptools-*.whl')]" "$dir"
    ls "$dir" ;;
  prepare) "$HERE/gpu_check.sh" prepare "${2:?llama.cpp source}" "${3:?work folder}" ;;
  measure)
    work=${2:?work folder} out=${3:?output folder} deps=${4:-}
    mkdir -p "$out"
    PYTHONPATH=${deps:+$deps:}${PYTHONPATH:-} python3 "$HERE/gpu_lab.py" --server "$work/build/bin/llama-server" \
      --model "$work/qwen2-7b-q4_k_m.gguf" --parallel "${PARALLEL:-1,8}" --requests "${REQUESTS:-16}" ${NO_FAILURE:+--no-failure} \
      --out "$out/gpu_lab.json" | tee "$out/gpu_lab.txt" ;;
  *) echo "usage: $0 deps DIR | prepare SRC WORK | measure WORK OUT [DEPS]" >&2; exit 2 ;;
esac
