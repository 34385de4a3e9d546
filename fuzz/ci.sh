#!/usr/bin/env bash
# The bounded CI fuzz run (issue 12): installs cargo-fuzz if missing, builds the `ops` target with
# libFuzzer instrumentation (stable toolchain with RUSTC_BOOTSTRAP=1, as cargo-fuzz needs nightly
# flags), then fuzzes for FUZZ_SECONDS (default 60) on both backends in lockstep (the CPU and the GPU,
# lavapipe in CI, with output poisoning; KILN_FUZZ_GPU=0 for the CPU alone) with NaN and infinities
# among the inputs (KILN_FUZZ_MODE=nonfinite), whose findings are all fixed or listed as known
# (docs/RELIABILITY.md). A crash fails the step and leaves its input in fuzz/artifacts/ops/. Measured
# on the 2-core dev machine: see docs/RELIABILITY.md.
set -euo pipefail
cd "$(dirname "$0")"
export RUSTC_BOOTSTRAP=1
# Its own target dir: the instrumented build must not evict the workspace's artifacts.
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-$PWD/target}"
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
cargo fuzz build -O ops
# CI fuzzes the CPU in the safe mode: on 2026-11-25 the non-finite mode reached arange with a 52 GB
# request (ASan aborts where kiln would return Err) within 60 s; KILN_FUZZ_GPU=1 KILN_FUZZ_MODE=nonfinite
# run both backends with NaN/Inf inputs by hand until that is fixed.
export KILN_FUZZ_GPU="${KILN_FUZZ_GPU:-0}" KILN_FUZZ_MODE="${KILN_FUZZ_MODE:-safe}"
mkdir -p corpus/ops
# With the GPU on, LeakSanitizer reports allocations Mesa's Vulkan driver (libvulkan_lvp) never frees
# (48 bytes once, seen 2026-11-25): leaks outside kiln, so leak detection is off in that mode.
leaks=1
[ "$KILN_FUZZ_GPU" = 1 ] && leaks=0
cargo fuzz run -O ops corpus/ops -- \
  -max_total_time="${FUZZ_SECONDS:-60}" -max_len=2048 -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
  -detect_leaks="$leaks"
