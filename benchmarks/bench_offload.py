#!/usr/bin/env python
"""Benchmark bottom-layer offload
(:class:`pyg_orch.offload.BottomLayerOffload`) on a synthetic power-law
graph, and (``--accuracy``) compare its test accuracy with plain training on
Cora, CiteSeer and the MUSAE Facebook and GitHub graphs.

Throughput (default): one run builds the graph once (features in host
memory), then trains GraphSAGE with :class:`pyg_orch.HybridNeighborLoader`
over the same number of batches per mode (``--modes``): without offload
(``plain``), and with offload in each refresh mode (``super_batch``: tables of
all hot vertices, pipelined a super-batch ahead; ``batch``: only the hot rows
each batch needs), and reports per mode:

* ms per batch (after warm-up) and the speed-up ``plain / mode``, plus
  the extrapolated time of an epoch (``--epoch`` times a whole epoch
  instead);
* the loader's stage breakdown (sample / gather / transfer / train / wait,
  and the offload wait), nodes and edges per batch;
* for offload: setup time (pre-sampling), hot-set size and coverage, hot rows
  replaced per batch, staleness histogram and maximum, the training loop's
  wait for CPU embeddings, CPU compute seconds of the workers;
* CPU utilisation (``psutil``, if installed: system-wide percent and cores
  used by this process) and GPU utilisation (``torch.cuda.utilization``,
  where NVML is available), peak GPU memory.

Accuracy (``--accuracy``): GraphSAGE and GCN (2 layers, 64 hidden, fan-out
[10, 5], Adam; :func:`pyg_orch.evaluation.train_and_test`), with and without
offload (``--hot-ratio``, ``--max-staleness``, ``--split``), test accuracy
averaged over ``--seeds`` seeds (seed ``s`` seeds the model and the loader
of both modes), on every data set found under ``--datasets``
(``--accuracy-datasets`` picks among them; the missing are skipped):

* Cora and CiteSeer (``Cora/raw``, ``CiteSeer/raw``: Planetoid raw files):
  public split, batch 32, ``--epochs`` epochs (30);
* MUSAE Facebook page-page (4 classes) and GitHub (2 classes)
  (``musae/facebook``, ``musae/github``: ``edges.csv``, ``target.csv``,
  :func:`pyg_orch.datasets.read_musae`): real, skewed social graphs without
  node features. They get the deterministic structural features of
  :func:`pyg_orch.datasets.structural_features` (a one-hot of the log2
  in-degree bucket, 16 buckets, the normalized log-degree and the mean
  normalized log-degree of the neighbors: 18 columns), and a random split
  (:func:`pyg_orch.evaluation.random_split`: ``--train-ratio`` (10 %) of
  the nodes for training, ``--val-ratio`` (10 %) for validation (unused),
  the rest for testing), drawn once with ``--split-seed`` (0), so it is the
  same for both modes and every model seed. Batch ``--musae-batch-size``
  (64), ``--musae-epochs`` epochs (30), as the graphs are 8-14 times larger
  than Cora and the whole run fits in ~30 minutes on 2 CPU cores.

Examples::

    python benchmarks/bench_offload.py --tiny            # smoke test, CPU
    python benchmarks/bench_offload.py --small
    python benchmarks/bench_offload.py                   # 2.4M nodes, GPU
    python benchmarks/bench_offload.py --wide            # 600-dim features
    python benchmarks/bench_offload.py --accuracy --seeds 5
    python benchmarks/bench_offload.py --accuracy --accuracy-datasets github
"""
import argparse
import datetime
import gc
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import torch
from _bench_common import (  # noqa: E402
    REPO,
    add_preset_args,
    apply_preset,
    int_list,
    log,
    machine_info,
    resolve_device,
    sync,
    train_step,
    write_report,
)

SCHEMA_VERSION = 1
ACCURACY_DATASETS = ('Cora', 'CiteSeer', 'facebook', 'github')


def _ratio(value: str):
    return value if value == 'auto' else float(value)


