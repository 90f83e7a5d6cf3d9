#!/usr/bin/env python
"""Benchmark :class:`pyg_orch.HybridNeighborLoader` against PyG's
:class:`torch_geometric.loader.NeighborLoader` (with torch-sparse) on a
synthetic power-law graph.

One run measures, on one graph built once:

1. Sampling alone (ms per batch and sampled edges per second):

   * PyG ``NeighborLoader``: iterating the loader (sampling + feature
     slicing) for every ``--pyg-workers`` value, and "sample only" through
     ``loader.node_sampler.sample_from_nodes`` in the main process;
   * ``HybridNeighborLoader`` on the CPU: "sample only" through
     ``loader.node_sampler.sample_from_nodes`` on the same seed batches, and
     iterating the loader for every worker count (with ``num_workers=0``,
     the loader's ``'sample'`` stage gives the sampling share of iterating);
   * ``HybridNeighborLoader`` on the GPU (``device='cuda'``), when CUDA is
     available and ``--device`` allows it.

2. End-to-end training of GraphSAGE (Adam, cross-entropy on
   ``out[:batch.batch_size]``), ms per batch broken down by stage
   (sample / gather / transfer / train / wait).

3. Ratios of every configuration against the PyG baseline at its best
   ``num_workers`` (speed-up = pyg_ms / ours_ms, and the ratio of sampled
   edges per second), printed as tables and written as JSON (``--out``).

PyG's loader needs pyg-lib or torch-sparse. When ``import torch_sparse``
fails, the PyG rows are skipped with a note (see benchmarks/README.md for the
``PYTHONPATH=.cache/baseline-site`` trick).

Examples::

    PYTHONPATH=.cache/baseline-site python benchmarks/bench_loader.py --tiny
    PYTHONPATH=.cache/baseline-site python benchmarks/bench_loader.py \\
        --small --device cpu
    PYTHONPATH=.cache/baseline-site python benchmarks/bench_loader.py
"""
import argparse
import gc
import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, List

import torch
import torch.nn.functional as F
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


# Arguments ###################################################################

