#!/usr/bin/env bash
# The bounded CI fuzz run (issue 12): installs cargo-fuzz if missing, builds the `ops` target with
# libFuzzer instrumentation (stable toolchain with RUSTC_BOOTSTRAP=1, as cargo-fuzz needs nightly
# flags), then fuzzes the CPU for FUZZ_SECONDS (default 60; KILN_FUZZ_GPU=1 adds the GPU in lockstep,
# with output poisoning; KILN_FUZZ_MODE=nonfinite adds NaN and infinities), whose findings are all
# fixed or listed as known
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
# The non-finite mode once reached arange(65504, 524032, 1e-5) (5.2e10 values), a request libFuzzer's
# malloc limit (= -rss_limit_mb) aborts on: kiln now refuses any host buffer above
# KILN_HOST_ALLOC_LIMIT with Err(HostOutOfMemory) before allocating (tests/host_alloc_limit.rs), set
# here below that malloc limit. CI stays in the safe mode until a 60 s non-finite run has passed with
# that fix (not run yet: KILN_FUZZ_MODE=nonfinite bash fuzz/ci.sh). KILN_FUZZ_GPU=1 adds lavapipe.
export KILN_FUZZ_GPU="${KILN_FUZZ_GPU:-0}" KILN_FUZZ_MODE="${KILN_FUZZ_MODE:-safe}"
export KILN_HOST_ALLOC_LIMIT="${KILN_HOST_ALLOC_LIMIT:-1073741824}"
mkdir -p corpus/ops
# With the GPU on, LeakSanitizer reports allocations Mesa's Vulkan driver (libvulkan_lvp) never frees
# (48 bytes once, seen 2026-11-25): leaks outside kiln, so leak detection is off in that mode.
leaks=1
[ "$KILN_FUZZ_GPU" = 1 ] && leaks=0
cargo fuzz run -O ops corpus/ops -- \
  -max_total_time="${FUZZ_SECONDS:-60}" -max_len=2048 -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
  -detect_leaks="$leaks"
