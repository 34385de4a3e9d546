#!/usr/bin/env python3
"""A bounded load generator for `kiln serve` (localhost only, Python standard library only): for each
concurrency level, that many simultaneous streaming /v1/completions requests, each with its own
prompt and a fixed max_tokens (greedy, so every stream runs to max_tokens unless the model stops).
Reports time to first token (median and max), per-stream tokens/s (median of tokens / request time)
and aggregate tokens/s (all tokens / wall time of the level).

    kiln serve --model MODEL --port 8080 --max-batch 64 &
    python3 bench/serve/load.py --url http://127.0.0.1:8080 --streams 1,8,32,64 --max-tokens 128

Each stream is one thread with an http.client connection; every request has a timeout, and the run
is bounded by --streams x --rounds requests in all. --markdown prints a table for docs/PERFORMANCE.md,
--json the raw rows."""

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
from urllib.parse import urlparse

WORDS = "the kiln fires clay pots slowly while the potter waits by the warm door of the old shed".split()


def prompt(i, words):
    return " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(words))


def one_stream(host, port, i, args, out, barrier):
    body = json.dumps({"model": "bench", "prompt": prompt(i, args.prompt_words), "max_tokens": args.max_tokens,
                       "temperature": 0, "stream": True, "stream_options": {"include_usage": True}})
    first = None
    chunks = 0
    tokens = None
    try:
        conn = http.client.HTTPConnection(host, port, timeout=args.timeout)
        conn.connect()
        barrier.wait(timeout=args.timeout)
        t0 = time.perf_counter()
        conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            out[i] = {"error": f"HTTP {r.status}: {r.read(300)!r}"}
            return
        while True:
            line = r.readline()
            if not line:
                break
            line = line.decode("utf-8", "replace").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            d = json.loads(line[6:])
            if d.get("usage"):
                tokens = d["usage"]["completion_tokens"]
            if d.get("choices") and d["choices"][0].get("text"):
                chunks += 1
                if first is None:
                    first = time.perf_counter()
        t1 = time.perf_counter()
        conn.close()
    except Exception as e:  # a failed stream is counted, not fatal
        out[i] = {"error": repr(e)}
        return
    first = first or t1
    tokens = tokens if tokens is not None else chunks
    # Per stream: tokens over the whole request (first token included); tokens arrive in bursts on
    # a fast model, so a rate after the first token alone is noise.
    out[i] = {"ttft": first - t0, "total": t1 - t0, "tokens": tokens, "stream_tps": tokens / (t1 - t0)}


def level(host, port, n, args):
    out = [None] * n
    barrier = threading.Barrier(n + 1)
    threads = [threading.Thread(target=one_stream, args=(host, port, i, args, out, barrier), daemon=True)
               for i in range(n)]
    for t in threads:
        t.start()
    barrier.wait(timeout=args.timeout)
    t0 = time.perf_counter()
    deadline = t0 + args.timeout + 5
    for t in threads:
        t.join(max(0.0, deadline - time.perf_counter()))
    wall = time.perf_counter() - t0
    ok = [o for o in out if o and "error" not in o]
    errors = [o["error"] for o in out if o and "error" in o]
    if errors:
        print(f"{n} streams: {len(errors)} failed, e.g. {errors[0]}", file=sys.stderr)
    if not ok:
        return {"streams": n, "errors": n}
    return {
        "streams": n,
        "errors": n - len(ok),
        "ttft_median_s": statistics.median(o["ttft"] for o in ok),
        "ttft_max_s": max(o["ttft"] for o in ok),
        "per_stream_tok_s": statistics.median(o["stream_tps"] for o in ok),
        "aggregate_tok_s": sum(o["tokens"] for o in ok) / wall,
        "tokens": sum(o["tokens"] for o in ok),
        "wall_s": wall,
    }


def markdown(rows):
    lines = ["| streams | errors | TTFT median (s) | TTFT max (s) | per-stream tok/s | aggregate tok/s | x single |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    single = next((r["aggregate_tok_s"] for r in rows if r["streams"] == 1 and "aggregate_tok_s" in r), None)
    for r in rows:
        if "aggregate_tok_s" not in r:
            lines.append(f"| {r['streams']} | {r['errors']} | | | | | |")
            continue
        x = f"{r['aggregate_tok_s'] / single:.1f}" if single else ""
        lines.append(f"| {r['streams']} | {r['errors']} | {r['ttft_median_s']:.3f} | {r['ttft_max_s']:.3f} | "
                     f"{r['per_stream_tok_s']:.1f} | {r['aggregate_tok_s']:.1f} | {x} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompt-words", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=1, help="runs per level (the best aggregate is kept)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    u = urlparse(args.url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1"):
        sys.exit(f"load.py only loads a local server (127.0.0.1, localhost, ::1), not {u.hostname}")
    levels = [int(x) for x in args.streams.split(",") if x]
    if any(n < 1 or n > 256 for n in levels) or not 1 <= args.rounds <= 10 or not 1 <= args.max_tokens <= 4096:
        sys.exit("--streams: 1 to 256 each; --rounds: 1 to 10; --max-tokens: 1 to 4096")
    host, port = u.hostname, u.port or 80
    level(host, port, 1, argparse.Namespace(**{**vars(args), "max_tokens": 4}))  # warm-up
    rows = []
    for n in levels:
        runs = [level(host, port, n, args) for _ in range(args.rounds)]
        rows.append(max(runs, key=lambda r: r.get("aggregate_tok_s", 0)))
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    if args.markdown:
        print(markdown(rows))
        return
    print(f"{'streams':>7} {'errors':>6} {'TTFT med s':>10} {'TTFT max s':>10} {'per-stream tok/s':>16} "
          f"{'aggregate tok/s':>15}")
    for r in rows:
        if "aggregate_tok_s" not in r:
            print(f"{r['streams']:>7} {r['errors']:>6}")
            continue
        print(f"{r['streams']:>7} {r['errors']:>6} {r['ttft_median_s']:>10.3f} {r['ttft_max_s']:>10.3f} "
              f"{r['per_stream_tok_s']:>16.1f} {r['aggregate_tok_s']:>15.1f}")


if __name__ == "__main__":
    main()
