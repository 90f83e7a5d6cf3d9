#!/usr/bin/env python
"""Benchmark the CPU side of bottom-layer offload: how fast worker
configurations compute hot-vertex embeddings (rows per second), alone and
while a plain training loop runs on the device, and how much they slow that
loop down (the training loop and the workers share Python's interpreter
lock).

Every configuration ``TxI[:cN][:dedup][:bf16][:agg][:nobag]`` runs ``T``
worker threads with ``I`` PyTorch intra-op threads each, work items of ``N``
hot vertices (default: :func:`pyg_orch.offload.tables.default_chunk_size`),
optionally deduplicating sampled neighbors or under bfloat16 autocast. By
default the workers compute the first layer's output; with ``agg``, its
weight-free aggregation (``split='aggregate'``, GraphSAGE's mean), with
:func:`~torch.nn.functional.embedding_bag` unless ``nobag`` (then the
layer's own aggregation). The hot set is
the ``--num-hot`` vertices of highest in-degree. The training loop is
GraphSAGE on :class:`pyg_orch.HybridNeighborLoader` as in
``bench_offload.py`` (without offload), untrimmed and with
``trim_to_layer``; its slowdown is reported as the ratio of ms per batch
with and without the workers busy in the background.

Examples::

    python benchmarks/bench_offload_workers.py --tiny     # smoke test, CPU
    python benchmarks/bench_offload_workers.py            # 2.4M nodes, GPU
    python benchmarks/bench_offload_workers.py --wide --configs 2x4,2x4:bf16
"""
import argparse
import json
import threading
import time
from pathlib import Path
from typing import Any, Dict

import torch
import torch.nn.functional as F
from _bench_common import REPO, log, machine_info, sync  # noqa: E402
from bench_offload import build_graph  # noqa: E402
from bench_offload import parse_args as offload_args  # noqa: E402

SCHEMA_VERSION = 1


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog='bench_offload_workers.py',
        description='CPU throughput of offload worker configurations, '
        'alone and next to a training loop',
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument('--tiny', action='store_true',
                   help='20k-node graph on the CPU (smoke test)')
    p.add_argument('--wide', action='store_true', help='600-dim features')
    p.add_argument('--num-hot', type=int, default=120_000)
    p.add_argument('--configs', default='8x1:c15000,8x1,8x1:dedup,4x2,2x4,'
                   '1x8,2x6',
                   help='comma-separated TxI[:cN][:dedup][:bf16][:agg]'
                   '[:nobag]')
    p.add_argument('--together', default='8x1:c15000,8x1,4x2,2x4,1x8,2x6',
                   help='configurations also run next to training')
    p.add_argument('--tables', type=int, default=3,
                   help='tables timed per configuration alone')
    p.add_argument('--batches', type=int, default=60,
                   help='training batches timed per configuration')
    p.add_argument('--out', default=None)
    args = p.parse_args(argv)
    base = ['--undirected'] + (['--wide'] if args.wide else [])
    if args.tiny:
        base += ['--tiny', '--device', 'cpu']
        args.num_hot = min(args.num_hot, 1000)
    args.graph = offload_args(base)
    args.configs = [c for c in args.configs.split(',') if c]
    args.together = [c for c in args.together.split(',') if c]
    for spec in args.configs + args.together:
        parse_config(spec)
    if args.out is None:
        name = (f"offload_workers{'_tiny' if args.tiny else ''}"
                f"{'_wide' if args.wide else ''}_{args.graph.device}")
        args.out = str(REPO / 'benchmarks' / 'results' / f'{name}.json')
    return args


def parse_config(spec: str) -> Dict[str, Any]:
    head, *opts = spec.split(':')
    try:
        threads, intra = (int(v) for v in head.split('x'))
    except ValueError:
        raise SystemExit(f'bad configuration {spec!r} (expected TxI...)')
    out = dict(threads=threads, intra=intra, chunk=None, dedup=None,
               autocast=None, agg=False, nobag=False)
    for opt in opts:
        if opt.startswith('c') and opt[1:].isdigit():
            out['chunk'] = int(opt[1:])
        elif opt == 'dedup':
            out['dedup'] = True
        elif opt == 'bf16':
            out['autocast'] = torch.bfloat16
        elif opt in ('agg', 'nobag'):
            out[opt] = True
        else:
            raise SystemExit(f'bad option {opt!r} in {spec!r}')
    return out


