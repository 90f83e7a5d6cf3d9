"""Training on one vs several GPUs of one machine, with replicated or
sharded topology and feature cache (``topology_placement='sharded'``).

One process per GPU (``torch.multiprocessing``, NCCL, DDP), the same batch
size per GPU. Every configuration trains GraphSAGE for ``--warmup`` steps,
then ``--repeats`` times ``--batches`` steps; seeds per second are the
machine's (all ranks) and the figure is the median of the repeats. Sampling
alone is timed per batch with replicated and sharded topology. Reported per
configuration: NVLink (peer), host-link and local bytes per batch, GPU
memory per tier, and each process's resident host memory.

    python benchmarks/bench_multi_gpu.py --gpus 2 --out results.json
    python benchmarks/bench_multi_gpu.py --gpus 2 --scale  # 100M nodes, 1B edges
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench_common import (  # noqa: E402
    PRESETS,
    adam,
    add_compile_args,
    add_preset_args,
    apply_preset,
    compile_model,
    log,
    machine_info,
)

from pyg_orch.multigpu import MULTICAST_OFF_ENV  # noqa: E402

def _rss() -> dict:
    out = {}
    with open('/proc/self/status') as f:
        for line in f:
            key = line.split(':')[0]
            if key in ('VmRSS', 'RssAnon', 'RssFile', 'RssShmem'):
                out[key + '_mb'] = int(line.split()[1]) / 1024
    return out


def _configs(world: int, scale: bool):
    # name, topology placement, features ('gpu', 'host', 'sharded', 'all')
    out = []
    if not scale:
        out.append(('features_on_gpu', 'device', 'gpu'))
    out.append(('host_features_cache', 'device', 'host'))
    if world > 1:
        if not scale:
            out.append(('sharded_topology_features_on_gpu', 'sharded',
                        'gpu'))
        out.append(('sharded_topology_sharded_cache', 'sharded', 'host'))
        if scale:
            out.append(('sharded_all_in_gpu_memory', 'sharded', 'all'))
    return out


def _compare_sampling(samplers, batches, warmup, rounds, dev,
                      warmup_s=1.0, pass_repeats=3):
    # Milliseconds per batch for each sampler, one figure per round. The
    # samplers take turns, in an order rotated every round, and all ranks
    # time the same sampler at once (a barrier before each pass), as in
    # training; every sampler first runs `warmup` batches and `warmup_s`
    # seconds of sampling (an idle GPU runs at a low clock for the first
    # few hundred milliseconds, which favoured whichever sampler ran
    # later). A pass is the timed batches `pass_repeats` times over.
    import torch.distributed as dist
    from torch_geometric.sampler import NodeSamplerInput

    def run(sampler, seeds):
        for b in seeds:
            sampler.sample_from_nodes(NodeSamplerInput(None, b))

    timed = list(batches[warmup:]) * pass_repeats
    for sampler in samplers.values():
        run(sampler, batches[:warmup])
        torch.cuda.synchronize(dev)
        start = time.perf_counter()
        while time.perf_counter() - start < warmup_s:
            run(sampler, batches[warmup:])
            torch.cuda.synchronize(dev)
    names = list(samplers)
    ms = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            torch.cuda.synchronize(dev)
            dist.barrier()
            t = time.perf_counter()
            run(samplers[name], timed)
            torch.cuda.synchronize(dev)
            ms[name].append((time.perf_counter() - t) * 1e3 / len(timed))
    return ms


def _split_sampling(rank, data, parts, args, fanout, dev):
    # Sampling alone with this rank's seeds in its own part of `parts`:
    # replicated topology, shards by ranges, shards by the partition.
    from pyg_orch import HybridNeighborSampler
    from pyg_orch.multigpu import TopologySharding
    out = {}
    for split, node_parts in parts.items():
        own = (node_parts == rank).nonzero().view(-1)
        gen = torch.Generator().manual_seed(2)
        own = own[torch.randperm(own.numel(), generator=gen)]
        n = (args.warmup + args.batches) * args.batch_size
        batches = own[:n].view(-1, args.batch_size)
        samplers = {
            name: HybridNeighborSampler(data, fanout, device=dev,
                                        topology_placement=placement,
                                        seed=rank)
            for name, placement in (
                ('replicated', 'device'), ('ranges', 'sharded'),
                (split, TopologySharding(split_by=node_parts)))}
        for sampler in samplers.values():
            if sampler.topology.is_sharded:
                sampler.topology.reset_read_counts()
        ms = _compare_sampling(samplers, batches, args.warmup,
                               args.sampling_rounds, dev)
        runs = {name: {'ms_per_batch': ms[name],
                       'topology_reads': sampler.topology.read_counts()
                       if sampler.topology.is_sharded else None}
                for name, sampler in samplers.items()}
        del samplers
        out[split] = {'seeds_in_own_part': int(own.numel()), 'runs': runs}
    return out


def _worker(rank, world, port, data, args, out_dir, parts=None):
    os.environ.update(MULTICAST_OFF_ENV)
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port),
                      LOCAL_WORLD_SIZE=str(world))
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch_geometric.nn import GraphSAGE
    from pyg_orch import (
        CacheOptions,
        HybridNeighborLoader,
        HybridNeighborSampler,
        PlacementOptions,
    )

    torch.cuda.set_device(rank)
    dev = torch.device('cuda', rank)
    dist.init_process_group('nccl', rank=rank, world_size=world,
                            device_id=dev)
    torch.backends.cuda.matmul.allow_tf32 = True
    fanout = [int(k) for k in args.fanout.split(',')]
    N, F = data.x.shape
    row_bytes = F * data.x.element_size()
    steps = args.steps
    gen = torch.Generator().manual_seed(1)
    seeds = torch.randperm(N, generator=gen)[:world * steps *
                                             args.batch_size]
    mine = seeds.view(world, -1)[rank]  # Equal counts on every rank.
    res = {'rank': rank, 'world': world, 'configs': {}}
    x_gpu = y_gpu = ei_gpu = None
    if not data.x.is_pinned():
        # The parent's shared features, pinned in place: every feature
        # store reads them there (a store would copy unpinned rows into
        # pinned memory: 51 GB per rank and per configuration at --scale).
        from pyg_orch.parallel.peer_memory import register_pinned
        t = time.perf_counter()
        register_pinned(data.x)
        res['pin_s'] = time.perf_counter() - t
    topo = None  # Built once from edge_index, shared by the loaders.

    for name, placement, feats in _configs(world, args.scale):
        torch.cuda.reset_peak_memory_stats(dev)
        if feats == 'gpu':
            if x_gpu is None:
                x_gpu = data.x.to(dev)
            if y_gpu is None:  # The whole graph on the GPU.
                y_gpu = data.y.to(dev)
                ei_gpu = data.edge_index.to(dev)
            d = type(data)(x=x_gpu, y=y_gpu, edge_index=ei_gpu, num_nodes=N)
            cache = CacheOptions()
        else:
            d = data
            budget = int(args.cache_ratio * N) * row_bytes
            if feats == 'all':
                budget = (N + world - 1) // world * row_bytes
            cache = CacheOptions(gpu_memory_budget=budget)
        t = time.perf_counter()
        loader = HybridNeighborLoader(
            d, fanout, input_nodes=mine, batch_size=args.batch_size,
            shuffle=False, device=dev,
            placement=PlacementOptions(topology=placement), cache=cache,
            seed=rank, lookahead=True,
            topology=topo if feats != 'gpu' else None)
        build_s = time.perf_counter() - t
        if topo is None and feats != 'gpu' and \
                not loader.topology.is_sharded:
            topo = loader.topology
        log(f'rank {rank}: {name}: loader built in {build_s:.1f}s')
        model = GraphSAGE(F, args.hidden, len(fanout),
                          int(data.y.max()) + 1).to(dev)
        ddp = DistributedDataParallel(model, device_ids=[rank])
        opt = adam(ddp.parameters(), args.fused_adam)
        if args.compile != 'none':  # DDP compiled as a whole, as PyTorch
            ddp = compile_model(ddp, args.compile)  # recommends.
        it = iter(loader)
        times = []

        def step():
            batch = next(it)
            opt.zero_grad()
            kw = dict(num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                      num_sampled_edges_per_hop=batch.num_sampled_edges
                      ) if args.trim else {}
            out = ddp(batch.x, batch.edge_index, **kw)[:batch.batch_size]
            loss = torch.nn.functional.cross_entropy(
                out, batch.y[:batch.batch_size].to(dev))
            loss.backward()
            opt.step()

        for _ in range(args.warmup):
            step()
        loader.reset_stats()
        for _ in range(args.repeats):
            torch.cuda.synchronize(dev)
            dist.barrier()
            t = time.perf_counter()
            for _ in range(args.batches):
                step()
            torch.cuda.synchronize(dev)
            dist.barrier()
            times.append(time.perf_counter() - t)
        stats = loader.stats()
        nb = args.repeats * args.batches
        feat = stats['features'] or {}
        reads = stats.get('topology_reads') or {}
        csc = loader.topology.csc[None]  # Not `topo`: shared by loaders.
        edge_bytes = csc.row.element_size() + (
            0 if csc.edge_id is None else csc.edge_id.element_size())
        mem = {'feature_cache': stats['memory']['feature_cache_bytes']}
        if csc.is_sharded:
            mem.update({f'topology_{k}': v for k, v in csc.memory().items()})
        else:
            mem['topology'] = stats['memory']['topology_bytes']
        if feats == 'gpu':
            mem['features_on_gpu'] = x_gpu.numel() * x_gpu.element_size()
        mem['max_allocated'] = torch.cuda.max_memory_allocated(dev)
        res['configs'][name] = {
            'seconds': times,
            'seeds_per_s': [world * args.batch_size * args.batches / s
                            for s in times],
            'build_s': build_s,
            'bytes_per_batch': {
                'host_features': feat.get('h2d_bytes_per_batch', 0.0),
                'peer_features': feat.get('peer_bytes_per_batch', 0.0),
                'local_cache_features': feat.get('cache_rows', 0) *
                row_bytes / nb,
                'peer_topology': reads.get('peer', 0) * edge_bytes / nb,
                'local_topology': (reads.get('local', 0) +
                                   reads.get('replicated', 0)) *
                edge_bytes / nb,
            },
            'stages_ms_per_batch': {
                k: v['ms_per_batch'] for k, v in stats['stages'].items()
            },
            'gpu_memory_bytes': mem,
            'host_rss': _rss(),
        }
        del it, loader, ddp, model, opt
        import gc
        gc.collect()
        torch.cuda.empty_cache()
        empty_host = getattr(torch._C, '_host_emptyCache', None)
        if empty_host is not None:  # Pinned copies go back to the OS.
            empty_host()

    # Sampling alone, replicated vs sharded topology:
    if not args.scale or world > 1:
        samplers = {
            placement: HybridNeighborSampler(data, fanout, device=dev,
                                             topology_placement=placement,
                                             seed=rank)
            for placement in (['device', 'sharded'] if world > 1 else
                              ['device'])}
        batches = mine[:(args.warmup + args.batches) *
                       args.batch_size].view(-1, args.batch_size)
        res['sampling_ms_per_batch'] = _compare_sampling(
            samplers, batches, args.warmup, args.sampling_rounds, dev)
        del samplers
    if parts and world > 1:
        res['split_sampling'] = _split_sampling(rank, data, parts, args,
                                                fanout, dev)
    with open(os.path.join(out_dir, f'{world}_{rank}.json'), 'w') as f:
        json.dump(res, f)
    dist.destroy_process_group()


def _graph(args):
    from pyg_orch.datasets import power_law_graph

    dev = torch.device('cuda', 0)
    t = time.perf_counter()
    data = power_law_graph(args.num_nodes, args.num_edges,
                           num_features=0 if args.scale else
                           args.num_features, num_classes=47, device=dev,
                           seed=0, index_dtype=torch.int32 if args.scale
                           else torch.int64)
    data.edge_index = data.edge_index.cpu()
    data.y = data.y.cpu()
    N = args.num_nodes
    if args.scale:
        x = torch.empty((N, args.num_features), dtype=torch.float32)
        chunk = 4_000_000
        for a in range(0, N, chunk):
            b = min(a + chunk, N)
            x[a:b].copy_(torch.randn(b - a, args.num_features, device=dev))
        data.x = x
    else:
        data.x = data.x.cpu()
    for k in ('train_mask', 'val_mask', 'test_mask'):
        if k in data:
            del data[k]
    torch.cuda.synchronize()
    log(f'graph generated in {time.perf_counter() - t:.1f}s')
    for k in ('x', 'y', 'edge_index'):
        data[k].share_memory_()
    torch.cuda.empty_cache()
    return data, time.perf_counter() - t


def _median(values):
    return {'median': statistics.median(values), 'min': min(values),
            'max': max(values)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    add_preset_args(p)
    p.add_argument('--scale', action='store_true',
                   help='100M nodes, 1B edges, 128 features')
    p.add_argument('--gpus', type=int, default=2)
    p.add_argument('--fanout', default='15,10,5')
    p.add_argument('--batch-size', type=int, default=1024)
    p.add_argument('--hidden', type=int, default=256)
    p.add_argument('--batches', type=int, default=30)
    p.add_argument('--warmup', type=int, default=5)
    p.add_argument('--repeats', type=int, default=3)
    p.add_argument('--cache-ratio', type=float, default=0.1)
    p.add_argument('--worlds', default='',
                   help="comma-separated GPU counts to run (default: 1 and "
                   "--gpus); e.g. '2' skips the one-GPU run")
    p.add_argument('--sampling-rounds', type=int, default=7,
                   help='passes per sampler when timing sampling alone '
                   '(samplers take turns)')
    p.add_argument('--split-by', default='',
                   help="comma-separated partitions ('metis', 'random') to "
                   "shard the topology by, besides ranges: sampling alone, "
                   "each rank's seeds in its own part")
    p.add_argument('--trim', action='store_true',
                   help="train with PyG's trim_to_layer (the fastest plain "
                   "configuration)")
    add_compile_args(p, 'the DDP model (as a whole)')
    p.add_argument('--out', default=None)
    args = p.parse_args()
    args.num_nodes = args.num_edges = None
    apply_preset(args, 'num_nodes', 'num_edges')
    args.num_features = 100
    if args.scale:
        for k, v in PRESETS['scale'].items():
            setattr(args, k, v)
    args.steps = steps = args.warmup + args.repeats * args.batches
    if args.gpus * steps * args.batch_size > args.num_nodes:
        # Every rank's seeds are distinct nodes, one batch per step.
        p.error(f'{args.gpus} GPUs x {steps} steps (--warmup + --repeats x '
                f'--batches) x --batch-size {args.batch_size} seeds exceed '
                f'the graph\'s {args.num_nodes} nodes; take fewer steps or a '
                'larger preset')
    try:
        worlds = sorted({int(w) for w in args.worlds.split(',')} if
                        args.worlds else {1, args.gpus})
    except ValueError:
        p.error(f"--worlds must be comma-separated GPU counts (got "
                f"{args.worlds!r})")
    if worlds[0] < 1 or worlds[-1] > args.gpus:
        p.error(f'--worlds must lie in 1..--gpus ({args.gpus}); got '
                f'{args.worlds!r}')
    os.environ.update(MULTICAST_OFF_ENV)
    import torch.multiprocessing as mp

    res = {'machine': machine_info(), 'config': vars(args)}
    data, res['generate_s'] = _graph(args)
    parts = {}
    for split in filter(None, args.split_by.split(',')):
        from pyg_orch.partition.partitioning import assign_parts, edge_cut
        t = time.perf_counter()
        parts[split] = assign_parts(data.edge_index, args.num_nodes,
                                    args.gpus, split).share_memory_()
        res.setdefault('partitions', {})[split] = {
            'seconds': time.perf_counter() - t,
            'edge_cut': edge_cut(data.edge_index, parts[split])}
        log(f'{split}: {res["partitions"][split]}')
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for world in worlds:
            log(f'{world} GPU(s) ...')
            t = time.perf_counter()
            mp.spawn(_worker, args=(world, 29600 + world, data, args, tmp,
                                    parts), nprocs=world, join=True)
            log(f'{world} GPU(s) done in {time.perf_counter() - t:.1f}s')
            runs[world] = [
                json.load(open(os.path.join(tmp, f'{world}_{r}.json')))
                for r in range(world)
            ]
    res['runs'] = runs
    summary = {}
    for world, ranks in runs.items():
        for name, c in ranks[0]['configs'].items():
            summary[f'{world}gpu/{name}'] = {
                'seeds_per_s': _median(c['seeds_per_s']),
                'bytes_per_batch': c['bytes_per_batch'],
                'gpu_memory_bytes': c['gpu_memory_bytes'],
                'host_rss_mb_per_rank': [r['configs'][name]['host_rss']
                                         for r in ranks],
            }
        for placement, ms in ranks[0].get('sampling_ms_per_batch',
                                          {}).items():
            summary[f'{world}gpu/sampling_{placement}_ms'] = _median(ms)
    one, many = summary, args.gpus
    ratios = {}
    for name in ('features_on_gpu', 'host_features_cache'):
        a, b = one.get(f'1gpu/{name}'), one.get(f'{many}gpu/{name}')
        if a and b:
            ratios[f'{many}v1/{name}'] = (b['seeds_per_s']['median'] /
                                          a['seeds_per_s']['median'])
    for name in ('sharded_topology_features_on_gpu',
                 'sharded_topology_sharded_cache',
                 'sharded_all_in_gpu_memory'):
        b = one.get(f'{many}gpu/{name}')
        if not b:
            continue
        for base in ('features_on_gpu', 'host_features_cache'):
            a = one.get(f'{many}gpu/{base}')
            if a:
                ratios[f'{many}gpu/{name}_vs_{base}'] = (
                    b['seeds_per_s']['median'] / a['seeds_per_s']['median'])
        a = one.get('1gpu/host_features_cache')
        if a:
            ratios[f'{many}gpu/{name}_vs_1gpu_host'] = (
                b['seeds_per_s']['median'] / a['seeds_per_s']['median'])
    for split, c in runs.get(many, [{}])[0].get('split_sampling',
                                                 {}).items():
        ms = {name: _median(r['ms_per_batch'])
              for name, r in c['runs'].items()}
        summary[f'{many}gpu/split_by_{split}_sampling_ms'] = ms
        reads = {name: r['topology_reads']
                 for name, r in c['runs'].items() if r['topology_reads']}
        summary[f'{many}gpu/split_by_{split}_local_read_fraction'] = {
            name: r['local'] / max(r['local'] + r['peer'], 1)
            for name, r in reads.items()}
        ratios[f'sampling_split_by_{split}_over_ranges'] = (
            ms[split]['median'] / ms['ranges']['median'])
    s = one.get(f'{many}gpu/sampling_sharded_ms')
    d = one.get(f'{many}gpu/sampling_device_ms')
    if s and d:
        ratios['sampling_sharded_over_replicated'] = (s['median'] /
                                                      d['median'])
    res['summary'], res['ratios'] = summary, ratios
    log(json.dumps({'summary': summary, 'ratios': ratios}, indent=1))
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(res, f, indent=1)


if __name__ == '__main__':
    main()
