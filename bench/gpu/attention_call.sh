#!/usr/bin/env bash
# One device call for the cooperative attention kernel (issue 34): its conformance tests on the
# device (KILN_REQUIRE_COOP=1), the structured probe, examples/coop_attention.rs (kiln's cooperative
# kernel beside the default path) for each variant in VARIANTS, and PyTorch's SDPA on the same cases
# (torch_attention.py), all on the same GPU in this one call. A variant is `shape/ablation`:
# KILN_COOP_ATTN_SHAPE (`subgroups,keys,lanes`, or `auto`) and KILN_COOP_ATTN_ABLATE (`none`,
# `stage`, `scores`, `softmax`, `pv`); ONLY picks the example's cases. Run from the repository root
# with .gl/ and .devbin.tar.xz carried (.devbin/coop_attention and .devbin/coop_attention_probe: the
# release examples). Writes $OUT/attention.txt.
set -u
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT"
[ -d .devbin ] || tar xJf .devbin.tar.xz
source bench/gpu/vulkan-env.sh
log="$OUT/attention.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$log"
export KILN_REQUIRE_GPU=1 KILN_REQUIRE_COOP=1
if [ "${SKIP_TESTS:-0}" != 1 ]; then
    echo "== conformance (cooperative attention)" >> "$log"
    timeout 300 .devbin/conformance --include-ignored --test-threads 2 sdpa_coop >> "$log" 2>&1
    echo "== probe" >> "$log"
    timeout 120 .devbin/coop_attention_probe >> "$log" 2>&1
fi
for variant in ${VARIANTS:-auto/none}; do
    shape=${variant%/*}
    echo "== coop_attention $variant" >> "$log"
    if [ "$shape" = auto ]; then unset KILN_COOP_ATTN_SHAPE; else export KILN_COOP_ATTN_SHAPE=$shape; fi
    # The example's "default" row is the plain flash kernel.
    KILN_COOP_ATTN=0 KILN_COOP_ATTN_ABLATE=${variant#*/} timeout 240 .devbin/coop_attention >> "$log" 2>&1
done
unset KILN_COOP_ATTN_SHAPE
echo "== torch" >> "$log"
(cd bench/gpu && timeout 200 python3 torch_attention.py) >> "$log" 2>&1
grep -E "WRONG|FAILED|panicked|test result" "$log" | head -20
