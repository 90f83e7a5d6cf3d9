r"""How fast a feature cache fills from host memory: the rows a cache adds
(random ids, hottest first) copied by :func:`~pyg_orch.features.tiered.copy_rows`
in the order given (the stores' way), or read in id order and put in place
(:obj:`in_id_order=True`).

A cache's fill reads the rows of its nodes from host memory in chunks of a
million; :meth:`~pyg_orch.HybridNeighborLoader.fit_gpu_cache` on a sharded
loader copies most of the graph's rows this way (83M of 111M per GPU on
the papers100M-shaped graph). Times the median of :obj:`--repeats` fills,
both orders in the same run::

    python benchmarks/bench_cache_fill.py --nodes 8000000 --rows 6000000

Results: JSON under ``benchmarks/results/`` (and ``$OUT``).
"""
import argparse
import datetime
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import log, machine_info, sync, write_report  # noqa: E402

from pyg_orch.features.tiered import TieredFeatureStore, copy_rows  # noqa: E402


def time_fill(host: torch.Tensor, nodes: torch.Tensor, device: torch.device,
              in_id_order: bool, repeats: int) -> Dict[str, Any]:
    r"""Seconds per fill of :obj:`nodes`' rows into a new tensor on
    :obj:`device` (median, min, max of :obj:`repeats`), checked against
    :obj:`host[nodes]` on a sample of rows."""
    seconds: List[float] = []
    out = torch.empty(nodes.numel(), host.size(1), dtype=host.dtype,
                      device=device)
    for _ in tqdm(range(repeats), desc=f'in_id_order={in_id_order}'):
        sync(device)
        start = time.perf_counter()
        copy_rows(host, nodes, out, TieredFeatureStore.FILL_CHUNK_ROWS,
                  in_id_order)
        sync(device)
        seconds.append(time.perf_counter() - start)
    probe = torch.randint(0, nodes.numel(), (1000, ))
    ok = torch.equal(out[probe.to(device)].cpu(), host[nodes[probe]])
    gb = nodes.numel() * host.size(1) * host.element_size() / 1e9
    med = statistics.median(seconds)
    return {'median_s': med, 'min_s': min(seconds), 'max_s': max(seconds),
            'GBps': gb / med, 'rows_right': ok}


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--nodes', type=int, default=8_000_000,
                   help='rows in host memory')
    p.add_argument('--rows', type=int, default=6_000_000,
                   help='rows the cache adds (random ids)')
    p.add_argument('--width', type=int, default=128)
    p.add_argument('--repeats', type=int, default=3)
    p.add_argument('--device', default='cuda' if torch.cuda.is_available()
                   else 'cpu')
    p.add_argument('--out', default=None)
    args = p.parse_args(argv)
    if not 0 < args.rows <= args.nodes:
        p.error(f"'--rows' must lie in [1, --nodes] (got {args.rows})")
    device = torch.device(args.device)
    gen = torch.Generator().manual_seed(0)
    host = torch.randn(args.nodes, args.width, generator=gen)
    if device.type == 'cuda':
        host = host.pin_memory()
    nodes = torch.randperm(args.nodes, generator=gen)[:args.rows]
    res: Dict[str, Any] = {'machine': machine_info(), 'config': vars(args),
                           'date': datetime.date.today().isoformat(),
                           'gb': args.rows * args.width * 4 / 1e9}
    res['given_order'] = time_fill(host, nodes, device, False, args.repeats)
    res['id_order'] = time_fill(host, nodes, device, True, args.repeats)
    res['id_order_speedup'] = (res['given_order']['median_s'] /
                               res['id_order']['median_s'])
    log(f"{res['gb']:.2f} GB: given order "
        f"{res['given_order']['median_s']:.2f} s, id order "
        f"{res['id_order']['median_s']:.2f} s "
        f"({res['id_order_speedup']:.2f}x)")
    out = args.out or (f"benchmarks/results/cache_fill_{device.type}_"
                       f"{res['date']}.json")
    write_report(res, out)
    if os.environ.get('OUT'):
        write_report(res, Path(os.environ['OUT'], Path(out).name))
    return res


if __name__ == '__main__':
    main()
