"""Sampling and training across machines (``pyg_orch.distributed``): bytes
exchanged and time per batch for METIS vs random partitions, one part per
process, and a scaling model that projects the time per batch to more GPUs.

Four modes:

* **run** (default): partitions a synthetic power-law graph into
  ``--world-size`` parts for every method of ``--methods``, then spawns one
  process per part (``torch.multiprocessing``, start method ``spawn``), each
  acting as a machine: it builds a ``HybridNeighborLoader('parts/')`` over its
  part and iterates ``--warmup`` batches, then ``--repeats`` times
  ``--batches`` batches (with ``--train``: GraphSAGE under DDP). Reported
  per method: time per batch (median over batches, median / min / max over
  repeats), bytes per hop of the sampling exchange (requests, responses),
  of the feature exchange, remote rows, cache hit rate, time inside
  ``all_to_all``, edge cut and balance of the partition, partitioning time.
  ``--cache-ranking degree`` fills each rank's cache of remote rows by
  in-degree within its part instead of pre-sampled read counts.
  ``--sampling-device cuda`` samples on each rank's GPU
  (``HybridNeighborLoader(part_dir, sampling_device=...)``; the default ``cpu``
  samples on the CPU over the memory-mapped part); ``--feature-device cuda``
  gathers the feature rows there too
  (``HybridNeighborLoader(part_dir, feature_device=...)``, over a copy of the
  part's features on the GPU; the default ``cpu`` reads the memory-mapped
  part).
* ``--sweep-parts 2,4,...``: no process group; partitions the graph into
  every number of parts and replays the collective sampler's owner lookup
  on batches sampled by the single-machine sampler (the same distribution):
  remote fraction of the frontier per hop, bytes per hop, remote feature
  rows with a static cache. The scaling model's input.
* ``--project RESULT.json [SWEEP.json]``: prints the projected time per
  batch at ``--project-gpus`` (default 8, 16, 64) GPUs, one GPU per machine
  and ``--gpus-per-machine`` GPUs per machine (``docs/scaling.rst``).
* ``--show RESULT.json ...``: prints the tables of run or sweep results
  (``--format rst`` for the docs).

    python benchmarks/bench_distributed.py                       # CPU, gloo
    python benchmarks/bench_distributed.py --backend nccl --nodes 2400000 \\
        --edges 60000000 --train
    python benchmarks/bench_distributed.py --backend nccl \\
        --sampling-device cuda --nodes 1000000 --edges 20000000 --train
    python benchmarks/bench_distributed.py --backend nccl \\
        --sampling-device cuda --feature-device cuda --nodes 1000000 \\
        --edges 20000000 --train
    python benchmarks/bench_distributed.py --sweep-parts 2,4,8,16,32,64
    python benchmarks/bench_distributed.py --project run.json sweep.json
"""
import argparse
import datetime
import json
import math
import os
import socket
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any, Dict, List, Optional, Sequence

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench_common import REPO, fmt_table, int_list, log  # noqa: E402

SCHEMA_VERSION = 1
ID_BYTES = 8  # The library's exchanges send int64 ids, counts, edge ids.


# Helpers ####################################################################
def _stats(values: Sequence[float]) -> Optional[Dict[str, float]]:
    values = list(values)
    if not values:
        return None
    return {'median': statistics.median(values), 'min': min(values),
            'max': max(values), 'n': len(values)}


def _mean(values) -> float:
    values = list(values)
    return float(sum(values) / len(values)) if values else 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _row_bytes(num_features: int) -> int:
    # 'x' (float32) and 'y' (int64): what DistributedFeatureGather gathers.
    return num_features * 4 + 8


def sage_num_params(in_dim: int, hidden: int, num_layers: int,
                    out_dim: int) -> int:
    r"""Parameters of PyG's :class:`GraphSAGE` (mean aggregation): every
    :class:`SAGEConv` has :obj:`lin_l` (with bias) and :obj:`lin_r`."""
    dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
    return sum(2 * a * b + b for a, b in zip(dims[:-1], dims[1:]))


def _out_path(args, kind: str) -> str:
    if args.out:
        return args.out
    date = datetime.date.today().isoformat()
    backend = args.backend + ('_gpusampling' if args.sampling_device == 'cuda'
                              else '') + (
        '_gpufeatures' if args.feature_device == 'cuda' else '') + (
        f'_{args.ranks_per_part}perpart' if args.ranks_per_part > 1
        else '') + ('_sharded' if args.topology == 'sharded' else '') + (
        '_rowsharded' if args.feature_placement == 'sharded' else '')
    name = (f'distributed_{backend}_{date}.json' if kind == 'run' else
            f'distributed_sweep_{_count(args.nodes)}_{date}.json')
    return os.path.join(REPO, 'benchmarks', 'results', name)


def _count(n: int) -> str:
    for div, unit in ((10**9, 'B'), (10**6, 'M'), (10**3, 'k')):
        if n >= div:
            return f'{n / div:g}{unit}'
    return str(n)


def _write_json(path: str, res: Dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + '.tmp', 'w') as f:
        json.dump(res, f, indent=1)
    os.replace(path + '.tmp', path)
    log(f'wrote {path}')


def _machine() -> Dict[str, Any]:
    from _bench_common import machine_info
    info = machine_info()
    if torch.cuda.is_available():
        info['gpus'] = [torch.cuda.get_device_name(i)
                        for i in range(torch.cuda.device_count())]
    return info


def _graph(args):
    r"""The synthetic graph on the CPU (generated on the GPU if one is
    there), with :obj:`train_mask` (the loader's seeds)."""
    from pyg_orch.datasets import power_law_graph
    dev = 'cuda' if torch.cuda.is_available() else 'cpu'
    t = time.perf_counter()
    data = power_law_graph(args.nodes, args.edges, num_features=args.dim,
                           num_classes=args.classes, device=dev,
                           seed=args.seed)
    data = data.cpu()
    for key in ('val_mask', 'test_mask'):
        if key in data:
            del data[key]
    seconds = time.perf_counter() - t
    if dev == 'cuda':
        torch.cuda.empty_cache()
    log(f'graph: {args.nodes:,} nodes, {args.edges:,} edges, {args.dim} '
        f'features, generated on {dev} in {seconds:.1f}s')
    return data, {'num_nodes': args.nodes, 'num_edges': args.edges,
                  'num_features': args.dim, 'num_classes': args.classes,
                  'num_train_nodes': int(data.train_mask.sum()),
                  'generator': 'pyg_orch.datasets.power_law_graph',
                  'gen_device': dev, 'seed': args.seed,
                  'generate_s': seconds}