def _full_neighbors(value: str):
    # BottomLayerOffload's full_neighbors from '0', '1' or 'auto'.
    choices = {'0': False, '1': True, 'auto': 'auto'}
    if value not in choices:
        raise ValueError(f"full_neighbors must be 0, 1 or auto (got "
                         f"{value!r})")
    return choices[value]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog='bench_offload.py',
        description='Benchmark BottomLayerOffload (GraphSAGE training with '
        'and without it on a power-law graph), or compare its accuracy on '
        'Cora, CiteSeer and MUSAE Facebook / GitHub (--accuracy).',
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_preset_args(p)
    p.add_argument('--accuracy', action='store_true',
                   help='compare test accuracy on Cora, CiteSeer and MUSAE '
                   'Facebook / GitHub instead')
    p.add_argument('--num-nodes', type=int, default=None)
    p.add_argument('--num-edges', type=int, default=None)
    p.add_argument('--num-features', type=int, default=100)
    p.add_argument('--wide', action='store_true',
                   help='600-dimensional features (overrides '
                   '--num-features)')
    p.add_argument('--num-classes', type=int, default=47)
    p.add_argument('--undirected', action='store_true',
                   help='add the reverse of every edge (num_edges / 2 are '
                   'drawn, so the graph has num_edges edges): hubs are then '
                   'also frequent neighbors, as in most real graphs')
    p.add_argument('--fanout', type=int_list, default=[15, 10, 5])
    p.add_argument('--batch-size', type=int, default=1024)
    p.add_argument('--hidden', type=int, default=256)
    p.add_argument('--num-layers', type=int, default=3)
    p.add_argument('--lr', type=float, default=3e-3)
    p.add_argument('--device', choices=('auto', 'cpu', 'cuda'),
                   default='auto')
    p.add_argument('--batches', type=int, default=None,
                   help='timed batches per mode (default: by preset)')
    p.add_argument('--warmup', type=int, default=None,
                   help='untimed batches per mode (default: by preset)')
    p.add_argument('--epoch', action='store_true',
                   help='time a whole epoch per mode instead of --batches')
    p.add_argument('--hot-ratio', type=_ratio, default=0.05,
                   help="a fraction of the vertices, or 'auto'")
    p.add_argument('--gpu-cache-ratio', type=float, default=0.1,
                   help='GPU feature cache, as a fraction of the rows, of '
                   'every mode (plain included); features stay in host '
                   'memory')
    p.add_argument('--max-staleness', type=int, default=8)
    p.add_argument('--hetero', action='store_true',
                   help="two node types (every 4th vertex 'a', the rest "
                   "'b', labelled) and four edge types; GraphSAGE through "
                   "to_hetero()")
    p.add_argument('--trim', action='store_true',
                   help='call the model with trim_to_layer')
    p.add_argument('--num-threads', type=int, default=None,
                   help='offload worker threads (default: automatic)')
    p.add_argument('--full-neighbors', nargs='?', const='1',
                   default='auto', type=_full_neighbors,
                   help="full_neighbors of the offload modes: 'auto' (the "
                   "library's default), 1 (also without a value) or 0")
    p.add_argument('--split', choices=('auto', 'aggregate', 'output'),
                   default='auto',
                   help="what the CPU computes for hot vertices: the first "
                   "layer's weight-free aggregation or its output")
    p.add_argument('--both-orders', action='store_true',
                   help='run the modes in --modes order, then in reverse '
                   'order, and average each mode over its two runs')
    p.add_argument('--process-per-run', action='store_true',
                   help='run every mode (and with --both-orders, every run '
                   'of it) in a fresh Python process that builds the same '
                   'graph, as a training script starts: within one '
                   'process, the first mode run was 2-3%% faster than the '
                   'later ones on an H100, which favours whichever mode '
                   'runs first')
    p.add_argument('--only-mode', default=None, help=argparse.SUPPRESS)
    p.add_argument('--modes', default='plain,super_batch,batch',
                   help="comma-separated: 'plain' (no offload), "
                   "'default' (BottomLayerOffload with its defaults: the "
                   "hot-set size decided by measurement), "
                   "'super_batch' and 'batch' (offload with "
                   "refresh='super_batch' / 'batch'), optionally with "
                   "overrides, e.g. 'super_batch:s=16:h=0.1:t=2:i=4' "
                   "(max_staleness, hot_ratio (a fraction or 'auto'), "
                   "a= max_sample_age, "
                   "num_threads, intra_op_threads, c= chunk_size, d=bf16 "
                   "cpu_autocast, f=0|1|auto full_neighbors (default: "
                   "--full-neighbors), split=output|aggregate|auto); "
                   "'default:after=unwrap' / 'default:after=free': once the "
                   "default has switched offload off, train the wrapped "
                   "model itself / empty the device and pinned-host "
                   "caches once (experiments on what the trial leaves); "
                   "'plain:pruned=N': plain training whose sampler prunes "
                   "the last hop at the hot_ratio highest in-degree "
                   "vertices for the first N steps (the trial's pruning "
                   "without offload)")
    p.add_argument('--presample-batches', type=int, default=None)
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--seeds', type=int, default=5,
                   help='--accuracy: seeds per configuration')
    p.add_argument('--epochs', type=int, default=30,
                   help='--accuracy: training epochs on Cora and CiteSeer')
    p.add_argument('--musae-epochs', type=int, default=30,
                   help='--accuracy: training epochs on the MUSAE graphs')
    p.add_argument('--musae-batch-size', type=int, default=64,
                   help='--accuracy: batch size on the MUSAE graphs '
                   '(Cora and CiteSeer: 32)')
    p.add_argument('--train-ratio', type=float, default=0.1,
                   help='--accuracy: MUSAE training nodes (random split)')
    p.add_argument('--val-ratio', type=float, default=0.1,
                   help='--accuracy: MUSAE validation nodes (unused; the '
                   'rest are test nodes)')
    p.add_argument('--split-seed', type=int, default=0,
                   help='--accuracy: seed of the MUSAE split (fixed over '
                   'the model seeds)')
    p.add_argument('--accuracy-datasets', default=','.join(ACCURACY_DATASETS),
                   help='--accuracy: comma-separated, among '
                   f'{",".join(ACCURACY_DATASETS)}')
    p.add_argument('--accuracy-models', default='sage,gcn',
                   help="--accuracy: comma-separated, among 'sage' and "
                   "'gcn'")
    p.add_argument('--datasets', default=str(REPO.parent / 'shared' /
                                             'datasets'),
                   help='--accuracy: folder with Cora/raw, CiteSeer/raw, '
                   'musae/facebook and musae/github (the missing are '
                   'skipped)')
    p.add_argument('--out', default=None,
                   help='JSON output (default: benchmarks/results/...)')
    args = p.parse_args(argv)
    args.modes = [m for m in args.modes.replace(' ', '').split(',') if m]
    args.accuracy_datasets = [
        d for d in args.accuracy_datasets.replace(' ', '').split(',') if d]
    unknown = set(args.accuracy_datasets) - set(ACCURACY_DATASETS)
    if unknown or not args.accuracy_datasets:
        p.error(f"--accuracy-datasets takes a comma-separated list of "
                f"{', '.join(ACCURACY_DATASETS)} (got "
                f"{', '.join(sorted(unknown)) or 'none'})")
    args.accuracy_models = [
        m for m in args.accuracy_models.replace(' ', '').split(',') if m]
    if not args.accuracy_models or not set(args.accuracy_models) <= {
            'sage', 'gcn'}:
        p.error(f"--accuracy-models takes a comma-separated list of sage, "
                f"gcn (got {','.join(args.accuracy_models) or 'none'})")
    if args.seeds < 1 or args.epochs < 1 or args.musae_epochs < 1 or \
            args.musae_batch_size < 1:
        p.error('--seeds, --epochs, --musae-epochs and --musae-batch-size '
                'take positive integers')
    try:
        for m in args.modes:
            mode_options(args, m)
    except ValueError as e:
        p.error(str(e))
    if args.only_mode is not None:  # A child of --process-per-run.
        args.modes = ['plain', args.only_mode]
    if 'plain' not in args.modes or len(args.modes) < 2:
        p.error("--modes takes 'plain' and at least one of 'super_batch', "
                "'batch'")
    if args.hetero and (args.trim or args.accuracy):
        p.error('--hetero goes with neither --trim (to_hetero() models do '
                'not trim bipartite edge types) nor --accuracy')
    apply_preset(args, 'num_nodes', 'num_edges', batches='offload_batches',
                 warmup='offload_warmup')
    if args.wide:
        args.num_features = 600
    resolve_device(p, args)
    if args.out is None:
        name = 'offload_accuracy' if args.accuracy else (
            f"offload_{args.preset}{'_wide' if args.wide else ''}"
            f"{'_undirected' if args.undirected else ''}"
            f"{'_hetero' if args.hetero else ''}"
            f"{'_trim' if args.trim else ''}_"
            f"{args.device}")
        args.out = str(REPO / 'benchmarks' / 'results' / f'{name}.json')
    return args