class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    r"""Shows defaults, except for flags and options without one."""
    def _get_help_string(self, action):
        if action.default is None or action.const is not None:
            return action.help
        return super()._get_help_string(action)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog='bench_loader.py',
        description=(
            'Benchmark pyg_orch.HybridNeighborLoader (CPU and GPU) against '
            "PyG's NeighborLoader with torch-sparse on a synthetic power-law "
            'graph: sampling alone (ms/batch, sampled edges/s), end-to-end '
            'GraphSAGE training with a per-stage breakdown, and speed-ups '
            'over PyG at its best num_workers. Results are printed and saved '
            'as JSON.'),
        epilog=(
            presets_help() + ' (default: the GPU box, ~128 GB RAM; tiny: a '
            'smoke test). PyG rows need torch-sparse: run with '
            'PYTHONPATH=.cache/baseline-site. See benchmarks/README.md.'),
        formatter_class=_HelpFormatter)

    g = p.add_argument_group('graph')
    add_preset_args(g)
    g.add_argument('--num-nodes', type=int, default=None,
                   help='override the number of nodes of the preset')
    g.add_argument('--num-edges', type=int, default=None,
                   help='override the number of directed edges of the '
                   'preset')
    g.add_argument('--num-features', type=int, default=100,
                   help='node feature dimension')
    g.add_argument('--num-classes', type=int, default=47,
                   help='number of classes')
    g.add_argument('--exponent', type=float, default=2.1,
                   help='power-law exponent of the in-degree distribution')
    g.add_argument('--homophily', type=float, default=0.5,
                   help='probability that an edge stays within a class')
    g.add_argument('--gen-device', default='auto',
                   help="where the graph is generated ('auto': the GPU when "
                   'the benchmark uses one, else the CPU); it is moved to '
                   'the CPU afterwards')

    g = p.add_argument_group('model and sampling')
    g.add_argument('--fanout', type=int_list, default=[15, 10, 5],
                   help='neighbors per hop, comma-separated')
    g.add_argument('--batch-size', type=int, default=1024,
                   help='seed nodes per batch')
    g.add_argument('--hidden', type=int, default=256,
                   help='GraphSAGE hidden channels')
    g.add_argument('--num-layers', type=int, default=3,
                   help='GraphSAGE layers')
    g.add_argument('--lr', type=float, default=3e-3, help='Adam learning rate')

    g = p.add_argument_group('measurement')
    g.add_argument('--device', choices=('auto', 'cpu', 'cuda'),
                   default='auto',
                   help="'cpu': CPU-only configurations, training on the "
                   "CPU; 'cuda': also GPU sampling, training on the GPU "
                   "(needs CUDA); 'auto': 'cuda' when available")
    g.add_argument('--batches', type=int, default=20,
                   help='timed batches per measurement (worker '
                   'configurations time at least 4 x num_workers batches)')
    g.add_argument('--warmup', type=int, default=2,
                   help='untimed warm-up batches before every measurement '
                   '(+ num_workers when iterating with workers)')
    g.add_argument('--train-batches', type=int, default=None,
                   help='timed batches per end-to-end training run '
                   '(default: --batches)')
    g.add_argument('--pyg-workers', type=int_list, default=[0, 2, 4, 8, 15],
                   help='num_workers sweep (PyG and HybridNeighborLoader on '
                   'the CPU), capped by os.cpu_count()')
    g.add_argument('--threads', type=int, default=None,
                   help='torch.set_num_threads for the main process '
                   '(default: leave PyTorch\'s choice)')
    g.add_argument('--seed', type=int, default=0,
                   help='seed of the graph, the seed batches and sampling')
    g.add_argument('--no-pyg', action='store_true',
                   help="skip PyG's NeighborLoader even if torch-sparse "
                   'imports')
    g.add_argument('--no-train', action='store_true',
                   help='skip end-to-end training')
    g.add_argument('--no-sweep', action='store_true',
                   help='only num_workers=0 (no worker sweep)')
    g.add_argument('--profile', action='store_true',
                   help='also profile HybridNeighborLoader CPU sampling with '
                   'torch.profiler and print / save the top operators')
    g.add_argument('--out', default=None,
                   help='JSON output path (default: '
                   'benchmarks/results/loader_<preset>_<device>.json)')
    args = p.parse_args(argv)

    for name in ('batches', 'batch_size', 'num_layers', 'hidden'):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup < 0:
        p.error('--warmup must be >= 0')
    if any(w < 0 for w in args.pyg_workers):
        p.error('--pyg-workers must be >= 0')
    if args.train_batches is None:
        args.train_batches = args.batches
    apply_preset(args, 'num_nodes', 'num_edges')

    resolve_device(p, args)
    if args.gen_device == 'auto':
        args.gen_device = args.device

    cpus = os.cpu_count() or 1
    workers = sorted({w for w in args.pyg_workers if w <= cpus})
    if args.no_sweep or not workers:
        workers = [0]
    if 0 not in workers:
        workers = [0] + workers
    args.workers = workers
    if args.out is None:
        args.out = str(REPO / 'benchmarks' / 'results' /
                       f'loader_{args.preset}_{args.device}.json')
    return args


# Helpers #####################################################################

@contextmanager
def timed(timer, name: str, device):
    r"""Times a block into :obj:`timer` (a :class:`StageTimer`),
    synchronizing :obj:`device` around it."""
    sync(device)
    t0 = time.perf_counter()
    try:
        yield
    finally:
        sync(device)
        timer.add(name, time.perf_counter() - t0)


@contextmanager
def num_threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def batch_edges(batch) -> int:
    nse = getattr(batch, 'num_sampled_edges', None)
    if nse is not None:
        return int(sum(int(v) for v in nse))
    return int(batch.edge_index.size(1))


def out_edges(out) -> int:
    r"""Sampled edges of a :class:`SamplerOutput`."""
    return int(out.row.numel())


def try_torch_sparse():
    try:
        import torch_sparse  # noqa: F401
    except Exception as e:  # ImportError, or OSError on an ABI mismatch
        return None, f'{type(e).__name__}: {e}'
    return torch_sparse, None


