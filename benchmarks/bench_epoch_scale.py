"""Whole-epoch training on a papers100M-shaped graph (one JSON per run):
every training seed once, GraphSAGE 3 x 256, fan-out [15, 10, 5], batch
1024, features in pinned host memory behind the loader's default GPU cache.

Modes (``--modes``): ``eager`` (untrimmed), ``trim`` (``trim_to_layer``,
look-ahead on as by default), ``offload`` (``BottomLayerOffload`` with its
defaults, trimmed; two epochs: the first carries its set-up and trial),
``compiled`` (``torch.compile`` + fused Adam, trimmed); then PyG's
``NeighborLoader`` at each ``--pyg-workers`` over ``--pyg-batches``
batches, projected to an epoch (needs ``torch_sparse``).

GPU box (one H100, 128 GB host memory):

    python benchmarks/bench_epoch_scale.py                    # full size

CPU smoke run (tiny graph):

    python benchmarks/bench_epoch_scale.py --scale tiny --device cpu
"""
import argparse
import datetime
import gc
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_common import (  # noqa: E402
    adam,
    compile_model,
    fmt_table,
    int_list,
    log,
    machine_info,
    time_pyg_workers,
    train_step,
    write_report,
)
from torch_geometric.nn import GraphSAGE  # noqa: E402

from pyg_orch import BottomLayerOffload, HybridNeighborLoader  # noqa: E402
from pyg_orch.datasets import (  # noqa: E402
    PAPERS100M,
    papers_like_node_data,
    papers_like_topology,
)

#: Graph sizes of ``--scale``: nodes, undirected edges, training seeds.
SCALES = {
    'full': dict(num_nodes=PAPERS100M['num_nodes'],
                 num_edges=PAPERS100M['num_edges'],
                 num_train=PAPERS100M['num_train']),
    'tenth': dict(num_nodes=11_105_996, num_edges=161_568_587,
                  num_train=120_718),
    'tiny': dict(num_nodes=20_000, num_edges=290_000, num_train=5_000),
}
MODES = ('eager', 'trim', 'offload', 'compiled')


# Memory ######################################################################


def host_memory() -> Dict[str, float]:
    r"""This process's resident memory now and at its peak since the last
    :func:`reset_host_peak`, and the machine's memory in use (GB)."""
    out: Dict[str, float] = {}
    try:
        with open('/proc/self/status') as f:
            for line in f:
                key, _, value = line.partition(':')
                if key in ('VmRSS', 'VmHWM'):
                    out[{'VmRSS': 'rss_gb', 'VmHWM': 'rss_peak_gb'}[key]] = \
                        int(value.split()[0]) / 2**20
    except OSError:
        pass
    try:
        import psutil
        vm = psutil.virtual_memory()
        out['system_used_gb'] = (vm.total - vm.available) / 2**30
        out['system_total_gb'] = vm.total / 2**30
    except ImportError:
        pass
    return out


def reset_host_peak() -> None:
    try:  # Linux: resets VmHWM to the current RSS.
        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')
    except OSError:
        pass


def gpu_memory(device: torch.device) -> Dict[str, float]:
    if device.type != 'cuda':
        return {}
    return {'allocated_gb': torch.cuda.memory_allocated(device) / 2**30,
            'peak_allocated_gb':
            torch.cuda.max_memory_allocated(device) / 2**30,
            'peak_reserved_gb':
            torch.cuda.max_memory_reserved(device) / 2**30}