# Helpers #####################################################################

_OVERRIDES = {'s': ('max_staleness', int), 'h': ('hot_ratio', _ratio),
              'a': ('max_sample_age', int),
              't': ('num_threads', int), 'i': ('intra_op_threads', int),
              'c': ('chunk_size', int),
              'f': ('full_neighbors', _full_neighbors),
              'd': ('cpu_autocast', lambda v: {'bf16': torch.bfloat16}[v]),
              'split': ('split', lambda v: {
                  k: k for k in ('auto', 'aggregate', 'output')}[v])}


# 'default:after=...' (an experiment on the default's gap after it chose no
# hot set): 'unwrap' trains the wrapped model itself from then on; 'free'
# empties PyTorch's device and pinned-host caches once.
_AFTER_DECISION = ('after=unwrap', 'after=free')


def _after_decision(model, how: str):
    # Returns the model to train from now on, or None while undecided.
    runtime = model.runtime
    if runtime.tuner is not None or runtime.active:
        return None
    if how == 'unwrap':
        return model.module
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        host_empty = getattr(torch._C, '_host_emptyCache', None)
        if host_empty is not None:
            host_empty()
    return model


def _prune_top_degrees(loader, data, ratio) -> None:
    # 'plain:pruned=N': the sampler prunes the last hop at the vertices of
    # highest in-degree (as the default's trial does at its hot set) for
    # the first N steps, with no offload at all.
    num_nodes = data.num_nodes
    deg = torch.bincount(data.edge_index[1].cpu(), minlength=num_nodes)
    share = ratio if isinstance(ratio, float) else 0.05
    mask = torch.zeros(num_nodes, dtype=torch.bool)
    mask[torch.topk(deg, max(1, int(share * num_nodes))).indices] = True
    loader.node_sampler.set_hot_nodes(mask)