def fit_batches(loader, warmup: int, num: int):
    r"""Warm-up and timed batches, fewer where the loader has fewer than
    :obj:`warmup + num` batches (at least one timed)."""
    available = len(loader)
    if warmup + num > available:
        num = max(available - warmup, 1)
        warmup = available - num
    return warmup, num


def batches_per_epoch(num_inputs: int, batch_size: int) -> int:
    return max(num_inputs // batch_size, 1)  # drop_last=True


# Measurements ################################################################

def measure_sample_only(sampler, input_data, batches: List[torch.Tensor],
                        warmup: int, device) -> Dict[str, Any]:
    r"""Calls :obj:`sampler.sample_from_nodes` directly (no feature
    gathering, no DataLoader)."""
    for idx in batches[:warmup]:
        sampler.sample_from_nodes(input_data[idx])
    timed_batches = batches[warmup:]
    sync(device)
    t0 = time.perf_counter()
    edges = nodes = 0
    for idx in timed_batches:
        out = sampler.sample_from_nodes(input_data[idx])
        edges += out_edges(out)
        nodes += int(out.node.numel())
    sync(device)
    dt = time.perf_counter() - t0
    n = len(timed_batches)
    return dict(batches=n, seconds=dt, ms_per_batch=1e3 * dt / n,
                edges_per_s=edges / dt, edges_per_batch=edges / n,
                nodes_per_batch=nodes / n)


def measure_iteration(loader, warmup: int, num: int, device,
                      hybrid: bool) -> Dict[str, Any]:
    r"""Iterates :obj:`loader` without training (sampling + feature
    slicing, plus any transfer the loader does)."""
    warmup, num = fit_batches(loader, warmup, num)
    it = iter(loader)
    for _ in range(warmup):
        next(it)
    if hybrid:
        reset_stats(loader)
    sync(device)
    t0 = time.perf_counter()
    edges = nodes = 0
    for _ in range(num):
        batch = next(it)
        edges += batch_edges(batch)
        nodes += int(batch.num_nodes)
    sync(device)
    dt = time.perf_counter() - t0
    del it
    gc.collect()
    res = dict(batches=num, warmup=warmup, seconds=dt,
               ms_per_batch=1e3 * dt / num, edges_per_s=edges / dt,
               edges_per_batch=edges / num, nodes_per_batch=nodes / num)
    if hybrid:
        res['stages_ms'] = stage_ms(loader.timer)
        res['loader_stats'] = extra_stats(loader)
    return res


def stage_ms(timer) -> Dict[str, float]:
    return {k: v['ms_per_batch'] for k, v in timer.summary().items()}


def reset_stats(loader) -> None:
    if hasattr(loader, 'reset_stats'):
        loader.reset_stats()
    else:
        loader.timer.reset()


def extra_stats(loader) -> Dict[str, Any]:
    r"""What :meth:`HybridNeighborLoader.stats` reports beyond stage times
    (feature cache, memory, ...), and the loader's settings, when known."""
    out: Dict[str, Any] = {
        'build_s': getattr(loader, '_bench_build_s', None)}
    for name in ('prefetch', 'backend', 'topology_placement'):
        if hasattr(loader, name):
            value = getattr(loader, name)
            if not isinstance(value, (int, float, str, bool, type(None))):
                value = str(value)
            out[name] = value
    if hasattr(loader, 'feature_store'):
        fs = loader.feature_store
        out['feature_store'] = None if fs is None else type(fs).__name__
    try:
        stats = loader.stats()
    except Exception:
        return out
    if isinstance(stats, dict) and 'stages' in stats:
        for k, v in stats.items():
            if k != 'stages':
                out[k] = v
    return out


def make_model(args, device):
    from torch_geometric.nn.models import GraphSAGE

    torch.manual_seed(args.seed)
    model = GraphSAGE(args.num_features, args.hidden, args.num_layers,
                      out_channels=args.num_classes).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    return model, opt


def measure_training(args, loader, train_device, hybrid: bool
                     ) -> Dict[str, Any]:
    r"""GraphSAGE training over :obj:`loader`, with the time per stage:
    the loader's own (sample / gather / transfer / wait) for
    :class:`HybridNeighborLoader`, :obj:`'wait'` (blocked in :obj:`next`)
    for PyG, plus :obj:`'transfer'` (to the training device, when the batch
    is elsewhere) and :obj:`'train'`."""
    from pyg_orch import StageTimer

    model, opt = make_model(args, train_device)
    model.train()
    warmup, num = fit_batches(loader, args.warmup, args.train_batches)
    timer = loader.timer if hybrid else StageTimer(train_device)
    it = iter(loader)
    edges = 0
    losses = []
    t0 = None
    for i in range(warmup + num):
        if i == warmup:
            sync(train_device)
            if hybrid:
                reset_stats(loader)
            else:
                timer.reset()
            edges = 0
            t0 = time.perf_counter()
        if hybrid:
            batch = next(it)  # The loader charges its stages and 'wait'.
        else:
            start = time.perf_counter()
            batch = next(it)
            timer.add('wait', time.perf_counter() - start)
            timer.num_batches += 1
        edges += batch_edges(batch)
        if batch.x.device != torch.device(train_device):
            with timed(timer, 'transfer', train_device):
                batch = batch.to(train_device, non_blocking=True)
        with timed(timer, 'train', train_device):
            opt.zero_grad(set_to_none=True)
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(
                out, batch.y[:batch.batch_size].to(out.device))
            loss.backward()
            opt.step()
        losses.append(float(loss.detach()))
    sync(train_device)
    dt = time.perf_counter() - t0
    del it, batch, out, loss
    gc.collect()
    stages = stage_ms(timer)
    total_ms = 1e3 * dt / num
    # Stages of a prefetching loader overlap training (their sum can exceed
    # the total):
    stages['other'] = max(total_ms - sum(stages.values()), 0.0)
    res = dict(batches=num, warmup=warmup, seconds=dt,
               ms_per_batch=total_ms, edges_per_s=edges / dt,
               stages_ms=stages, first_loss=losses[0], last_loss=losses[-1])
    if hybrid:
        res['loader_stats'] = extra_stats(loader)
    return res


def profile_sampler(sampler, input_data, batches, top: int = 15):
    from torch.profiler import ProfilerActivity, profile

    for idx in batches[:2]:
        sampler.sample_from_nodes(input_data[idx])
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for idx in batches:
            sampler.sample_from_nodes(input_data[idx])
    table = prof.key_averages().table(sort_by='self_cpu_time_total',
                                      row_limit=top)
    rows = []
    total = sum(e.self_cpu_time_total for e in prof.key_averages()) or 1
    for e in sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total
                    )[:top]:
        rows.append(dict(op=e.key, calls=e.count,
                         self_ms_per_batch=e.self_cpu_time_total / 1e3 /
                         len(batches),
                         share=e.self_cpu_time_total / total))
    return table, rows


