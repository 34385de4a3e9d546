#!/usr/bin/env bash
# 8B-shaped prefill, kiln against llama.cpp's Vulkan backend on the same GPU and the same GGUF file
# (issue 34's target: prefill of 8192 tokens): a random-weight f16 Llama-3-8B-shaped GGUF, then
# llama.cpp's prefill (flash attention on) and `kiln llm-bench --prefill N` for each N in PREFILL
# (default "2048 8192"). The GGUF writer and llama.cpp's timer are in .lcpp/, which
# ../../../shared/device/llama-cpp/pack.sh makes. Run from the repository root with .gl/, .lcpp/ and
# .devbin.tar.xz carried. Writes $OUT/prefill.txt.
set -u
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT"
[ -d .devbin ] || tar xJf .devbin.tar.xz
[ -n "${VK_DRIVER_FILES:-}" ] || source bench/gpu/vulkan-env.sh
log="$OUT/prefill.txt"
mkdir -p /tmp/cyl /tmp/site /tmp/m
tar xJf .lcpp/cyllama-min.tar.xz -C /tmp/cyl
python3 -m pip install -q --no-index --no-deps --target /tmp/site .lcpp/gguf-*.whl
export PYTHONPATH=/tmp/cyl:/tmp/site
[ -f /tmp/m/f16.gguf ] || python3 .lcpp/make_gguf.py 8b /tmp/m/f16.gguf >> "$log" 2>&1
pp=$(echo ${PREFILL:-2048 8192} | tr ' ' ',')
echo "== llama.cpp (Vulkan, flash attention on)" >> "$log"
timeout 240 python3 .lcpp/lcpp_bench.py /tmp/m/f16.gguf --pp "$pp" --ctx "" --reps 2 >> "$log" 2>&1
for n in ${PREFILL:-2048 8192}; do
    echo "== kiln llm-bench --prefill $n" >> "$log"
    timeout 240 .devbin/kiln llm-bench --model /tmp/m/f16.gguf --device gpu --dtype f16 --prefill "$n" \
        --max-context "$n" --contexts 512 --decode-tokens 4 >> "$log" 2>&1
done
grep -E "prefill|pp|error" "$log" | head -20