def sync(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


# Training ####################################################################


def run_epoch(loader, step: Callable[[Any], None], device: torch.device,
              budget_s: float, limit: Optional[int] = None) -> Dict:
    r"""One pass over the loader (or :obj:`limit` batches), stopped after
    :obj:`budget_s` seconds (then projected to the whole epoch)."""
    total = len(loader)
    n, start = 0, time.perf_counter()
    for batch in loader:
        step(batch)
        n += 1
        if n == limit or time.perf_counter() - start > budget_s:
            break
    sync(device)
    sec = time.perf_counter() - start
    res = {'seconds': sec, 'batches': n, 'batches_per_epoch': total,
           'ms_per_batch': 1e3 * sec / max(n, 1)}
    res['epoch_s'] = sec if n == total else sec * total / max(n, 1)
    res['complete'] = n == total
    return res


def time_mode(name: str, loader, model, opt, trim: bool, args,
              device: torch.device, epochs: int = 1) -> Dict:
    r"""Warm-up batches (compilation, caches), then :obj:`epochs` timed
    epochs; peak GPU and host memory over the mode."""
    if device.type == 'cuda':
        torch.cuda.reset_peak_memory_stats(device)
    reset_host_peak()

    def step(b):
        train_step(model, opt, b, trim)

    res: Dict[str, Any] = {'trim': trim}
    start = time.perf_counter()
    warm = run_epoch(loader, step, device, math.inf, limit=args.warmup)
    res['warmup'] = dict(warm, wall_s=time.perf_counter() - start)
    if hasattr(loader, 'reset_stats'):
        loader.reset_stats()
    res['epochs'] = []
    for e in range(epochs):
        r = run_epoch(loader, step, device, args.epoch_budget_s)
        res['epochs'].append(r)
        log(f"{name} epoch {e}: {r['epoch_s']:.2f} s "
            f"({r['batches']}/{r['batches_per_epoch']} batches, "
            f"{r['ms_per_batch']:.2f} ms per batch)")
    res['epoch_s'] = res['epochs'][-1]['epoch_s']
    res['gpu_memory'] = gpu_memory(device)
    res['host_memory'] = host_memory()
    if hasattr(loader, 'stats'):
        st = loader.stats()
        res['loader'] = {
            'stages_ms_per_batch': {k: v.get('ms_per_batch') for k, v in
                                    st['stages'].items()},
            'features': st['features'], 'memory': st['memory']}
    return res


def make_model(args, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)
    return GraphSAGE(args.num_features, args.hidden, 3,
                     args.num_classes).to(device)


def run_mode(mode: str, loader, args, device: torch.device) -> Dict:
    if mode == 'eager':
        model = make_model(args, device)
        return time_mode(mode, loader, model, adam(model.parameters()),
                         False, args, device)
    if mode == 'trim':
        model = make_model(args, device)
        return time_mode(mode, loader, model, adam(model.parameters()),
                         True, args, device)
    if mode == 'compiled':
        model = make_model(args, device)
        opt = adam(model.parameters(), fused=device.type == 'cuda')
        model = compile_model(model, 'default')
        res = time_mode(mode, loader, model, opt, True, args, device)
        res['fused_adam'] = device.type == 'cuda'
        return res
    if mode == 'offload':
        start = time.perf_counter()
        model = BottomLayerOffload(make_model(args, device), loader)
        build_s = time.perf_counter() - start
        try:
            res = time_mode(mode, loader, model, adam(model.parameters()),
                            True, args, device, epochs=2)
            res['build_s'] = build_s
            st = model.stats()
            res['offload_stats'] = {
                k: st.get(k) for k in ('decision', 'hot_sizes', 'split',
                                       'full_neighbors', 'static_tables',
                                       'cpu_aggregation')}
        finally:
            model.close()
        return res
    raise ValueError(f"unknown mode {mode!r} (expected one of {MODES})")


# What bounds an epoch ########################################################


def bounds(loader, data, device: torch.device, num: int) -> Dict:
    r"""Parts of a batch timed alone, each waited for: sampling
    (:obj:`num` batches of the loader's seeds), the feature gather of the
    sampled nodes through the loader's feature store, and the copy rate of
    pinned host memory to the device."""
    from torch_geometric.sampler import NodeSamplerInput

    out: Dict[str, Any] = {}
    sampler = loader.node_sampler
    gen = torch.Generator().manual_seed(7)
    train = data.train_mask.nonzero().view(-1)
    seeds = [train[torch.randint(train.numel(), (loader.batch_size, ),
                                 generator=gen)] for _ in range(num + 5)]
    nodes = []
    for i, s in enumerate(seeds):
        if i == 5:
            sync(device)
            start = time.perf_counter()
        o = sampler.sample_from_nodes(NodeSamplerInput(None, s))
        nodes.append(o.node)
    sync(device)
    out['sample_ms_per_batch'] = 1e3 * (time.perf_counter() - start) / num
    out['nodes_per_batch'] = sum(n.numel() for n in nodes[5:]) / num
    store = getattr(loader, 'feature_store', None)
    if store is not None:
        for n in nodes[:5]:
            store.gather(n)
        sync(device)
        start = time.perf_counter()
        for n in nodes[5:]:
            store.gather(n)
        sync(device)
        out['gather_ms_per_batch'] = \
            1e3 * (time.perf_counter() - start) / num
    if device.type == 'cuda':
        src = data.x[:min(data.x.size(0), 1 << 21)]  # 1 GB of rows.
        dst = torch.empty_like(src, device=device)
        dst.copy_(src, non_blocking=True)
        sync(device)
        start = time.perf_counter()
        for _ in range(5):
            dst.copy_(src, non_blocking=True)
        sync(device)
        out['h2d_GBps'] = 5 * src.numel() * 4 / 1e9 / (
            time.perf_counter() - start)
        del dst
    log(f'bounds: {json.dumps(out)}')
    return out


# PyG #########################################################################


def pyg_baseline(data, topology, args, device: torch.device) -> Dict:
    r"""PyG's :class:`~torch_geometric.loader.NeighborLoader` over the same
    graph (its sampler reads an :obj:`int64` CSC copy in host memory), the
    eager untrimmed step, at each :obj:`--pyg-workers`."""
    try:
        from torch_sparse import SparseTensor
    except ImportError as e:
        return {'skipped': f'torch_sparse not importable: {e}'}
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.sampler import NeighborSampler

    start = time.perf_counter()
    csc = topology.csc[None]
    n, num = args.num_nodes, csc.num_edges
    colptr = csc.colptr.to('cpu', torch.int64)
    row = torch.empty(num, dtype=torch.int64)
    chunk = 1 << 27
    for a in range(0, num, chunk):
        row[a:a + chunk].copy_(csc.row[a:a + chunk])
    del csc
    adj_t = SparseTensor(rowptr=colptr, col=row, sparse_sizes=(n, n),
                         is_sorted=True, trust_data=True)
    sampler = NeighborSampler(Data(adj_t=adj_t, num_nodes=n),
                              args.fanout)
    pyg_data = Data(x=data.x, y=data.y, num_nodes=n,
                    edge_index=torch.empty(2, 0, dtype=torch.long))
    train_idx = data.train_mask.nonzero().view(-1)
    setup_s = time.perf_counter() - start
    model = make_model(args, device)
    opt = adam(model.parameters())

    def make_loader(w):
        return NeighborLoader(pyg_data, args.fanout,
                              batch_size=args.batch_size,
                              input_nodes=train_idx, shuffle=True,
                              num_workers=w, persistent_workers=w > 0,
                              pin_memory=device.type == 'cuda',
                              neighbor_sampler=sampler)

    reset_host_peak()
    res = time_pyg_workers(
        make_loader, 'PyG NeighborLoader', device,
        lambda b: train_step(model, opt, b, False), args.pyg_workers,
        args.pyg_batches, 1)
    res['setup_s'] = setup_s
    res['host_memory'] = host_memory()
    res['gpu_memory'] = gpu_memory(device)
    batches = math.ceil(train_idx.numel() / args.batch_size)
    if 'best' in res:
        res['best']['epoch_s_projected'] = \
            res['best']['ms_per_batch'] * batches / 1e3
    return res


# Main ########################################################################


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--scale', choices=tuple(SCALES), default='full',
                   help='graph size: ' + '; '.join(
                       f"{k} = {v['num_nodes']:,} nodes, "
                       f"{v['num_edges']:,} undirected edges, "
                       f"{v['num_train']:,} seeds"
                       for k, v in SCALES.items()))
    p.add_argument('--nodes', type=int, default=None, dest='num_nodes',
                   help='override the number of nodes of --scale')
    p.add_argument('--edges', type=int, default=None, dest='num_edges',
                   help='override the number of undirected edges')
    p.add_argument('--train', type=int, default=None, dest='num_train',
                   help='override the number of training seeds')
    p.add_argument('--num-features', type=int, default=128)
    p.add_argument('--num-classes', type=int, default=172)
    p.add_argument('--exponent', type=float, default=3.0)
    p.add_argument('--fanout', type=int_list, default=[15, 10, 5])
    p.add_argument('--batch-size', type=int, default=1024)
    p.add_argument('--hidden', type=int, default=256)
    p.add_argument('--modes', default=','.join(MODES),
                   help=f"comma-separated, of {', '.join(MODES)}")
    p.add_argument('--warmup', type=int, default=20,
                   help='batches before each timed epoch')
    p.add_argument('--epoch-budget-s', type=float, default=120.0,
                   help='stop an epoch after this long and project it')
    p.add_argument('--time-budget-s', type=float, default=math.inf,
                   help='start no mode after this many seconds of the run')
    p.add_argument('--bound-batches', type=int, default=50,
                   help='batches of sampling and of gathering timed alone')
    p.add_argument('--pyg-workers', type=int_list, default=[8, 16])
    p.add_argument('--pyg-batches', type=int, default=200)
    p.add_argument('--no-pyg', action='store_true')
    p.add_argument('--cache-dir', default=None,
                   help='disk cache of the topology: the first run writes '
                   'it, a second generation in this run reads it back')
    p.add_argument('--device', default='cuda')
    p.add_argument('--tag', default='')
    p.add_argument('--out', default=None)
    args = p.parse_args(argv)
    for k, v in SCALES[args.scale].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    unknown = set(args.modes.split(',')) - set(MODES) - {''}
    if unknown:
        p.error(f"unknown --modes {sorted(unknown)} (expected {MODES})")
    if args.device == 'cuda' and not torch.cuda.is_available():
        p.error('--device cuda, but CUDA is not available (use --device '
                'cpu with --scale tiny)')
    return args


