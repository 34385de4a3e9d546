#!/usr/bin/env python3
"""Joins `kiln bench --json` runs of two builds on one device: A runs (the baseline, e.g. main before a
change) and B runs (after), given as files `--a a1.json a2.json --b b1.json ...`. Prints per row the
median time of each build (the median over runs of each run's median), B/A, and the spread of the A
runs ((max - min) / median), which is the noise a B/A ratio must exceed to mean anything."""
import argparse
import json
import statistics


def rows(paths):
    out = {}
    for p in paths:
        with open(p) as f:
            for r in json.load(f)["rows"]:
                if r.get("status") == "ok" and r.get("median_s"):
                    out.setdefault(r["name"], []).append(r["median_s"])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", nargs="+", required=True)
    ap.add_argument("--b", nargs="+", required=True)
    args = ap.parse_args()
    a, b = rows(args.a), rows(args.b)
    print(f"{'row':44} {'A us':>10} {'B us':>10} {'B/A':>6} {'A spread':>9}")
    ratios = []
    for name in sorted(set(a) & set(b)):
        ma, mb = statistics.median(a[name]), statistics.median(b[name])
        spread = (max(a[name]) - min(a[name])) / ma if len(a[name]) > 1 else float("nan")
        ratios.append(mb / ma)
        print(f"{name:44} {ma * 1e6:10.1f} {mb * 1e6:10.1f} {mb / ma:6.3f} {spread:9.3f}")
    missing = sorted(set(a) ^ set(b))
    if missing:
        print("only in one build:", ", ".join(missing))
    if ratios:
        print(f"{len(ratios)} rows; B/A median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}")


if __name__ == "__main__":
    main()
