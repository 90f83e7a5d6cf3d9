"""Why the frequency-ranked UVA gather was 4x slower than the degree-ranked
one on fresh machines (one run, one JSON).

``bench_gpu_data_path.py`` timed the frequency-ranked gather first, then the
degree-ranked one, each after 3 warm-up batches. The UVA gather kernel took
the number of rows and the loop count as specialized integer arguments, so
Triton compiled one kernel per "divisible by 16" class of them: batches of a
new class met a compile in the timed loop. With a warm Triton cache (the
machine the old figures came from) a compile is a cache read; on a fresh
machine it is a real compile, and the first store timed paid for it.

This probe times every batch of the gather separately with a cold Triton
cache, once with the kernel as it was (``specialized``) and once as it is
now (``do_not_specialize``), each in a fresh process, and counts the
kernels compiled.

GPU box:

    python benchmarks/probe_gather_compile.py
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _bench_common  # noqa: E402,F401  (puts the checkout on the path)


def child(mode: str, num_batches: int) -> dict:
    import torch
    import triton

    from pyg_orch.sampling.triton import kernels as tk
    from pyg_orch.features.tiered import TieredFeatureStore
    if mode == 'specialized':  # The kernel as it was before the fix.
        tk.gather_rows_kernel = triton.jit(tk.gather_rows_kernel.fn)
    kernel = tk.gather_rows_kernel
    torch.manual_seed(0)
    num_nodes, width = 2_400_000, 100
    x = torch.randn(num_nodes, width).pin_memory()
    hot = torch.rand(num_nodes)
    store = TieredFeatureStore(x, 'cuda', hotness=hot, cache_ratio=0.1,
                               gpu_memory_budget=0.5)
    # Batch sizes like a sampler's: about 600k distinct rows, varying.
    gen = torch.Generator().manual_seed(1)
    sizes = torch.randint(550_000, 650_000, (num_batches, ), generator=gen)
    times = []
    for n in sizes.tolist():
        idx = torch.randperm(num_nodes, generator=gen)[:n].cuda()
        torch.cuda.synchronize()
        t = time.perf_counter()
        store.gather(idx)
        torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - t))
    cache = getattr(kernel, 'device_caches', {})
    compiled = sum(len(c[0]) for c in cache.values()) if cache else None
    steady = sorted(times[3:])
    return {'mode': mode, 'ms_per_batch': times,
            'mean_ms_after_3_warmup': sum(times[3:]) / len(times[3:]),
            'median_ms_after_3_warmup': steady[len(steady) // 2],
            'max_ms_after_3_warmup': max(times[3:]),
            'kernels_compiled': compiled,
            'sizes_div_16': int((sizes % 16 == 0).sum())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--batches', type=int, default=25)
    p.add_argument('--child', default=None)
    p.add_argument('--out',
                   default='benchmarks/results/probe_gather_compile.json')
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.batches)))
        return
    res = {}
    for mode in ('specialized', 'do_not_specialize'):
        with tempfile.TemporaryDirectory() as cache:  # A cold Triton cache.
            env = dict(os.environ, TRITON_CACHE_DIR=cache)
            out = subprocess.run(
                [sys.executable, __file__, '--child', mode, '--batches',
                 str(args.batches)], env=env, capture_output=True, text=True,
                check=True)
        res[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        r = res[mode]
        print(f"{mode}: mean {r['mean_ms_after_3_warmup']:.2f} ms, median "
              f"{r['median_ms_after_3_warmup']:.2f} ms, max "
              f"{r['max_ms_after_3_warmup']:.2f} ms, kernels compiled "
              f"{r['kernels_compiled']}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(f'wrote {args.out}')


if __name__ == '__main__':
    main()
