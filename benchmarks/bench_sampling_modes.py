#!/usr/bin/env python
"""Cost of temporal and weighted sampling in
:class:`pyg_orch.HybridNeighborLoader`, against plain uniform sampling, on a
synthetic power-law graph.

The graph comes from :func:`pyg_orch.datasets.power_law_graph`, with random
integer times per node (``time``) and per edge (``edge_time``) and random
positive edge weights (``edge_weight``). For every sampling mode, the
topology is built once (timed separately), then sampling alone is timed
through ``loader.node_sampler.sample_from_nodes(loader.input_data[idx])`` on
the same seed batches (no feature gathering, no DataLoader), after
``--warmup`` untimed batches per mode. By default the modes take turns batch
by batch (round-robin), so that other load on a shared machine hits them
alike; ``--sequential`` times one mode after the other instead, holding one
topology at a time (least memory). On a busy CPU, ``--threads 1`` avoids
OpenMP threads spinning against other processes.

==========================  ==================================================
mode                        loader arguments
==========================  ==================================================
uniform                     (none)
uniform+replace             ``replace=True``
uniform+disjoint            ``disjoint=True`` (what temporal sampling implies;
                            an extra reference row)
node-temporal uniform       ``time_attr='time'`` (seed time: the seed's own)
node-temporal last          ... and ``temporal_strategy='last'``
edge-temporal               ``time_attr='edge_time'``, ``input_time`` = the
                            seed node's time
weighted                    ``weight_attr='edge_weight'``
weighted+replace            ... and ``replace=True``
==========================  ==================================================

Temporal sampling is always disjoint (as in PyG), so its subgraphs are larger
than those of non-disjoint uniform sampling: compare with
``uniform+disjoint`` too. Prints ms/batch, sampled edges/s and the ratios to
``uniform``; saves everything (with machine info) as JSON.

Examples::

    python benchmarks/bench_sampling_modes.py --tiny
    python benchmarks/bench_sampling_modes.py --small --device cpu
    python benchmarks/bench_sampling_modes.py --device cuda
"""
import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import torch
from _bench_common import (  # noqa: E402
    REPO,
    add_preset_args,
    apply_preset,
    fmt_table,
    int_list,
    log,
    machine_info,
    presets_help,
    resolve_device,
    seed_batches,
    sync,
)

SCHEMA_VERSION = 1

# name -> (topology key, loader keyword arguments)
MODES = {
    'uniform': ('plain', dict()),
    'uniform+replace': ('plain', dict(replace=True)),
    'uniform+disjoint': ('plain', dict(disjoint=True)),
    'node-temporal uniform': ('node_time',
                              dict(time_attr='time',
                                   temporal_strategy='uniform')),
    'node-temporal last': ('node_time',
                           dict(time_attr='time', temporal_strategy='last')),
    'edge-temporal': ('edge_time', dict(time_attr='edge_time')),
    'weighted': ('weight', dict(weight_attr='edge_weight')),
    'weighted+replace': ('weight',
                         dict(weight_attr='edge_weight', replace=True)),
}
TOPOLOGY_ATTRS = {
    'plain': dict(),
    'node_time': dict(time_attr='time'),
    'edge_time': dict(time_attr='edge_time'),
    'weight': dict(weight_attr='edge_weight'),
}


# Arguments ###################################################################

def _mode_list(text: str) -> List[str]:
    names = [v.strip() for v in text.split(',') if v.strip()]
    bad = [n for n in names if n not in MODES]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f'unknown modes {bad}; choose from {list(MODES)}')
    return names


