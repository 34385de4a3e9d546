#!/usr/bin/env bash
# CI for `kiln serve`: the kiln binary (test profile, whose dependencies `cargo test` already built),
# a fresh venv with the official `openai` client and pytest, then the client tests against servers on
# localhost ports, on the CPU and on the GPU (lavapipe in CI; KILN_REQUIRE_GPU=1 makes a missing one fail),
# and two CPU replicas behind nginx (test_replicas.py; skipped without nginx, unless KILN_REQUIRE_NGINX=1).
# Usage: crates/kiln-serve/ci.sh   (PYTHON=python3.X picks the interpreter; KILN_TEST_DEVICES=cpu,gpu)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
export CARGO_TERM_COLOR=never
venv="${KILN_SERVE_VENV:-$CARGO_TARGET_DIR/kiln-serve-venv}"

start=$(date +%s)
(cd "$root" && cargo build -q --profile test -p kiln-cli --bin kiln)
export KILN_BIN="$CARGO_TARGET_DIR/debug/kiln"
rm -rf "$venv"
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "openai>=1.40,<3" pytest
echo "kiln-serve: built and installed in $(( $(date +%s) - start ))s"

if [ -z "${KILN_TEST_DEVICES:-}" ]; then
  if [ "${KILN_REQUIRE_GPU:-}" = 1 ]; then
    export KILN_TEST_DEVICES=cpu,gpu
  else
    export KILN_TEST_DEVICES=cpu
  fi
fi
cd "$here/tests"
set +e
timeout 1500 "$venv/bin/python" -m pytest -q -p no:cacheprovider .
status=$?
set -e
echo "kiln-serve: pytest exit status $status after $(( $(date +%s) - start ))s in total"
exit "$status"
