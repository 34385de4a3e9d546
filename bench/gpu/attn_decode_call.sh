#!/usr/bin/env bash
# Issue 35's decode attention in one device call (one GPU): the whole GPU suite first
# (device_check.sh), the copy bandwidth, `kiln bench --filter sdpa_decode` with the lanes kernel
# (default), the slots kernel (both folded into one dispatch) and the two-dispatch path
# (KILN_DECODE_FOLD=0), a sweep of the keys per split (SPLITS), PyTorch's SDPA on the same cases
# (torch_ref.py), and the 8B-shaped f16 decode (llm-bench, per-kernel profile) with each kernel.
# Run from the repository root with .gl/, .lcpp/ (the gguf wheel) and .devbin.tar.xz carried.
# Writes $OUT/device_check.txt, $OUT/decode_attn.txt and $OUT/llm_8b_{lanes,slots}.json.
set -u
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT" /tmp/site
[ -d .devbin ] || tar xJf .devbin.tar.xz
[ -n "${VK_DRIVER_FILES:-}" ] || source bench/gpu/vulkan-env.sh
log="$OUT/decode_attn.txt"
if [ "${CHECK:-1}" = 1 ]; then
    bash bench/gpu/device_check.sh > "$OUT/device_check.txt" 2>&1
    echo "device_check rc=$?" >> "$OUT/device_check.txt"
    tail -4 "$OUT/device_check.txt"
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$log"
python3 bench/gpu/copy_bw.py >> "$log" 2>&1
kb() { timeout 120 .devbin/kiln bench --device gpu --filter "$1" 2>/dev/null | grep -E "sdpa_decode|^name" >> "$log"; }
# The lanes kernel (default) against the slots kernel, both folded, and the two-dispatch path.
for variant in "KILN_DECODE_KERNEL=lanes" "KILN_DECODE_KERNEL=slots" "KILN_DECODE_FOLD=0"; do
    echo "== kiln bench sdpa_decode, $variant" >> "$log"
    (export "$variant"; kb sdpa_decode)
done
for split in ${SPLITS:-64 128}; do
    echo "== KILN_DECODE_SPLIT=$split (lanes, folded)" >> "$log"
    KILN_DECODE_SPLIT=$split kb sdpa_decode_bf16_d128_kv512,sdpa_decode_bf16_d128_kv4096
done
echo "== torch SDPA" >> "$log"
(cd bench/gpu && timeout 120 python3 torch_ref.py --filter sdpa_decode) >> "$log" 2>&1
[ "${LLM:-1}" = 1 ] || exit 0
python3 -m pip install -q --no-index --no-deps --target /tmp/site .lcpp/gguf-*.whl
export PYTHONPATH=/tmp/site KILN=$PWD/.devbin/kiln OUTDIR=$OUT
cat > /tmp/llm.sh <<'SH'
for k in lanes slots; do
    echo "== llm-bench 8b f16, KILN_DECODE_KERNEL=$k" >> "$OUTDIR/decode_attn.txt"
    KILN_DECODE_KERNEL=$k timeout 150 "$KILN" llm-bench --model "$MODEL" --device gpu --dtype f16 --prefill 512 \
        --contexts 512,4096 --decode-tokens 32 > "$OUTDIR/llm_8b_$k.json" 2>> "$OUTDIR/decode_attn.txt"
done
SH
timeout 330 python3 bench/gpu/mem_gguf.py 8b /tmp/m/8b.gguf bash /tmp/llm.sh >> "$log" 2>&1
grep -E "loaded in|decode at|prefill of 512 tokens:" "$log" | tail -8
