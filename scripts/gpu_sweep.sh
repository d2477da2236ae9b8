#!/usr/bin/env bash
# llama.cpp on one NVIDIA GPU across shapes and quantizations (scripts/gpu_sweep.py says what is
# measured), made for a GPU machine without network, in as few sessions as possible:
#   pack DIR            : here: DIR/llama.cpp-src.tar.xz (the llama.cpp source vendored in the
#                         llama-cpp-python sdist, trimmed to what a CUDA build of llama-server,
#                         llama-quantize, llama-bench and llama-batched-bench needs, with gguf-py and
#                         the Qwen2 vocab), DIR/deps (the engine's pure-Python packages and httptools,
#                         scripts/gpu_lab.sh deps) and, with BIN=BUILD/bin, DIR/llama-bin.tar.xz (a CUDA
#                         build made here: its binaries and shared libraries)
#   run DIR OUT [EARLIER.json] : there: use the carried build (when it runs there) or build one
#                         (-DGGML_CUDA_FA=OFF, sm_90, while the first F16s are written), then
#                         gpu_sweep.py, writing OUT/lab_sweep_h200.json after every step and level
#                         and its log to OUT/lab_sweep_h200.txt. EARLIER.json: measure only what it
#                         lacks. Everything stays under WORK (default /root/lab; the GGUFs on a tmpfs
#                         there) so that a second call on the same machine reuses it.
# BUDGET_S (default 550): seconds from the start of `run` by which the sweep is done; PLAN, STEPS
# as gpu_sweep.py's --plan and --steps.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=${SRC:-$HOME/.cache/llm-servers/llama_cpp_python-0.3.36/vendor/llama.cpp}
TOOLS="llama-server llama-quantize llama-bench llama-batched-bench"
CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_NATIVE=OFF
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_CUDA_FA=OFF"
case "${1:-}" in
  pack)
    dir=${2:?folder}; mkdir -p "$dir"
    tar -C "$SRC" -cJf "$dir/llama.cpp-src.tar.xz" --exclude='*/ggml-vulkan' --exclude='*/ggml-sycl' \
      --exclude='*/ggml-opencl' --exclude='*/ggml-metal' --exclude='*/ggml-hexagon' --exclude='*/ggml-cann' \
      --exclude='*/ggml-webgpu' --exclude='*/ggml-openvino' --exclude='*/ggml-et' --exclude='*/ggml-virtgpu' \
      --exclude='*/ggml-zdnn' --exclude='*/ggml-musa' --exclude='*/ggml-hip' --exclude='tools/ui/dist' \
      CMakeLists.txt cmake common ggml include src tools vendor gguf-py licenses LICENSE \
      models/ggml-vocab-qwen2.gguf scripts/ui-assets.cmake
    "$HERE/gpu_lab.sh" deps "$dir/deps" >/dev/null
    if [ -n "${BIN:-}" ]; then
      tar -C "$BIN" -cJf "$dir/llama-bin.tar.xz" $TOOLS $(cd "$BIN" && ls ./*.so* 2>/dev/null)
    fi
    du -sh "$dir"/* ;;
  run)
    carry=$(cd "${2:?carried folder}" && pwd) out=${3:?output folder} earlier=${4:-}
    t0=$(date +%s); deadline=$((t0 + ${BUDGET_S:-550}))
    work=${WORK:-/root/lab}; mkdir -p "$work/models" "$out"
    # A call on the same machine goes on from its own last state (newer than any carried file).
    [ -f "$work/state.json" ] && earlier=$work/state.json
    log=$out/lab_sweep_h200.txt
    say() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a "$log"; }
    say "resuming from: ${earlier:-nothing}"
    [ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
    for tool in cmake ninja; do
      command -v $tool >/dev/null || { d=$(python3 -c "import $tool, os; print(getattr($tool, 'BIN_DIR', None) or $tool.CMAKE_BIN_DIR)" 2>/dev/null) && export PATH=$PATH:$d; }
    done
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,power.draw --format=csv | tee -a "$log"
    # The GGUFs on a tmpfs (the machine's memory is larger than its disk and faster); else the disk.
    if ! mountpoint -q "$work/models"; then
      mount -t tmpfs -o size="${TMPFS_SIZE:-100g}" tmpfs "$work/models" 2>>"$log" || say "no tmpfs: the GGUFs go to disk"
    fi
    df -h "$work/models" / | tee -a "$log"
    [ -f "$work/src/CMakeLists.txt" ] || { mkdir -p "$work/src" && tar -C "$work/src" -xJf "$carry/llama.cpp-src.tar.xz"; }
    # The CUDA libraries the build needs at run time (cuBLAS from the toolkit or from a wheel).
    libs=$(for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu \
             $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
             [ -e "$d/libcublas.so.13" ] && echo -n "$d:"; done)
    export LD_LIBRARY_PATH="$work/bin:${libs}${LD_LIBRARY_PATH:-}"
    say "cuBLAS from: ${libs:-none found}"
    build_note=$(cat "$work/build_note.txt" 2>/dev/null)
    if [ -f "$carry/llama-bin.tar.xz" ]; then cp "$carry/llama-bin.tar.xz" "$work/llama-bin.tar.xz"
    elif ls "$carry"/llama-bin.tar.xz.part* >/dev/null 2>&1; then cat "$carry"/llama-bin.tar.xz.part* > "$work/llama-bin.tar.xz"; fi
    if [ ! -x "$work/bin/llama-server" ] && [ -f "$work/llama-bin.tar.xz" ]; then
      mkdir -p "$work/bin" && tar -C "$work/bin" -xJf "$work/llama-bin.tar.xz"
      if "$work/bin/llama-server" --version >>"$log" 2>&1; then
        say "the carried build runs here"
        build_note="carried build: $(cat "$work/bin/build_note.txt" 2>/dev/null || echo 'made elsewhere')"
        echo "$build_note" > "$work/build_note.txt"
      else
        say "the carried build does not run here: building"; rm -rf "$work/bin"
      fi
    fi
    gen=""
    if [ ! -x "$work/bin/llama-server" ]; then
      # Write the first F16s while the build runs (I/O, one core), so that they are ready with it.
      shapes=("7b 28 3584 18944 28 4" "3b 36 2048 11008 16 2")
      mountpoint -q "$work/models" && shapes+=("14b 48 5120 13824 40 8")  # memory enough for all three
      ( for s in "${shapes[@]}"; do
          set -- $s; f=$work/models/qwen2-$1-f16.gguf
          [ -e "$f" ] || [ -e "$work/models/qwen2-$1-q4_k_m.gguf" ] && continue
          python3 "$HERE/gen_qwen2_random.py" "$work/src" "$f.part" --layers $2 --hidden $3 --ffn $4 --heads $5 \
            --kv-heads $6 --tile --name "random-qwen2.5-$1-shape" $([ "$1" = 3b ] && echo --tied) && mv "$f.part" "$f"
        done ) >>"$log" 2>&1 &
      gen=$!
      tb=$(date +%s)
      # shellcheck disable=SC2086
      cmake -S "$work/src" -B "$work/build" -G Ninja $CMAKE_FLAGS >"$work/configure.log" 2>&1 &&
        cmake --build "$work/build" --target $TOOLS -j"$(nproc)" >"$work/build.log" 2>&1
      rc=$?
      say "build: rc $rc in $(( $(date +%s) - tb )) s"
      if [ $rc -ne 0 ]; then tail -n 30 "$work/configure.log" "$work/build.log" | tee -a "$log"; exit 1; fi
      mkdir -p "$work/bin"; cp "$work/build/bin/"* "$work/bin/"
      build_note="built on this GPU machine in $(( $(date +%s) - tb )) s ($(nproc) cores; the F16s written meanwhile): cmake $(echo $CMAKE_FLAGS)"
      echo "$build_note" > "$work/build_note.txt"; cp "$work/build_note.txt" "$work/bin/"
      # The build comes back too (OUT/llama-bin.tar.xz, in 15 MB pieces when larger), for a later
      # call on a fresh machine to carry; packed while the first models are quantized.
      ( cd "$work/bin" && tar -cf - $TOOLS build_note.txt ./*.so* | xz -T4 -6 > "$out/llama-bin.tar.xz" &&
        if [ "$(stat -c %s "$out/llama-bin.tar.xz")" -gt 15000000 ]; then
          split -b 15000000 -d "$out/llama-bin.tar.xz" "$out/llama-bin.tar.xz.part" && rm "$out/llama-bin.tar.xz"; fi ) &
    fi
    [ -n "$gen" ] && { wait "$gen"; say "F16s written: $(ls "$work/models")"; }
    cd "$HERE/.." || exit 1
    PYTHONUNBUFFERED=1 PYTHONPATH="$carry/deps${PYTHONPATH:+:$PYTHONPATH}" python3 "$HERE/gpu_sweep.py" \
      --bin "$work/bin" --src "$work/src" --work "$work/models" --out "$out/lab_sweep_h200.json" \
      --deadline "$deadline" ${earlier:+--resume "$earlier"} --mirror "$work/state.json" ${PLAN:+--plan "$PLAN"} ${STEPS:+--steps "$STEPS"} \
      --source-note "llama-cpp-python 0.3.36 sdist, vendor/llama.cpp" --build-note "$build_note" 2>&1 | tee -a "$log"
    ;;
  *) echo "usage: $0 pack DIR | run DIR OUT [EARLIER.json]" >&2; exit 2 ;;
esac