def generate(args, device: torch.device, res: Dict):
    kw = dict(num_nodes=args.num_nodes, num_edges=args.num_edges,
              exponent=args.exponent, device=device, progress=True)
    start = time.perf_counter()
    topo = papers_like_topology(cache_dir=args.cache_dir, **kw)
    sync(device)
    gen = {'topology_s': time.perf_counter() - start,
           'topology_gb': topo.nbytes() / 1e9,
           'colptr_dtype': str(topo.csc[None].colptr.dtype),
           'row_dtype': str(topo.csc[None].row.dtype)}
    if args.cache_dir is not None:  # Read back what was written.
        del topo
        gc.collect()
        if device.type == 'cuda':
            torch.cuda.empty_cache()
        gen['topology_written_s'] = gen.pop('topology_s')
        start = time.perf_counter()
        topo = papers_like_topology(cache_dir=args.cache_dir, **kw)
        sync(device)
        gen['topology_from_cache_s'] = time.perf_counter() - start
    start = time.perf_counter()
    data = papers_like_node_data(args.num_nodes, args.num_features,
                                 args.num_classes, args.num_train, device,
                                 progress=True)
    gen['node_data_s'] = time.perf_counter() - start
    gen['features_gb'] = data.x.numel() * 4 / 1e9
    csc = topo.csc[None]
    deg = (csc.colptr[1:] - csc.colptr[:-1])
    gen['degree'] = {'mean': float(deg.double().mean()),
                     'max': int(deg.max()), 'median': float(
                         deg.double().median())}
    del deg
    gen['host_memory'] = host_memory()
    res['generate'] = gen
    gc.collect()
    if device.type == 'cuda':  # Free for the cache's share of free memory.
        torch.cuda.empty_cache()
    log(f"generated: {json.dumps(gen)}")
    return data, topo


