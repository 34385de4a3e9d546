#!/usr/bin/env bash
# Issue 36's few-row products in one device call (one GPU): the cooperative matmul sweep
# (examples/coop_sweep.rs, in .devbin/ through `EXAMPLES=coop_sweep bash bench/gpu/build_devbin.sh`)
# over the serving step's products at 16-96 rows (q/k/v, o, gate/up, down of the 8B shape), f16 and
# bf16: the default path, the tiles without a K split, and split K (`kN`) over several tile shapes;
# then PyTorch on the same shapes (torch_gemm.py). Optionally (SERVE=1) the serving benchmark
# (bench/serve/run_h100.sh on the 8B shape written by mem_gguf.py, 1/8/32/64 streams). Run from the
# repository root with .gl/, .lcpp/ and .devbin.tar.xz carried. Writes $OUT/skinny.txt (and
# $OUT/serve.txt with SERVE=1: the table, the per-level profile and, with SERVE_KERNEL_PROFILE=1,
# the per-kernel GPU time of a 1- and a 32-stream burst).
set -u
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT"
[ -d .devbin ] || tar xJf .devbin.tar.xz
[ -n "${VK_DRIVER_FILES:-}" ] || source bench/gpu/vulkan-env.sh
log="$OUT/skinny.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$log"
CASES=${CASES:-lin16x14336,lin32x14336,lin64x14336,lin96x14336,lin96x4096,lin32x6144,down32x4096}
SPECS=${SPECS:-"2x2:4x4:32:h4:deep:fast 2x2:4x4:32:h4:deep:fast:k2 2x2:4x4:32:h4:deep:fast:k4
1x4:2x2:32:h4:deep:fast 1x4:2x2:32:h4:deep:fast:k2 1x4:2x2:32:h4:deep:fast:k4 1x4:2x2:32:h4:deep:fast:k8
1x4:4x2:32:h4:deep:fast:k4 1x4:2x4:16:h4:deep:fast:k4 2x4:2x2:32:h4:deep:fast:k4 2x4:4x2:32:h4:deep:fast:k3"}
SECONDS=0
for dt in ${DTYPES:-f16 bf16}; do
    echo "== sweep $dt" >> "$log"
    KILN_SWEEP_DTYPE=$dt KILN_SWEEP_CASES=$CASES KILN_REQUIRE_GPU=1 \
        timeout "${SWEEP_LIMIT:-200}" .devbin/coop_sweep $SPECS >> "$log" 2>&1
    echo "sweep $dt rc=$? ($SECONDS s)" | tee -a "$log"
    echo "== default path with KILN_COOP_SPLIT=0, $dt" >> "$log"
    KILN_COOP_SPLIT=0 KILN_SWEEP_DTYPE=$dt KILN_SWEEP_CASES=$CASES timeout 60 .devbin/coop_sweep none 2>&1 \
        | grep "default" >> "$log"
done
echo "== torch" >> "$log"
timeout 120 python3 bench/gpu/torch_gemm.py 2>&1 | grep -E "lin16x|lin32x|lin64x|lin96x|down32x" >> "$log"
echo "torch ($SECONDS s)" | tee -a "$log"
if [ "${SERVE:-0}" = 1 ]; then
    # The 8B shape written into memory (mem_gguf.py: random f16 weights, served in bf16).
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .lcpp/gguf-*.whl
    sout=/tmp/serve-out
    mkdir -p "$sout" /tmp/m
    PYTHONPATH=/tmp/site OUT=$sout SERVE_KERNEL_PROFILE=${SERVE_KERNEL_PROFILE:-0} timeout "${SERVE_LIMIT:-300}" \
        python3 bench/gpu/mem_gguf.py 8b /tmp/m/8b.gguf bash -c 'SERVE_MODEL=$MODEL bash bench/serve/run_h100.sh .devbin' \
        > "$sout/run.txt" 2>&1
    echo "serve rc=$? ($SECONDS s)" | tee -a "$log"
    cat "$sout/serve_table.md" "$sout/serve_profile.txt" "$sout/load.txt" "$sout/serve_kernels.txt" \
        > "$OUT/serve.txt" 2>&1
    tail -n 20 "$sout/run.txt" >> "$OUT/serve.txt"
fi
