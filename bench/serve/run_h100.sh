#!/usr/bin/env bash
# The serving benchmark of issue 24, in one command on the NVIDIA machine (from the project's root):
# writes the Llama-3-8B-shaped random-weight model (bf16, numpy only: bench/serve/make_model.py),
# starts `kiln serve` on it (GPU, bf16) on a free localhost port, runs bench/serve/load.py at 1, 8, 32
# and 64 concurrent streams (stdlib HTTP client), and writes $OUT/serve_table.md (the markdown table),
# $OUT/serve_load.json, $OUT/serve_profile.txt (the scheduler's per-step profile of each level: host
# time by phase, rows per step, dispatches, kernels compiled), the server's log and the load
# generator's. Then, unless SERVE_KERNEL_PROFILE=0, a second, short pass (a new server with
# KILN_PROFILE=1: every kernel timed, which serialises the GPU, so its speed means nothing) at 1 and
# 32 streams (16 tokens each) writes the per-kernel GPU time of each level to $OUT/serve_kernels.txt.
#
#   bash bench/serve/run_h100.sh BIN_DIR        BIN_DIR holds the release `kiln` binary
#
# Env: SERVE_SHAPE (8b; tiny/mid/1b for a quick try), SERVE_LAYERS (the shape's depth), SERVE_DEVICE
#      (gpu), SERVE_DTYPE (bf16), SERVE_STREAMS (1,8,32,64), SERVE_MAX_TOKENS (128),
#      SERVE_PROMPT_WORDS (32), SERVE_MODEL (an existing model folder: skips writing one),
#      SERVE_LOAD_TIMEOUT (seconds to wait for the server, 600), SERVE_PROFILE (KILN_SERVE_PROFILE of
#      the main pass: 1 = a line per level, no extra waits; sync = wait for the GPU after each forward
#      pass to split its time out; steps = sync plus a line per step), SERVE_KERNEL_PROFILE (1),
#      SERVE_EXTRA (more `kiln serve` arguments, e.g. "--prefill-chunk 1024" or "--warmup false").
#      The environment reaches the servers: KILN_FUSED_ROWS=8 (batched passes of up to 8 rows on the
#      fused decode kernels; default 1) is an A/B worth a run.
# Every step is bounded by a timeout; the servers are stopped at the end.
set -u
BIN=${1:?usage: run_h100.sh BIN_DIR (the folder holding the release kiln binary)}
BIN=$(cd "$BIN" && pwd)
OUT=${OUT:-/tmp/kiln-serve-out}
mkdir -p "$OUT"
[ -d .gl ] && [ -f bench/gpu/vulkan-env.sh ] && source bench/gpu/vulkan-env.sh
SHAPE=${SERVE_SHAPE:-8b}
STREAMS=${SERVE_STREAMS:-1,8,32,64}
MAXB=$(echo "$STREAMS" | tr ',' '\n' | sort -n | tail -n 1)
WORK=${SERVE_WORK:-/tmp/kiln-serve-model}
MODEL=${SERVE_MODEL:-}
if [ -z "$MODEL" ]; then
    MODEL="$WORK/$SHAPE"
    layers=""
    [ -n "${SERVE_LAYERS:-}" ] && layers="--layers $SERVE_LAYERS"
    timeout 900 python3 bench/serve/make_model.py "$SHAPE" "$MODEL" $layers 2>&1 | tee "$OUT/make_model.txt" || exit 1
fi

SERVER=""
PORT=""
stop() {
    [ -n "$SERVER" ] || return 0
    kill -INT "$SERVER" 2>/dev/null
    for _ in $(seq 30); do kill -0 "$SERVER" 2>/dev/null || { SERVER=""; return 0; }; sleep 1; done
    kill -KILL "$SERVER" 2>/dev/null
    SERVER=""
}
trap stop EXIT

