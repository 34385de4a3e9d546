#!/usr/bin/env bash
# Batched decode in one device call (issues 35 and 36): `kiln llm-bench --rows` on the 8B shape
# (random f16 weights written into memory by mem_gguf.py), in each dtype of DTYPES (bf16 f16): decode
# steps of 1, 8, 32 and 64 sequences at context 512 through a paged KV pool, as `kiln serve` runs
# them, with the per-kernel GPU profile of the largest batch's step. Issue 35's target: 8 rows at
# most 1.3x one row; issue 36's: what a 32- and a 64-row serving step spend, kernel by kernel. With
# CHECK=1 the whole GPU suite first (device_check.sh). Run from the repository root with .gl/,
# .lcpp/ (the gguf wheel) and .devbin.tar.xz carried. Writes $OUT/rows.txt and $OUT/rows_<dtype>.json.
#   ROWS (1,8,32,64), CONTEXT (512), STEPS (32), DTYPES (bf16 f16), TOP (kernels listed, 30)
set -u
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT" /tmp/site /tmp/m
[ -d .devbin ] || tar xJf .devbin.tar.xz
[ -n "${VK_DRIVER_FILES:-}" ] || source bench/gpu/vulkan-env.sh
log="$OUT/rows.txt"
if [ "${CHECK:-0}" = 1 ]; then
    bash bench/gpu/device_check.sh > "$OUT/device_check.txt" 2>&1
    echo "device_check rc=$?" >> "$OUT/device_check.txt"
    tail -4 "$OUT/device_check.txt"
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$log"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .lcpp/gguf-*.whl
export PYTHONPATH=/tmp/site
for dt in ${DTYPES:-bf16 f16}; do
    echo "== kiln llm-bench --dtype $dt --rows ${ROWS:-1,8,32,64}" >> "$log"
    json="$OUT/rows_$dt.json"
    DT=$dt JSON=$json timeout "${LIMIT:-280}" python3 bench/gpu/mem_gguf.py 8b /tmp/m/8b.gguf bash -c \
        '.devbin/kiln llm-bench --model "$MODEL" --device gpu --dtype "$DT" --prefill 512 \
         --contexts "${CONTEXT:-512}" --decode-tokens "${STEPS:-32}" --rows "${ROWS:-1,8,32,64}" > "$JSON"' \
        2>> "$log"
    echo "rc=$?" >> "$log"
    python3 bench/gpu/rows_summary.py "$json" "${TOP:-30}" >> "$log" 2>&1
done
cat "$log"
