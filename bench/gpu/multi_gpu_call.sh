#!/usr/bin/env bash
# Issue 37 part 2 on a machine with two GPUs (nvidia-h200-x2 or -h100-x2), one device call per PART,
# from the repository root with .gl/, .lcpp/ (for the gguf wheel) and .devbin.tar.xz carried. The
# models are written into memory by bench/gpu/mem_gguf.py (the machine's disk is smaller than a 70B
# model). Everything goes to $OUT/multi_gpu.txt, the llm-bench runs to $OUT/llm_*.json.
#   PART=8b:  the 8B shape (f16) on one GPU and split over two (llm-bench: prefill 2048, decode at
#             512 and 4096), greedy text equal both ways, then `kiln serve --devices gpu:0,gpu:1`
#             under bench/serve/load.py (1, 8 and 32 streams).
#   PART=70b: a Llama-3.1-70B-shaped model (141 GB of f16 weights, bf16 on the GPUs) with a 65,536
#             position context: refused on one GPU before loading, then greedy text on two GPUs (the
#             split by free memory) with its prefill and decode tokens/s.
set -u
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT" /tmp/site
[ -d .devbin ] || tar xJf .devbin.tar.xz
[ -n "${VK_DRIVER_FILES:-}" ] || source bench/gpu/vulkan-env.sh
python3 -m pip install -q --no-index --no-deps --target /tmp/site .lcpp/gguf-*.whl
export PYTHONPATH=/tmp/site KILN=$PWD/.devbin/kiln OUTDIR=$OUT
log="$OUT/multi_gpu.txt"
{
    nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv,noheader
    "$KILN" info 2>&1 | grep -E "^  gpu|memory:"
    free -g | head -2
    df -h / /tmp | tail -2
} >> "$log"

# text NAME ARGS...: greedy `kiln generate` of NTOK (24) tokens; stdout to $OUT/text_NAME.txt, stderr to the log.
cat > /tmp/text.sh <<'SH'
name=$1; shift
echo "== generate $name: $*" >> "$OUTDIR/multi_gpu.txt"
timeout 400 "$KILN" generate --model "$MODEL" --prompt "The kiln fires clay pots slowly" --max-tokens "${NTOK:-24}" \
    --temperature 0 "$@" > "$OUTDIR/text_$name.txt" 2>> "$OUTDIR/multi_gpu.txt"
echo "rc=$?" >> "$OUTDIR/multi_gpu.txt"
SH

if [ "${PART:-8b}" = 8b ]; then
    cat > /tmp/part.sh <<'SH'
bench() {
    local name=$1; shift
    echo "== llm-bench 8b $name: $*" >> "$OUTDIR/multi_gpu.txt"
    timeout 240 "$KILN" llm-bench --model "$MODEL" --dtype f16 --prefill 2048 --contexts 512,4096 \
        --decode-tokens 32 "$@" > "$OUTDIR/llm_8b_$name.json" 2>> "$OUTDIR/multi_gpu.txt"
    echo "rc=$?" >> "$OUTDIR/multi_gpu.txt"
}
bench 1gpu --device gpu:0
bench 2gpu --devices gpu:0,gpu:1
bash /tmp/text.sh 8b_1gpu --device gpu:0 --dtype f16
bash /tmp/text.sh 8b_2gpu --devices gpu:0,gpu:1 --dtype f16
cmp -s "$OUTDIR/text_8b_1gpu.txt" "$OUTDIR/text_8b_2gpu.txt" && echo "8b text: 1 GPU == 2 GPUs" >> "$OUTDIR/multi_gpu.txt" \
    || echo "8b text: 1 GPU != 2 GPUs" >> "$OUTDIR/multi_gpu.txt"
# Serving split over both GPUs (bf16, as bench/serve/run_h100.sh).
PORT=18431
"$KILN" serve --model "$MODEL" --devices gpu:0,gpu:1 --dtype bf16 --host 127.0.0.1 --port $PORT --max-batch 32 \
    --max-queue 128 --max-context 2048 --kv-positions 17408 > /tmp/server.log 2>&1 &
SERVER=$!
for _ in $(seq 240); do
    python3 -c "import http.client,sys; c=http.client.HTTPConnection('127.0.0.1',$PORT,timeout=2); c.request('GET','/health'); sys.exit(c.getresponse().status!=200)" 2>/dev/null && break
    kill -0 $SERVER 2>/dev/null || break
    sleep 1
done
echo "== kiln serve --devices gpu:0,gpu:1 (8B bf16), load.py" >> "$OUTDIR/multi_gpu.txt"
timeout 200 python3 bench/serve/load.py --url http://127.0.0.1:$PORT --streams 1,8,32 --max-tokens 64 \
    --markdown >> "$OUTDIR/multi_gpu.txt" 2>&1
kill -INT $SERVER; wait $SERVER
grep -a -E "model:|memory estimate|loaded in|warmed up|listening|error" /tmp/server.log | head -8 >> "$OUTDIR/multi_gpu.txt"
SH
    timeout 560 python3 bench/gpu/mem_gguf.py 8b /tmp/m/8b.gguf bash /tmp/part.sh >> "$log" 2>&1
else
    cat > /tmp/part.sh <<'SH'
echo "== one GPU: must be refused before loading" >> "$OUTDIR/multi_gpu.txt"
timeout 120 "$KILN" generate --model "$MODEL" --device gpu:0 --dtype bf16 --max-context 65536 --prompt hi \
    --max-tokens 2 >> "$OUTDIR/multi_gpu.txt" 2>&1
echo "rc=$?" >> "$OUTDIR/multi_gpu.txt"
# One load (141 GB): greedy text with its prefill and decode tokens/s.
NTOK=48 bash /tmp/text.sh 70b_2gpu --devices gpu:0,gpu:1 --dtype bf16 --max-context 65536
SH
    timeout 580 python3 bench/gpu/mem_gguf.py 70b /tmp/m/70b.gguf bash /tmp/part.sh >> "$log" 2>&1
fi
echo "part ${PART:-8b} done, rc=$?" >> "$log"
tail -5 "$log"
