#!/usr/bin/env bash
# One device call for the LLM-level numbers: writes the Llama-3-8B-shaped random bf16 model once
# (bench/serve/make_model.py), runs `kiln llm-bench` on it (prefill of 2048 tokens, decode at context
# 512), then the serving table (bench/serve/run_h100.sh on the same model), then the fusion rows of
# `kiln bench` beside PyTorch eager and torch.compile (bench/gpu/torch_fusion.py). Logs under $OUT,
# the short results last. Needs $D/kiln (release CLI) and .gl/.
#   Env: D (.devbin), LLM=0 / SERVE=0 / FUSION=0 / TORCH=0 skip a part; MODEL_LIMIT, LLM_LIMIT,
#   FUSION_LIMIT, SERVE_LIMIT (seconds), FUSION_FILTER (kiln bench --filter); SERVE_* reach run_h100.sh.
set -u
D=${D:-.devbin}
D=$(cd "$D" && pwd)
OUT=${OUT:-/tmp/llm-serve-out}
mkdir -p "$OUT"
source bench/gpu/vulkan-env.sh
export KILN_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
SECONDS=0
M=/tmp/kiln-8b
timeout ${MODEL_LIMIT:-600} python3 bench/serve/make_model.py 8b "$M" > "$OUT/make_model.txt" 2>&1
echo "model rc=$? ($SECONDS s)"
if [ "${LLM:-1}" = 1 ]; then
    timeout ${LLM_LIMIT:-240} "$D/kiln" llm-bench --model "$M" --device gpu --dtype bf16 --max-context 4160 --prefill 2048 \
        --contexts 512 --decode-tokens 32 > "$OUT/llm_8b_bf16.json" 2> "$OUT/llm_8b_bf16.err"
    echo "llm-bench rc=$? ($SECONDS s)"; tail -n 4 "$OUT/llm_8b_bf16.err"
fi
if [ "${FUSION:-1}" = 1 ]; then
    timeout ${FUSION_LIMIT:-120} "$D/kiln" bench --device gpu --filter ${FUSION_FILTER:-fused,eager_,kiln_,launch_} > "$OUT/fusion.txt" 2>&1
    echo "fusion bench rc=$? ($SECONDS s)"
    [ "${TORCH:-1}" = 1 ] && timeout 120 python3 bench/gpu/torch_fusion.py > "$OUT/torch_fusion.txt" 2>&1
    echo "torch fusion rc=$? ($SECONDS s)"
fi
if [ "${SERVE:-1}" = 1 ]; then
    SERVE_MODEL=$M SERVE_KERNEL_PROFILE=${SERVE_KERNEL_PROFILE:-0} OUT=$OUT timeout ${SERVE_LIMIT:-420} bash bench/serve/run_h100.sh "$D" > "$OUT/serve_run.txt" 2>&1
    echo "serve rc=$? ($SECONDS s)"
fi
cat "$OUT/fusion.txt" "$OUT/torch_fusion.txt" 2>/dev/null | grep -v "^$" | tail -n 40
cat "$OUT/serve_table.md" "$OUT/serve_profile.txt" 2>/dev/null | head -n 30
python3 -c "
import json,sys
d=json.load(open('$OUT/llm_8b_bf16.json'))
print(json.dumps({k:v for k,v in d.items() if k!='profile'}, indent=None)[:1500])
" 2>/dev/null