def _backend_list(text: str) -> List[str]:
    names = [v.strip() for v in text.split(',') if v.strip()]
    if not names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f'expected distinct backend names, got {text!r}')
    return names


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog='bench_sampling_modes.py',
        description=(
            'Time HybridNeighborLoader sampling (sample_from_nodes alone) for '
            'uniform, temporal (node-/edge-level, uniform/last) and weighted '
            'sampling on a synthetic power-law graph; print ms/batch, '
            'sampled edges/s and ratios to uniform; save JSON.'),
        epilog=presets_help() + '.',
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_preset_args(p)
    p.add_argument('--num-nodes', type=int, default=None,
                   help='override the number of nodes of the preset')
    p.add_argument('--num-edges', type=int, default=None,
                   help='override the number of edges of the preset')
    p.add_argument('--exponent', type=float, default=2.1,
                   help='power-law exponent of the in-degree distribution')
    p.add_argument('--time-range', type=int, default=1000,
                   help='node and edge times are uniform in [0, time-range)')
    p.add_argument('--device', choices=('auto', 'cpu', 'cuda'),
                   default='auto', help="where sampling runs ('auto': CUDA "
                   'when available)')
    p.add_argument('--batches', type=int, default=20,
                   help='timed batches per mode')
    p.add_argument('--warmup', type=int, default=2,
                   help='untimed warm-up batches per mode')
    p.add_argument('--batch-size', type=int, default=1024,
                   help='seed nodes per batch')
    p.add_argument('--fanout', type=int_list, default=[15, 10, 5],
                   help='neighbors per hop, comma-separated')
    p.add_argument('--modes', type=_mode_list, default=list(MODES),
                   help='comma-separated subset of: ' + ', '.join(MODES))
    p.add_argument('--backends', type=_backend_list, default=['auto'],
                   help="sampling backends to time, comma-separated "
                   "('auto', 'torch', 'triton', 'triton_draw'); with more "
                   "than one, every mode is timed with each (rows 'mode "
                   "[backend]') and, with 'torch' among them, the speed-up "
                   "over it is reported")
    p.add_argument('--sequential', action='store_true',
                   help='time the modes one after the other, one topology '
                   'in memory at a time (default: round-robin over the '
                   'modes batch by batch, all topologies in memory, which '
                   'is fairer on a shared machine)')
    p.add_argument('--seed', type=int, default=0,
                   help='seed of the graph, the batches and the sampler')
    p.add_argument('--threads', type=int, default=None,
                   help='torch.set_num_threads (default: torch default)')
    p.add_argument('--wait-dataset', type=float, default=1800.0,
                   help='seconds to wait for pyg_orch.datasets.power_law '
                   'to appear (it may still be written)')
    p.add_argument('--out', default=None,
                   help='JSON output (default: benchmarks/results/'
                   'sampling_modes_<preset>_<device>.json)')
    args = p.parse_args(argv)
    for name in ('batches', 'batch_size'):
        if getattr(args, name) < 1:
            p.error(f'--{name.replace("_", "-")} must be >= 1')
    if args.warmup < 0:
        p.error('--warmup must be >= 0')
    resolve_device(p, args)
    apply_preset(args, 'num_nodes', 'num_edges')
    if args.out is None:
        args.out = str(REPO / 'benchmarks' / 'results' /
                       f'sampling_modes_{args.preset}_{args.device}.json')
    return args


# Helpers #####################################################################

def import_power_law_graph(wait_s: float):
    r"""Imports :func:`pyg_orch.datasets.power_law_graph`, polling while the
    module is not there yet."""
    import importlib
    deadline = time.monotonic() + wait_s
    delay = 5.0
    while True:
        try:
            importlib.invalidate_caches()
            for name in ('pyg_orch.datasets.power_law', 'pyg_orch.datasets'):
                sys.modules.pop(name, None)
            from pyg_orch.datasets import power_law_graph
            return power_law_graph
        except ImportError as e:
            if time.monotonic() > deadline:
                raise SystemExit(
                    f'pyg_orch.datasets.power_law_graph is not available '
                    f'after waiting {wait_s:.0f}s: {e}') from e
            log(f'waiting for pyg_orch.datasets.power_law ({e}); '
                f'retrying in {delay:.0f}s')
            time.sleep(delay)
            delay = min(delay * 1.5, 60.0)


