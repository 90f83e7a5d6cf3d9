"""Which Triton kernels compile after the loader's warm-up: a loader over a
power-law graph on the GPU (seeds not a multiple of the batch size, so the
last batch is short), 20 warm-up batches, then two whole epochs; for each
phase the kernels that entered Triton's cache (a fresh cache directory),
and the last batch of the first epoch alone::

    python benchmarks/probe_epoch_compiles.py [--nodes N] [--out F.json]
"""
import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault('TRITON_CACHE_DIR', tempfile.mkdtemp(prefix='triton_'))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from _bench_common import machine_info, write_report  # noqa: E402
from bench_epoch_scale import (  # noqa: E402
    triton_cache_entries,
    triton_kernel_names,
)
from pyg_orch import HybridNeighborLoader  # noqa: E402
from pyg_orch.datasets import power_law_graph  # noqa: E402


def phase(loader, limit=None, last_alone=False) -> dict:
    r"""One pass (or :obj:`limit` batches); the kernels it compiled."""
    before, n, start = triton_cache_entries(), 0, time.perf_counter()
    last = None
    for batch in loader:
        n += 1
        if last_alone and n == len(loader):
            last = triton_cache_entries()
        batch.x.sum().item()  # Wait for the batch.
        if n == limit:
            break
    out = {'batches': n, 'seconds': time.perf_counter() - start,
           'new_kernels': triton_kernel_names(triton_cache_entries() -
                                              before)}
    if last is not None:
        out['new_kernels_last_batch'] = triton_kernel_names(
            triton_cache_entries() - last)
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--nodes', type=int, default=2_000_000)
    p.add_argument('--edges', type=int, default=20_000_000)
    p.add_argument('--seeds', type=int, default=100_454)
    p.add_argument('--device', default='cuda')
    p.add_argument('--out', default=None)
    args = p.parse_args(argv)
    dev = torch.device(args.device)
    data = power_law_graph(args.nodes, args.edges, 64, 10, device='cpu',
                           seed=0)
    seeds = torch.randperm(args.nodes)[:args.seeds]
    loader = HybridNeighborLoader(data, [15, 10, 5], input_nodes=seeds,
                                  batch_size=1024, shuffle=True, device=dev,
                                  seed=0)
    res = {'machine': machine_info(), 'config': vars(args),
           'after_build': triton_kernel_names(triton_cache_entries())}
    res['warmup'] = phase(loader, limit=20)
    res['epoch1'] = phase(loader, last_alone=True)
    res['epoch2'] = phase(loader)
    print(json.dumps({k: v for k, v in res.items() if k != 'machine'},
                     indent=1))
    if args.out:
        write_report(res, args.out)
    return res


if __name__ == '__main__':
    main()
