#!/usr/bin/env bash
# BottomLayerOffload's defaults against plain training (trim_to_layer,
# look-ahead, the same 10% GPU cache, features in host memory) in the
# regimes of issue 18, on one GPU; one JSON per regime and one log (run.log) in
# ${OUT:-benchmarks/results/default_regimes}. Epoch regimes train two
# epochs per mode and time the second (the first, with the decision by
# measurement and the first tables, is reported as `warmup_s`).
set -u
OUT=${OUT:-benchmarks/results/default_regimes}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
B=benchmarks/bench_offload.py
run() {  # name, arguments...
    local name=$1; shift
    echo "### $name: $*" >> "$OUT/run.log"
    timeout 300 python $B "$@" --modes plain,default \
        --out "$OUT/$name.json" >> "$OUT/run.log" 2>&1
    echo "$name: exit $?" | tee -a "$OUT/run.log"
}
run wide_trim --wide --trim --epoch --warmup 1407
run dim100_trim --trim --epoch --warmup 1407
run hetero --undirected --hetero --fanout 8,5,3 --batch-size 512 \
    --batches 300 --warmup 700
run dim100_trim_gpu_features --trim --gpu-cache-ratio 1.0 --batches 300 \
    --warmup 800
