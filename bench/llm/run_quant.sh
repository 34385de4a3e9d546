#!/usr/bin/env bash
# On the NVIDIA machine: issue 13's decode table. Writes the random-weight Llama-3-8B-shaped model
# (bf16, make_weights.py), runs `kiln llm-bench` on it in bf16 and with its projections quantized at
# load (`--quantize q8_0`, `q4_k`), measures the copy bandwidth with torch, and writes the table
# (quant_table.py: tokens/s against the ceiling of the bytes each run reads) to $OUT.
# Needs .devbin/kiln (release build) and .gl/. Env: LLM_SHAPE (8b), LLM_LAYERS (the shape's),
# KILN_QUANTS ("none q8_0 q4_k"), LLM_PREFILL (2048), LLM_CONTEXTS (512,4096).
set -u
OUT=${OUT:-/tmp/kiln-llm-out}
mkdir -p "$OUT"
source bench/gpu/vulkan-env.sh
export KILN_REQUIRE_GPU=1
shape=${LLM_SHAPE:-8b}
dir=${LLM_WORK:-/tmp/kiln-llm-models}/$shape
layers=${LLM_LAYERS:+--layers $LLM_LAYERS}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
SECONDS=0
[ -f "$dir/config.json" ] || python3 bench/llm/make_weights.py "$shape" "$dir" $layers 2>&1 | tail -n 2 | tee -a "$OUT/log.txt"
python3 - > "$OUT/bandwidth.json" <<'PY'
import json, torch
x = torch.empty(1 << 28, dtype=torch.float32, device="cuda")
for _ in range(3):
    x.clone()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(20):
    x.clone()
e.record()
torch.cuda.synchronize()
print(json.dumps({"copy_bandwidth_bytes_per_sec": 20 * 2 * x.numel() * 4 / (s.elapsed_time(e) / 1e3),
                  "device": torch.cuda.get_device_name(), "torch": torch.__version__}))
PY
for q in ${KILN_QUANTS:-none q8_0 q4_k}; do
    flag=""
    [ "$q" = none ] || flag="--quantize $q"
    timeout 300 .devbin/kiln llm-bench --model "$dir" --device gpu --dtype bf16 $flag --max-context 4160 \
        --prefill "${LLM_PREFILL:-2048}" --contexts "${LLM_CONTEXTS:-512,4096}" --decode-tokens 32 \
        > "$OUT/kiln_${shape}_$q.json" 2> "$OUT/kiln_${shape}_$q.err"
    echo "kiln $shape $q rc=$? ($SECONDS s)" | tee -a "$OUT/log.txt"; grep -v XDG "$OUT/kiln_${shape}_$q.err" | tail -n 5
done
python3 bench/llm/quant_table.py "$OUT" "$shape"
