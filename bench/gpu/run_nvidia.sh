#!/usr/bin/env bash
# On the NVIDIA machine (see ../../docs/PERFORMANCE.md): runs the GPU conformance suite and runtime
# tests on the NVIDIA Vulkan driver, then kiln's GPU benchmark and the PyTorch reference over the same
# shapes, and prints the joined table (bench/gpu/compare.py). Everything lands under $OUT.
# Expects release binaries in .devbin/ (built on the x86-64 build machine) and the Vulkan loader
# packages in .gl/ (../../../shared/device/prepare-vulkan.sh).
# Usage: run_nvidia.sh [all|tests|bench] [kiln bench args...]
set -u
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT"
what=${1:-all}
shift || true
source bench/gpu/vulkan-env.sh
export KILN_REQUIRE_GPU=1 KILN_REQUIRE_COOP=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
.devbin/kiln info > "$OUT/info.txt" 2>&1
if [ "$what" = all ] || [ "$what" = tests ]; then
    # --include-ignored: `coop_on_device` is ignored by default (it needs cooperative matrices).
    .devbin/conformance --include-ignored --test-threads 4 > "$OUT/conformance.txt" 2>&1; echo "conformance rc=$?" >> "$OUT/conformance.txt"
    .devbin/gpu_runtime --test-threads 1 > "$OUT/gpu_runtime.txt" 2>&1; echo "gpu_runtime rc=$?" >> "$OUT/gpu_runtime.txt"
    for f in conformance gpu_runtime; do grep -E "^test result|FAILED|panicked" "$OUT/$f.txt" | head -20; tail -n 1 "$OUT/$f.txt"; done
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
    KILN_AUTOTUNE=1 .devbin/kiln bench --device gpu --json "$@" > "$OUT/kiln_gpu.json" 2> "$OUT/kiln_gpu.err"
    python3 bench/gpu/torch_ref.py "$@" > "$OUT/torch.json" 2> "$OUT/torch.err"
    python3 bench/gpu/compare.py "$OUT/kiln_gpu.json" "$OUT/torch.json" > "$OUT/compare.txt" 2>&1
    tail -n 3 "$OUT/kiln_gpu.err" "$OUT/torch.err"
    cat "$OUT/compare.txt"
fi