def make_graph(args):
    power_law_graph = import_power_law_graph(args.wait_dataset)
    gen_device = args.device
    t0 = time.perf_counter()
    data = power_law_graph(args.num_nodes, args.num_edges, num_features=0,
                           exponent=args.exponent, device=gen_device,
                           seed=args.seed)
    gen = torch.Generator(device=gen_device).manual_seed(args.seed + 1)
    data.time = torch.randint(args.time_range, (args.num_nodes, ),
                              generator=gen, device=gen_device)
    data.edge_time = torch.randint(args.time_range, (args.num_edges, ),
                                   generator=gen, device=gen_device)
    # Positive weights, spread over two orders of magnitude:
    data.edge_weight = torch.empty(args.num_edges, device=gen_device)
    data.edge_weight.uniform_(-2.0, 0.0, generator=gen).exp2_()
    data.edge_weight.pow_(3.3)
    sync(gen_device)
    data = data.to('cpu')
    seconds = time.perf_counter() - t0
    for key in ('train_mask', 'val_mask', 'test_mask', 'y'):
        if key in data:
            del data[key]
    return data, seconds


def time_batch(sampler, input_data, idx, device):
    r"""Samples one batch; returns (seconds, sampled edges, sampled nodes)."""
    sync(device)
    t0 = time.perf_counter()
    out = sampler.sample_from_nodes(input_data[idx])
    sync(device)
    return (time.perf_counter() - t0, int(out.row.numel()),
            int(out.node.numel()))


