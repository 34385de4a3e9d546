#!/usr/bin/env bash
# Issue 22 exploration on the NVIDIA machine, one call: the cooperative matmul sweep (examples/
# coop_sweep.rs) over the given specs and cases, f16 then (optionally) bf16, with the ablation specs
# that show where the time goes, beside PyTorch. Needs $D/coop_sweep (release example) and .gl/.
# Env: SPECS (space-separated), CASES (KILN_SWEEP_CASES list), DTYPES (default "f16"), TORCH=0 skips it.
set -u
D=${D:-.devbin}
OUT=${OUT:-/tmp/explore-out}
mkdir -p "$OUT"
source bench/gpu/vulkan-env.sh
export KILN_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$OUT/gpu.txt" 2>&1
SECONDS=0
for dt in ${DTYPES:-f16}; do
    KILN_SWEEP_DTYPE=$dt KILN_SWEEP_CASES=${CASES:-sq4096,lin2048x4096,lin512x11008} \
        timeout ${SWEEP_LIMIT:-300} "$D/coop_sweep" ${SPECS:-} > "$OUT/sweep_$dt.txt" 2>&1
    echo "sweep $dt rc=$? ($SECONDS s)"
done
if [ "${TORCH:-1}" = 1 ]; then
    timeout 90 python3 bench/gpu/torch_gemm.py > "$OUT/torch.txt" 2>&1
    echo "torch rc=$? ($SECONDS s)"
fi
cat "$OUT"/gpu.txt "$OUT"/sweep_*.txt "$OUT/torch.txt" 2>/dev/null | grep -v "^$"
