#!/usr/bin/env bash
# Issue 22 on the NVIDIA machine, one call: the cooperative-matrix conformance tests on the device,
# the f16 and bf16 GEMM sweeps (default path + specs) beside PyTorch on the same shapes, and the
# Llama-3-8B-shaped llm-bench (bf16 prefill 2048 and decode). Logs under $OUT, a short table last.
# Needs in $D (default .devbin): conformance (release test binary, optional), coop_sweep and
# coop_attention (release examples), kiln (release CLI); .gl/ shipped along. Env: TC_SPECS (sweep specs), TC_LLM=0 skips the llm-bench,
# TC_CONF=0 skips the conformance tests.
set -u
D=${D:-.devbin}
OUT=${OUT:-/tmp/tc-out}
mkdir -p "$OUT"
source bench/gpu/vulkan-env.sh
export KILN_REQUIRE_GPU=1 KILN_REQUIRE_COOP=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$OUT/gpu.txt" 2>&1
SECONDS=0
if [ "${TC_CONF:-1}" = 1 ] && [ -x "$D/conformance" ]; then
    timeout 240 "$D/conformance" coop_bf16_on_device coop_tiles_on_device coop_on_device sdpa linear matmul_2d \
        --include-ignored --test-threads 8 > "$OUT/conf.txt" 2>&1
    echo "conformance rc=$? ($SECONDS s)"; grep -E "test result|FAILED|panicked" "$OUT/conf.txt" | head -12
fi
SPECS=${TC_SPECS:-2x4:4x4:16:h4:deep 4x2:4x4:16:h4:deep 2x4:4x2:32:h4 4x2:4x4:16:h4}
for dt in f16 bf16; do
    KILN_SWEEP_DTYPE=$dt timeout 150 "$D/coop_sweep" $SPECS > "$OUT/sweep_$dt.txt" 2>&1
    echo "sweep $dt rc=$? ($SECONDS s)"
done
timeout 150 "$D/coop_attention" > "$OUT/attention.txt" 2>&1
echo "attention rc=$? ($SECONDS s)"
timeout 120 "$D/kiln" bench --device gpu --filter sdpa_causal,matmul_f16,matmul_bf16 > "$OUT/bench.txt" 2>&1
echo "bench rc=$? ($SECONDS s)"
timeout 90 python3 bench/gpu/torch_gemm.py > "$OUT/torch.txt" 2>&1
echo "torch rc=$? ($SECONDS s)"
if [ "${TC_LLM:-1}" = 1 ]; then
    W=/tmp/tc-8b
    python3 bench/llm/make_weights.py 8b $W > "$OUT/weights.txt" 2>&1
    echo "weights rc=$? ($SECONDS s)"
    timeout 200 "$D/kiln" llm-bench --model $W --device gpu --dtype bf16 --max-context 4160 --prefill 2048 \
        --contexts 512 --decode-tokens 16 > "$OUT/llm_8b_bf16.json" 2> "$OUT/llm_8b_bf16.err"
    echo "llm-bench rc=$? ($SECONDS s)"; tail -n 3 "$OUT/llm_8b_bf16.err"
fi
cat "$OUT/sweep_f16.txt" "$OUT/sweep_bf16.txt" "$OUT/attention.txt" "$OUT/bench.txt" "$OUT/torch.txt" 2>/dev/null | grep -v "^$"
cat "$OUT/llm_8b_bf16.json" 2>/dev/null | head -c 1500
