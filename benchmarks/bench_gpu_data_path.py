"""GPU data path benchmark (one run, one JSON): sampling rate of the fused
Triton kernels (topology on the GPU or in pinned host memory) and of the
PyTorch path; end-to-end GraphSAGE training with features on the GPU, with
features in host memory and a GPU cache, and with PyG's NeighborLoader; and
the compute-only bound (the same kind of batches materialized on the GPU
beforehand, only forward and backward timed).

GPU box (H100):

    python benchmarks/bench_gpu_data_path.py                 # 2.4M / 120M
    python benchmarks/bench_gpu_data_path.py --scale         # 100M / 1B

PyG's loader is included when ``torch_sparse`` imports (carry the wheels of
``../shared/wheels/device-*`` and put them on ``PYTHONPATH``).
"""
import argparse
import gc
import itertools
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torch_geometric.nn import GraphSAGE  # noqa: E402
from torch_geometric.sampler import NodeSamplerInput  # noqa: E402

from pyg_orch import CacheOptions, PlacementOptions  # noqa: E402
from pyg_orch import HybridNeighborLoader, HybridNeighborSampler  # noqa
from pyg_orch.datasets import power_law_graph  # noqa: E402
from pyg_orch.features.tiered import TieredFeatureStore
from pyg_orch.sampling.presample import count_node_access  # noqa: E402
from pyg_orch.topology.graph import GraphTopology
from _bench_common import (  # noqa: E402
    PRESETS,
    add_compile_args,
    adam,
    compile_model,
    describe_preset,
    dynamo_graphs,
    log,
    machine_info,
    release_workers,
)


def sync():
    torch.cuda.synchronize()


