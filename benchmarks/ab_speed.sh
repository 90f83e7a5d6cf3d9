#!/usr/bin/env bash
# Same-machine A/B of the package at two commits over the GPU benchmarks
# that issue 50 names (one GPU data path, two GPUs of one machine, two NCCL
# ranks over a partitioned graph). The base is an extracted tree:
#   git archive BASE pyg_orch benchmarks ':!benchmarks/results' | tar -x -C .ab/base
#   bash benchmarks/ab_speed.sh .ab/base OUT_DIR [base-first|new-first]
# Then: python benchmarks/summarize_ab.py OUT_DIR/*.json
# Env: AB_ONLY (one benchmark), AB_TIMEOUT (s per side), AB_DIST_BATCHES
# (NCCL batches per repeat; 20 were within noise of the CPU step), AB_PROBE.
set -u
BASE=$(cd "$1" && pwd); OUTDIR=$2; ORDER=${3:-base-first}
NEW=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
run() {  # run SIDE NAME ARGS...: one benchmark of one side, its JSON in OUTDIR
    local side=$1 name=$2; shift 2
    local root=$NEW; [ "$side" = base ] && root=$BASE
    local start=$(date +%s)
    (cd "$root" && PYTHONPATH="$root" timeout ${AB_TIMEOUT:-300} python "benchmarks/$name.py" "$@" \
        --out "$OUTDIR/${name}__${side}.json") > "$OUTDIR/${name}__${side}.log" 2>&1
    echo "$name $side rc=$? $(( $(date +%s) - start )) s"
}
pair() {  # pair NAME ARGS...: both sides, in ORDER (AB_ONLY: a name)
    [ -n "${AB_ONLY:-}" ] && [ "$1" != "$AB_ONLY" ] && return
    if [ "$ORDER" = new-first ]; then run new "$@"; run base "$@"
    else run base "$@"; run new "$@"; fi
}
pair bench_gpu_data_path --no-pyg --gather-blocks '' --batches 40
pair bench_multi_gpu --gpus 2
pair bench_distributed --backend nccl --world-size 2 --sampling-device cuda \
    --feature-device cuda --train --methods random --batches ${AB_DIST_BATCHES:-60} --repeats 3
# Which Triton kernels still compile after the loader's warm-up (new side).
[ "${AB_PROBE:-1}" = 1 ] && (cd "$NEW" && timeout 120 python benchmarks/probe_epoch_compiles.py \
    --out "$OUTDIR/probe_epoch_compiles.json") > "$OUTDIR/probe_epoch_compiles.log" 2>&1
echo "probe_epoch_compiles rc=$?"