def main(argv=None) -> Dict[str, Any]:
    import psutil
    from torch_geometric.nn import GraphSAGE

    from pyg_orch import CacheOptions, HybridNeighborLoader
    from pyg_orch.offload.bottom_layer import BottomLayerComputer
    from pyg_orch.offload.super_batch import EmbeddingPipeline

    args = parse_args(argv)
    g = args.graph
    device = torch.device(g.device)
    data = build_graph(g)
    loader = HybridNeighborLoader(data, g.fanout, batch_size=g.batch_size,
                                  shuffle=True, input_nodes=data.train_mask,
                                  device=device, seed=0,
                                  cache=CacheOptions(
                                      cache_ratio=g.gpu_cache_ratio))
    csc = loader.node_sampler.topology.to('cpu').csc[None]
    deg = csc.colptr[1:] - csc.colptr[:-1]
    hot = deg.argsort(descending=True)[:args.num_hot]
    model = GraphSAGE(g.num_features, g.hidden, g.num_layers,
                      g.num_classes).to(device)
    layer = model.convs[0]
    proc = psutil.Process()

    def cpu_seconds():
        t = proc.cpu_times()
        return t.user + t.system

    def pipeline(cfg):
        computer = BottomLayerComputer(layer, data.x, csc, g.fanout[-1],
                                       seed=0, dedup=cfg['dedup'],
                                       autocast_dtype=cfg['autocast'])
        if cfg['agg'] or cfg['nobag']:
            computer.choose_split(hot, 'aggregate')
            if cfg['nobag']:
                computer.bag_mode = None
        computer.calibrate(hot)
        return EmbeddingPipeline(computer, layer, hot, device, 10**9,
                                 cfg['threads'], chunk_size=cfg['chunk'],
                                 intra_op_threads=cfg['intra'])

    def run_tables(pipe, count=None, stop=None):
        rows, version = 0, 0
        t0, c0 = time.perf_counter(), cpu_seconds()
        while (stop is None and version < count) or (stop is not None and
                                                     not stop.is_set()):
            pipe.submit(version)
            pipe._wait(pipe._jobs.popleft())
            rows += hot.numel()
            version += 1
        wall = time.perf_counter() - t0
        return rows / wall, (cpu_seconds() - c0) / wall

    results: Dict[str, Any] = {'alone': {}, 'together': {}}
    for spec in args.configs:
        pipe = pipeline(parse_config(spec))
        run_tables(pipe, 1)  # Warm-up.
        rate, cores = run_tables(pipe, args.tables)
        results['alone'][spec] = dict(rows_per_s=rate, cores=cores,
                                      chunk_size=pipe.chunk_size)
        log(f'[alone] {spec:<14} {rate / 1e3:8.0f}k rows/s '
            f'{cores:5.1f} cores (items of {pipe.chunk_size} rows)')
        pipe.close()

    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def batches():
        while True:
            yield from loader

    def train(trim):
        it = batches()

        def step():
            b = next(it)
            optimizer.zero_grad(set_to_none=True)
            kw = dict(num_sampled_nodes_per_hop=b.num_sampled_nodes,
                      num_sampled_edges_per_hop=b.num_sampled_edges) \
                if trim else {}
            out = model(b.x, b.edge_index, **kw)[:b.batch_size]
            F.cross_entropy(out, b.y[:b.batch_size]).backward()
            optimizer.step()

        for _ in range(5):
            step()
        sync(device)
        t0 = time.perf_counter()
        for _ in range(args.batches):
            step()
        sync(device)
        return 1e3 * (time.perf_counter() - t0) / args.batches

    for trim in (False, True):
        alone = train(trim)
        key = 'trim' if trim else 'plain'
        results['together'][key] = {'train_ms_alone': alone}
        log(f'[train] {key}: {alone:.2f} ms/batch alone')
        for spec in args.together:
            pipe = pipeline(parse_config(spec))
            stop, out = threading.Event(), {}
            worker = threading.Thread(
                target=lambda: out.update(r=run_tables(pipe, stop=stop)))
            worker.start()
            time.sleep(0.3)
            ms = train(trim)
            stop.set()
            worker.join()
            pipe.close()
            rate, cores = out['r']
            results['together'][key][spec] = dict(
                train_ms=ms, slowdown=ms / alone, rows_per_s=rate,
                cores=cores)
            log(f'  {spec:<14} train {ms:7.2f} ms/batch ({ms / alone:.2f}x)'
                f', CPU {rate / 1e3:.0f}k rows/s, {cores:.1f} cores')

    report = {
        'schema_version': SCHEMA_VERSION,
        'benchmark': 'offload_workers',
        'args': {k: v for k, v in vars(args).items() if k != 'graph'},
        'graph': {k: v for k, v in vars(g).items()
                  if k in ('num_nodes', 'num_edges', 'num_features',
                           'fanout', 'batch_size', 'hidden', 'num_layers')},
        'machine': machine_info(),
        'results': results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, 'w') as f:
        json.dump(report, f, indent=1, default=str)
    log(f'[out] {args.out}')
    return report


if __name__ == '__main__':
    main()
