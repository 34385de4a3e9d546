#!/usr/bin/env bash
# On the x86-64 build machine: the release binaries the NVIDIA machine runs (it has no Rust), in
# .devbin/ (git-ignored through .git/info/exclude): the `kiln` CLI and the test binaries that
# bench/gpu/device_check.sh runs (conformance, gpu_runtime, the library's own tests as kiln_lib).
# Then packs them as .devbin.tar.xz for a device call's `carry` (64 MiB per call).
set -euo pipefail
cd "$(dirname "$0")/../.."
exclude=$(git rev-parse --git-path info/exclude)  # a worktree's .git is a file
mkdir -p "$(dirname "$exclude")"
grep -qx '/.devbin/' "$exclude" 2>/dev/null || echo '/.devbin/' >> "$exclude"
grep -qx '/.devbin.tar.xz' "$exclude" 2>/dev/null || echo '/.devbin.tar.xz' >> "$exclude"
cargo build --release -p kiln-cli
json=$(cargo test --release -p kiln --lib --test conformance --test gpu_runtime --no-run --message-format=json 2>/dev/null)
mkdir -p .devbin
cp "${CARGO_TARGET_DIR:-target}/release/kiln" .devbin/kiln
for name in conformance gpu_runtime; do
    exe=$(echo "$json" | python3 -c "import sys,json
for l in sys.stdin:
    m=json.loads(l)
    if m.get('reason')=='compiler-artifact' and m.get('executable') and m['target']['name']=='$name': print(m['executable'])" | tail -n1)
    cp "$exe" ".devbin/$name"
done
exe=$(echo "$json" | python3 -c "import sys,json
for l in sys.stdin:
    m=json.loads(l)
    if m.get('reason')=='compiler-artifact' and m.get('executable') and m['target']['name']=='kiln' and 'lib' in m['target']['kind']: print(m['executable'])" | tail -n1)
cp "$exe" .devbin/kiln_lib
# kiln-llm's test binaries the call also runs (LLM_TESTS="fixtures batch"; they read the fixtures
# from the working tree, which travels with the call), as llm_NAME.
for t in ${LLM_TESTS:-}; do
    exe=$(cargo test --release -p kiln-llm --test "$t" --no-run --message-format=json 2>/dev/null | python3 -c "import sys,json
for l in sys.stdin:
    m=json.loads(l)
    if m.get('reason')=='compiler-artifact' and m.get('executable') and m['target']['name']=='$t': print(m['executable'])" | tail -n1)
    cp "$exe" ".devbin/llm_$t"
done
# Examples the call also runs (EXAMPLES="coop_sweep coop_attention"), each a release build.
for ex in ${EXAMPLES:-}; do
    cargo build --release -p kiln --example "$ex"
    cp "${CARGO_TARGET_DIR:-target}/release/examples/$ex" ".devbin/$ex"
done
strip .devbin/* 2>/dev/null || true
tar cJf .devbin.tar.xz .devbin
ls -la .devbin .devbin.tar.xz
