#!/usr/bin/env bash
# Builds the Python package's wheels, so people can `pip install` it without Rust. Every wheel is
# abi3 (pyo3's `abi3-py39`: one wheel per platform serves CPython >= 3.9) and built by
# `maturin build --release`:
#   - this machine's wheel (a manylinux one on Linux, checked by maturin's auditwheel), always;
#   - with --all, the platform wheels too: Linux x86-64 and aarch64 (manylinux2014, cross-built
#     through zig), macOS arm64 (on a Mac; wgpu links Apple's frameworks, so it needs the SDK).
#     A platform whose tools are missing (its rustup target, zig, a Mac) is skipped with a message.
# Usage: crates/kiln-py/build_wheels.sh [--all]
#   WHEEL_DIR (default $CARGO_TARGET_DIR/wheels) receives the wheels; MATURIN picks the maturin
#   command (default: `maturin` on PATH, else `python3 -m maturin`).
# The distribution name comes from pyproject.toml's [project] name (the one place it is set).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
out="${WHEEL_DIR:-$CARGO_TARGET_DIR/wheels}"
all=0
case "${1:-}" in
    --all) all=1 ;;
    "") ;;
    *) echo "usage: $0 [--all]" >&2; exit 2 ;;
esac
if [ -n "${MATURIN:-}" ]; then
    read -r -a maturin <<< "$MATURIN"
elif command -v maturin > /dev/null; then
    maturin=(maturin)
else
    maturin=(python3 -m maturin)
fi
mkdir -p "$out"

build() {  # build <what> [maturin args...]
    local what="$1"
    shift
    echo "build_wheels: $what"
    "${maturin[@]}" build --release --quiet --manifest-path "$here/Cargo.toml" --out "$out" "$@"
}

have_target() { command -v rustup > /dev/null && rustup target list --installed 2> /dev/null | grep -qx "$1"; }
have_zig() { command -v zig > /dev/null || python3 -c "import ziglang" 2> /dev/null; }

host="$(uname -s)-$(uname -m)"
build "this machine's wheel ($host)"

if [ "$all" = 1 ]; then
    for target in x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu; do
        if [ "$host" = "Linux-${target%%-*}" ]; then
            continue  # built above
        elif ! have_target "$target"; then
            echo "build_wheels: skipping $target: rustup target not installed (rustup target add $target)"
        elif ! have_zig; then
            echo "build_wheels: skipping $target: cross-building needs zig (pip install ziglang)"
        else
            build "$target (manylinux2014, zig)" --target "$target" --zig --compatibility manylinux2014
        fi
    done
    if [ "$host" = "Darwin-arm64" ]; then
        :  # built above
    elif [ "$(uname -s)" = Darwin ] && have_target aarch64-apple-darwin; then
        build "aarch64-apple-darwin" --target aarch64-apple-darwin
    else
        echo "build_wheels: skipping aarch64-apple-darwin: needs a Mac (wgpu links Apple's Metal frameworks)"
    fi
fi
ls -1 "$out"/*.whl