def mode_options(args, mode: str) -> Dict[str, Any]:
    r"""The refresh mode (:obj:`None` for plain) and the offload options of
    a mode spec such as :obj:`'super_batch:s=16:h=0.1'`."""
    name, *parts = mode.split(':')
    if name not in ('plain', 'super_batch', 'batch', 'default') or (
            name == 'plain' and parts and (
                len(parts) > 1 or not parts[0].startswith('pruned=')
                or not parts[0][7:].isdigit())) or (
            name == 'default' and parts and (
                len(parts) > 1 or parts[0] not in _AFTER_DECISION)):
        raise ValueError(f"unknown mode {mode!r}")
    if name == 'plain' and parts:  # The trial's pruning, without offload.
        return dict(refresh=None, pruned=int(parts[0][7:]))
    if name == 'default':  # BottomLayerOffload(model, loader), as it is.
        return dict(refresh='default',
                    after=parts[0].split('=')[1] if parts else None)
    opts = dict(refresh=None if name == 'plain' else name,
                max_staleness=args.max_staleness, hot_ratio=args.hot_ratio,
                num_threads=args.num_threads, split=args.split,
                full_neighbors=args.full_neighbors)
    for part in parts:
        key, _, value = part.partition('=')
        if key not in _OVERRIDES or not value:
            raise ValueError(f"bad override {part!r} in mode {mode!r} "
                             f"(expected s=, h=, a=, t=, i=, c=, f=0/1/auto, "
                             f"d=bf16 or split=)")
        field, kind = _OVERRIDES[key]
        try:
            opts[field] = kind(value)
        except (KeyError, ValueError):
            raise ValueError(f"bad value in {part!r} of mode {mode!r}"
                             ) from None
    return opts