def summarize(samples: List[tuple]) -> Dict[str, Any]:
    total = sum(s[0] for s in samples)
    edges = sum(s[1] for s in samples)
    nodes = sum(s[2] for s in samples)
    n = len(samples)
    ms = sorted(1e3 * s[0] for s in samples)
    return dict(batches=n, seconds=total, ms_per_batch=1e3 * total / n,
                ms_median=ms[n // 2], ms_min=ms[0], ms_max=ms[-1],
                edges_per_s=edges / total, edges_per_batch=edges / n,
                nodes_per_batch=nodes / n)


# Main ########################################################################

def main(argv=None) -> Dict[str, Any]:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    from pyg_orch import HybridNeighborLoader, PlacementOptions
    from pyg_orch.topology.graph import GraphTopology

    device = torch.device(args.device)
    machine = machine_info()
    log(f"machine: {machine['cpu_count']} CPUs ({machine['cpu_model']}), "
        f"{machine['torch_num_threads']} torch threads, "
        f"{machine['memory_gb']} GB, torch {machine['torch']}, "
        f"PyG {machine['torch_geometric']}, GPU {machine['gpu']}, "
        f"load {machine['load_average_start']}")
    log(f'graph: preset {args.preset}, {args.num_nodes:,} nodes, '
        f'{args.num_edges:,} edges, exponent {args.exponent}; sampling on '
        f'{device}, fan-out {args.fanout}, batch size {args.batch_size}, '
        f'{args.warmup} warm-up + {args.batches} timed batches per mode')
    data, gen_s = make_graph(args)
    log(f'generated the graph in {gen_s:.1f}s')

    batches = seed_batches(args.num_nodes, args.batch_size,
                           args.warmup + args.batches, args.seed)
    # Edge-level temporal sampling needs a time per seed: the seed's own.
    input_time = data.time

    by_topology: Dict[str, List[str]] = {}
    for name in args.modes:
        by_topology.setdefault(MODES[name][0], []).append(name)
    several = len(args.backends) > 1

    def label(name: str, backend: str) -> str:
        return f'{name} [{backend}]' if several else name

    labels = [(label(n, b), n, b) for n in args.modes for b in args.backends]
    topo_info: Dict[str, Dict[str, Any]] = {}
    samples: Dict[str, List[tuple]] = {lab: [] for lab, _, _ in labels}
    meta: Dict[str, Dict[str, Any]] = {}

    def build_topology(key: str, names: List[str]):
        attrs = TOPOLOGY_ATTRS[key]
        gc.collect()
        sync(device)
        t0 = time.perf_counter()
        topo = GraphTopology.from_data(data, device=device, **attrs)
        if key == 'weight' and any(MODES[n][1].get('replace')
                                   for n in names):
            for t in topo.csc.values():  # Built lazily on the first draw.
                _ = t.weight_cumsum
        sync(device)
        build_s = time.perf_counter() - t0
        topo_info[key] = dict(attrs=attrs, build_s=build_s,
                              nbytes=topo.nbytes())
        log(f'topology {key!r} {attrs}: built in {build_s:.2f}s, '
            f'{topo.nbytes() / 2**20:.0f} MiB')
        return topo

    def make_sampler(name: str, backend: str, topo):
        kwargs = dict(MODES[name][1])
        if kwargs.get('time_attr') == 'edge_time':
            kwargs['input_time'] = input_time
        loader = HybridNeighborLoader(data, args.fanout,
                                      batch_size=args.batch_size,
                                      device=device, seed=args.seed,
                                      topology=topo,
                                      placement=PlacementOptions(
                                          backend=backend),
                                      **kwargs)
        meta[label(name, backend)] = dict(
            topology=MODES[name][0], mode=name, backend=backend,
            backend_used=loader.node_sampler.backend, kwargs={
                k: v for k, v in kwargs.items() if k != 'input_time'
            }, disjoint=bool(loader.node_sampler.disjoint))
        for idx in batches[:args.warmup]:
            loader.node_sampler.sample_from_nodes(loader.input_data[idx])
        return loader

    timed = batches[args.warmup:]
    if args.sequential:  # One topology at a time (least memory).
        for key, names in by_topology.items():
            topo = build_topology(key, names)
            for lab, name, backend in labels:
                if name not in names:
                    continue
                loader = make_sampler(name, backend, topo)
                for idx in timed:
                    samples[lab].append(time_batch(
                        loader.node_sampler, loader.input_data, idx, device))
                del loader
            del topo
            if device.type == 'cuda':
                torch.cuda.empty_cache()
    else:  # Round-robin over the modes, batch by batch: load on a shared
        # machine then hits every mode alike.
        loaders = {}
        for key, names in by_topology.items():
            topo = build_topology(key, names)
            for lab, name, backend in labels:
                if name in names:
                    loaders[lab] = make_sampler(name, backend, topo)
        for idx in timed:
            for lab, loader in loaders.items():
                samples[lab].append(time_batch(
                    loader.node_sampler, loader.input_data, idx, device))
        del loaders

    results: Dict[str, Dict[str, Any]] = {}
    for lab, _, _ in labels:
        results[lab] = res = summarize(samples[lab])
        res.update(meta[lab])

    rows = []
    for lab, name, backend in labels:
        r = results[lab]
        base = results.get(label('uniform', backend))
        if base is not None:
            r['ms_ratio_to_uniform'] = r['ms_per_batch'] / base['ms_per_batch']
            r['edges_per_s_ratio_to_uniform'] = (r['edges_per_s'] /
                                                 base['edges_per_s'])
        ref = results.get(label(name, 'torch')) if several else None
        if ref is not None and backend != 'torch':
            r['speedup_over_torch'] = ref['ms_per_batch'] / r['ms_per_batch']
        rows.append([
            lab, r['backend_used'], r['ms_per_batch'], r['ms_median'],
            r['edges_per_batch'], r['edges_per_s'] / 1e6,
            r.get('ms_ratio_to_uniform'), r.get('speedup_over_torch')
        ])
    log('')
    log(f'Sampling alone on {device} ({args.preset}: {args.num_nodes:,} '
        f'nodes, {args.num_edges:,} edges, fan-out {args.fanout}, batch '
        f'{args.batch_size}, mean of {args.batches} batches, '
        f"{'sequential' if args.sequential else 'round-robin'}, "
        f'{torch.get_num_threads()} threads):')
    log(fmt_table([
        'mode', 'backend', 'ms/batch', 'median ms', 'edges/batch',
        'M edges/s', 'ms / uniform', 'x torch'
    ], rows))

    report = dict(
        schema_version=SCHEMA_VERSION,
        benchmark='sampling_modes',
        created=time.strftime('%Y-%m-%dT%H:%M:%S%z'),
        args={k: v for k, v in vars(args).items()},
        graph=dict(num_nodes=args.num_nodes, num_edges=args.num_edges,
                   exponent=args.exponent, time_range=args.time_range,
                   generate_s=gen_s,
                   edge_time='uniform integers in [0, time_range)',
                   node_time='uniform integers in [0, time_range)',
                   edge_weight='(2^U(-2, 0))^3.3, in [0.01, 1]',
                   input_time='edge-temporal: the seed node time'),
        device=str(device),
        machine=machine,
        topologies=topo_info,
        results=results,
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + '\n')
    log(f'\nwrote {out}')
    return report


if __name__ == '__main__':
    main()
