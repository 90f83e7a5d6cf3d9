#!/usr/bin/env python
"""Whether the default :class:`~pyg_orch.offload.BottomLayerOffload` leaves
anything behind that slows training after its trial, measured in one
process (``bench_offload.py --process-per-run`` compares separate
processes, whose step times differ by themselves).

One process, one graph, one loader, GraphSAGE with ``trim_to_layer``; the
phases, each ``--steps`` timed steps:

* ``plain_1``: the plain model (after ``--warmup-steps`` untimed steps;
  left out with ``--default-first``, where the model is wrapped before its
  first step, as in a process of ``bench_offload.py --process-per-run``);
* ``default_after``: the same model wrapped in the default
  ``BottomLayerOffload(model, loader)``, timed once its decision by
  measurement is made (the trial's steps, at most ``--trial-steps``, are
  not timed);
* ``unwrapped``: the same model called directly again;
* ``after_empty_cache``: after ``gc.collect()`` and
  ``torch.cuda.empty_cache()``;
* ``fresh_model``: a new model and optimizer (20 warm-up steps);
* ``plain_2``: the first model again.

Each phase records ms per step (total and median), and the CUDA caching
allocator's allocated and reserved bytes and segments.

Example::

    python benchmarks/bench_offload_same_process.py --wide --steps 400
"""
import argparse
import datetime
import gc
import statistics
import sys
import time
from typing import Any, Dict

import torch
from _bench_common import (  # noqa: E402
    REPO,
    log,
    machine_info,
    sync,
    write_report,
)

import bench_offload  # noqa: E402

SCHEMA_VERSION = 1


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog='bench_offload_same_process.py',
        description='Plain training, the default offload after its '
        'decision, and plain training again, in one process.')
    p.add_argument('--steps', type=int, default=400,
                   help='timed steps per phase')
    p.add_argument('--warmup-steps', type=int, default=100,
                   help='untimed steps of the first model before plain_1')
    p.add_argument('--trial-steps', type=int, default=400,
                   help='at most this many untimed steps for the decision')
    p.add_argument('--default-first', action='store_true',
                   help='wrap the model before its first step (as a '
                   'process of bench_offload.py does): no plain_1 phase')
    p.add_argument('--out', default=None)
    args, rest = p.parse_known_args(argv)
    if min(args.steps, args.warmup_steps, args.trial_steps) < 1:
        p.error('--steps, --warmup-steps and --trial-steps take positive '
                'integers')
    # The graph, model and loader arguments are bench_offload.py's:
    args.graph = bench_offload.parse_args(
        ['--trim', '--modes', 'plain,default'] + rest)
    if args.out is None:
        wide = '_wide' if args.graph.wide else ''
        first = '_default_first' if args.default_first else ''
        args.out = str(REPO / 'benchmarks' / 'results' /
                       f'offload_same_process{wide}{first}_trim_'
                       f'{args.graph.device}.json')
    return args


def run(args) -> Dict[str, Any]:
    from torch_geometric.nn import GraphSAGE

    from pyg_orch import CacheOptions, GraphTopology, HybridNeighborLoader
    from pyg_orch.offload import BottomLayerOffload, OffloadOptions

    g = args.graph
    device = torch.device(g.device)
    data = bench_offload.build_graph(g)
    topology = GraphTopology.from_data(data, device=g.device)
    loader = HybridNeighborLoader(
        data, g.fanout, batch_size=g.batch_size, shuffle=True,
        input_nodes=data.train_mask, device=device, seed=g.seed,
        topology=topology, cache=CacheOptions(cache_ratio=g.gpu_cache_ratio))
    batches = bench_offload.endless(loader)

    def step(model, opt) -> None:
        bench_offload.train_step(model, opt, next(batches), trim=True)

    def timed(name: str, model, opt) -> Dict[str, Any]:
        sync(device)
        marks = [time.perf_counter()]
        for _ in range(args.steps):
            step(model, opt)
            marks.append(time.perf_counter())
        sync(device)
        total = time.perf_counter() - marks[0]
        steps = [1e3 * (b - a) for a, b in zip(marks[:-1], marks[1:])]
        mem = torch.cuda.memory_stats(device) if device.type == 'cuda' \
            else {}
        r = dict(ms_per_step=1e3 * total / args.steps,
                 median_ms=statistics.median(steps),
                 allocated=mem.get('allocated_bytes.all.current'),
                 reserved=mem.get('reserved_bytes.all.current'),
                 segments=mem.get('segment.all.current'))
        log(f'[{name}] {r}')
        return r

    def new_model(seed: int):
        torch.manual_seed(seed)
        return GraphSAGE(g.num_features, g.hidden, g.num_layers,
                         g.num_classes).to(device)

    res: Dict[str, Any] = {}
    model = new_model(0)
    opt = torch.optim.Adam(model.parameters(), lr=g.lr)
    if not args.default_first:
        for _ in range(args.warmup_steps):
            step(model, opt)
        res['plain_1'] = timed('plain_1', model, opt)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        seed=g.seed))
    opt = torch.optim.Adam(off.parameters(), lr=g.lr)
    off.train()
    steps = 0
    while steps < args.trial_steps:  # The trial, untimed.
        step(off, opt)
        steps += 1
        if (off.stats().get('decision') or {}).get('state') == 'decided':
            break
    decision = off.stats().get('decision') or {}
    res['trial_steps'] = steps
    res['decision'] = {k: decision.get(k)
                       for k in ('state', 'chosen_num_hot', 'reason')}
    res['default_after'] = timed('default_after', off, opt)
    res['unwrapped'] = timed('unwrapped', model, opt)
    gc.collect()
    if device.type == 'cuda':
        torch.cuda.empty_cache()
    res['after_empty_cache'] = timed('after_empty_cache', model, opt)
    other = new_model(1)
    other_opt = torch.optim.Adam(other.parameters(), lr=g.lr)
    for _ in range(20):
        step(other, other_opt)
    res['fresh_model'] = timed('fresh_model', other, other_opt)
    res['plain_2'] = timed('plain_2', model, opt)
    return res


def main(argv=None) -> Dict[str, Any]:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    report: Dict[str, Any] = {
        'schema_version': SCHEMA_VERSION,
        'benchmark': 'offload_same_process',
        'args': {'steps': args.steps, 'warmup_steps': args.warmup_steps,
                 'default_first': args.default_first,
                 'trial_steps': args.trial_steps, 'argv': argv,
                 'graph': vars(args.graph)},
        'machine': machine_info(),
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec='seconds'),
    }
    t0 = time.perf_counter()
    report['results'] = run(args)
    report['total_s'] = time.perf_counter() - t0
    write_report(report, args.out)
    return report


if __name__ == '__main__':
    main()