def time_sampling(sampler, seeds, warmup, rounds=5, warmup_s=1.0,
                  pass_repeats=3):
    # Each batch is waited for (no overlap between batches). The median of
    # `rounds` passes, each `pass_repeats` times over the timed batches,
    # after `warmup` batches and then `warmup_s` seconds of sampling: an
    # idle GPU runs at a low clock and takes a few hundred milliseconds of
    # load to reach its steady one (an H100 went from 0.69 to 0.49 ms per
    # batch over its first three ~30 ms passes), which training, sampling
    # all the time, does not see. Passes of ~60 ms rather than ~20 ms: a
    # slow spell of ~100 ms once spanned four of five short passes.
    for s in seeds[:warmup]:  # Compiles the kernels, captures the graphs.
        sampler.sample_from_nodes(NodeSamplerInput(None, s))
    sync()
    start, i = time.perf_counter(), 0
    while time.perf_counter() - start < warmup_s:
        sampler.sample_from_nodes(NodeSamplerInput(None, seeds[i % warmup]))
        i += 1
    sync()
    warmup_batches = warmup + i
    timed = seeds[warmup:] * pass_repeats
    passes = []
    for _ in range(rounds):
        start, edges = time.perf_counter(), 0
        for s in timed:
            out = sampler.sample_from_nodes(NodeSamplerInput(None, s))
            edges += out.row.numel()
        sync()
        passes.append((time.perf_counter() - start, edges))
    sec, edges = sorted(passes)[len(passes) // 2]
    n = len(timed)
    return {'ms_per_batch': 1e3 * sec / n, 'edges_per_s': edges / sec,
            'edges_per_batch': edges / n, 'batches_per_pass': n,
            'edges_per_s_passes': [e / t for t, e in passes],
            'warmup_batches': warmup_batches, 'warmup_s': warmup_s}


TRIM = True


def batch_args(b):
    nodes = getattr(b, 'num_sampled_nodes', None) if TRIM else None
    edges = getattr(b, 'num_sampled_edges', None) if TRIM else None
    return (b.x, b.edge_index, b.y, b.batch_size, nodes, edges)


def train_step(model, opt, x, edge_index, y, batch_size, nodes=None,
               edges=None):
    opt.zero_grad(set_to_none=True)
    if nodes is not None and edges is not None:  # trim_to_layer
        out = model(x, edge_index, num_sampled_nodes_per_hop=nodes,
                    num_sampled_edges_per_hop=edges)[:batch_size]
    else:
        out = model(x, edge_index)[:batch_size]
    loss = F.cross_entropy(out, y[:batch_size])
    loss.backward()
    opt.step()
    return loss


def time_training(loader, model, opt, batches, warmup, rounds=1):
    # The median of `rounds` passes of `batches` batches each, after
    # `warmup` batches: a single short pass is at the mercy of a garbage
    # collection or a clock change in it.
    it = iter(loader)
    for _ in range(warmup):
        b = next(it)
        train_step(model, opt, *batch_args(b))
    sync()
    if hasattr(loader, 'reset_stats'):
        loader.reset_stats()
    passes, n = [], 0
    for _ in range(rounds):
        start, k = time.perf_counter(), 0
        for b in it:
            if hasattr(loader, 'timer'):
                with loader.timer.stage('train'):
                    train_step(model, opt, *batch_args(b))
            else:
                train_step(model, opt, *batch_args(b))
            k += 1
            if k == batches:
                break
        sync()
        if k == 0:
            break
        passes.append(1e3 * (time.perf_counter() - start) / k)
        n += k
    res = {'ms_per_batch': sorted(passes)[len(passes) // 2], 'batches': n,
           'ms_per_batch_passes': passes}
    if hasattr(loader, 'stats'):
        st = loader.stats()
        res['stages_ms_per_batch'] = {
            k: v['ms_per_batch']
            for k, v in st['stages'].items()
        }
        res['features'] = st['features']
        res['memory'] = st['memory']
    del it
    return res


def compute_only(loader, model, opt, num, reps):
    # The median of `reps` passes over the same `num` batches.
    batches = []
    for b in loader:
        batches.append(batch_args(b))
        if len(batches) == num:
            break
    for b in batches[:3]:
        train_step(model, opt, *b)
    sync()
    passes = []
    for _ in range(reps):
        start = time.perf_counter()
        for b in batches:
            train_step(model, opt, *b)
        sync()
        passes.append(1e3 * (time.perf_counter() - start) / len(batches))
    return {'ms_per_batch': sorted(passes)[len(passes) // 2],
            'ms_per_batch_passes': passes}


def gather_microbench(x_cpu, hotness, index_batches, ratio, method):
    store = TieredFeatureStore(x_cpu, 'cuda', hotness=hotness,
                               cache_ratio=ratio, method=method,
                               gpu_memory_budget=0.5)
    for idx in index_batches[:3]:
        store.gather(idx)
    sync()
    store.reset_stats()
    start = time.perf_counter()
    for idx in index_batches[3:]:
        store.gather(idx)
    sync()
    sec = time.perf_counter() - start
    res = store.stats.as_dict()
    res['ms_per_batch'] = 1e3 * sec / (len(index_batches) - 3)
    res['host_GBps'] = res['h2d_bytes_per_batch'] * (
        len(index_batches) - 3) / sec / 1e9
    store.close()
    return res


def main():
    global TRIM
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--num-nodes', type=int,
                   default=PRESETS['default']['num_nodes'])
    p.add_argument('--num-edges', type=int,
                   default=PRESETS['default']['num_edges'])
    p.add_argument('--num-features', type=int, default=100)
    p.add_argument('--num-classes', type=int, default=47)
    p.add_argument('--fanout', default='15,10,5')
    p.add_argument('--batch-size', type=int, default=1024)
    p.add_argument('--hidden', type=int, default=256)
    p.add_argument('--batches', type=int, default=40)
    p.add_argument('--rounds', type=int, default=5,
                   help='passes of --batches batches per end-to-end '
                   'setting of ours (the median is reported)')
    p.add_argument('--warmup', type=int, default=5)
    p.add_argument('--cache-ratio', type=float, default=0.1)
    p.add_argument('--gather-blocks', default='none,32,132',
                   help="caps of the UVA gather grid to try besides the "
                   "default ('auto'); 'none' for no cap")
    p.add_argument('--pyg-workers', default='8,12,14,16',
                   help='num_workers values of PyG\'s loader to try (the '
                   'best is the baseline)')
    p.add_argument('--pyg-batches', type=int, default=100,
                   help='batches timed per pass of each PyG configuration')
    p.add_argument('--pyg-rounds', type=int, default=3,
                   help="passes of --pyg-batches batches per num_workers "
                   "value of PyG's loader (the median is reported)")
    p.add_argument('--scale-gather-blocks', type=int, default=None,
                   help='cap of the UVA gather grid in the --scale run')
    p.add_argument('--no-pyg', action='store_true')
    p.add_argument('--sampling-only', action='store_true',
                   help='time sampling alone, then stop')
    p.add_argument('--sampling-warmup-s', type=float, default=1.0,
                   help='seconds of sampling before it is timed (the GPU '
                   'clock ramps up under load)')
    p.add_argument('--scale', action='store_true',
                   help=describe_preset('scale') + ' in host memory')
    p.add_argument('--no-trim', action='store_true',
                   help='do not use trim_to_layer (it needs num_sampled_*, '
                   'which PyG with torch-sparse does not provide)')
    p.add_argument('--no-tf32', action='store_true')
    add_compile_args(p, "the model of every row, PyG's included (the "
                     "eager compute-only bound is timed too),")
    p.add_argument('--pyg-eager-too', action='store_true',
                   help="with --compile: time PyG's loader with the eager "
                   "model too (its best of both is the baseline)")
    p.add_argument('--out', default=None)
    args = p.parse_args()
    TRIM = not args.no_trim
    torch.backends.cuda.matmul.allow_tf32 = not args.no_tf32
    torch.backends.cudnn.allow_tf32 = not args.no_tf32
    if not torch.cuda.is_available():
        sys.exit('this benchmark needs a CUDA device')
    if args.scale:
        return scale(args)
    fanout = [int(k) for k in args.fanout.split(',')]
    dev = torch.device('cuda')
    res = {'machine': machine_info(), 'config': vars(args)}

    t = time.perf_counter()
    data = power_law_graph(args.num_nodes, args.num_edges, args.num_features,
                           args.num_classes, device=dev, seed=0)
    sync()
    res['generate_s'] = time.perf_counter() - t
    t = time.perf_counter()
    topo = GraphTopology.from_data(data, device=dev)
    sync()
    res['topology_build_s'] = time.perf_counter() - t
    res['topology_bytes'] = topo.nbytes()
    host_topo = topo.pin_memory()
    train_nodes = data.train_mask.nonzero().view(-1)
    # Seed batches in host memory, as the loader passes them to the sampler
    # (PyG's `NodeSamplerInput` copies seeds on the GPU back to the host:
    # one synchronization per batch that the loader does not pay).
    g = torch.Generator().manual_seed(1)
    n_seed_batches = args.batches + args.warmup
    train_host = train_nodes.cpu()
    seeds = [
        train_host[torch.randint(0, train_host.numel(), (args.batch_size, ),
                                 generator=g)]
        for _ in range(n_seed_batches)
    ]
    log(f'graph: {args.num_nodes} nodes, {args.num_edges} edges, '
        f'generated in {res["generate_s"]:.2f}s, topology '
        f'{res["topology_bytes"] / 1e9:.2f} GB in '
        f'{res["topology_build_s"]:.2f}s')

    # Sampling alone ##########################################################
    res['sampling'] = {}
    for name, backend, t_ in [('triton/device', 'triton', topo),
                              ('triton/host', 'triton', host_topo),
                              ('torch/device', 'torch', topo)]:
        s = HybridNeighborSampler(data, fanout, device=dev, seed=0,
                                  backend=backend, topology=t_)
        res['sampling'][name] = time_sampling(s, seeds, 10,
                                              warmup_s=args.sampling_warmup_s)
        log(f'sampling {name}: {res["sampling"][name]}')
        del s
    sd = res['sampling']
    res['sampling']['host_over_device'] = (
        sd['triton/host']['ms_per_batch'] /
        sd['triton/device']['ms_per_batch'])
    if args.sampling_only:
        write(res, args.out or 'benchmarks/results/gpu_data_path.json')
        return res

    # Data in host memory #####################################################
    data_cpu = data.cpu()
    data_gpu = data
    x_cpu = data_cpu.x.pin_memory()
    data_cpu.x = x_cpu
    model = GraphSAGE(args.num_features, args.hidden, 3,
                      args.num_classes).to(dev)
    opt = adam(model.parameters(), args.fused_adam)
    common = dict(input_nodes=data_cpu.train_mask, batch_size=args.batch_size,
                  shuffle=True, device=dev, seed=0)

    # Compute-only bound and features on the GPU ##############################
    gpu_loader = HybridNeighborLoader(data_gpu, fanout, topology=topo,
                                      **common)
    res['lookahead_default'] = gpu_loader.lookahead
    graphs = {}
    compiled = args.compile != 'none'
    if compiled:
        res['compute_only_eager'] = compute_only(gpu_loader, model, opt, 20,
                                                 5)
        log(f'compute only, eager model: {res["compute_only_eager"]}')
        model = compile_model(model, args.compile)
    t = time.perf_counter()
    res['compute_only'] = compute_only(gpu_loader, model, opt, 20, 5)
    if compiled:
        res['compute_only']['with_compile_s'] = time.perf_counter() - t
        res['compute_only']['over_eager'] = (
            res['compute_only']['ms_per_batch'] /
            res['compute_only_eager']['ms_per_batch'])
    graphs['compute_only'] = dynamo_graphs()
    res['dynamo_graphs_after'] = graphs
    log(f'compute only: {res["compute_only"]}')
    variants = [('e2e_features_on_gpu', {}),
                ('e2e_features_on_gpu_no_lookahead', dict(lookahead=False)),
                ('e2e_features_on_gpu_prefetch_thread', dict(prefetch=2))]
    for key, kw in variants:
        loader = gpu_loader if not kw else HybridNeighborLoader(
            data_gpu, fanout, topology=topo, **common, **kw)
        res[key] = time_training(loader, model, opt, args.batches,
                                 args.warmup, args.rounds)
        res[key]['over_compute_only'] = (res[key]['ms_per_batch'] /
                                         res['compute_only']['ms_per_batch'])
        log(f'{key}: {res[key]}')
        del loader
    if TRIM:  # The same without trim_to_layer, as PyG's batches must run.
        TRIM = False
        res['compute_only_no_trim'] = compute_only(gpu_loader, model, opt, 20,
                                                   3)
        res['e2e_features_on_gpu_no_trim'] = time_training(
            gpu_loader, model, opt, args.batches // 2, args.warmup,
            args.rounds)
        res['e2e_features_on_gpu_no_trim']['over_compute_only'] = (
            res['e2e_features_on_gpu_no_trim']['ms_per_batch'] /
            res['compute_only_no_trim']['ms_per_batch'])
        TRIM = True
        graphs['no_trim'] = dynamo_graphs()
        log(f'no trim: {res["compute_only_no_trim"]} '
            f'{res["e2e_features_on_gpu_no_trim"]}')

    # Features in host memory, GPU cache ######################################
    t = time.perf_counter()
    freq = count_node_access(
        HybridNeighborSampler(data_cpu, fanout, device=dev, seed=5,
                              topology=topo), train_nodes.cpu(),
        args.batch_size, num_batches=128)
    res['presample_s'] = time.perf_counter() - t
    # Rows are fetched when drawn as in-neighbors: rank by out-degree.
    deg = torch.bincount(topo.csc[None].row.to(torch.int64),
                         minlength=args.num_nodes).cpu()
    sampler = HybridNeighborSampler(data_cpu, fanout, device=dev, seed=9,
                                    topology=topo)
    index_batches = [
        sampler.sample_from_nodes(NodeSamplerInput(None, s)).node
        for s in seeds[:25]
    ]
    res['gather'] = {}
    for policy, hot in (('frequency', freq), ('degree', deg)):
        for method in ('uva', 'cpu'):
            key = f'{policy}/{method}'
            res['gather'][key] = gather_microbench(x_cpu, hot, index_batches,
                                                   args.cache_ratio, method)
            log(f'gather {key}: {res["gather"][key]}')
    best_method = min(('uva', 'cpu'),
                      key=lambda m: res['gather'][f'frequency/{m}']
                      ['ms_per_batch'])
    res['gather']['best_method'] = best_method
    # End to end, loader defaults (lookahead on, gather grid 'auto'), then
    # other caps of the UVA gather's grid (a small grid leaves SMs to the
    # training step it overlaps with).
    res['host_gather_blocks'] = {}
    caps = ['auto'] + [None if b == 'none' else int(b)
                       for b in args.gather_blocks.split(',') if b]
    for blocks in caps:
        store = TieredFeatureStore(x_cpu, dev, hotness=freq,
                                   cache_ratio=args.cache_ratio,
                                   method=best_method, gpu_memory_budget=0.5,
                                   gather_blocks=blocks)
        loader = HybridNeighborLoader(data_cpu, fanout, topology=topo,
                                      cache=CacheOptions(store=store),
                                      **common)
        r = time_training(loader, model, opt, args.batches, args.warmup,
                          args.rounds)
        r['gather_blocks'] = store.gather_blocks
        res['host_gather_blocks'][str(blocks)] = r
        log(f'host features + cache, gather_blocks={blocks}: {r}')
        if blocks == 'auto':
            res['e2e_host_features_cache'] = r
            default_store = store
        del loader
    store = default_store
    for key, kw in (('e2e_host_features_cache_no_lookahead',
                     dict(lookahead=False)),
                    ('e2e_host_features_cache_prefetch_thread',
                     dict(prefetch=2))):
        loader = HybridNeighborLoader(data_cpu, fanout, topology=topo,
                                      cache=CacheOptions(store=store),
                                      **common, **kw)
        res[key] = time_training(loader, model, opt, args.batches,
                                 args.warmup)
        log(f'{key}: {res[key]}')
        del loader
    del gpu_loader
    graphs['host_features'] = dynamo_graphs()

    # PyG ####################################################################
    # Forked workers must not inherit garbage that holds CUDA objects.
    gc.collect()
    sync()
    res['pyg'] = {}
    try:
        import torch_sparse  # noqa: F401
        have_pyg = not args.no_pyg
    except Exception as e:
        have_pyg = False
        res['pyg']['skipped'] = f'torch_sparse not importable: {e}'
    if have_pyg:
        from torch_geometric.loader import NeighborLoader
        from torch_geometric.sampler import NeighborSampler
        data_pyg = data_cpu.clone()
        data_pyg.x = data_cpu.x.clone()  # Pageable, as users have it.
        t = time.perf_counter()
        pyg_sampler = NeighborSampler(data_pyg, fanout, share_memory=True)
        res['pyg']['sampler_build_s'] = time.perf_counter() - t
        # The same training step as ours (compiled or not); with
        # --pyg-eager-too the eager model's step as well (the same weights).
        pyg_models = [('', model)]
        if compiled and args.pyg_eager_too:
            pyg_models.append(('eager_model/', model._orig_mod))
        for (prefix, step_model), w in itertools.product(
                pyg_models, [int(w) for w in args.pyg_workers.split(',')]):
            loader = NeighborLoader(data_pyg, fanout, batch_size=args.batch_size,
                                    input_nodes=data_pyg.train_mask,
                                    shuffle=True, num_workers=w,
                                    persistent_workers=w > 0,
                                    pin_memory=True,
                                    neighbor_sampler=pyg_sampler)
            # Steady state: the warm-up drains the batches the workers made
            # ahead (2 per worker), and many batches are timed, so that
            # batches made during the warm-up do not flatter the rate.
            r = time_training(_ToDevice(loader, dev), step_model, opt,
                              args.pyg_batches, 4 * w, args.pyg_rounds)
            res['pyg'][f'{prefix}workers={w}'] = r
            log(f'PyG {prefix}workers={w}: {r}')
            release_workers(loader)
            del loader
        graphs['pyg'] = dynamo_graphs()
        best, best_key = min((v['ms_per_batch'], k)
                             for k, v in res['pyg'].items()
                             if 'workers=' in k)
        res['pyg']['best_ms_per_batch'] = best
        res['pyg']['best'] = best_key
        res['speedup_vs_pyg'] = {
            'features_on_gpu': best / res['e2e_features_on_gpu']
            ['ms_per_batch'],
            'features_on_gpu_no_trim': best / res.get(
                'e2e_features_on_gpu_no_trim',
                res['e2e_features_on_gpu'])['ms_per_batch'],
            'host_features_cache': best / res['e2e_host_features_cache']
            ['ms_per_batch'],
        }
    summarize(res)
    write(res, args.out or 'benchmarks/results/gpu_data_path.json')


class _ToDevice:
    def __init__(self, loader, device):
        self.loader, self.device = loader, device

    def __iter__(self):
        for b in self.loader:
            yield b.to(self.device, non_blocking=True)


def scale(args):
    dev = torch.device('cuda')
    N, E, Fdim = (PRESETS['scale'][k]
                  for k in ('num_nodes', 'num_edges', 'num_features'))
    res = {'machine': machine_info(), 'config': vars(args),
           'graph': {'num_nodes': N, 'num_edges': E, 'num_features': Fdim}}
    t = time.perf_counter()
    data = power_law_graph(N, E, num_features=0, num_classes=47, device=dev,
                           seed=0, index_dtype=torch.int32)
    sync()
    log(f'edges generated in {time.perf_counter() - t:.1f}s')
    topo = GraphTopology.from_data(data, device=dev)
    edge_index = data.edge_index
    del data.edge_index
    host_topo = topo.pin_memory()
    del topo, edge_index
    torch.cuda.empty_cache()
    res['topology_host_bytes'] = host_topo.nbytes()
    log(f'topology in pinned host memory: {host_topo.nbytes() / 1e9:.1f} GB '
        f'after {time.perf_counter() - t:.1f}s')
    x = torch.empty((N, Fdim), dtype=torch.float32, pin_memory=True)
    chunk = 4_000_000
    for a in range(0, N, chunk):
        b = min(a + chunk, N)
        x[a:b].copy_(torch.randn(b - a, Fdim, device=dev))
    sync()
    log(f'features in pinned host memory: {x.numel() * 4 / 1e9:.1f} GB '
        f'after {time.perf_counter() - t:.1f}s')
    data.x = x
    data.y = data.y.cpu()
    for k in ('train_mask', 'val_mask', 'test_mask'):
        data[k] = data[k].cpu()
    deg = torch.bincount(host_topo.csc[None].row.to(torch.int64),
                         minlength=N)
    store = TieredFeatureStore(x, dev, hotness=deg, cache_ratio=0.1,
                               gpu_memory_budget=0.6,
                               gather_blocks=args.scale_gather_blocks)
    log(store.describe())
    data.edge_index = torch.empty(2, 0, dtype=torch.long)  # Topology given.
    fanout = [int(k) for k in args.fanout.split(',')]
    loader = HybridNeighborLoader(data, fanout, input_nodes=data.train_mask,
                                  batch_size=args.batch_size, shuffle=True,
                                  device=dev, topology=host_topo,
                                  placement=PlacementOptions(topology='host'),
                                  cache=CacheOptions(store=store), seed=0,
                                  lookahead=True)
    model = GraphSAGE(Fdim, args.hidden, 3, 47).to(dev)
    opt = adam(model.parameters())
    torch.backends.cuda.matmul.allow_tf32 = True
    res['e2e'] = time_training(loader, model, opt, args.batches, args.warmup)
    res['memory_tiers_bytes'] = {
        'gpu_feature_cache': store.gpu_bytes(),
        'host_features': x.numel() * 4,
        'host_topology': host_topo.nbytes(),
        'gpu_max_allocated': torch.cuda.max_memory_allocated(),
    }
    log(json.dumps(res, indent=1, default=str))
    write(res, args.out or 'benchmarks/results/gpu_data_path_scale.json')


def summarize(res):
    sd = res['sampling']
    rows = [
        ('sampling triton, topology on GPU', sd['triton/device']),
        ('sampling triton, topology in host memory', sd['triton/host']),
        ('sampling torch, topology on GPU', sd['torch/device']),
        ('compute only (batches on GPU)', res['compute_only']),
        ('  same, eager model', res.get('compute_only_eager',
                                        res['compute_only'])),
        ('end-to-end, features on GPU', res['e2e_features_on_gpu']),
        ('  same, no lookahead', res['e2e_features_on_gpu_no_lookahead']),
        ('  same, prefetch thread', res['e2e_features_on_gpu_prefetch_thread']),
        ('compute only, no trim', res.get('compute_only_no_trim',
                                          res['compute_only'])),
        ('end-to-end, features on GPU, no trim',
         res.get('e2e_features_on_gpu_no_trim', res['e2e_features_on_gpu'])),
        ('end-to-end, host features + cache',
         res['e2e_host_features_cache']),
        ('  same, no lookahead', res['e2e_host_features_cache_no_lookahead']),
        ('  same, prefetch thread',
         res['e2e_host_features_cache_prefetch_thread']),
    ]
    for k, v in res.get('pyg', {}).items():
        if 'workers=' in k:
            rows.append((f'PyG NeighborLoader {k}', v))
    log('\n' + f"{'configuration':<45} {'ms/batch':>9} {'Medges/s':>9}")
    for name, v in rows:
        eps = v.get('edges_per_s')
        log(f"{name:<45} {v['ms_per_batch']:>9.2f} "
            f"{'' if eps is None else f'{eps / 1e6:>9.0f}'}")
    log(f"host/device sampling time: {sd['host_over_device']:.2f}x")
    no_trim = res.get('e2e_features_on_gpu_no_trim', {})
    log('features on GPU over compute-only: '
        f"{res['e2e_features_on_gpu']['over_compute_only']:.3f}x (no trim: "
        f"{no_trim.get('over_compute_only', float('nan')):.3f}x)")
    for k, v in res['host_gather_blocks'].items():
        log(f"host features + cache, gather_blocks={k} "
            f"({v['gather_blocks']}): {v['ms_per_batch']:.2f} ms")
    for k, v in res.get('speedup_vs_pyg', {}).items():
        log(f'speed-up over PyG (best workers), {k}: {v:.1f}x')
    for k, v in res['gather'].items():
        if isinstance(v, dict):
            log(f"gather {k}: {v['ms_per_batch']:.2f} ms, hit rate "
                f"{v['hit_rate']:.3f} (cache {v['cache_hit_rate']:.3f})")


def write(res, path):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(res, indent=1, default=str))
    out = os.environ.get('OUT')
    if out:
        Path(out, Path(path).name).write_text(
            json.dumps(res, indent=1, default=str))
    log(f'wrote {path}')


if __name__ == '__main__':
    main()