# The per-rank worker ########################################################
class _CommMeter:
    r"""Counts calls, bytes to / from other ranks and wall time of
    :func:`torch.distributed.all_to_all_single` (the transport of the
    library's :func:`~pyg_orch.parallel.exchange.exchange`), by the
    phase set around the loader's sampler and gather calls."""
    def __init__(self, rank: int, world: int):
        self.rank, self.world = rank, world
        self.phase = 'other'
        self.devices = set()
        self.reset()

    def reset(self) -> None:
        self.totals = defaultdict(lambda: {'calls': 0, 'bytes_out': 0,
                                           'bytes_in': 0, 'seconds': 0.0})

    def install(self) -> None:
        import torch.distributed as dist
        original = dist.all_to_all_single
        meter = self

        def all_to_all_single(output, input, output_split_sizes=None,
                              input_split_sizes=None, group=None,
                              async_op=False):
            t = time.perf_counter()
            work = original(output, input, output_split_sizes,
                            input_split_sizes, group=group,
                            async_op=async_op)
            if input.is_cuda and not async_op:
                torch.cuda.synchronize(input.device)
            seconds = time.perf_counter() - t
            meter.devices.add(input.device.type)
            w, r = meter.world, meter.rank
            if group is not None:  # E.g. the ranks of one local rank.
                w, r = dist.get_world_size(group), dist.get_rank(group)

            def other_bytes(t, splits):
                rows = t.size(0) if t.dim() else t.numel()
                if rows == 0:
                    return 0
                per_row = t.numel() * t.element_size() // rows
                own = splits[r] if splits else rows // w
                return (rows - own) * per_row

            tot = meter.totals[meter.phase]
            tot['calls'] += 1
            tot['bytes_out'] += other_bytes(input, input_split_sizes)
            tot['bytes_in'] += other_bytes(output, output_split_sizes)
            tot['seconds'] += seconds
            return work

        dist.all_to_all_single = all_to_all_single

    def wrap(self, fn, phase: str, timer: Dict[str, float],
             sync: Optional[torch.device] = None):
        r"""Times :obj:`fn` as :obj:`phase`; with :obj:`sync` (a CUDA
        device), the phase ends when the work it queued there is done."""
        def wrapped(*a, **kw):
            previous, self.phase = self.phase, phase
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                if sync is not None:
                    torch.cuda.synchronize(sync)
                timer[phase] = timer.get(phase, 0.0) + (time.perf_counter()
                                                        - t)
                self.phase = previous
        return wrapped


def _batch_record(loader, batch, meter, timer, total_s, loader_s, train_s,
                  row_bytes):
    hops = []
    # The loader's own sampler samples every batch only without threads:
    threaded = loader.prefetch > 0 or loader.num_workers > 0
    sampler = loader.partition_batches.sampler
    for h in [] if threaded else sampler.stats.per_hop:
        req_out = h['remote_requests'] * ID_BYTES
        req_in = h['served_requests'] * ID_BYTES
        hops.append({
            'frontier': h['local_requests'] + h['remote_requests'],
            'local_requests': h['local_requests'],
            'remote_requests': h['remote_requests'],
            'served_requests': h['served_requests'],
            'request_bytes_out': req_out,
            'request_bytes_in': req_in,
            'response_bytes_out': h['bytes_sent'] - req_out,
            'response_bytes_in': h['bytes_received'] - req_in,
        })
    # This batch's (also where threads build batches; per-hop figures are
    # only recorded without them):
    g = loader.batch_stats[-1]
    feat = {
        'nodes': int(batch.n_id.numel()),
        'local_rows': g['local_rows'], 'cached_rows': g['cached_rows'],
        'remote_rows': g['remote_rows'], 'served_rows': g['served_rows'],
        'request_bytes_out': g['remote_rows'] * ID_BYTES,
        'request_bytes_in': g['served_rows'] * ID_BYTES,
        'response_bytes_out': g['served_rows'] * row_bytes,
        'response_bytes_in': g['remote_bytes'],
    }
    comm = {k: dict(v) for k, v in meter.totals.items()}
    return {'total_s': total_s, 'loader_s': loader_s, 'train_s': train_s,
            'phase_s': dict(timer), 'comm': comm, 'hops': hops,
            'features': feat, 'batch_size': int(batch.batch_size),
            'sampled_edges': [int(e) for e in batch.num_sampled_edges]}


def _summarize_rank(records: List[dict], repeats: int) -> Dict[str, Any]:
    r"""Per-rank figures over the timed batches: times as medians per repeat
    (median / min / max over repeats), volumes as means per batch."""
    per_rep = len(records) // max(repeats, 1)
    reps = [records[i * per_rep:(i + 1) * per_rep] for i in range(repeats)]
    out: Dict[str, Any] = {}
    for key in ('total_s', 'loader_s', 'train_s'):
        out[key.replace('_s', '_ms')] = _stats(
            [statistics.median(r[key] for r in rep) * 1e3 for rep in reps])
    # The wall time of a repeat over its batches (steps run back to back):
    # the throughput, where batches built ahead (prefetch, workers) make
    # the time per batch bimodal and its median says little.
    out['wall_ms'] = _stats([_mean(r['total_s'] for r in rep) * 1e3
                             for rep in reps])
    phases = sorted({p for r in records for p in r['phase_s']})
    out['phase_ms'] = {p: _stats([statistics.median(
        r['phase_s'].get(p, 0.0) for r in rep) * 1e3 for rep in reps])
        for p in phases}
    comm_phases = sorted({p for r in records for p in r['comm']})
    out['comm'] = {}
    for p in comm_phases:
        def get(r, k):
            return r['comm'].get(p, {}).get(k, 0)
        out['comm'][p] = {
            'calls': _mean(get(r, 'calls') for r in records),
            'bytes_out': _mean(get(r, 'bytes_out') for r in records),
            'bytes_in': _mean(get(r, 'bytes_in') for r in records),
            'ms': _stats([statistics.median(get(r, 'seconds') for r in rep)
                          * 1e3 for rep in reps]),
        }
    out['comm_ms_total'] = _stats([statistics.median(
        sum(c['seconds'] for c in r['comm'].values()) for r in rep) * 1e3
        for rep in reps])
    num_hops = max(len(r['hops']) for r in records)
    hops = []
    for h in range(num_hops):
        rows = [r['hops'][h] for r in records if len(r['hops']) > h]
        hop = {k: _mean(x[k] for x in rows) for k in rows[0]}
        hop['remote_fraction'] = (hop['remote_requests'] / hop['frontier']
                                  if hop['frontier'] else 0.0)
        hop['sampled_edges'] = _mean(r['sampled_edges'][h] for r in records
                                     if len(r['sampled_edges']) > h)
        hops.append(hop)
    out['hops'] = hops
    feat = {k: _mean(r['features'][k] for r in records)
            for k in records[0]['features']}
    remote = feat['cached_rows'] + feat['remote_rows']
    feat['remote_fraction'] = remote / feat['nodes'] if feat['nodes'] else 0.
    feat['cache_hit_rate'] = feat['cached_rows'] / remote if remote else 0.
    out['features'] = feat
    out['bytes_per_batch'] = {
        'sampling_out': sum(h['request_bytes_out'] + h['response_bytes_out']
                            for h in hops),
        'sampling_in': sum(h['request_bytes_in'] + h['response_bytes_in']
                           for h in hops),
        'features_out': feat['request_bytes_out'] +
        feat['response_bytes_out'],
        'features_in': feat['request_bytes_in'] + feat['response_bytes_in'],
    }
    out['all_to_all_calls_per_batch'] = sum(c['calls']
                                            for c in out['comm'].values())
    out['batches'] = len(records)
    return out


