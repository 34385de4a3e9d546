#!/usr/bin/env bash
# On the NVIDIA machine: the quantized-weight conformance tests (tests/conformance/quant.rs) on the
# NVIDIA Vulkan driver, then the quantized matrix-vector benchmark (`qmatvec_*`: M = 1, 4096x4096 and
# 14336x4096 in Q8_0, Q4_0, Q4_K, Q6_K), whose limit column is GB/s of the packed weight over the
# copy bandwidth (target: >= 80%). Expects .devbin/kiln and .devbin/conformance (release builds) and
# .gl/ as run_nvidia.sh does. Output lands under $OUT.
set -u
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT"
source bench/gpu/vulkan-env.sh
export KILN_REQUIRE_GPU=1
.devbin/conformance quant > "$OUT/quant_conformance.txt" 2>&1
echo "quant conformance rc=$?" >> "$OUT/quant_conformance.txt"
grep -E "^test result|FAILED|panicked" "$OUT/quant_conformance.txt" | head -20
.devbin/kiln bench --device gpu --filter qmatvec "$@" 2> "$OUT/quant_bench.err" | tee "$OUT/quant_bench.txt"
.devbin/kiln bench --device gpu --filter qmatvec --json "$@" > "$OUT/quant_bench.json" 2>> "$OUT/quant_bench.err"