# Tables ######################################################################

# Main ########################################################################

def main(argv=None) -> Dict[str, Any]:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch_sparse, sparse_error = try_torch_sparse()
    use_pyg = torch_sparse is not None and not args.no_pyg

    import torch_geometric
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.sampler import NeighborSampler

    from pyg_orch import GraphTopology, HybridNeighborLoader
    try:
        from pyg_orch.datasets import power_law_graph
    except ImportError:  # Package __init__ not there yet.
        from pyg_orch.datasets.power_law import power_law_graph

    notes: List[str] = []
    if torch_sparse is None:
        msg = ("NOTE: 'import torch_sparse' failed (" + sparse_error + "); "
               "PyG NeighborLoader rows are skipped. Run with "
               "PYTHONPATH=.cache/baseline-site to include the baseline.")
        log(msg)
        notes.append(msg)
    elif args.no_pyg:
        notes.append('PyG rows skipped (--no-pyg).')
    if not torch_geometric.typing.WITH_PYG_LIB and use_pyg:
        notes.append("PyG samples with torch-sparse's neighbor_sample "
                     '(pyg-lib not installed).')

    use_cuda = args.device == 'cuda'
    train_device = torch.device('cuda', torch.cuda.current_device()) \
        if use_cuda else torch.device('cpu')
    machine = machine_info()
    log(f"machine: {machine['cpu_count']} CPUs ({machine['cpu_model']}), "
        f"{machine['memory_gb']} GB, torch {machine['torch']}, "
        f"PyG {machine['torch_geometric']}, torch-sparse "
        f"{machine['torch_sparse']}, GPU {machine['gpu']}")
    load = machine['load_average_start']
    if load and load[0] > 0.75 * (machine['cpu_count'] or 1):
        msg = (f"WARNING: load average {load[0]:.1f} on "
               f"{machine['cpu_count']} CPUs: other processes compete for "
               f"the CPU, timings are noisy. Multi-threaded ops suffer most "
               f"(OpenMP threads spin-wait for descheduled peers); compare "
               f"the t=1 rows, or run with OMP_WAIT_POLICY=PASSIVE.")
        log(msg)
        notes.append(msg)
    log(f'preset {args.preset}: {args.num_nodes:,} nodes, '
        f'{args.num_edges:,} edges, {args.num_features} features, '
        f'{args.num_classes} classes; fan-out {args.fanout}, batch '
        f'{args.batch_size}; workers {args.workers}; device {args.device}')

    # Graph, built once ######################################################
    t = time.perf_counter()
    data = power_law_graph(args.num_nodes, args.num_edges,
                           num_features=args.num_features,
                           num_classes=args.num_classes,
                           exponent=args.exponent, homophily=args.homophily,
                           device=args.gen_device, seed=args.seed)
    if data.edge_index.device.type != 'cpu':
        data = data.to('cpu')
        torch.cuda.empty_cache()
    graph_s = time.perf_counter() - t
    train_idx = data.train_mask.nonzero().view(-1)
    log(f'graph built in {graph_s:.1f}s ({train_idx.numel():,} training '
        f'nodes)')

    t = time.perf_counter()
    topo_cpu = GraphTopology.from_data(data)
    topo_s = time.perf_counter() - t
    log(f'HybridNeighborLoader topology built in {topo_s:.1f}s '
        f'({topo_cpu.nbytes() / 2**20:.0f} MiB)')
    graph = dict(num_nodes=args.num_nodes, num_edges=args.num_edges,
                 num_features=args.num_features,
                 num_classes=args.num_classes, exponent=args.exponent,
                 homophily=args.homophily, gen_device=args.gen_device,
                 num_train_nodes=int(train_idx.numel()), build_s=graph_s,
                 topology_build_s=topo_s, topology_bytes=topo_cpu.nbytes(),
                 max_in_degree=int((topo_cpu.csc[None].colptr[1:] -
                                    topo_cpu.csc[None].colptr[:-1]).max()))

    num_sample = args.warmup + args.batches
    idx_batches = seed_batches(train_idx.numel(), args.batch_size,
                               num_sample, args.seed)
    epoch = batches_per_epoch(train_idx.numel(), args.batch_size)
    common = dict(num_neighbors=args.fanout, batch_size=args.batch_size,
                  input_nodes=train_idx, shuffle=True, drop_last=True)
    sampling: List[Dict[str, Any]] = []
    training: List[Dict[str, Any]] = []

    # Sampling-only rows run at the main process's thread count and, when
    # that is above 1, also single-threaded (torch-sparse's sampler is
    # single-threaded; DataLoader workers run with one thread each).
    main_threads = torch.get_num_threads()
    thread_counts = [main_threads] + ([1] if main_threads > 1 else [])

    def add_sampling(name, loader_kind, device, mode, workers, res,
                     data_on='cpu', threads=None):
        if threads is None:
            threads = main_threads if workers == 0 else 1
        row = dict(name=name, loader=loader_kind, device=str(device),
                   mode=mode, num_workers=workers, threads=threads,
                   data_on=data_on, **res)
        sampling.append(row)
        extra = ''
        if 'stages_ms' in res and 'sample' in res['stages_ms']:
            extra = f"  (sample {res['stages_ms']['sample']:.1f} ms)"
        log(f"  {name:<36} {res['ms_per_batch']:9.2f} ms/batch "
            f"{res['edges_per_s'] / 1e6:9.3f} M edges/s{extra}")
        return row

    def iter_counts(workers):
        warm = args.warmup + workers
        num = max(args.batches, 4 * workers)
        if warm + num > epoch:
            log(f'    (only {epoch} batches per epoch: timing '
                f'{max(epoch - warm, 1)} batches)')
        return warm, num

    # PyG ####################################################################
    pyg_sampler = None
    if use_pyg:
        log('\n[PyG NeighborLoader + torch-sparse]')
        t = time.perf_counter()
        pyg_sampler = NeighborSampler(data, num_neighbors=args.fanout,
                                      share_memory=max(args.workers) > 0)
        graph['pyg_sampler_build_s'] = time.perf_counter() - t
        log(f"  PyG sampler (CSC) built in {graph['pyg_sampler_build_s']:.1f}"
            f's')
        loader = NeighborLoader(data, neighbor_sampler=pyg_sampler, **common)
        for th in thread_counts:
            with num_threads(th):
                res = measure_sample_only(loader.node_sampler,
                                          loader.input_data, idx_batches,
                                          args.warmup, 'cpu')
            add_sampling(f'pyg sample_from_nodes t={th}', 'pyg', 'cpu',
                         'sample_only', 0, res, threads=th)
        for w in args.workers:
            loader = NeighborLoader(data, neighbor_sampler=pyg_sampler,
                                    num_workers=w, **common)
            warm, num = iter_counts(w)
            res = measure_iteration(loader, warm, num, 'cpu', hybrid=False)
            add_sampling(f'pyg iterate w={w}', 'pyg', 'cpu', 'iterate', w,
                         res)
            del loader
            gc.collect()

    def make_hybrid(*a, **kw):
        t = time.perf_counter()
        loader = HybridNeighborLoader(*a, **kw)
        sync(kw.get('device', 'cpu'))
        loader._bench_build_s = time.perf_counter() - t
        return loader

    # HybridNeighborLoader, CPU ##############################################
    log('\n[HybridNeighborLoader, CPU]')
    loader = make_hybrid(data, device='cpu', seed=args.seed,
                         topology=topo_cpu, **common)
    for th in thread_counts:
        with num_threads(th):
            res = measure_sample_only(loader.node_sampler, loader.input_data,
                                      idx_batches, args.warmup, 'cpu')
        add_sampling(f'hybrid-cpu sample_from_nodes t={th}', 'hybrid', 'cpu',
                     'sample_only', 0, res, threads=th)
    profile = None
    if args.profile:
        table, rows = profile_sampler(loader.node_sampler, loader.input_data,
                                      idx_batches[:max(args.batches, 5)])
        log('\ntorch.profiler, HybridNeighborLoader CPU sample_from_nodes:')
        log(table)
        profile = rows
    del loader
    for w in args.workers:
        loader = make_hybrid(data, device='cpu', seed=args.seed,
                             topology=topo_cpu, num_workers=w,
                             **common)
        warm, num = iter_counts(w)
        res = measure_iteration(loader, warm, num, 'cpu', hybrid=True)
        add_sampling(f'hybrid-cpu iterate w={w}', 'hybrid', 'cpu', 'iterate',
                     w, res)
        del loader
        gc.collect()

    # HybridNeighborLoader, GPU ##############################################
    data_gpu = topo_gpu = None
    if use_cuda:
        log('\n[HybridNeighborLoader, GPU]')
        t = time.perf_counter()
        topo_gpu = topo_cpu.to('cuda')
        sync('cuda')
        graph['topology_to_gpu_s'] = time.perf_counter() - t
        loader = make_hybrid(data, device='cuda', seed=args.seed,
                             topology=topo_gpu, **common)
        res = measure_sample_only(loader.node_sampler, loader.input_data,
                                  idx_batches, args.warmup, 'cuda')
        add_sampling('hybrid-gpu sample_from_nodes', 'hybrid', 'cuda',
                     'sample_only', 0, res)
        warm, num = iter_counts(0)
        res = measure_iteration(loader, warm, num, 'cuda', hybrid=True)
        add_sampling('hybrid-gpu iterate (data cpu)', 'hybrid', 'cuda',
                     'iterate', 0, res)
        del loader
        t = time.perf_counter()
        data_gpu = data.to('cuda')
        sync('cuda')
        graph['data_to_gpu_s'] = time.perf_counter() - t
        loader = make_hybrid(data_gpu, device='cuda', seed=args.seed,
                             topology=topo_gpu, **common)
        res = measure_iteration(loader, warm, num, 'cuda', hybrid=True)
        add_sampling('hybrid-gpu iterate (data gpu)', 'hybrid', 'cuda',
                     'iterate', 0, res, data_on='cuda')
        del loader
        gc.collect()

    def best(rows):
        return min(rows, key=lambda r: r['ms_per_batch']) if rows else None

    pyg_iter = [r for r in sampling
                if r['loader'] == 'pyg' and r['mode'] == 'iterate']
    pyg_best = best(pyg_iter)
    pyg_so_rows = {r['threads']: r for r in sampling
                   if r['loader'] == 'pyg' and r['mode'] == 'sample_only'}
    pyg_so = pyg_so_rows.get(main_threads)
    hyb_cpu_iter = [r for r in sampling if r['loader'] == 'hybrid'
                    and r['device'] == 'cpu' and r['mode'] == 'iterate']
    hyb_best = best(hyb_cpu_iter)
    for rows in (pyg_iter, hyb_cpu_iter):
        b = best(rows)
        for r in rows:
            r['best'] = r is b

    # End-to-end training ####################################################
    if not args.no_train:
        log(f'\n[End-to-end GraphSAGE training on {train_device}]')

        def add_training(name, loader_kind, sample_device, workers, res,
                         data_on='cpu'):
            row = dict(name=name, loader=loader_kind,
                       sample_device=str(sample_device),
                       train_device=str(train_device), num_workers=workers,
                       data_on=data_on, **res)
            training.append(row)
            stages = ' '.join(f'{k} {v:.1f}'
                              for k, v in res['stages_ms'].items())
            log(f"  {name:<36} {res['ms_per_batch']:9.2f} ms/batch  "
                f"[{stages}]  loss {res['first_loss']:.3f} -> "
                f"{res['last_loss']:.3f}")

        if use_pyg:
            w = pyg_best['num_workers']
            loader = NeighborLoader(data, neighbor_sampler=pyg_sampler,
                                    num_workers=w, **common)
            res = measure_training(args, loader, train_device, hybrid=False)
            add_training(f'pyg w={w} (best)', 'pyg', 'cpu', w, res)
            del loader
            gc.collect()
        cpu_workers = [0]
        if hyb_best is not None and hyb_best['num_workers'] != 0:
            cpu_workers.append(hyb_best['num_workers'])
        for w in cpu_workers:
            loader = make_hybrid(data, device='cpu', seed=args.seed,
                                 topology=topo_cpu, num_workers=w,
                                 **common)
            res = measure_training(args, loader, train_device, hybrid=True)
            suffix = ' (best)' if w == hyb_best['num_workers'] else ''
            add_training(f'hybrid-cpu w={w}{suffix}', 'hybrid', 'cpu', w,
                         res)
            del loader
            gc.collect()
        if use_cuda:
            loader = make_hybrid(data, device='cuda', seed=args.seed,
                                 topology=topo_gpu, **common)
            res = measure_training(args, loader, train_device, hybrid=True)
            add_training('hybrid-gpu (data cpu)', 'hybrid', 'cuda', 0, res)
            del loader
            loader = make_hybrid(data_gpu, device='cuda',
                                 seed=args.seed, topology=topo_gpu,
                                 **common)
            res = measure_training(args, loader, train_device, hybrid=True)
            add_training('hybrid-gpu (data gpu)', 'hybrid', 'cuda', 0, res,
                         data_on='cuda')
            del loader
            gc.collect()

    # Ratios #################################################################
    ratios: Dict[str, List[Dict[str, Any]]] = {'sampling': [], 'training': []}
    for r in sampling:
        ref = pyg_so_rows.get(r['threads'], pyg_so) \
            if r['mode'] == 'sample_only' else pyg_best
        if ref is None:
            continue
        ratios['sampling'].append(dict(
            name=r['name'], baseline=ref['name'],
            speedup=ref['ms_per_batch'] / r['ms_per_batch'],
            edges_per_s_ratio=r['edges_per_s'] / ref['edges_per_s']))
    pyg_train = next((r for r in training if r['loader'] == 'pyg'), None)
    for r in training:
        if pyg_train is None:
            break
        ratios['training'].append(dict(
            name=r['name'], baseline=pyg_train['name'],
            speedup=pyg_train['ms_per_batch'] / r['ms_per_batch'],
            edges_per_s_ratio=r['edges_per_s'] / pyg_train['edges_per_s']))

    # Report #################################################################
    def ratio_of(kind, name, key):
        for x in ratios[kind]:
            if x['name'] == name:
                return x[key]
        return None

    log('\n=== Sampling alone (sample_only: sampler only, same seed batches; '
        'iterate: DataLoader incl. feature slicing) ===')
    log(fmt_table(
        ['config', 'workers', 'threads', 'ms/batch', 'M edges/s', 'edges/batch',
         'speed-up', 'edges/s ratio', 'vs'],
        [[r['name'] + (' *' if r.get('best') else ''), r['num_workers'],
          r['threads'],
          r['ms_per_batch'], r['edges_per_s'] / 1e6, r['edges_per_batch'],
          ratio_of('sampling', r['name'], 'speedup'),
          ratio_of('sampling', r['name'], 'edges_per_s_ratio'),
          ratio_of('sampling', r['name'], 'baseline')]
         for r in sampling]))
    log('  * best num_workers of the sweep')
    if training:
        stage_names = ['sample', 'gather', 'transfer', 'train', 'wait',
                       'other']
        log(f'\n=== End-to-end training (GraphSAGE {args.num_layers}x'
            f'{args.hidden}, ms/batch by stage, train on {train_device}) ===')
        log(fmt_table(
            ['config', 'total'] + stage_names + ['M edges/s', 'speed-up'],
            [[r['name'], r['ms_per_batch']] +
             [r['stages_ms'].get(s) for s in stage_names] +
             [r['edges_per_s'] / 1e6,
              ratio_of('training', r['name'], 'speedup')]
             for r in training]))
    if pyg_so is not None:
        parts = []
        for th in thread_counts:
            h = next(r for r in sampling
                     if r['name'] == f'hybrid-cpu sample_from_nodes t={th}')
            b = pyg_so_rows[th]
            parts.append(f"sample only t={th}: {h['edges_per_s'] / 1e6:.3f} "
                         f"vs {b['edges_per_s'] / 1e6:.3f} M "
                         f"(x{h['edges_per_s'] / b['edges_per_s']:.2f})")
        log(f"\nHybrid CPU vs PyG+torch-sparse, sampled edges/s: "
            f"{'; '.join(parts)}; iterate best {hyb_best['edges_per_s'] / 1e6:.3f} (w="
            f"{hyb_best['num_workers']}) vs {pyg_best['edges_per_s'] / 1e6:.3f}"
            f" M (w={pyg_best['num_workers']}) "
            f"(x{hyb_best['edges_per_s'] / pyg_best['edges_per_s']:.2f})")

    try:
        machine['load_average_end'] = [round(v, 2) for v in os.getloadavg()]
    except OSError:
        pass
    result = dict(
        schema_version=SCHEMA_VERSION,
        created=time.strftime('%Y-%m-%dT%H:%M:%S%z'),
        command=' '.join([sys.executable] + sys.argv),
        preset=args.preset,
        device=args.device,
        config=dict(fanout=args.fanout, batch_size=args.batch_size,
                    hidden=args.hidden, num_layers=args.num_layers,
                    lr=args.lr, batches=args.batches, warmup=args.warmup,
                    train_batches=args.train_batches, workers=args.workers,
                    seed=args.seed, threads=torch.get_num_threads(),
                    train_device=str(train_device)),
        machine=machine,
        graph=graph,
        baseline=dict(
            available=use_pyg, torch_sparse_error=sparse_error,
            best_num_workers=pyg_best['num_workers'] if pyg_best else None,
            best_iterate=pyg_best['name'] if pyg_best else None),
        sampling=sampling,
        training=training,
        ratios=ratios,
        profile=profile,
        notes=notes,
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + '.tmp')
    tmp.write_text(json.dumps(result, indent=2))
    tmp.replace(out)
    log(f'\nsaved {out}')
    return result


if __name__ == '__main__':
    main()
