#!/usr/bin/env python3
"""Side-by-side CPU comparison of kiln and NumPy on the shapes of `kiln bench`.

Runs `kiln bench --json --device cpu` and numpy_ref.py one after the other (never at the same time, so
they do not share the cores), joins the rows by name and prints: op, shape, kiln median, NumPy median,
the ratio kiln speed / NumPy speed (= NumPy time / kiln time, same work on both sides) and the target.

Targets: matmul f32 1024/2048 >= 0.9x NumPy, add 32M >= 0.9x NumPy, softmax and rms_norm >= 3x NumPy.

Usage:
  python3 bench/cpu/compare.py [--kiln PATH] [--quick] [--filter SUBSTR] [--markdown] [--check]
  python3 bench/cpu/compare.py --kiln-json kiln.json --numpy-json numpy.json   # reuse saved results
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

TARGETS = {
    "matmul_f32_1024": 0.9,
    "matmul_f32_2048": 0.9,
    "add": 0.9,
    "softmax": 3.0,
    "rms_norm": 3.0,
}


def default_kiln():
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    return os.path.join(target, "release", "kiln")


def run_json(cmd):
    print("running: " + " ".join(cmd), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out)


def load(path):
    with open(path) as f:
        return json.load(f)


def fmt_time(s):
    if s is None:
        return "n/a"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def fmt_rate(row):
    if row.get("gflops") is not None and row.get("bytes") is None:
        return f"{row['gflops']:.1f} GFLOPS"
    if row.get("gbps") is not None:
        return f"{row['gbps']:.1f} GB/s"
    if row.get("gflops") is not None:
        return f"{row['gflops']:.1f} GFLOPS"
    return ""


def join(kiln, numpy):
    """One dict per op present in the NumPy results, in NumPy's order."""
    krows = {r["name"]: r for r in kiln["rows"]}
    out = []
    for n in numpy["rows"]:
        k = krows.get(n["name"])
        kt = k.get("median_s") if k and k.get("status") == "ok" else None
        ratio = n["median_s"] / kt if kt else None
        target = TARGETS.get(n["name"])
        if target is None:
            verdict = ""
        elif ratio is None:
            verdict = "pending"
        else:
            verdict = "met" if ratio >= target else "MISSED"
        note = None if k is None else (k.get("error") if k.get("status") != "ok" else None)
        out.append(
            dict(
                op=n["name"],
                shape=n["shape"],
                kiln=fmt_time(kt) if kt else "n/a",
                kiln_rate=fmt_rate(k) if kt else "",
                numpy=fmt_time(n["median_s"]),
                numpy_rate=fmt_rate(n),
                ratio=f"{ratio:.2f}x" if ratio else "n/a",
                target=f">= {target:g}x" if target else "",
                verdict=verdict,
                note=note,
            )
        )
    return out


COLS = [
    ("op", "op"),
    ("shape", "shape"),
    ("kiln", "kiln"),
    ("kiln_rate", "kiln rate"),
    ("numpy", "NumPy"),
    ("numpy_rate", "NumPy rate"),
    ("ratio", "kiln/NumPy speed"),
    ("target", "target"),
    ("verdict", ""),
]


def print_text(rows):
    widths = [max(len(h), *(len(r[k]) for r in rows)) for k, h in COLS]
    print("  ".join(h.ljust(w) for (_, h), w in zip(COLS, widths)).rstrip())
    print("  ".join("-" * w for w, (_, h) in zip(widths, COLS) if h))
    for r in rows:
        print("  ".join(r[k].ljust(w) for (k, _), w in zip(COLS, widths)).rstrip())
    notes = {r["note"] for r in rows if r["note"]}
    for n in sorted(notes):
        print(f"note: kiln: {n}")


def print_markdown(rows):
    print("| " + " | ".join(h or "status" for _, h in COLS) + " |")
    print("|" + "---|" * len(COLS))
    for r in rows:
        print("| " + " | ".join(r[k] for k, _ in COLS) + " |")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kiln", default=None, help="kiln binary (default: $CARGO_TARGET_DIR or target, release/kiln)")
    p.add_argument("--kiln-json", default=None, help="use saved `kiln bench --json` output instead of running")
    p.add_argument("--numpy-json", default=None, help="use saved numpy_ref.py output instead of running")
    p.add_argument("--quick", action="store_true", help="small shapes (smoke test; ratios mean little)")
    p.add_argument("--filter", default=None, help="only ops whose name contains this")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    p.add_argument("--check", action="store_true", help="exit 1 when a target is missed or pending")
    args = p.parse_args()

    extra = (["--quick"] if args.quick else []) + (["--filter", args.filter] if args.filter else [])
    if args.kiln_json:
        kiln = load(args.kiln_json)
    else:
        exe = args.kiln or default_kiln()
        if not os.path.exists(exe):
            sys.exit(f"compare.py: no kiln binary at {exe}; build it with `cargo build --release -p kiln-cli`")
        kiln = run_json([exe, "bench", "--json", "--device", "cpu"] + extra)
    if args.numpy_json:
        numpy = load(args.numpy_json)
    else:
        numpy = run_json([sys.executable, os.path.join(HERE, "numpy_ref.py")] + extra)

    cpu = kiln.get("cpu", {})
    print(
        f"machine: {cpu.get('model')} ({cpu.get('physical_cores')} cores, {cpu.get('logical_cores')} logical), "
        f"kiln {kiln.get('kiln_version')} with {cpu.get('rayon_threads')} threads, "
        f"NumPy {numpy.get('numpy_version')} ({numpy.get('blas')})"
    )
    bw = kiln.get("copy_bandwidth") or {}
    if bw.get("gbps"):
        print(f"copy bandwidth (kiln's limit measurement): {bw['gbps']:.1f} GB/s")
    print()
    rows = join(kiln, numpy)
    (print_markdown if args.markdown else print_text)(rows)
    if args.check and any(r["verdict"] in ("MISSED", "pending") for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
