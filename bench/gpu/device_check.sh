#!/usr/bin/env bash
# The whole GPU test suite on the NVIDIA machine, inside its time budget: every GPU test of the
# conformance suite, the runtime tests and the library's in-crate kernel tests, each test in its own
# process, many at once (wgpu compiles and dispatches from several processes as from one; a hung test
# is killed at its timeout and reported, not waited for). Prints one line per failure, the slowest
# tests and the totals, and leaves the logs of failing tests in $OUT/device_check.log.
#
# Expects release test binaries in $BIN (default .devbin: conformance, gpu_runtime, kiln_lib; built on
# the x86-64 build machine by bench/gpu/build_devbin.sh) and the Vulkan loader packages in .gl/
# (../../../shared/device/prepare-vulkan.sh). Environment:
#   JOBS=N          processes at once (default: the core count, at most 16)
#   TEST_TIMEOUT=S  seconds one test may take (default 150)
#   FILTER=RE       only tests whose name matches this extended regex
#   WITH_CPU=1      also the `::cpu` halves (the CPU backend; CI runs them anyway)
#   TIMES=FILE      a previous run's device_check_times.tsv, to start the longest tests first
#                   (default bench/gpu/device_check_times.tsv, the H100 run of the last change)
# Exit status: 0 when every test passed.
set -u
OUT=${OUT:-/tmp/kiln-out}
BIN=${BIN:-.devbin}
mkdir -p "$OUT"
jobs=${JOBS:-$(nproc)}
[ "$jobs" -gt 16 ] && jobs=16
timeout_s=${TEST_TIMEOUT:-150}
if [ -d .gl ] && [ -z "${VK_DRIVER_FILES:-}" ]; then
    source bench/gpu/vulkan-env.sh
fi
export KILN_REQUIRE_GPU=1 KILN_REQUIRE_COOP=1
work=$(mktemp -d)
list="$work/list"
: > "$list"
for b in conformance gpu_runtime kiln_lib; do
    [ -x "$BIN/$b" ] || { echo "device_check: $BIN/$b is missing" >&2; exit 2; }
    "$BIN/$b" --list --include-ignored 2>/dev/null | sed -n 's/: test$//p' | while read -r t; do
        case "$b:$t" in
            # The library's own tests: only those that run kernels.
            kiln_lib:*) [[ "$t" == gpu::* ]] || continue ;;
            *) [ "${WITH_CPU:-0}" = 1 ] || [[ "$t" != *::cpu ]] || continue ;;
        esac
        if [ -n "${FILTER:-}" ] && ! [[ "$t" =~ $FILTER ]]; then continue; fi
        printf '%s\t%s\n' "$b" "$t" >> "$list"
    done
done
# Longest first (as timed by the last run, in $TIMES): a long test started last would set the wall
# time alone. Tests the file does not know go first.
times=${TIMES:-bench/gpu/device_check_times.tsv}
if [ -f "$times" ]; then
    awk -F'\t' 'NR == FNR { t[$2 "\t" $3] = $4; next } { k = $1 "\t" $2; printf "%s\t%s\n", (k in t ? t[k] : 1e9), k }' \
        "$times" "$list" | sort -t$'\t' -k1,1 -g -r | cut -f2- > "$list.sorted"
    mv "$list.sorted" "$list"
fi
total=$(wc -l < "$list")
echo "device_check: $total tests, $jobs at a time, ${timeout_s}s each at most"
# One test: its own process, its wall time, and its output kept when it failed.
run_one() {
    local b=$1 t=$2 start end rc log
    log="$work/$(printf '%s' "$b.$t" | tr -c 'A-Za-z0-9_.-' '_').log"
    start=$(date +%s.%N)
    timeout -k 5 "$timeout_s" "$BIN/$b" --exact "$t" --include-ignored --test-threads 1 > "$log" 2>&1
    rc=$?
    end=$(date +%s.%N)
    # A filter that matched nothing is a failure too (the listed test must have run).
    if [ $rc = 0 ] && ! grep -q '^test result: ok. 1 passed' "$log"; then rc=99; fi
    printf '%s\t%s\t%s\t%s\n' "$rc" "$b" "$t" "$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')" >> "$work/results"
    [ $rc = 0 ] && rm -f "$log"
}
export -f run_one
export BIN work timeout_s
t0=$(date +%s)
tr '\t' '\n' < "$list" | xargs -d '\n' -n 2 -P "$jobs" bash -c 'run_one "$0" "$1"'
wall=$(( $(date +%s) - t0 ))
: > "$OUT/device_check.log"
fails=0
while IFS=$'\t' read -r rc b t secs; do
    [ "$rc" = 0 ] && continue
    fails=$((fails + 1))
    log="$work/$(printf '%s' "$b.$t" | tr -c 'A-Za-z0-9_.-' '_').log"
    why=$(grep -m1 -E "panicked at|^thread .* panicked|assert|Error|error" "$log" 2>/dev/null | cut -c1-200)
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && why="timed out after ${timeout_s}s"
    echo "FAIL $b $t (${secs}s, rc $rc): $why"
    { echo "===== $b $t (rc $rc, ${secs}s)"; cat "$log" 2>/dev/null; } >> "$OUT/device_check.log"
done < <(sort -t$'\t' -k2,3 "$work/results")
cp "$work/results" "$OUT/device_check_times.tsv"
echo "slowest:"
sort -t$'\t' -k4,4 -g -r "$work/results" | head -n 12 | awk -F'\t' '{printf "  %6.1fs  %s %s\n", $4, $2, $3}'
done_n=$(wc -l < "$work/results")
passed=$((done_n - fails))
echo "device_check: $total tests in ${wall}s wall ($jobs at a time)"
echo "$passed passed, $fails failed"
rm -rf "$work"
[ "$fails" = 0 ] && [ "$done_n" = "$total" ]
