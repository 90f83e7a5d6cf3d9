#!/usr/bin/env bash
# BottomLayerOffload's defaults against plain training (trim_to_layer where
# named, look-ahead, the same 10% GPU cache, features in host memory) in
# the regimes of issue 18, on one GPU; one JSON per regime and one log
# (run.log) in ${OUT:-benchmarks/results/default_regimes}. Epoch regimes
# train two epochs per mode and time the second (the first, with the
# decision by measurement and the first tables, is reported as
# `warmup_s`). REGIMES (space-separated names) runs some of them only.
set -u
OUT=${OUT:-benchmarks/results/default_regimes}
REGIMES=${REGIMES:-"wide_trim dim100_trim hetero dim100_trim_gpu_features dim100_untrimmed"}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
B=benchmarks/bench_offload.py
run() {  # name, arguments...
    local name=$1; shift
    case " $REGIMES " in *" $name "*) ;; *) return 0 ;; esac
    echo "### $name: $*" >> "$OUT/run.log"
    timeout 300 python $B "$@" --modes plain,default \
        --out "$OUT/$name.json" >> "$OUT/run.log" 2>&1
    echo "$name: exit $?" | tee -a "$OUT/run.log"
}
run wide_trim --wide --trim --epoch --warmup 1407
run dim100_trim --trim --epoch --warmup 1407
run hetero --undirected --hetero --fanout 8,5,3 --batch-size 512 \
    --batches 300 --warmup 700
# All features in the GPU cache (the host link carries none):
run dim100_trim_gpu_features --trim --gpu-cache-ratio 1.0 --batches 300 \
    --warmup 800
run dim100_untrimmed --epoch --warmup 1407
