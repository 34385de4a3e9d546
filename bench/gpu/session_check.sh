#!/usr/bin/env bash
# One device call for a change to GPU code: the whole GPU suite (device_check.sh), then `kiln bench`
# of the baseline build (.devbin/kiln_base, e.g. main before the change) and of this build
# (.devbin/kiln) on the same GPU, A B A B, joined by bench_ab.py. Run from the repository root with
# .gl/ and .devbin.tar.xz carried (bench/gpu/build_devbin.sh makes the tarball; copy a baseline
# `kiln` into .devbin/kiln_base before packing). BENCH_FILTER picks the bench rows, PAIRS the number of
# A B pairs (default 2; one pair when the check and two pairs would pass the 600 s a call may take).
set -u
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT"
[ -d .devbin ] || tar xJf .devbin.tar.xz
source bench/gpu/vulkan-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
bash bench/gpu/device_check.sh > "$OUT/check.txt" 2>&1
check_rc=$?
filter=${BENCH_FILTER:-matmul,linear,sdpa,decode,fused,qmatvec,rms_norm,softmax}
if [ -x .devbin/kiln_base ] && [ "${SKIP_BENCH:-0}" != 1 ]; then
    for i in $(seq 1 "${PAIRS:-2}"); do
        .devbin/kiln_base bench --device gpu --json --filter "$filter" > "$OUT/bench_a$i.json" 2>> "$OUT/bench.err"
        .devbin/kiln bench --device gpu --json --filter "$filter" > "$OUT/bench_b$i.json" 2>> "$OUT/bench.err"
    done
    python3 bench/gpu/bench_ab.py --a "$OUT"/bench_a*.json --b "$OUT"/bench_b*.json > "$OUT/bench_ab.txt" 2>&1
    tail -n 1 "$OUT/bench_ab.txt"
fi
grep -E "^FAIL|passed, .* failed|tests in" "$OUT/check.txt"
exit $check_rc
