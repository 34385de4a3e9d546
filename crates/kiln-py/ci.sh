#!/usr/bin/env bash
# CI for the Python package: a fresh venv, the abi3 release wheel (build_wheels.sh: `maturin build
# --release`, kept in $CARGO_TARGET_DIR/wheels as CI's artifact), installed with pip as a user
# without Rust would install it, then the pytest suite with the GPU half required (lavapipe in CI).
# Usage: crates/kiln-py/ci.sh   (PYTHON=python3.X to pick the interpreter; CARGO_TARGET_DIR is shared)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
export CARGO_TERM_COLOR=never
venv="${KILN_PY_VENV:-$CARGO_TARGET_DIR/kiln-py-venv}"

start=$(date +%s)
rm -rf "$venv"
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check maturin pytest numpy hypothesis ml_dtypes "dask[array]" distributed
# The wheel (the same release build `pip install ./crates/kiln-py` makes), then pip installs it.
wheels="$CARGO_TARGET_DIR/wheels"
rm -f "$wheels"/*.whl
WHEEL_DIR="$wheels" MATURIN="$venv/bin/python -m maturin" bash "$here/build_wheels.sh"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$wheels"/*.whl
echo "kiln-py: built $(cd "$wheels" && ls *.whl) and installed it in $(( $(date +%s) - start ))s"

export KILN_REQUIRE_GPU=1
cd "$here"
set +e
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests
status=$?
set -e
echo "kiln-py: pytest exit status $status after $(( $(date +%s) - start ))s in total"
# 0: all passed; anything else (failures, errors, no tests collected, interrupted) fails CI.
exit "$status"
