#!/usr/bin/env bash
# Issue 35 in one device call: the quantized matrix-vector kernels (`kiln bench --filter qmatvec`,
# GB/s of the packed weight) with the integer-dot kernel and with the f32 one (`KILN_QMV_I8=0`),
# the copy bandwidth (torch clone), and the 8B-shaped Q4_K_M decode, kiln (both kernels) against
# llama.cpp's Vulkan backend on the same GGUF file written by llama.cpp's own quantizer. With
# CHECK=1 (default) the whole GPU suite first (device_check.sh). Run from the repository root with
# .gl/, .lcpp/ (../../../shared/device/llama-cpp/pack.sh) and .devbin.tar.xz carried. Writes
# $OUT/decode.txt (everything but the suite) and the JSON of each llm-bench run.
set -u
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT"
[ -d .devbin ] || tar xJf .devbin.tar.xz
[ -n "${VK_DRIVER_FILES:-}" ] || source bench/gpu/vulkan-env.sh
log="$OUT/decode.txt"
if [ "${CHECK:-1}" = 1 ]; then
    bash bench/gpu/device_check.sh > "$OUT/device_check.txt" 2>&1
    echo "device_check rc=$?" >> "$OUT/device_check.txt"
    tail -4 "$OUT/device_check.txt"
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$log"
python3 bench/gpu/copy_bw.py >> "$log" 2>&1
# The formats of Q4_K_M and Q8_0 files (the whole qmatvec set takes over two minutes).
for i8 in ${BENCH_I8S:-1 0}; do
    for f in q4_k q6_k q8_0; do
        echo "== kiln bench --filter qmatvec_$f, KILN_QMV_I8=$i8" >> "$log"
        KILN_QMV_I8=$i8 timeout 100 .devbin/kiln bench --device gpu --filter "qmatvec_$f" 2>/dev/null >> "$log"
    done
done
# Weight rows per set x lanes per set of the integer-dot kernel on the gate/up shape.
if [ "${SWEEP:-0}" = 1 ]; then
    for c in 2 4 8; do for ln in 32 64 128; do
        echo "== sweep KILN_QMV_C=$c KILN_QMV_LN=$ln" >> "$log"
        KILN_QMV_C=$c KILN_QMV_LN=$ln timeout 60 .devbin/kiln bench --device gpu \
            --filter qmatvec_q4_k_14336x4096_bf16 2>/dev/null | grep qmatvec >> "$log"
    done; done
fi
[ "${GGUF:-1}" = 1 ] || exit 0
mkdir -p /tmp/cyl /tmp/site /tmp/m
tar xJf .lcpp/cyllama-min.tar.xz -C /tmp/cyl
python3 -m pip install -q --no-index --no-deps --target /tmp/site .lcpp/gguf-*.whl
export PYTHONPATH=/tmp/cyl:/tmp/site
python3 .lcpp/make_gguf.py 8b /tmp/m/f16.gguf > /tmp/m/make.log 2>&1 || tail -5 /tmp/m/make.log >> "$log"
python3 .lcpp/quantize.py /tmp/m/f16.gguf /tmp/m/q4km.gguf Q4_K_M > /tmp/m/quant.log 2>&1 || tail -5 /tmp/m/quant.log >> "$log"
rm -f /tmp/m/f16.gguf
ls -la /tmp/m >> "$log"
echo "== llama.cpp (Vulkan) Q4_K_M decode" >> "$log"
timeout 200 python3 .lcpp/lcpp_bench.py /tmp/m/q4km.gguf --pp 512 --ctx 512,4096 --tg 32 --reps 2 >> "$log" 2>&1
for i8 in ${I8S:-1 0}; do
    echo "== kiln llm-bench Q4_K_M, KILN_QMV_I8=$i8" >> "$log"
    KILN_QMV_I8=$i8 timeout 200 .devbin/kiln llm-bench --model /tmp/m/q4km.gguf --device gpu --prefill 512 \
        --contexts 512,4096 --decode-tokens 32 > "$OUT/llm_q4km_i8_$i8.json" 2>> "$log"
    python3 -c "
import json,sys
d=json.load(open('$OUT/llm_q4km_i8_$i8.json'))
for k,v in d.items():
    if k!='decode_profile': print(k, json.dumps(v)[:400])
p=d.get('decode_profile') or {}
ks=p.get('kernels', p) if isinstance(p, dict) else p
print(json.dumps(p)[:3000])
" >> "$log" 2>&1
done
