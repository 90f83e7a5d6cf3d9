"""Where a heterogeneous batch's sampling time goes, against the same edges
as one homogeneous graph (``bench_hetero_gpu.py``'s graph and seeds): wall
time per waited batch, kernel time per batch (``torch.profiler``) and the
host's share (``cProfile`` of the sampler's calls, the wait for the device
included as ``synchronize``). GPU box::

    PYTHONPATH=$PWD python benchmarks/probe_hetero_sampler.py --out probe.json
"""
import argparse
import cProfile
import io
import json
import pstats
import sys
from pathlib import Path

import torch
from torch_geometric.sampler import NodeSamplerInput

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_common import device_time  # noqa: E402
from bench_hetero_gpu import hetero_graph, sampler_step, time_batches  # noqa
from pyg_orch import HybridNeighborSampler  # noqa: E402

PROFILED = 40


def kernel_time(step, batches) -> dict:
    r"""Device time per batch and the largest kernels."""
    def run():
        for s in batches[:PROFILED]:
            step(s)
    return device_time(run, PROFILED, top=20)


def host_profile(step, batches) -> dict:
    r"""``cProfile`` of :obj:`PROFILED` waited batches: the functions with
    the most cumulative time, per batch."""
    prof = cProfile.Profile()
    prof.enable()
    for s in batches[:PROFILED]:
        step(s)
    torch.cuda.synchronize()
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    rows = []
    for (file, line, fn), (cc, nc, tt, ct, _) in stats.stats.items():
        rows.append((f'{Path(file).name}:{line}({fn})', nc // PROFILED,
                     round(1e6 * tt / PROFILED, 1),
                     round(1e6 * ct / PROFILED, 1)))
    rows.sort(key=lambda r: -r[3])
    own = sorted(rows, key=lambda r: -r[2])
    return {'by_cumulative_us': rows[:40], 'by_own_us': own[:25],
            'calls_per_batch': sum(r[1] for r in rows)}


def loader_profile(data, fanout, batch_size: int, device) -> dict:
    r"""``cProfile`` of :obj:`PROFILED` batches of the heterogeneous
    loader (fused sampling, feature store, look-ahead; no training), after
    warm-up batches."""
    from pyg_orch import HybridNeighborLoader
    loader = HybridNeighborLoader(data, fanout, batch_size=batch_size,
                                  shuffle=True, input_nodes='paper',
                                  device=device, seed=0)
    it = iter(loader)
    for _ in range(20):
        next(it)
    torch.cuda.synchronize()
    return host_profile(lambda _: next(it), [None] * PROFILED)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument('--num-papers', type=int, default=1_000_000)
    p.add_argument('--fanout', default='15,10')
    p.add_argument('--batch-size', type=int, default=1024)
    p.add_argument('--loader', action='store_true',
                   help="also profile the heterogeneous loader's host work")
    p.add_argument('--out', default='probe_hetero_sampler.json')
    args = p.parse_args()
    dev = torch.device('cuda')
    fanout = [int(k) for k in args.fanout.split(',')]
    data = hetero_graph(args.num_papers, 128 if args.loader else 16)
    homo = data.to_homogeneous()
    gen = torch.Generator().manual_seed(1)
    papers = [torch.randint(0, args.num_papers, (args.batch_size, ),
                            generator=gen) for _ in range(60)]
    start = int((homo.node_type == data.node_types.index('paper'))
                .nonzero()[0])
    res = {'config': vars(args)}
    for name, graph, batches, t in (
            ('hetero', data, papers, 'paper'),
            ('homogeneous', homo, [s + start for s in papers], None)):
        s = HybridNeighborSampler(graph, fanout, device=dev, seed=0,
                                  backend='auto')
        step = sampler_step(s, t)
        out = time_batches(step, batches, warmup=10, rounds=5, device=dev)
        out['backend'] = s.backend
        out.update(kernel_time(step, batches[10:]))
        out['host'] = host_profile(step, batches[10:])
        res[name] = out
        print(name, json.dumps({k: out[k] for k in (
            'ms_per_batch', 'ns_per_edge', 'device_us_per_batch')}),
            flush=True)
        for row in out['host']['by_cumulative_us'][:25]:
            print('   ', row)
        for row in out['kernels'][:12]:
            print('   K', row)
    if args.loader:
        res['loader'] = loader_profile(data, fanout, args.batch_size, dev)
        print('loader', res['loader']['calls_per_batch'], 'calls per batch')
        for row in res['loader']['by_cumulative_us'][:40]:
            print('   ', row)
        for row in res['loader']['by_own_us'][:25]:
            print('   own', row)
    with open(args.out, 'w') as f:
        json.dump(res, f, indent=1)


if __name__ == '__main__':
    main()