def summarize(res: Dict) -> None:
    rows: List[List[Any]] = []
    for mode, r in res['modes'].items():
        if 'epoch_s' not in r:
            rows.append([mode, None, None, None, None, r.get('error')])
            continue
        rows.append([mode, r['epoch_s'], r['epochs'][-1]['ms_per_batch'],
                     r['gpu_memory'].get('peak_allocated_gb'),
                     r['host_memory'].get('rss_peak_gb'), ''])
    best = res.get('pyg', {}).get('best')
    if best:
        rows.append([f"PyG workers={best['num_workers']} (projected)",
                     best['epoch_s_projected'], best['ms_per_batch'],
                     res['pyg']['gpu_memory'].get('peak_allocated_gb'),
                     res['pyg']['host_memory'].get('rss_peak_gb'), ''])
    log(fmt_table(['mode', 'epoch s', 'ms/batch', 'GPU peak GB',
                   'RSS peak GB', 'note'], rows))


def main(argv=None) -> Dict:
    args = parse_args(argv)
    t0 = time.perf_counter()
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True
    res: Dict[str, Any] = {'machine': machine_info(), 'config': vars(args),
                           'date': datetime.date.today().isoformat()}
    out = args.out or (f"benchmarks/results/epoch_scale_{res['date']}"
                       f"{'_' + args.tag if args.tag else ''}.json")

    def save():
        res['wall_s'] = time.perf_counter() - t0
        write_report(res, out)
        if os.environ.get('OUT'):
            write_report(res, Path(os.environ['OUT'], Path(out).name))

    data, topo = generate(args, device, res)
    start = time.perf_counter()
    loader = HybridNeighborLoader(data, args.fanout,
                                  input_nodes=data.train_mask,
                                  batch_size=args.batch_size, shuffle=True,
                                  device=device, topology=topo, seed=0)
    res['loader'] = {'build_s': time.perf_counter() - start,
                     'batches_per_epoch': len(loader),
                     'lookahead': getattr(loader, 'lookahead', None),
                     'memory': loader.stats()['memory']}
    log(f"loader: {json.dumps(res['loader'])}")
    try:
        res['bounds'] = bounds(loader, data, device, args.bound_batches)
    except Exception as e:
        res['bounds'] = {'error': f'{type(e).__name__}: {e}'}
    save()
    res['modes'] = {}
    for mode in [m for m in args.modes.split(',') if m]:
        if time.perf_counter() - t0 > args.time_budget_s:
            res['modes'][mode] = {'error': 'skipped: --time-budget-s'}
            continue
        log(f'--- {mode}')
        try:
            res['modes'][mode] = run_mode(mode, loader, args, device)
        except Exception as e:  # Keep the other modes' figures.
            res['modes'][mode] = {'error': f'{type(e).__name__}: {e}'}
            log(f'{mode} failed: {res["modes"][mode]["error"]}')
        gc.collect()
        save()
    if not args.no_pyg and time.perf_counter() - t0 < args.time_budget_s:
        del loader
        gc.collect()
        if device.type == 'cuda':
            torch.cuda.empty_cache()
        try:
            res['pyg'] = pyg_baseline(data, topo, args, device)
        except Exception as e:
            res['pyg'] = {'error': f'{type(e).__name__}: {e}'}
        log(f"PyG: {json.dumps(res['pyg'], default=str)}")
    summarize(res)
    save()
    return res


if __name__ == '__main__':
    main()
