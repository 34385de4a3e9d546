#!/usr/bin/env bash
# A/B runs on the NVIDIA machine: `kiln bench` for each configuration (environment assignments, ""
# for the default) over each filter, printing one table row per (configuration, op). Used to decide
# between kernel variants; results go into docs/PERFORMANCE.md's history.
# Usage: ab.sh "CONFIG1;CONFIG2;..." FILTER...   e.g. ab.sh ";KILN_EW_VEC=0" add mul
set -u
source bench/gpu/vulkan-env.sh
IFS=';' read -r -a configs <<< "$1"
shift
for cfg in "${configs[@]}"; do
    echo "== config: ${cfg:-default}"
    for f in "$@"; do
        env $cfg .devbin/kiln bench --device gpu --filter "$f" 2>/dev/null | awk 'NR > 4 && !/^-/ && NF'
    done
done