# start LOG [ENV=VALUE ...]: starts `kiln serve` (max-batch and the KV pool hold every stream of the
# largest level at once: (prompt + answer) <= 512 positions each; the server warms its kernels up
# before it listens) and waits until /health answers. Sets SERVER and PORT.
start() {
    local log=$1
    shift
    PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    env "$@" "$BIN/kiln" serve --model "$MODEL" --device "${SERVE_DEVICE:-gpu}" --dtype "${SERVE_DTYPE:-bf16}" \
        --host 127.0.0.1 --port "$PORT" --max-batch "$MAXB" --max-queue 256 --max-context 2048 \
        --kv-positions $((MAXB * 512 + 1024)) ${SERVE_EXTRA:-} > "$log" 2>&1 &
    SERVER=$!
    local t0=$SECONDS
    for _ in $(seq "${SERVE_LOAD_TIMEOUT:-600}"); do
        if python3 -c "import http.client,sys; c=http.client.HTTPConnection('127.0.0.1',$PORT,timeout=2); c.request('GET','/health'); sys.exit(c.getresponse().status!=200)" 2>/dev/null; then
            echo "server up after $((SECONDS - t0)) s (model load and warm-up included)" | tee -a "$OUT/load.txt"
            return 0
        fi
        kill -0 "$SERVER" 2>/dev/null || break
        sleep 1
    done
    echo "kiln serve did not come up; its log:" | tee -a "$OUT/load.txt"
    tail -n 30 "$log"
    return 1
}

: > "$OUT/load.txt"
start "$OUT/server.log" KILN_SERVE_PROFILE="${SERVE_PROFILE:-1}" || exit 1
args=(--url "http://127.0.0.1:$PORT" --streams "$STREAMS" --max-tokens "${SERVE_MAX_TOKENS:-128}"
      --prompt-words "${SERVE_PROMPT_WORDS:-32}" --timeout 300)
timeout 1200 python3 bench/serve/load.py "${args[@]}" --json > "$OUT/serve_load.json" 2>> "$OUT/load.txt"
rc=$?
curl -s "http://127.0.0.1:$PORT/metrics" > "$OUT/metrics.txt" 2>/dev/null || true
stop
python3 - "$OUT/serve_load.json" > "$OUT/serve_table.md" <<'EOF'
import json, sys
sys.path.insert(0, "bench/serve")
from load import markdown
print(markdown(json.load(open(sys.argv[1]))))
EOF
{
    echo
    echo "kiln serve, $SHAPE shape (random weights), ${SERVE_DTYPE:-bf16} on ${SERVE_DEVICE:-gpu}:" \
         "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)," \
         "${SERVE_PROMPT_WORDS:-32}-token prompts, ${SERVE_MAX_TOKENS:-128} tokens per stream, greedy"
} >> "$OUT/serve_table.md"
# The per-level profile: load.py's 4-token warm-up request, then one line per level, in order.
{
    echo "Levels in order: load.py's warm-up request (1 stream, 4 tokens), then streams $STREAMS."
    echo "Per step: host ms by phase (forward = recording the kernels; with SERVE_PROFILE=1 the GPU's"
    echo "time is inside readback, with sync it is gpu), rows, dispatches, kernels compiled."
    grep -a -E "warmed up|warm-up failed|kiln serve: (profile|step)" "$OUT/server.log"
} > "$OUT/serve_profile.txt"

if [ "${SERVE_KERNEL_PROFILE:-1}" = 1 ]; then
    KSTREAMS=$((MAXB < 32 ? MAXB : 32))
    if start "$OUT/server_kernels.log" KILN_SERVE_PROFILE=1 KILN_PROFILE=1; then
        kargs=(--url "http://127.0.0.1:$PORT" --streams "1,$KSTREAMS" --max-tokens 16
               --prompt-words "${SERVE_PROMPT_WORDS:-32}" --timeout 300)
        timeout 900 python3 bench/serve/load.py "${kargs[@]}" > /dev/null 2>> "$OUT/load.txt"
        stop
        {
            echo "KILN_PROFILE=1 (each kernel timed alone: GPU ms per kernel, not throughput); bursts in order:"
            echo "load.py's warm-up request, then 1 stream x 16 tokens, then $KSTREAMS streams x 16 tokens."
            sed -n '/kiln serve: profile:/,$p' "$OUT/server_kernels.log" | grep -a -v "shutting down"
        } > "$OUT/serve_kernels.txt"
    fi
fi
cat "$OUT/serve_table.md"
echo
cat "$OUT/serve_profile.txt"
[ -f "$OUT/serve_kernels.txt" ] && { echo; cat "$OUT/serve_kernels.txt"; }
exit $rc
