#!/usr/bin/env bash
# On the NVIDIA machine, in one command: writes random-weight Llama-3.2-1B- and Llama-3-8B-shaped models
# (bf16 safetensors, generated on the GPU with torch), runs `kiln llm-bench` on each (bf16, and f16
# where KILN_DTYPES_<SHAPE> asks) and the transformers reference (PyTorch eager, bf16, `generate`
# greedy), and writes JSON plus a table (table.md) to $OUT.
# Needs: .devbin/kiln (release build), .gl/ (Vulkan loader debs), .whl/ (transformers and its
# pure-Python deps; torch and numpy are on the machine).
# Env: LLM_SHAPES (default "1b 8b"), LLM_8B_LAYERS (default 32: the real depth; fewer to save time),
#      KILN_DTYPES_1B (default "bf16 f16"), KILN_DTYPES_8B (default "bf16"), LLM_DECODE_TOKENS (32),
#      KILN_AUTOTUNE=1 to time matmul candidates first (adds time per shape bucket).
set -u
OUT=${OUT:-/tmp/kiln-llm-out}
mkdir -p "$OUT"
source bench/gpu/vulkan-env.sh
export KILN_REQUIRE_GPU=1
WORK=${LLM_WORK:-/tmp/kiln-llm-models}
mkdir -p "$WORK"
python3 -m pip install -q --no-index --no-deps --target /tmp/kiln-llm-py .whl/*.whl > "$OUT/pip.txt" 2>&1 || cat "$OUT/pip.txt"
export PYTHONPATH=/tmp/kiln-llm-py${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
N=${LLM_DECODE_TOKENS:-32}
for shape in ${LLM_SHAPES:-1b 8b}; do
    dir="$WORK/$shape"
    layers=""
    if [ "$shape" = 8b ]; then layers="--layers ${LLM_8B_LAYERS:-32}"; fi
    SECONDS=0
    python3 bench/llm/make_weights.py "$shape" "$dir" $layers 2>&1 | tail -n 2 | tee -a "$OUT/log.txt"
    case $shape in 1b) dtypes=${KILN_DTYPES_1B:-bf16 f16} ;; *) dtypes=${KILN_DTYPES_8B:-bf16} ;; esac
    for dt in $dtypes; do
        KILN_AUTOTUNE=${KILN_AUTOTUNE:-0} timeout 240 .devbin/kiln llm-bench --model "$dir" --device gpu --dtype "$dt" \
            --max-context 4160 --prefill 2048 --contexts 512,4096 --decode-tokens "$N" \
            > "$OUT/kiln_${shape}_$dt.json" 2> "$OUT/kiln_${shape}_$dt.err"
        echo "kiln $shape $dt rc=$? ($SECONDS s)" | tee -a "$OUT/log.txt"; tail -n 4 "$OUT/kiln_${shape}_$dt.err"
    done
    timeout 300 python3 bench/llm/hf_bench.py "$dir" --prefill 2048 --contexts 512,4096 --decode-tokens "$N" \
        > "$OUT/hf_$shape.json" 2> "$OUT/hf_$shape.err"
    echo "transformers $shape rc=$? ($SECONDS s)" | tee -a "$OUT/log.txt"; tail -n 3 "$OUT/hf_$shape.err"
    rm -rf "$dir"
done
python3 bench/llm/compare.py "$OUT"
