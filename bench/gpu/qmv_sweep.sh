#!/usr/bin/env bash
# The integer-dot quantized matvec's shape sweep on the device: weight rows per set (KILN_QMV_C) x
# lanes per set (KILN_QMV_LN) on the products of an 8B decode step (`kiln bench` qmatvec rows, bf16
# x). Run from the repository root with .gl/ and .devbin.tar.xz carried; prints one line per run.
set -u
[ -d .devbin ] || tar xJf .devbin.tar.xz
[ -n "${VK_DRIVER_FILES:-}" ] || source bench/gpu/vulkan-env.sh
rows=${ROWS:-qmatvec_q4_k_14336x4096_bf16,qmatvec_q4_k_4096x14336_bf16,qmatvec_q4_k_4096x4096_bf16,qmatvec_q6_k_4096x14336_bf16}
echo "== default"
timeout 60 .devbin/kiln bench --device gpu --filter "$rows" 2>/dev/null | grep qmatvec
for c in ${CS:-4 8 16}; do for ln in ${LNS:-32 64 128}; do
    echo "== KILN_QMV_C=$c KILN_QMV_LN=$ln"
    KILN_QMV_C=$c KILN_QMV_LN=$ln timeout 60 .devbin/kiln bench --device gpu --filter "$rows" 2>/dev/null | grep qmatvec
done; done