def _worker(rank: int, world: int, port: int, part_dir: str, method: str,
            args, out_dir: str) -> None:
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port),
                      LOCAL_WORLD_SIZE=str(args.ranks_per_part))
    use_cuda = args.backend == 'nccl'
    # This rank's GPU (under gloo, the ranks may share one):
    gpu = torch.device('cuda', rank if use_cuda else
                       rank % max(torch.cuda.device_count(), 1))
    if use_cuda or 'cuda' in (args.sampling_device, args.feature_device,
                              args.train_device):
        torch.cuda.set_device(gpu)
    if use_cuda:
        device = gpu
        # Sampling requests, feature rows and DDP's gradients all go over
        # NCCL (the library exchanges on the group's device, see
        # pyg_orch.parallel.exchange.comm_device).
        backend = 'nccl'
    elif args.train_device == 'cuda':  # Gloo exchanges, GPU training.
        device = gpu
        backend = 'gloo'
    else:
        device = torch.device('cpu')
        backend = 'gloo'
    torch.set_num_threads(args.threads)
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout))
    try:
        _run_rank(rank, world, part_dir, method, args, out_dir, device)
        # Every rank is done before any connection closes:
        dist.all_reduce(torch.zeros(1, device=device))
    except BaseException:
        dist.destroy_process_group()
        raise
    # Exit without tearing the groups down: destroying gloo subgroups (e.g.
    # with --ranks-per-part) while peers exit can abort a process
    # ("terminate called without an active exception"), as the tests'
    # workers avoid too (tests/multiproc.py).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _probe(world: int, device: torch.device, rounds: int) -> Dict:
    r"""Median time of one :func:`all_to_all_single` with 8 bytes and with
    1 MiB per peer on :obj:`device`'s transport (gloo for CPU tensors,
    NCCL for CUDA ones): the latency and bandwidth terms of the model, as
    this machine has them."""
    import torch.distributed as dist
    out = {}
    for name, per_peer in (('latency_us', 8), ('mib_per_peer_us', 2**20)):
        x = torch.zeros(world * (per_peer // 8), dtype=torch.int64,
                        device=device)
        y = torch.empty_like(x)
        times = []
        for i in range(rounds + 5):
            if device.type == 'cuda':
                torch.cuda.synchronize(device)
            t = time.perf_counter()
            dist.all_to_all_single(y, x)
            if device.type == 'cuda':
                torch.cuda.synchronize(device)
            if i >= 5:
                times.append((time.perf_counter() - t) * 1e6)
        out[name] = statistics.median(times)
    # Bytes to the other ranks over the time of the 1 MiB exchange:
    out['gbytes_per_s'] = (world - 1) * 2**20 / out['mib_per_peer_us'] / 1e3
    return out


def _run_rank(rank, world, part_dir, method, args, out_dir, device):
    import torch.distributed as dist

    from pyg_orch import CacheOptions, HybridNeighborLoader, PlacementOptions

    probe = {}
    if args.probe_rounds:
        for dev in [device]:
            probe[dev.type] = _probe(world, dev, args.probe_rounds)
    meter = _CommMeter(rank, world)
    meter.install()
    t = time.perf_counter()
    sampling_device, feature_device = (
        torch.device('cuda', torch.cuda.current_device())
        if choice == 'cuda' else
        torch.device('cpu') for choice in (args.sampling_device,
                                           args.feature_device))
    loader = HybridNeighborLoader(
        part_dir, args.fanout, batch_size=args.batch_size, shuffle=True,
        cache_size=args.cache_rows, cache=CacheOptions(
            num_presample_batches=args.presample, ranking=args.cache_ranking),
        seed=args.seed, device=device,
        sampling_device=sampling_device, feature_device=feature_device,
        placement=PlacementOptions(topology=args.topology),
        feature_placement=args.feature_placement, prefetch=args.prefetch,
        num_workers=args.num_workers)
    built = loader.partition_batches  # The sampler, rows, part.
    build_s = time.perf_counter() - t
    timer: Dict[str, float] = {}
    # Where a phase queues GPU work, it ends when that work is done:
    sync = next((d for d in (sampling_device, feature_device, device)
                 if d.type == 'cuda'), None)
    # With prefetch or workers, phases run in other threads:
    if not args.prefetch and not args.num_workers:
        built.sampler.sample_from_nodes = meter.wrap(
            built.sampler.sample_from_nodes, 'sampling', timer, sync)
        built.gather.gather = meter.wrap(built.gather.gather, 'features',
                                        timer, sync)
        built.gather.gather_edges = meter.wrap(
            built.gather.gather_edges, 'edges', timer, sync)
    part = built.partition
    row_bytes = _row_bytes(args.dim)

    model = opt = offload = None
    if args.train:
        from torch.nn.parallel import DistributedDataParallel
        from torch_geometric.nn import GraphSAGE
        net = GraphSAGE(args.dim, args.hidden, len(args.fanout),
                        args.classes).to(device)
        if args.offload is not None:
            from pyg_orch import BottomLayerOffload
            from pyg_orch.offload import OffloadOptions
            hot_ratio = None if args.offload == 'default' else \
                float(args.offload)
            net = offload = BottomLayerOffload(
                net, loader, options=OffloadOptions(hot_ratio=hot_ratio))
        model = DistributedDataParallel(
            net, device_ids=[device.index] if device.type == 'cuda'
            else None)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def batches():
        while True:
            for b in loader:
                yield b

    it = batches()
    losses = []

    def step():
        t0 = time.perf_counter()
        meter.reset()
        timer.clear()
        batch = next(it)
        t1 = time.perf_counter()
        if model is not None and batch.batch_size > 0:
            bs = batch.batch_size
            x = batch.x.to(device, non_blocking=True)
            ei = batch.edge_index.to(device, non_blocking=True)
            y = batch.y[:bs].to(device, non_blocking=True)
            opt.zero_grad()
            out = model(x, ei)[:bs]
            loss = torch.nn.functional.cross_entropy(out, y)
            loss.backward()
            opt.step()
            if device.type == 'cuda':
                torch.cuda.synchronize(device)
            losses.append(float(loss.detach()))
        t2 = time.perf_counter()
        return batch, t2 - t0, t1 - t0, t2 - t1

    # The first batch builds the cache (pre-sampling): timed on its own.
    t = time.perf_counter()
    step()
    first_s = time.perf_counter() - t
    for _ in range(max(args.warmup - 1, 0)):
        step()
    if rank == args.fail_rank:
        os._exit(3)  # Testing: this rank vanishes; the others must not hang.
    records = []
    bar = None
    if rank == 0:
        from tqdm import tqdm
        bar = tqdm(total=args.repeats * args.batches, desc=f'{method} batches',
                   file=sys.stdout, mininterval=2)
    for _ in range(args.repeats):
        # A barrier on the group's transport.
        dist.all_reduce(torch.zeros(1, device=device))
        for _ in range(args.batches):
            batch, total_s, loader_s, train_s = step()
            records.append(_batch_record(loader, batch, meter, timer,
                                         total_s, loader_s, train_s,
                                         row_bytes))
            if bar is not None:
                bar.update()
    if bar is not None:
        bar.close()
    res = {
        'rank': rank, 'part': part.part, 'method': method,
        'prefetch': args.prefetch, 'num_workers': args.num_workers,
        'device': str(device), 'topology_placement': args.topology,
        'topology_reads': built.sampler.topology_reads(),
        'feature_placement': args.feature_placement,
        'row_reads': built.gather.row_reads(),
        'sampling_device': str(sampling_device),
        'feature_device': str(feature_device),
        'transport_devices': sorted(meter.devices),
        'build_s': build_s, 'first_batch_s': first_s,
        'num_batches_per_epoch': len(loader),
        'part_nodes': int(part.node_ids.numel()),
        'seeds': int(built.input_nodes.numel()),
        'cache_rows': int(built.cached_rows),
        'cache_ranking': built.cache_ranking,
        'cache_bytes': int(built.gather.cache_bytes),
        'loss_first_last': [losses[0], losses[-1]] if losses else None,
        'all_to_all_probe': probe,
        'summary': _summarize_rank(records, args.repeats),
    }
    if offload is not None:
        res['offload'] = {k: v for k, v in offload.stats().items()
                          if isinstance(v, (int, float, str, dict, list,
                                            type(None)))}
        offload.close()
    if args.keep_batches:
        res['batches'] = records
    with open(os.path.join(out_dir, f'{method}_{rank}.json'), 'w') as f:
        json.dump(res, f)


def _processes(args) -> int:
    r"""The benchmark's processes: :obj:`--ranks-per-part` per part."""
    return args.world_size * args.ranks_per_part


def _spawn(method: str, part_dir: str, args, out_dir: str) -> Optional[str]:
    r"""Runs the ranks of one method; returns an error message, or
    :obj:`None`. A rank that fails ends the others (the process group's
    timeout, then :func:`torch.multiprocessing.spawn`'s clean-up);
    :obj:`--run-timeout` bounds the whole run."""
    import torch.multiprocessing as mp
    ctx = mp.start_processes(
        _worker, args=(_processes(args), _free_port(), part_dir, method, args,
                       out_dir), nprocs=_processes(args), join=False,
        start_method='spawn')
    deadline = time.monotonic() + args.run_timeout
    try:
        while not ctx.join(timeout=5):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    if p.is_alive():
                        p.terminate()
                return f'timed out after {args.run_timeout}s'
    except Exception as e:  # A rank raised or died.
        return f'{type(e).__name__}: {str(e).strip()[-2000:]}'
    return None


def _combine(method: str, ranks: List[dict]) -> Dict[str, Any]:
    r"""One method's figures over the ranks: the step time of the slowest
    rank (ranks move in step), volumes as the mean over ranks."""
    sums = [r['summary'] for r in ranks]
    out: Dict[str, Any] = {}
    worst = max(sums, key=lambda s: s['total_ms']['median'])
    out['time_per_batch_ms'] = worst['total_ms']
    out['loader_ms'] = worst['loader_ms']
    out['train_ms'] = worst['train_ms']
    # Throughput: the slowest rank's wall time per batch.
    out['wall_ms_per_batch'] = max((s['wall_ms'] for s in sums),
                                   key=lambda w: w['median'])
    out['phase_ms'] = worst['phase_ms']
    out['comm_ms'] = worst['comm_ms_total']
    out['time_per_batch_ms_per_rank'] = [s['total_ms']['median']
                                         for s in sums]
    hops = []
    for h in range(len(sums[0]['hops'])):
        rows = [s['hops'][h] for s in sums]
        hop = {k: _mean(x[k] for x in rows) for k in rows[0]}
        hops.append(hop)
    out['hops'] = hops
    out['features'] = {k: _mean(s['features'][k] for s in sums)
                       for k in sums[0]['features']}
    out['bytes_per_batch'] = {k: _mean(s['bytes_per_batch'][k]
                                       for s in sums)
                              for k in sums[0]['bytes_per_batch']}
    out['comm'] = {p: {k: _mean(s['comm'][p][k] for s in sums
                                if p in s['comm'])
                       for k in ('calls', 'bytes_out', 'bytes_in')}
                   for p in sums[0]['comm']}
    out['all_to_all_calls_per_batch'] = _mean(
        s['all_to_all_calls_per_batch'] for s in sums)
    out['first_batch_s'] = max(r['first_batch_s'] for r in ranks)
    out['all_to_all_probe'] = ranks[0].get('all_to_all_probe')
    out['cache_rows_per_rank'] = [r['cache_rows'] for r in ranks]
    out['transport_devices'] = sorted({d for r in ranks
                                       for d in r['transport_devices']})
    out['sampling_device'] = sorted({r['sampling_device'].split(':')[0]
                                     for r in ranks})
    out['feature_device'] = sorted({r.get('feature_device', 'cpu').split(
        ':')[0] for r in ranks})
    return out


def run(args) -> Dict[str, Any]:
    from pyg_orch.distributed import partition_graph
    from pyg_orch.parallel.peer_memory import disable_multicast_env
    if args.backend == 'nccl' and \
            torch.cuda.device_count() < _processes(args):
        raise SystemExit(f'--backend nccl needs {_processes(args)} GPUs '
                         f'(found {torch.cuda.device_count()})')
    if 'cuda' in (args.sampling_device, args.feature_device) and \
            not torch.cuda.is_available():
        raise SystemExit('--sampling-device/--feature-device cuda need a '
                         'GPU (with gloo, the ranks may share one)')
    if args.backend == 'nccl':
        disable_multicast_env()  # Before any process starts NCCL.
    res: Dict[str, Any] = {
        'schema_version': SCHEMA_VERSION, 'kind': 'run',
        'created': time.strftime('%Y-%m-%dT%H:%M:%S%z'),
        'command': ' '.join(['python'] + sys.argv),
        'args': {k: v for k, v in vars(args).items()
                 if k not in ('project',)},
        'machine': _machine(), 'methods': {}, 'partitions': {},
        'errors': {}, 'notes': [],
    }
    res['git_commit'] = res['machine']['git_commit']
    data, res['graph'] = _graph(args)
    if args.cache_rows is None:
        args.cache_rows = int(args.cache_ratio * args.nodes)
    res['args']['cache_rows'] = args.cache_rows
    res['model'] = {'name': 'GraphSAGE', 'hidden': args.hidden,
                    'num_layers': len(args.fanout),
                    'num_params': sage_num_params(
                        args.dim, args.hidden, len(args.fanout),
                        args.classes)}
    work = args.work_dir or tempfile.mkdtemp(prefix='bench_distributed_')
    os.makedirs(work, exist_ok=True)
    from pyg_orch.partition.partitioning import metis_available
    for method in args.methods:
        if method == 'metis' and not metis_available():
            res['errors'][method] = ('pymetis is not installed (pip install '
                                     'pymetis)')
            log(f'[{method}] skipped: {res["errors"][method]}')
            continue
        part_dir = os.path.join(work, f'{method}_{args.world_size}')
        log(f'[{method}] partitioning into {args.world_size} parts ...')
        t = time.perf_counter()
        info = partition_graph(data, args.world_size, part_dir,
                               method=method, seed=args.seed,
                               overwrite=True, progress=True)
        seconds = time.perf_counter() - t
        res['partitions'][method] = {
            'edge_cut': info.edge_cut, 'balance': info.balance,
            'part_sizes': info.part_sizes,
            'part_num_edges': info.part_num_edges,
            'seconds': seconds, 'method_seconds': info.seconds,
        }
        log(f'[{method}] edge cut {info.edge_cut:.3f}, balance '
            f'{info.balance:.3f}, {seconds:.1f}s')
        rank_dir = tempfile.mkdtemp(dir=work, prefix=f'ranks_{method}_')
        t = time.perf_counter()
        error = _spawn(method, part_dir, args, rank_dir)
        log(f'[{method}] {_processes(args)} ranks done in '
            f'{time.perf_counter() - t:.1f}s' +
            (f' with an error: {error}' if error else ''))
        if error:
            res['errors'][method] = error
            continue
        ranks = [json.load(open(os.path.join(rank_dir, f'{method}_{r}.json')))
                 for r in range(_processes(args))]
        res['methods'][method] = _combine(method, ranks)
        res['methods'][method]['partition'] = res['partitions'][method]
        res['methods'][method]['ranks'] = ranks
    if 'nccl' == args.backend and any(
            'cpu' in m.get('transport_devices', [])
            for m in res['methods'].values()):
        res['notes'].append(
            'Some exchanges ran on CPU tensors although the backend is '
            'NCCL: check transport_devices.')
    if not args.work_dir:
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    return res


def _table(headers: List[str], rows: List[List[Any]],
           fmt: str = 'text') -> None:
    r"""A fixed-width text table, or a reST simple table."""
    if fmt != 'rst':
        log(fmt_table(headers, rows))
        return

    def cell(v):
        if v is None:
            return '-'
        if isinstance(v, float):
            return f'{v:.3f}' if abs(v) < 10 else f'{v:.1f}'
        return str(v)
    rows = [[cell(v) for v in r] for r in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in rows))
              for i, h in enumerate(headers)]
    sep = '  '.join('=' * w for w in widths)
    log(sep)
    log('  '.join(str(h).ljust(w) for h, w in zip(headers, widths)).rstrip())
    log(sep)
    for r in rows:
        log('  '.join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    log(sep)


def print_run(res: Dict[str, Any], fmt: str = 'text') -> None:
    rows = []
    for method, m in res['methods'].items():
        p = m['partition']
        b = m['bytes_per_batch']
        t = m['time_per_batch_ms']
        rows.append([method, '/'.join(m.get('sampling_device', ['cpu'])),
                     '/'.join(m.get('feature_device', ['cpu'])),
                     p['edge_cut'], p['balance'], p['seconds'],
                     t['median'], t['min'], t['max'], m['comm_ms']['median'],
                     (b['sampling_out'] + b['sampling_in']) / 1e6,
                     (b['features_out'] + b['features_in']) / 1e6,
                     m['features']['remote_rows'],
                     m['features']['cache_hit_rate'],
                     m['all_to_all_calls_per_batch']])
    _table(['method', 'sampling on', 'features on', 'edge cut', 'balance', 'partition s',
            'ms/batch',
            'min', 'max', 'a2a ms', 'sampling MB', 'features MB',
            'remote rows', 'cache hit', 'a2a calls'], rows, fmt)
    rows = []
    for method, m in res['methods'].items():
        for h, hop in enumerate(m['hops']):
            rows.append([f'{method} hop {h}', hop['frontier'],
                         hop['remote_fraction'],
                         hop['request_bytes_out'] / 1e3,
                         hop['response_bytes_in'] / 1e3,
                         hop['sampled_edges']])
    _table(['hop', 'frontier', 'remote frac', 'req out kB', 'resp in kB',
            'sampled edges'], rows, fmt)
    for method, m in res['methods'].items():
        wall = m.get('wall_ms_per_batch')
        if wall:
            log(f'[{method}] wall time per batch (slowest rank, median of '
                f'repeats): {wall["median"]:.2f} ms [{wall["min"]:.2f}-'
                f'{wall["max"]:.2f}]')
        phases = {k: v for k, v in (m.get('phase_ms') or {}).items() if v}
        if phases:
            log(f'[{method}] per batch (slowest rank, median ms): ' +
                ', '.join(f'{k} {v["median"]:.2f}'
                          for k, v in sorted(phases.items())) +
                f'; loader {m["loader_ms"]["median"]:.2f}, train '
                f'{m["train_ms"]["median"]:.2f}')
        for dev, pr in (m.get('all_to_all_probe') or {}).items():
            log(f'[{method}] all_to_all on {dev}: {pr["latency_us"]:.0f} us '
                f'(8 B per peer), {pr["mib_per_peer_us"]:.0f} us (1 MiB per '
                f'peer, {pr["gbytes_per_s"]:.2f} GB/s)')
    for method, e in res['errors'].items():
        log(f'[{method}] FAILED: {e}')


# Sweep: the remote fraction of the frontier vs the number of parts ##########
def sweep(args) -> Dict[str, Any]:
    r"""Partitions the graph into every number of parts of
    :obj:`--sweep-parts` and replays, for batches of seeds owned by one part,
    the owner lookup of the collective sampler: which frontier vertices of
    every hop and which rows of the batch are remote, and how many bytes
    the library's exchanges would carry. Batches come from the
    single-machine sampler, whose distribution the distributed sampler
    follows; the frontier of hop h is the set of vertices first reached at
    hop h - 1 (the seeds for hop 0), as in the collective sampler."""
    from torch_geometric.sampler import NodeSamplerInput
    from tqdm import tqdm

    from pyg_orch import HybridNeighborSampler
    from pyg_orch.partition.partitioning import assign_parts, balance, edge_cut

    data, graph = _graph(args)
    N = args.nodes
    row_bytes = _row_bytes(args.dim)
    train = data.train_mask.nonzero().view(-1)
    sampler = HybridNeighborSampler(data, args.fanout, device='cpu',
                                    seed=args.seed)
    cache_rows = args.cache_rows if args.cache_rows is not None else \
        int(args.cache_ratio * N)
    res: Dict[str, Any] = {
        'schema_version': SCHEMA_VERSION, 'kind': 'sweep',
        'created': time.strftime('%Y-%m-%dT%H:%M:%S%z'),
        'command': ' '.join(['python'] + sys.argv),
        'args': {k: v for k, v in vars(args).items()
                 if k not in ('project',)},
        'machine': _machine(), 'graph': graph,
        'row_bytes': row_bytes, 'cache_rows': cache_rows, 'results': {},
        'model': 'frontier / rows owned by another part than the seeds',
    }
    res['git_commit'] = res['machine']['git_commit']
    gen = torch.Generator().manual_seed(args.seed)
    short = set()
    for method in args.methods:
        res['results'][method] = {}
        for k in args.sweep_parts:
            t = time.perf_counter()
            node_part = assign_parts(data.edge_index, N, k, method,
                                     args.seed)
            part_s = time.perf_counter() - t
            entry = {'parts': k, 'edge_cut': edge_cut(data.edge_index,
                                                      node_part),
                     'balance': balance(node_part, k),
                     'partition_s': part_s}
            parts = torch.randperm(k, generator=gen)[:args.sim_parts]
            train_part = node_part[train]
            acc = defaultdict(list)
            peer_requests = torch.zeros(k, dtype=torch.float64)
            desc = f'{method} k={k}'
            for p in tqdm(parts.tolist(), desc=desc, file=sys.stdout,
                          mininterval=2):
                mine = train[train_part == p]
                if mine.numel() == 0:
                    continue

                if mine.numel() < args.batch_size:
                    short.add(k)

                def draw():
                    idx = torch.randperm(mine.numel(), generator=gen)[
                        :args.batch_size]
                    return sampler.sample_from_nodes(
                        NodeSamplerInput(None, mine[idx]))

                # A static cache of this part, as the loader's pre-sampling:
                counts = torch.zeros(N, dtype=torch.int64)
                for _ in range(args.presample):
                    counts += torch.bincount(draw().node, minlength=N)
                counts[node_part == p] = 0
                top = min(cache_rows, int((counts > 0).sum()))
                cached = torch.zeros(N, dtype=torch.bool)
                if top:
                    cached[torch.topk(counts, top).indices] = True
                for _ in range(args.sim_batches):
                    out = draw()
                    _replay(out, node_part, p, cached, acc, peer_requests)
            entry.update(_sweep_entry(acc, row_bytes, peer_requests, k))
            res['results'][method][str(k)] = entry
            log(f'[{method}] k={k}: edge cut {entry["edge_cut"]:.3f}, '
                f'remote frontier per hop '
                f'{[round(h["remote_fraction"], 3) for h in entry["hops"]]}'
                f', remote rows {entry["features"]["remote_fraction"]:.3f}'
                f' (partition {part_s:.1f}s)')
    res['notes'] = [] if not short else [
        f'with {sorted(short)} parts, some parts own fewer training '
        f'vertices than --batch-size: their batches are smaller (use a '
        f'larger graph)']
    for note in res['notes']:
        log('note: ' + note)
    return res


def _replay(out, node_part, p, cached, acc, peer_requests) -> None:
    node, col = out.node, out.col
    owner = node_part[node]
    remote = owner != p
    n_off, e_off = 0, 0
    for h, n_edges in enumerate(out.num_sampled_edges):
        n_nodes = out.num_sampled_nodes[h]
        fr = slice(n_off, n_off + n_nodes)
        e = slice(e_off, e_off + n_edges)
        fr_remote = remote[fr]
        dst_remote = remote[col[e]]
        acc[f'frontier_{h}'].append(n_nodes)
        acc[f'remote_{h}'].append(int(fr_remote.sum()))
        acc[f'edges_{h}'].append(int(n_edges))
        acc[f'remote_edges_{h}'].append(int(dst_remote.sum()))
        peer_requests += torch.bincount(owner[fr][fr_remote],
                                        minlength=peer_requests.numel())
        n_off += n_nodes
        e_off += n_edges
    is_cached = remote & cached[node]
    acc['nodes'].append(int(node.numel()))
    acc['remote_rows_no_cache'].append(int(remote.sum()))
    acc['cached_rows'].append(int(is_cached.sum()))
    acc['remote_rows'].append(int((remote & ~is_cached).sum()))


def _sweep_entry(acc, row_bytes: int, peer_requests, k: int):
    hops = []
    h = 0
    while f'frontier_{h}' in acc:
        fr, rem = _mean(acc[f'frontier_{h}']), _mean(acc[f'remote_{h}'])
        edges, redges = _mean(acc[f'edges_{h}']), _mean(
            acc[f'remote_edges_{h}'])
        hops.append({
            'frontier': fr, 'remote_requests': rem,
            'remote_fraction': rem / fr if fr else 0.0,
            'sampled_edges': edges, 'remote_sampled_edges': redges,
            # As DistributedNeighborSampler: ids out, then per remote
            # vertex a count and per edge a source and an edge id back.
            'request_bytes': rem * ID_BYTES,
            'response_bytes': (rem + 2 * redges) * ID_BYTES,
        })
        h += 1
    nodes = _mean(acc['nodes'])
    no_cache = _mean(acc['remote_rows_no_cache'])
    cached, remote = _mean(acc['cached_rows']), _mean(acc['remote_rows'])
    feats = {'nodes': nodes, 'remote_rows_no_cache': no_cache,
             'remote_fraction': no_cache / nodes if nodes else 0.0,
             'cached_rows': cached, 'remote_rows': remote,
             'cache_hit_rate': cached / no_cache if no_cache else 0.0,
             'request_bytes': remote * ID_BYTES,
             'response_bytes': remote * row_bytes}
    total = float(peer_requests.sum())
    # Requests served by the busiest part over the mean per part (1.0:
    # every part serves as many; the seeds' parts are a sample of all).
    skew = float(peer_requests.max()) * k / total if total else 1.0
    one_way = sum(x['request_bytes'] + x['response_bytes'] for x in hops)
    return {'hops': hops, 'features': feats, 'serve_imbalance': skew,
            'sampling_bytes_per_batch': one_way,
            'feature_bytes_per_batch': feats['request_bytes'] +
            feats['response_bytes'],
            'batches': len(acc['nodes'])}


def print_sweep(res: Dict[str, Any], fmt: str = 'text') -> None:
    rows = []
    for method, by_k in res['results'].items():
        for k, e in by_k.items():
            rows.append([method, int(k), e['edge_cut'], e['balance'],
                         *[h['remote_fraction'] for h in e['hops']],
                         e['features']['remote_fraction'],
                         e['features']['cache_hit_rate'],
                         e['sampling_bytes_per_batch'] / 1e6,
                         e['feature_bytes_per_batch'] / 1e6,
                         e['serve_imbalance'], e['partition_s']])
    num_hops = len(next(iter(next(iter(res['results'].values())).values()))[
        'hops'])
    _table(['method', 'parts', 'edge cut', 'balance'] +
           [f'remote hop {h}' for h in range(num_hops)] +
           ['remote rows', 'cache hit', 'sampling MB', 'features MB',
            'serve imbal.', 'partition s'], rows, fmt)


# The scaling model ##########################################################
# Defaults of the network and links (see docs/scaling.rst for the sources
# of the ranges). Latencies in microseconds, bandwidths in GB/s.
MODEL_DEFAULTS = {
    'net_gbps': 100.0,          # One NIC per machine, Gb/s.
    'net_efficiency': 0.8,      # Achievable share of the line rate.
    'nvlink_gbs': 300.0,        # Per-GPU all-to-all bandwidth in a machine.
    'alpha_net_us': (5.0, 20.0),  # Per message over the network.
    'alpha_nvl_us': (10.0, 30.0),  # Per all_to_all within a machine.
}


def _interp(by_k: Dict[int, float], k: int) -> float:
    r"""The value at :obj:`k` parts, log-linear between measured part counts
    (clamped at the ends)."""
    if k in by_k:
        return by_k[k]
    ks = sorted(by_k)
    if k <= ks[0]:
        return by_k[ks[0]]
    if k >= ks[-1]:
        return by_k[ks[-1]]
    lo = max(x for x in ks if x < k)
    hi = min(x for x in ks if x > k)
    w = (math.log(k) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return by_k[lo] + w * (by_k[hi] - by_k[lo])


def project(run_res: Optional[Dict[str, Any]],
            sweep_res: Optional[Dict[str, Any]],
            gpus: Sequence[int] = (8, 16, 64),
            gpus_per_machine: Sequence[int] = (1, 8),
            net_gbps: float = MODEL_DEFAULTS['net_gbps'],
            net_efficiency: float = MODEL_DEFAULTS['net_efficiency'],
            nvlink_gbs: float = MODEL_DEFAULTS['nvlink_gbs'],
            alpha_net_us: Sequence[float] = MODEL_DEFAULTS['alpha_net_us'],
            alpha_nvl_us: Sequence[float] = MODEL_DEFAULTS['alpha_nvl_us'],
            ) -> List[Dict[str, Any]]:
    r"""Projects the time per batch of DDP training with one graph part per
    GPU to :obj:`gpus` GPUs (model and assumptions: ``docs/scaling.rst``).

    Per GPU and batch: :math:`T = T_{local} + T_{bw} + T_{lat} + T_{ar}`,
    with :math:`T_{local}` the measured time outside :obj:`all_to_all`
    (constant: the batch size per GPU is); :math:`T_{bw}` the exchanged
    bytes (one way; the exchange is symmetric) over the machine's network
    link, shared by its GPUs, and over NVLink; :math:`T_{lat}` the
    :obj:`all_to_all` rounds times a per-round latency that grows with the
    peers reached over the network; :math:`T_{ar}` the gradient
    all-reduce. Exchanged bytes at :math:`k` parts are the measured bytes
    scaled by the sweep's ratio :math:`V(k) / V(W)`, or the sweep's own
    bytes without a run. Two latency cases: the low and high ends of
    :obj:`alpha_net_us` and :obj:`alpha_nvl_us`.
    """
    if sweep_res is None and run_res is None:
        raise ValueError('project needs a run result, a sweep result or both')
    rows = []
    methods = list((sweep_res or run_res)['results' if sweep_res
                                          else 'methods'])
    net_Bps = net_gbps / 8 * 1e9 * net_efficiency
    nvl_Bps = nvlink_gbs * 1e9
    for method in methods:
        m = run_res['methods'].get(method) if run_res else None
        if run_res is not None and m is None:
            continue
        W = run_res['args']['world_size'] if run_res else None
        sw = sweep_res['results'].get(method) if sweep_res else None
        vol_k: Dict[int, float] = {}
        if sw:
            vol_k = {int(k): e['sampling_bytes_per_batch'] +
                     e['feature_bytes_per_batch'] for k, e in sw.items()}
            vol_k[1] = 0.0
        if m is not None:
            b = m['bytes_per_batch']
            # One way: what this GPU sends (requests + served responses).
            v_run = (b['sampling_out'] + b['features_out'] +
                     b['sampling_in'] + b['features_in']) / 2
            t_batch = m['time_per_batch_ms']['median']
            t_comm = m['comm_ms']['median']
            t_local = t_batch - t_comm
            rounds = m['all_to_all_calls_per_batch']
            params = run_res['model']['num_params']
        else:
            v_run = t_batch = t_comm = t_local = None
            args = sweep_res['args']
            hops = len(args['fanout'])
            rounds = 4 * hops + 2 * 3  # 2 exchanges a hop; ids, x, y.
            params = sage_num_params(args['dim'], args['hidden'], hops,
                                     args['classes'])
        grad_bytes = 4 * params

        def volume(k: int) -> float:
            if k <= 1:
                return 0.0
            if vol_k and v_run is not None and W in vol_k and vol_k[W]:
                return v_run * _interp(vol_k, k) / vol_k[W]
            if vol_k:
                return _interp(vol_k, k)
            # No sweep: random-partition scaling of the measured volume.
            return v_run * ((k - 1) / k) / ((W - 1) / W)

        for k in gpus:
            for G in gpus_per_machine:
                if k % G:
                    continue
                M = k // G
                V = volume(k)
                if G == 1:
                    v_net = V
                elif method == 'random' or not vol_k:
                    v_net = V * (k - G) / (k - 1)
                else:  # Two-level: a METIS part per machine, split
                    # again per GPU: what leaves the machine is what
                    # leaves a part of M.
                    v_net = min(V, volume(M))
                v_nvl = V - v_net
                t_bw = G * v_net / net_Bps + v_nvl / nvl_Bps
                ar_bytes = 2 * (M - 1) / M * grad_bytes if M > 1 else 0.0
                t_ar_bw = ar_bytes / net_Bps + (
                    2 * (G - 1) / G * grad_bytes / nvl_Bps if G > 1 else 0)
                cases = {}
                for name, a_net, a_nvl in (('low', alpha_net_us[0],
                                            alpha_nvl_us[0]),
                                           ('high', alpha_net_us[-1],
                                            alpha_nvl_us[-1])):
                    peers_net = k - G
                    per_round = (a_nvl if G > 1 else a_net) + \
                        peers_net * a_net
                    t_lat = rounds * per_round * 1e-6
                    # The all-reduce: a tree over the machines (latency
                    # 2 log2 M), NVLink inside.
                    t_ar = t_ar_bw + ((2 * math.log2(M) * a_net
                                       if M > 1 else 0.0) +
                                      (a_nvl if G > 1 else 0.0)) * 1e-6
                    comm_ms = (t_bw + t_lat + t_ar) * 1e3
                    total = None if t_local is None else t_local + comm_ms
                    cases[name] = {
                        'latency_ms': t_lat * 1e3,
                        'allreduce_ms': t_ar * 1e3,
                        'comm_ms': comm_ms,
                        'time_per_batch_ms': total,
                        'efficiency': None if total is None else
                        t_local / total,
                    }
                rows.append({
                    'method': method, 'gpus': k, 'gpus_per_machine': G,
                    'machines': M, 'bytes_per_gpu': V,
                    'network_bytes_per_gpu': v_net,
                    'nvlink_bytes_per_gpu': v_nvl,
                    'bandwidth_ms': t_bw * 1e3, 'rounds': rounds,
                    'local_ms': t_local, 'cases': cases,
                })
    return rows


def print_projection(rows: List[Dict[str, Any]], fmt: str = 'text') -> None:
    headers = ['method', 'GPUs', 'GPUs/machine', 'MB/GPU', 'net MB/GPU',
               'bw ms', 'lat ms (lo-hi)', 'all-reduce ms', 'comm ms (lo-hi)',
               'local ms', 'ms/batch (lo-hi)', 'efficiency']
    table = []
    for r in rows:
        lo, hi = r['cases']['low'], r['cases']['high']

        def rng(a, b, f='{:.2f}'):
            if a is None:
                return 'TBD(h200-x2)'
            return f'{f.format(a)}-{f.format(b)}'
        table.append([
            r['method'], r['gpus'], r['gpus_per_machine'],
            f"{r['bytes_per_gpu'] / 1e6:.2f}",
            f"{r['network_bytes_per_gpu'] / 1e6:.2f}",
            f"{r['bandwidth_ms']:.2f}",
            rng(lo['latency_ms'], hi['latency_ms']),
            rng(lo['allreduce_ms'], hi['allreduce_ms']),
            rng(lo['comm_ms'], hi['comm_ms']),
            'TBD(h200-x2)' if r['local_ms'] is None else
            f"{r['local_ms']:.2f}",
            rng(lo['time_per_batch_ms'], hi['time_per_batch_ms']),
            rng(hi['efficiency'], lo['efficiency'], '{:.2f}'),
        ])
    _table(headers, table, fmt)


# Entry point ################################################################
def float_pair(text: str):
    r"""Parses :obj:`'low,high'` (or one number) into a pair of floats."""
    try:
        values = [float(v) for v in text.split(',') if v.strip()]
    except ValueError:
        values = []
    if len(values) not in (1, 2):
        raise argparse.ArgumentTypeError(
            f"expected 'low,high' or one number (got {text!r})")
    return (values[0], values[-1])


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split('\n\n', 1)[1])
    g = p.add_argument_group('graph and sampling')
    g.add_argument('--nodes', type=int, default=20_000)
    g.add_argument('--edges', type=int, default=200_000)
    g.add_argument('--dim', type=int, default=100, help='features')
    g.add_argument('--classes', type=int, default=47)
    g.add_argument('--fanout', type=int_list, default=[15, 10, 5])
    g.add_argument('--batch-size', type=int, default=1024)
    g.add_argument('--methods', default='metis,random',
                   help='comma-separated: metis, random, contiguous')
    g.add_argument('--cache-ratio', type=float, default=0.1,
                   help='remote rows cached per rank, as a share of the '
                   'graph\'s vertices (ignored with --cache-rows)')
    g.add_argument('--cache-rows', type=int, default=None)
    g.add_argument('--presample', type=int, default=8,
                   help='batches pre-sampled to fill the cache')
    g.add_argument('--cache-ranking', choices=('frequency', 'degree'),
                   default='frequency',
                   help="which remote rows the cache holds: the most read "
                   "in pre-sampled batches, or the sources of the most "
                   "in-edges of the part's vertices")
    g.add_argument('--seed', type=int, default=0)
    r = p.add_argument_group('run')
    r.add_argument('--world-size', type=int, default=2)
    r.add_argument('--ranks-per-part', type=int, default=1,
                   help='ranks that share each part, as the GPUs of one '
                   'machine (LOCAL_WORLD_SIZE): --world-size x this many '
                   'processes')
    r.add_argument('--topology', choices=('auto', 'sharded'), default='auto',
                   help="'sharded': split each part's neighbor lists across "
                   "the ranks that share it (needs --ranks-per-part > 1)")
    r.add_argument('--feature-placement', choices=('auto', 'sharded'),
                   default='auto',
                   help="'sharded': split each part's feature rows across "
                   "the ranks that share it, on --feature-device (needs "
                   "--ranks-per-part > 1)")
    r.add_argument('--backend', choices=('gloo', 'nccl'), default='gloo')
    r.add_argument('--sampling-device', choices=('cpu', 'cuda'),
                   default='cpu',
                   help="where each rank samples: 'cpu' over the "
                   "memory-mapped part, or 'cuda' (rank r on cuda:r; under "
                   "gloo on GPU r %% the GPUs, which ranks may share) over a "
                   "copy of its topology (default: %(default)s)")
    r.add_argument('--feature-device', choices=('cpu', 'cuda'),
                   default='cpu',
                   help="where each rank reads and serves its feature rows: "
                   "'cpu' from the memory-mapped part, or 'cuda' (as "
                   "--sampling-device) from a copy of its features (default: "
                   "%(default)s)")
    r.add_argument('--train-device', choices=('cpu', 'cuda'), default='cpu',
                   help="with --backend gloo: where batches land and the "
                   "model trains ('cuda': rank r on GPU r %% the GPUs)")
    r.add_argument('--prefetch', type=int, default=0,
                   help='batches built ahead by a thread '
                   '(HybridNeighborLoader(prefetch=...)); per-phase '
                   'times are not recorded then')
    r.add_argument('--num-workers', type=int, default=0,
                   help='threads that build batches '
                   '(HybridNeighborLoader(num_workers=...)); per-phase '
                   'times are not recorded then')
    r.add_argument('--batches', type=int, default=10)
    r.add_argument('--warmup', type=int, default=3)
    r.add_argument('--repeats', type=int, default=3)
    r.add_argument('--train', action='store_true',
                   help='train GraphSAGE with DDP on every batch')
    r.add_argument('--hidden', type=int, default=256)
    r.add_argument('--offload', default=None,
                   help="with --train: wrap the model in BottomLayerOffload "
                   "per rank, 'default' (decided by measurement: give "
                   "enough --warmup steps) or a hot ratio of the rank's "
                   "part (default: no offload)")
    r.add_argument('--threads', type=int, default=None,
                   help='torch threads per rank (default: cores / ranks)')
    r.add_argument('--timeout', type=float, default=120.0,
                   help='process group timeout, seconds')
    r.add_argument('--run-timeout', type=float, default=3600.0,
                   help='bound on each method\'s ranks, seconds')
    r.add_argument('--work-dir', default=None,
                   help='where partitions are written (kept); default: a '
                   'temporary folder, removed')
    r.add_argument('--probe-rounds', type=int, default=50,
                   help='timed all_to_all calls of 8 B and 1 MiB per peer, '
                   'per transport, before the loader (0: none)')
    r.add_argument('--fail-rank', type=int, default=-1,
                   help='testing: this rank exits abruptly after the warm-up '
                   '(the run must record an error, not hang)')
    r.add_argument('--keep-batches', action='store_true',
                   help='save every timed batch\'s record in the JSON')
    s = p.add_argument_group('sweep')
    s.add_argument('--sweep-parts', type=int_list, default=None)
    s.add_argument('--sim-parts', type=int, default=4,
                   help='parts whose seeds are simulated per part count')
    s.add_argument('--sim-batches', type=int, default=8,
                   help='measured batches per simulated part')
    m = p.add_argument_group('projection')
    m.add_argument('--project', nargs='+', default=None, metavar='JSON',
                   help='run results (their methods merged) and / or a '
                   'sweep result')
    m.add_argument('--show', nargs='+', default=None, metavar='JSON',
                   help='print the tables of run or sweep results (with '
                   '--format rst: for the docs)')
    m.add_argument('--project-gpus', type=int_list, default=[8, 16, 64])
    m.add_argument('--gpus-per-machine', type=int_list, default=[1, 8])
    m.add_argument('--net-gbps', type=float,
                   default=MODEL_DEFAULTS['net_gbps'])
    m.add_argument('--net-efficiency', type=float,
                   default=MODEL_DEFAULTS['net_efficiency'])
    m.add_argument('--nvlink-gbs', type=float,
                   default=MODEL_DEFAULTS['nvlink_gbs'])
    m.add_argument('--alpha-net-us', type=float_pair,
                   default=MODEL_DEFAULTS['alpha_net_us'],
                   help='latency per network message, low,high (us)')
    m.add_argument('--alpha-nvl-us', type=float_pair,
                   default=MODEL_DEFAULTS['alpha_nvl_us'],
                   help='latency of an all_to_all inside a machine, '
                   'low,high (us)')
    m.add_argument('--format', choices=('text', 'rst'), default='text')
    p.add_argument('--out', default=None, help='the JSON result')
    return p


def main(argv=None) -> None:
    p = _parser()
    args = p.parse_args(argv)
    args.methods = [m for m in args.methods.replace(' ', '').split(',') if m]
    for m in args.methods:
        if m not in ('metis', 'random', 'contiguous'):
            p.error(f'--methods: unknown method {m!r}')
    if args.ranks_per_part < 1:
        p.error('--ranks-per-part must be at least 1')
    if args.topology == 'sharded' and args.ranks_per_part < 2:
        p.error("--topology sharded needs --ranks-per-part of 2 or more "
                "(the ranks that share a part split its neighbor lists)")
    if args.feature_placement == 'sharded' and args.ranks_per_part < 2:
        p.error("--feature-placement sharded needs --ranks-per-part of 2 or "
                "more (the ranks that share a part split its rows)")
    if args.show:
        for path in args.show:
            with open(path) as f:
                res = json.load(f)
            log(f'{path}:')
            (print_sweep if res.get('kind') == 'sweep' else print_run)(
                res, args.format)
        return
    if args.project:
        run_res = sweep_res = None
        for path in args.project:
            with open(path) as f:
                res = json.load(f)
            if res.get('kind') == 'sweep':
                sweep_res = res
            elif run_res is None:
                run_res = res
            else:  # Runs of other methods (e.g. one per command).
                for key in ('methods', 'partitions'):
                    run_res[key].update(res[key])
        rows = project(run_res, sweep_res, args.project_gpus,
                       args.gpus_per_machine, args.net_gbps,
                       args.net_efficiency, args.nvlink_gbs,
                       args.alpha_net_us, args.alpha_nvl_us)
        print_projection(rows, args.format)
        return
    if args.threads is None:
        args.threads = max(1, (os.cpu_count() or 1) // _processes(args))
    if args.sweep_parts:
        res = sweep(args)
        print_sweep(res)
        _write_json(_out_path(args, 'sweep'), res)
        return
    if args.world_size < 1 or _processes(args) < 2:
        p.error('--world-size x --ranks-per-part must be at least 2 (e.g. '
                '--world-size 1 --ranks-per-part 2: one part shared by 2 '
                'ranks of one machine)')
    res = run(args)
    print_run(res)
    _write_json(_out_path(args, 'run'), res)
    if res['errors']:
        sys.exit(1)


if __name__ == '__main__':
    main()
