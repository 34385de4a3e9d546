#!/usr/bin/env bash
# The serving benchmark of issue 24, in one command on the NVIDIA machine (from the project's root):
# writes the Llama-3-8B-shaped random-weight model (bf16, numpy only: bench/serve/make_model.py),
# starts `kiln serve` on it (GPU, bf16) on a free localhost port, runs bench/serve/load.py at 1, 8, 32
# and 64 concurrent streams (stdlib HTTP client), and writes $OUT/serve_table.md (the markdown table),
# $OUT/serve_load.json, the server's log and the load generator's.
#
#   bash bench/serve/run_h100.sh BIN_DIR        BIN_DIR holds the release `kiln` binary
#
# Env: SERVE_SHAPE (8b; tiny/1b for a quick try), SERVE_LAYERS (the shape's depth), SERVE_DEVICE (gpu),
#      SERVE_DTYPE (bf16), SERVE_STREAMS (1,8,32,64), SERVE_MAX_TOKENS (128), SERVE_PROMPT_WORDS (32),
#      SERVE_MODEL (an existing model folder: skips writing one), SERVE_LOAD_TIMEOUT (seconds to wait
#      for the server, 600). Every step is bounded by a timeout; the server is stopped at the end.
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
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# max-batch and the KV pool hold every stream of the largest level at once:
# (prompt + answer) <= 512 positions each.
"$BIN/kiln" serve --model "$MODEL" --device "${SERVE_DEVICE:-gpu}" --dtype "${SERVE_DTYPE:-bf16}" \
    --host 127.0.0.1 --port "$PORT" --max-batch "$MAXB" --max-queue 256 --max-context 2048 \
    --kv-positions $((MAXB * 512 + 1024)) > "$OUT/server.log" 2>&1 &
SERVER=$!
stop() { kill -INT "$SERVER" 2>/dev/null; for _ in $(seq 30); do kill -0 "$SERVER" 2>/dev/null || return; sleep 1; done; kill -KILL "$SERVER" 2>/dev/null; }
trap stop EXIT
ready=""
for _ in $(seq "${SERVE_LOAD_TIMEOUT:-600}"); do
    if python3 -c "import http.client,sys; c=http.client.HTTPConnection('127.0.0.1',$PORT,timeout=2); c.request('GET','/health'); sys.exit(c.getresponse().status!=200)" 2>/dev/null; then
        ready=1; break
    fi
    kill -0 "$SERVER" 2>/dev/null || break
    sleep 1
done
if [ -z "$ready" ]; then
    echo "kiln serve did not come up; its log:" | tee -a "$OUT/load.txt"; tail -n 30 "$OUT/server.log"; exit 1
fi
echo "server up after $SECONDS s (model load included)" | tee "$OUT/load.txt"
args=(--url "http://127.0.0.1:$PORT" --streams "$STREAMS" --max-tokens "${SERVE_MAX_TOKENS:-128}"
      --prompt-words "${SERVE_PROMPT_WORDS:-32}" --timeout 300)
timeout 1200 python3 bench/serve/load.py "${args[@]}" --json > "$OUT/serve_load.json" 2>> "$OUT/load.txt"
rc=$?
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
curl -s "http://127.0.0.1:$PORT/metrics" > "$OUT/metrics.txt" 2>/dev/null || true
cat "$OUT/serve_table.md"
exit $rc