class UtilisationMonitor:
    r"""CPU utilisation over a phase (system-wide percent and cores used by
    this process, via :mod:`psutil` if installed) and GPU utilisation, SM
    clock, power draw and temperature sampled every 50 ms in a thread
    (:func:`torch.cuda.utilization` and its neighbours, where NVML works):
    a GPU that throttles makes the same work take longer, which a
    comparison of modes run one after the other must know of."""
    def __init__(self, device):
        self.device = torch.device(device)
        try:
            import psutil
            self.psutil = psutil
            self.proc = psutil.Process()
        except ImportError:
            self.psutil = None
        self.gpu_ok = False
        if self.device.type == 'cuda':
            try:
                torch.cuda.utilization(self.device)
                self.gpu_ok = True
            except Exception:
                pass

    def start(self) -> None:
        self.t0 = time.perf_counter()
        if self.psutil is not None:
            self.psutil.cpu_percent(interval=None)
            times = self.proc.cpu_times()
            self.cpu0 = times.user + times.system
        self.gpu_samples: List[float] = []
        # (time, SM clock MHz, power W, temperature C); NaN where unread.
        self.gpu_state: List[tuple] = []
        self._stop = threading.Event()
        self._thread = None
        if self.gpu_ok:
            self._thread = threading.Thread(target=self._sample_gpu,
                                            name='bench-gpu-monitor',
                                            daemon=True)
            self._thread.start()

    def _sample_gpu(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self.gpu_samples.append(
                    float(torch.cuda.utilization(self.device)))
            except Exception:
                return
            sample = [time.perf_counter()]
            for read in (torch.cuda.clock_rate, torch.cuda.power_draw,
                         torch.cuda.temperature):
                try:
                    sample.append(float(read(self.device)))
                except Exception:
                    sample.append(float('nan'))
            self.gpu_state.append(tuple(sample))

    def clock_by_hundred(self, t0: float,
                         marks: List[float]) -> List[Optional[float]]:
        r"""Mean SM clock (MHz) sampled during every run of 100 steps
        (:obj:`marks`: host times at the ends of steps, from :obj:`t0`)."""
        out = []
        for start, end in _hundreds(t0, marks):
            got = [c for t, c, _, _ in self.gpu_state
                   if start <= t < end and c == c]
            out.append(round(statistics.mean(got), 1) if got else None)
        return out

    def stop(self) -> Dict[str, Optional[float]]:
        wall = time.perf_counter() - self.t0
        out: Dict[str, Optional[float]] = {
            'cpu_percent_system': None,
            'cpu_cores_process': None,
            'gpu_percent': None,
        }
        if self.psutil is not None:
            out['cpu_percent_system'] = self.psutil.cpu_percent(interval=None)
            times = self.proc.cpu_times()
            out['cpu_cores_process'] = (times.user + times.system -
                                        self.cpu0) / max(wall, 1e-9)
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            if self.gpu_samples:
                out['gpu_percent'] = statistics.mean(self.gpu_samples)
            for key, col, agg in (('gpu_clock_mhz', 1, statistics.mean),
                                  ('gpu_power_w', 2, statistics.mean),
                                  ('gpu_temperature_max_c', 3, max)):
                got = [row[col] for row in self.gpu_state
                       if row[col] == row[col]]
                out[key] = round(agg(got), 1) if got else None
        return out


# Throughput ##################################################################

def _hundreds(t0: float, marks: List[float]) -> List[tuple]:
    r"""The (start, end) host times of every run of 100 steps
    (:obj:`marks`: host times at the ends of steps, from :obj:`t0`)."""
    ends = marks[99::100]
    return list(zip([t0] + ends[:-1], ends))


#: Where a step's host time goes: waiting in :obj:`next(loader)`, the
#: synchronization before the training step (the loader's work queued on
#: the training stream), launching forward, backward and optimizer step,
#: and the synchronization after it (the device finishing the step). Steps
#: are synchronized by the loader's stage timer, as in a loop that reads the
#: loss every step; a host that gets slower shows in :obj:`'loader'` and
#: :obj:`'launch'`, a device that gets slower in :obj:`'sync'`.
STEP_PARTS = ('loader', 'pre_sync', 'launch', 'sync')
#: The first timed steps whose parts are kept one by one.
FIRST_STEPS = 40


def _mean_by_hundred(times: List[float]) -> List[float]:
    r"""Mean (ms) of every run of 100 per-step times."""
    return [round(1e3 * sum(times[i:i + 100]) / 100, 3)
            for i in range(0, len(times) - 99, 100)]


def build_graph(args):
    from pyg_orch.datasets import power_law_graph
    gen_device = args.device
    log(f'[graph] power_law_graph({args.num_nodes:,} nodes, '
        f'{args.num_edges:,} edges, {args.num_features} features) on '
        f'{gen_device}')
    t0 = time.perf_counter()
    num_edges = args.num_edges // 2 if args.undirected else args.num_edges
    data = power_law_graph(args.num_nodes, num_edges,
                           num_features=args.num_features,
                           num_classes=args.num_classes, device=gen_device,
                           seed=args.seed)
    if args.undirected:
        data.edge_index = torch.cat(
            [data.edge_index, data.edge_index.flip(0)], dim=1)
    data = data.to('cpu')  # Features (and all else) in host memory.
    if args.hetero:
        data = split_node_types(data)
    log(f'[graph] built in {time.perf_counter() - t0:.1f} s')
    return data


def split_node_types(data):
    r"""A heterogeneous version of :obj:`data`: every 4th vertex becomes
    of type :obj:`'a'`, the others of type :obj:`'b'` (with the labels and
    training seeds); edges by their end types."""
    from torch_geometric.data import HeteroData
    is_a = torch.arange(data.num_nodes) % 4 == 0
    local = torch.empty(data.num_nodes, dtype=torch.int64)
    out = HeteroData()
    for t, mask in (('a', is_a), ('b', ~is_a)):
        ids = mask.nonzero().view(-1)
        local[ids] = torch.arange(ids.numel())
        out[t].x = data.x[ids]
    out['b'].y = data.y[~is_a]
    out['b'].train_mask = data.train_mask[~is_a]
    src, dst = data.edge_index
    for s in ('a', 'b'):
        for d in ('a', 'b'):
            keep = (is_a[src] == (s == 'a')) & (is_a[dst] == (d == 'a'))
            out[s, 'to', d].edge_index = torch.stack(
                [local[src[keep]], local[dst[keep]]])
    return out


def endless(loader) -> Iterator[Any]:
    r"""The batches of :obj:`loader`, epoch after epoch."""
    while True:
        yield from loader


def train_mode(args, data, topology, mode: str) -> Dict[str, Any]:
    from torch_geometric.nn import GraphSAGE

    from pyg_orch import CacheOptions, HybridNeighborLoader
    from pyg_orch.offload import BottomLayerOffload, OffloadOptions

    device = torch.device(args.device)
    hetero = args.hetero
    loader = HybridNeighborLoader(
        data, args.fanout, batch_size=args.batch_size, shuffle=True,
        input_nodes=('b', data['b'].train_mask) if hetero else
        data.train_mask, device=device, seed=args.seed, topology=topology,
        cache=CacheOptions(cache_ratio=args.gpu_cache_ratio))
    torch.manual_seed(args.seed)
    model = GraphSAGE(args.num_features, args.hidden, args.num_layers,
                      args.num_classes)
    if hetero:
        from torch_geometric.nn import to_hetero
        model = to_hetero(model, data.metadata())
    model = model.to(device)
    setup_s = 0.0
    opts = mode_options(args, mode)
    offload = opts['refresh'] is not None
    if offload:
        t0 = time.perf_counter()
        if opts['refresh'] == 'default':
            model = BottomLayerOffload(model, loader, options=OffloadOptions(
                seed=args.seed))
        else:
            model = BottomLayerOffload(model, loader, options=OffloadOptions(
                cache_ratio=args.gpu_cache_ratio,
                num_presample_batches=args.presample_batches, seed=args.seed,
                **opts))
        setup_s = time.perf_counter() - t0
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    model.train()
    per_epoch = len(loader)
    num = per_epoch if args.epoch else args.batches
    warmup = args.warmup
    monitor = UtilisationMonitor(device)
    it = endless(loader)
    nodes = edges = 0
    losses = []
    marks: List[float] = []  # Host time at the end of every timed step.
    # Host time per timed step in its parts (see `step_parts_ms`).
    parts: Dict[str, List[float]] = {k: [] for k in STEP_PARTS}
    if device.type == 'cuda':
        torch.cuda.reset_peak_memory_stats(device)
    after = opts.get('after') if offload else None
    pruned = opts.get('pruned') or 0
    if pruned:
        _prune_top_degrees(loader, data, args.hot_ratio)
    trained = model
    warmup_s = 0.0
    t_warmup = time.perf_counter()
    for i in range(warmup + num):
        if after is not None:
            swapped = _after_decision(model, after)
            if swapped is not None:
                trained, after = swapped, None
        if pruned and i == pruned:
            loader.node_sampler.set_hot_nodes(None)
        if i == warmup:
            sync(device)
            loader.timer.reset()
            if offload:
                model.reset_stats()
            nodes = edges = 0
            monitor.start()
            t0 = time.perf_counter()
            warmup_s = t0 - t_warmup
        t_begin = time.perf_counter()
        batch = next(it)
        t_loaded = time.perf_counter()
        nodes += batch.num_nodes
        edges += batch.num_edges
        with loader.timer.stage('train'):
            t_train = time.perf_counter()
            loss = train_step(trained, optimizer, batch, args.trim, hetero)
            t_launched = time.perf_counter()
        losses.append(loss.detach())  # Read at the end: no sync per step.
        if i >= warmup:
            marks.append(time.perf_counter())
            for key, a, b in (('loader', t_begin, t_loaded),
                              ('pre_sync', t_loaded, t_train),
                              ('launch', t_train, t_launched),
                              ('sync', t_launched, marks[-1])):
                parts[key].append(b - a)
    sync(device)
    seconds = time.perf_counter() - t0
    util = monitor.stop()
    stages = {
        name: round(v['ms_per_batch'], 3)
        for name, v in loader.timer.summary().items()
    }
    res: Dict[str, Any] = {
        'batches': num,
        'warmup': warmup,
        'seconds': seconds,
        'ms_per_batch': 1e3 * seconds / num,
        'epoch_s': seconds / num * per_epoch,
        'batches_per_epoch': per_epoch,
        'nodes_per_batch': nodes / num,
        'edges_per_batch': edges / num,
        'stages_ms': stages,
        'first_loss': float(losses[0]),
        'last_loss': float(losses[-1]),
        'setup_s': setup_s,
        # The untimed first steps (offload: the first table's wait too):
        'warmup_s': warmup_s,
        # Where the time goes: host time of steps 1-100, 101-200, ... (the
        # decision by measurement runs in the first ones).
        'step_ms_by_hundred': _mean_by_hundred(
            [b - a for a, b in zip([t0] + marks, marks)]),
        'gpu_clock_mhz_by_hundred': monitor.clock_by_hundred(t0, marks),
        'step_parts_ms_by_hundred': {
            key: _mean_by_hundred(times)
            for key, times in parts.items()
        },
        # Every one of the first steps (the trial of the default):
        'step_parts_ms_first': {
            key: [round(1e3 * t, 3) for t in times[:FIRST_STEPS]]
            for key, times in parts.items()
        },
        **util,
    }
    # Where a batch's features came from and the sampler's pruning state
    # (the default switched off must train as plain training does):
    loader_stats = loader.stats()
    res['loader_features'] = loader_stats.get('features')
    res['loader_memory'] = loader_stats.get('memory')
    res['sampler_prunes'] = getattr(loader.node_sampler, 'hot_nodes',
                                    None) is not None
    if device.type == 'cuda':
        res['peak_gpu_memory_gb'] = torch.cuda.max_memory_allocated(
            device) / 2**30
        mem = torch.cuda.memory_stats(device)
        res['cuda_memory'] = {
            key: mem.get(key)
            for key in ('reserved_bytes.all.current',
                        'allocated_bytes.all.current', 'segment.all.current',
                        'num_alloc_retries', 'num_device_alloc')
        }
    if offload:
        stats = model.stats()
        stats['staleness_hist'] = {
            str(k): v
            for k, v in stats['staleness_hist'].items()
        }
        stats['cpu_busy_share'] = stats['cpu_compute_s'] / max(seconds, 1e-9)
        res['offload'] = stats
        model.close()
    del it, batch, loss, model, trained, optimizer, loader
    gc.collect()
    if device.type == 'cuda':
        torch.cuda.empty_cache()
    return res


def mean_of_orders(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    r"""One mode run twice (first in :obj:`--modes` order, then in reverse
    order): the first run's figures, with the times averaged over both, so
    that what drifts within a process (on an H100 the order of two modes
    moved their ratio by about 2%) weighs on every mode alike.
    Each run is kept under :obj:`'orders'`."""
    out = dict(runs[0])
    for key in ('seconds', 'ms_per_batch', 'epoch_s'):
        out[key] = sum(r[key] for r in runs) / len(runs)
    out['stages_ms'] = {
        stage: round(sum(r['stages_ms'].get(stage, 0.0) for r in runs) /
                     len(runs), 3)
        for stage in set().union(*(r['stages_ms'] for r in runs))}
    out['orders'] = runs
    return out


def _child_argv(argv: List[str], mode: str, out: str) -> List[str]:
    r"""The command line of a child of :obj:`--process-per-run`: the
    parent's, running :obj:`mode` only and writing to :obj:`out`."""
    drop_value = ('--modes', '--out', '--only-mode')
    drop_flag = ('--process-per-run', '--both-orders')
    child, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split('=', 1)[0]
        if name in drop_value:
            skip = '=' not in arg
            continue
        if name in drop_flag:
            continue
        child.append(arg)
    return child + ['--only-mode', mode, '--out', out]


def run_in_processes(args, order: List[str]) -> List[Dict[str, Any]]:
    r"""Every run of :obj:`order` in a fresh Python process (see
    :obj:`--process-per-run`); the children's results, in order."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(order):
            path = str(Path(tmp) / f'run{i}.json')
            cmd = [sys.executable, str(Path(__file__).resolve()),
                   *_child_argv(args.argv, name, path)]
            log(f'[process] run {i + 1}/{len(order)}: {name}')
            subprocess.run(cmd, check=True)
            res = json.loads(Path(path).read_text())['results']['run']
            res['process'] = i + 1
            out.append(res)
    return out


def run_throughput(args) -> Dict[str, Any]:
    from pyg_orch import GraphTopology

    order = list(args.modes)
    if args.both_orders:
        order += order[::-1]
    if args.process_per_run and args.only_mode is None:
        done = run_in_processes(args, order)
        runs: Dict[str, List[Dict[str, Any]]] = {n: [] for n in args.modes}
        for name, r in zip(order, done):
            runs[name].append(r)
        return _summarize(args, runs)
    data = build_graph(args)
    t0 = time.perf_counter()
    topology = GraphTopology.from_data(data, device=args.device)
    log(f'[graph] topology on {args.device} in '
        f'{time.perf_counter() - t0:.1f} s')
    if args.only_mode is not None:
        order = [args.only_mode]
    runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in order}
    for name in order:
        log(f'[train] {name}: {args.warmup} warm-up + '
            f"{'an epoch' if args.epoch else args.batches} batches")
        r = train_mode(args, data, topology, name)
        runs[name].append(r)
        log(f"[train] {name}: {r['ms_per_batch']:.2f} ms/batch, "
            f"{r['nodes_per_batch']:,.0f} nodes/batch, stages (ms): "
            f"{r['stages_ms']}")
    if args.only_mode is not None:
        return {'run': runs[args.only_mode][0]}
    return _summarize(args, runs)


def _summarize(args, runs: Dict[str, List[Dict[str, Any]]]
               ) -> Dict[str, Any]:
    # Every mode's figures (the mean of its runs), and the ratios to plain.
    results: Dict[str, Any] = {}
    for name, done in runs.items():
        results[name] = done[0] if len(done) == 1 else mean_of_orders(done)
    plain = results['plain']
    results['speedup'] = {
        name: plain['ms_per_batch'] / results[name]['ms_per_batch']
        for name in args.modes if name != 'plain'
    }
    results['node_reduction'] = {
        name: 1 - results[name]['nodes_per_batch'] / plain['nodes_per_batch']
        for name in args.modes if name != 'plain'
    }
    return results


def print_throughput(args, res) -> None:
    modes = args.modes
    rows = [
        ('ms per batch', 'ms_per_batch'),
        ('epoch (s, extrapolated)', 'epoch_s'),
        ('nodes per batch', 'nodes_per_batch'),
        ('edges per batch', 'edges_per_batch'),
    ]
    stages = sorted(set().union(*(res[m]['stages_ms'] for m in modes)))
    log('')
    log(f"{'':<26}" + ''.join(f'{m:>13}' for m in modes))

    def fmt(v):
        return f'{v:13.2f}' if isinstance(v, (int, float)) else f"{'-':>13}"

    for title, key in rows:
        log(f'{title:<26}' + ''.join(fmt(res[m][key]) for m in modes))
    for stage in stages:
        log(f"{'  ' + stage + ' (ms)':<26}" +
            ''.join(fmt(res[m]['stages_ms'].get(stage, 0.0)) for m in modes))
    for key in ('cpu_percent_system', 'cpu_cores_process', 'gpu_percent',
                'peak_gpu_memory_gb'):
        log(f'{key:<26}' + ''.join(fmt(res[m].get(key)) for m in modes))
    for m in modes:
        if m == 'plain':
            continue
        off = res[m]
        log(f"\n{m}: speed-up (plain / offload) {res['speedup'][m]:.3f}x; "
            f"nodes per batch -{100 * res['node_reduction'][m]:.1f}%")
        st = off.get('offload')
        if st is None:  # 'plain:pruned=N'
            continue
        log(f"  split {st['split']} (CPU: {st.get('cpu_aggregation')}); "
            f"{st['num_hot']:,} hot vertices (coverage "
            f"{100 * st['hot_coverage']:.1f}% of bottom-layer accesses), "
            f"{st['hot_rows_per_batch']:.0f} rows replaced per batch, setup "
            f"{off['setup_s']:.1f} s; staleness {st['staleness_hist']} (max "
            f"{st['max_staleness_seen']}, bound {st['max_staleness']}, "
            f"super-batch {st['super_batch_size']}); wait "
            f"{st['wait_s']:.3f} s in {st['num_waits']} waits; CPU compute "
            f"{st['cpu_compute_s']:.2f} s ({100 * st['cpu_busy_share']:.0f}% "
            f"of the wall time), {st['rows_computed']:,} rows, with "
            f"{st['num_threads']} threads x {st['intra_op_threads']} intra-op, "
            f"items of {st['chunk_size']} rows; hot-set sizes "
            f"{st.get('hot_sizes')}")


# Accuracy ####################################################################

def accuracy_datasets(args, tmp: Path):
    r"""Yields :obj:`(name, data, settings)` for every data set of
    ``--accuracy-datasets`` found under ``--datasets`` (see the module
    docstring), logging the missing ones."""
    from torch_geometric.datasets import Planetoid

    from pyg_orch.datasets import read_musae, structural_features
    from pyg_orch.evaluation import random_split

    for name in args.accuracy_datasets:
        if name in ('Cora', 'CiteSeer'):
            raw = Path(args.datasets) / name / 'raw'
            if not raw.exists():
                log(f'[accuracy] {raw} not found: {name} skipped')
                continue
            shutil.copytree(raw, tmp / name / 'raw')
            data = Planetoid(str(tmp), name)[0]
            yield name, data, dict(epochs=args.epochs, batch_size=32,
                                   split='public')
        else:
            folder = Path(args.datasets) / 'musae' / name
            if not folder.is_dir():
                log(f'[accuracy] {folder} not found: {name} skipped')
                continue
            data = read_musae(str(folder))
            data.x = structural_features(data.edge_index, data.num_nodes)
            data.train_mask, data.val_mask, data.test_mask = random_split(
                data.num_nodes, args.train_ratio, args.val_ratio,
                seed=args.split_seed)
            yield name, data, dict(
                epochs=args.musae_epochs, batch_size=args.musae_batch_size,
                split=dict(kind='random', train_ratio=args.train_ratio,
                           val_ratio=args.val_ratio, seed=args.split_seed),
                features='structural_features (18 columns)')


def run_accuracy(args) -> Dict[str, Any]:
    from tqdm import tqdm

    from pyg_orch.evaluation import train_and_test

    results: Dict[str, Any] = {}
    tmp = Path(tempfile.mkdtemp(prefix='bench_offload_'))
    bar = tqdm(total=len(args.accuracy_datasets) *
               len(args.accuracy_models) * 2 * args.seeds,
               desc='accuracy runs', unit='run', dynamic_ncols=True)
    try:
        for name, data, settings in accuracy_datasets(args, tmp):
            for arch in args.accuracy_models:
                t0 = time.perf_counter()
                runs: Dict[str, List[Dict[str, Any]]] = {}
                for mode in ('plain', 'offload'):
                    runs[mode] = []
                    for s in range(args.seeds):
                        bar.set_postfix_str(f'{name} {arch} {mode} seed {s}')
                        runs[mode].append(train_and_test(
                            data, arch, s, mode == 'offload',
                            settings['epochs'], args.max_staleness,
                            args.full_neighbors, args.split, args.hot_ratio,
                            batch_size=settings['batch_size']))
                        bar.update()
                accs = {m: [r['acc'] for r in v] for m, v in runs.items()}
                entry: Dict[str, Any] = {
                    m: {
                        'accs': a,
                        'mean': statistics.mean(a),
                        'stderr': statistics.stdev(a) / len(a)**0.5
                        if len(a) > 1 else 0.0,
                    }
                    for m, a in accs.items()
                }
                entry['diff_points'] = 100 * (entry['offload']['mean'] -
                                              entry['plain']['mean'])
                entry['offload']['num_hot'] = runs['offload'][0]['num_hot']
                entry['offload']['split'] = runs['offload'][0]['split']
                entry['offload']['max_staleness_seen'] = max(
                    r['max_staleness_seen'] for r in runs['offload'])
                entry['offload']['max_table_age'] = max(
                    r['max_table_age'] for r in runs['offload'])
                entry['dataset'] = dict(
                    settings, num_nodes=data.num_nodes,
                    num_edges=data.edge_index.size(1),
                    num_features=data.num_features,
                    num_classes=int(data.y.max()) + 1,
                    num_train=int(data.train_mask.sum()),
                    num_test=int(data.test_mask.sum()))
                entry['seconds'] = time.perf_counter() - t0
                results[f'{name}/{arch}'] = entry
                bar.write(
                    f"[accuracy] {name:<8} {arch:<4} plain "
                    f"{100 * entry['plain']['mean']:.2f} +- "
                    f"{100 * entry['plain']['stderr']:.2f}, offload "
                    f"{100 * entry['offload']['mean']:.2f} +- "
                    f"{100 * entry['offload']['stderr']:.2f} "
                    f"({entry['diff_points']:+.2f} points, num_hot "
                    f"{entry['offload']['num_hot']}, max staleness "
                    f"{entry['offload']['max_staleness_seen']}, "
                    f"{entry['seconds']:.0f} s)")
    finally:
        bar.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return results


def main(argv=None) -> Dict[str, Any]:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    args.argv = argv
    report: Dict[str, Any] = {
        'schema_version': SCHEMA_VERSION,
        'benchmark': 'offload_accuracy' if args.accuracy else 'offload',
        'args': {k: v for k, v in vars(args).items()},
        'machine': machine_info(),
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec='seconds'),
    }
    t0 = time.perf_counter()
    if args.accuracy:
        report['results'] = run_accuracy(args)
    else:
        report['results'] = run_throughput(args)
        if args.only_mode is None:
            print_throughput(args, report['results'])
    report['total_s'] = time.perf_counter() - t0
    write_report(report, args.out)
    return report


if __name__ == '__main__':
    main()
