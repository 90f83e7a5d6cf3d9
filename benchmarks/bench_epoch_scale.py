"""Whole-epoch training on a papers100M-shaped graph (one JSON per run):
every training seed once, GraphSAGE 3 x 256, fan-out [15, 10, 5], batch
1024, features in pinned host memory behind the loader's default GPU cache.

Modes (``--modes``): ``eager`` (untrimmed), ``trim`` (``trim_to_layer``,
look-ahead on as by default), ``offload`` (``BottomLayerOffload`` with its
defaults, trimmed; two epochs: the first carries its set-up and trial,
and the wrapper grows the loader's GPU cache into free memory once it has
decided; later modes keep the grown cache),
``compiled`` (``torch.compile`` + fused Adam, trimmed),
``offload_compiled`` (``torch.compile`` over ``BottomLayerOffload`` with
its defaults + fused Adam, trimmed; two epochs; under ``torch.compile`` the
wrapper does not offload and fits the GPU cache); then PyG's
``NeighborLoader`` at each ``--pyg-workers`` over ``--pyg-batches``
batches, projected to an epoch (needs ``torch_sparse``).

GPU box (one H100, 128 GB host memory):

    python benchmarks/bench_epoch_scale.py                    # full size

CPU smoke run (tiny graph):

    python benchmarks/bench_epoch_scale.py --scale tiny --device cpu

Several GPUs of one machine (``--gpus N``): one process per GPU, DDP, every
training seed once across the ranks per epoch; each rank generates the
topology on its own GPU; the features live once per machine, in a file in
``--shm-dir`` (tmpfs) that every rank maps and pins in place
(``cudaHostRegister``), kept for later runs on the same machine. Each
``--placements`` entry (``device``: replicated topology and cache,
``sharded``: topology and cache split over the GPUs) is timed in the
``--modes`` ``trim`` and ``compiled``, with the per-batch breakdown (host
time of the loader and the step, the loader's stages, sampling and
gathering alone, GPU kernel time by kind from :mod:`torch.profiler`):

    python benchmarks/bench_epoch_scale.py --gpus 4 --modes trim,compiled
"""
import argparse
import contextlib
import datetime
import gc
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

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

from pyg_orch import (  # noqa: E402
    BottomLayerOffload,
    CacheOptions,
    HybridNeighborLoader,
    PlacementOptions,
)
from pyg_orch.datasets import (  # noqa: E402
    PAPERS100M,
    papers_like_features,
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
MODES = ('eager', 'trim', 'offload', 'compiled', 'offload_compiled')


# Memory ######################################################################


def host_memory() -> Dict[str, float]:
    r"""This process's resident memory now and at its peak since the last
    :func:`reset_host_peak`, and the machine's memory in use (GB)."""
    out: Dict[str, float] = {}
    try:
        with open('/proc/self/status') as f:
            for line in f:
                key, _, value = line.partition(':')
                names = {'VmRSS': 'rss_gb', 'VmHWM': 'rss_peak_gb',
                         'RssAnon': 'rss_anon_gb',
                         'RssShmem': 'rss_shmem_gb'}
                if key in names:
                    out[names[key]] = int(value.split()[0]) / 2**20
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
    compiled_before = triton_cache_entries()
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
    # Kernels Triton compiled in this pass (none once warmed up):
    res['triton_new_kernels'] = triton_kernel_names(
        triton_cache_entries() - compiled_before)
    return res


def timed_fit(loader) -> Dict[str, Any]:
    r""":meth:`~pyg_orch.HybridNeighborLoader.fit_gpu_cache`'s result, with
    the seconds it took."""
    start = time.perf_counter()
    fit = loader.fit_gpu_cache().as_dict()
    return dict(fit, seconds=time.perf_counter() - start)


def time_mode(name: str, loader, model, opt, trim: bool, args,
              device: torch.device, epochs: int = 1, fit: bool = False
              ) -> Dict:
    r"""Warm-up batches (compilation, caches), then (with :obj:`fit`)
    :meth:`~pyg_orch.HybridNeighborLoader.fit_gpu_cache`, then
    :obj:`epochs` timed epochs; peak GPU and host memory over the mode."""
    if device.type == 'cuda':
        torch.cuda.reset_peak_memory_stats(device)
    reset_host_peak()

    def step(b):
        train_step(model, opt, b, trim)

    res: Dict[str, Any] = {'trim': trim}
    start = time.perf_counter()
    warm = run_epoch(loader, step, device, math.inf, limit=args.warmup)
    res['warmup'] = dict(warm, wall_s=time.perf_counter() - start)
    if fit:
        res['gpu_cache_fit'] = timed_fit(loader)
        log(f"fit_gpu_cache: {json.dumps(res['gpu_cache_fit'])}")
    if hasattr(loader, 'reset_stats'):
        loader.reset_stats()
    res['epochs'] = []
    for e in range(epochs):
        r = run_epoch(loader, step, device, args.epoch_budget_s)
        res['epochs'].append(r)
        log(f"{name} epoch {e}: {r['epoch_s']:.2f} s "
            f"({r['batches']}/{r['batches_per_epoch']} batches, "
            f"{r['ms_per_batch']:.2f} ms per batch; Triton compiled "
            f"{len(r['triton_new_kernels'])} kernels in it)")
    res['epoch_s'] = res['epochs'][-1]['epoch_s']
    res['gpu_memory'] = gpu_memory(device)
    res['host_memory'] = host_memory()
    if hasattr(loader, 'stats'):
        st = loader.stats()
        res['loader'] = {
            'stages_ms_per_batch': {k: v.get('ms_per_batch') for k, v in
                                    st['stages'].items()},
            'features': st['features'], 'memory': st['memory']}
    if args.profile_batches > 0 and device.type == 'cuda':
        res['profile'] = kernel_profile(loader, step, device,
                                        args.profile_batches)
    return res


def make_model(args, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)
    return GraphSAGE(args.num_features, args.hidden, 3,
                     args.num_classes).to(device)


def run_mode(mode: str, loader, args, device: torch.device) -> Dict:
    if mode == 'eager':
        model = make_model(args, device)
        return time_mode(mode, loader, model, adam(model.parameters()),
                         False, args, device, fit=args.fit_gpu_cache)
    if mode == 'trim':
        model = make_model(args, device)
        return time_mode(mode, loader, model, adam(model.parameters()),
                         True, args, device, fit=args.fit_gpu_cache)
    if mode == 'compiled':
        model = make_model(args, device)
        opt = adam(model.parameters(), fused=device.type == 'cuda')
        model = compile_model(model, 'default')
        res = time_mode(mode, loader, model, opt, True, args, device,
                        fit=args.fit_gpu_cache)
        res['fused_adam'] = device.type == 'cuda'
        return res
    if mode in ('offload', 'offload_compiled'):
        compiled = mode == 'offload_compiled'
        start = time.perf_counter()
        model = BottomLayerOffload(make_model(args, device), loader)
        build_s = time.perf_counter() - start
        try:
            opt = adam(model.parameters(),
                       fused=compiled and device.type == 'cuda')
            net = compile_model(model, 'default') if compiled else model
            res = time_mode(mode, loader, net, opt, True, args, device,
                            epochs=2)
            res['build_s'] = build_s
            st = model.stats()
            res['offload_stats'] = {
                k: st.get(k) for k in ('decision', 'hot_sizes', 'split',
                                       'full_neighbors', 'static_tables',
                                       'cpu_aggregation', 'gpu_cache_fit')}
        finally:
            model.close()
        return res
    raise ValueError(f"unknown mode {mode!r} (expected one of {MODES})")


# What bounds an epoch ########################################################


def bounds(loader, data, device: torch.device, num: int,
           blocks: Sequence[Optional[int]] = ()) -> Dict:
    r"""Parts of a batch timed alone, each waited for: sampling
    (:obj:`num` batches of the loader's seeds), the feature gather of the
    sampled nodes through the loader's feature store (again with each
    number of thread blocks of :obj:`blocks`, :obj:`None` for no cap), and
    the copy rate of pinned host memory to the device."""
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
        if getattr(store, 'method', None) == 'uva' and blocks:
            out['gather_blocks'] = store.gather_blocks
            out['gather_ms_by_blocks'] = gather_by_blocks(
                store, nodes[5:], device, blocks)
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


def gather_by_blocks(store, nodes: List[torch.Tensor], device: torch.device,
                     blocks: Sequence[Optional[int]]) -> Dict[str, float]:
    r"""Ms per batch of :obj:`store.gather` over :obj:`nodes` with each
    number of thread blocks (the store's own setting restored after)."""
    own = store.gather_blocks
    out = {}
    try:
        for b in blocks:
            store.gather_blocks = b
            store.gather(nodes[0])
            sync(device)
            start = time.perf_counter()
            for n in nodes:
                store.gather(n)
            sync(device)
            out[str(b)] = 1e3 * (time.perf_counter() - start) / len(nodes)
    finally:
        store.gather_blocks = own
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


# Several GPUs ################################################################

def cache_options(args: argparse.Namespace) -> Optional[CacheOptions]:
    r"""The loader's cache options (:obj:`None`: its defaults)."""
    budget = args.gpu_memory_budget
    if budget is None:
        return None
    if budget != 'auto':
        budget = float(budget) if float(budget) <= 1 else int(float(budget))
    return CacheOptions(gpu_memory_budget=budget)


#: Modes timed with ``--gpus N`` (``offload``: DDP over
#: ``BottomLayerOffload`` with its defaults, trimmed, one hot set per machine).
MULTI_MODES = ('eager', 'trim', 'compiled', 'offload')
#: GPU kernels by what they do (substrings of their names), for the profile.
KERNEL_KINDS = (
    ('features', ('gather_rows', )),
    ('sampling', ('sample_hop', 'draw_neighbors', 'hash_', 'claim_kernel',
                  'seed_assign', 'mark_kernel', 'assign_block',
                  'advance_blocks', 'finish_counts', 'resolve_kernel',
                  'reset_kernel', 'compact_kernel')),
    ('allreduce', ('nccl', )),
    ('copies', ('Memcpy', 'Memset')),
)


def shared_features(args, device: torch.device) -> Dict[str, Any]:
    r"""The features once per machine: a file in :obj:`--shm-dir` that every
    rank maps (:func:`torch.from_file`); drawn on :obj:`device` unless a
    complete file of the same sizes is there from an earlier run."""
    n, f = args.num_nodes, args.num_features
    folder = Path(args.shm_dir)
    folder.mkdir(parents=True, exist_ok=True)
    key = f'papers_like_x_n{n}_f{f}_s0_{device.type}'
    path, done = folder / f'{key}.bin', folder / f'{key}.done'
    info: Dict[str, Any] = {'path': str(path), 'gb': n * f * 4 / 1e9}
    start = time.perf_counter()
    info['reused'] = done.exists() and path.exists() and \
        path.stat().st_size == n * f * 4
    if not info['reused']:
        done.unlink(missing_ok=True)
        x = torch.from_file(str(path), shared=True, size=n * f,
                            dtype=torch.float32).view(n, f)
        papers_like_features(n, f, device, out=x, progress=True)
        del x
        done.write_text('')
    info['seconds'] = time.perf_counter() - start
    return info


def map_features(path: str, n: int, f: int,
                 device: torch.device) -> torch.Tensor:
    r"""This rank's view of the shared features, pinned in place on CUDA."""
    x = torch.from_file(path, shared=True, size=n * f,
                        dtype=torch.float32).view(n, f)
    if device.type == 'cuda':
        from pyg_orch.parallel.peer_memory import register_pinned
        register_pinned(x)
    return x


def all_agree(flag: bool) -> bool:
    r"""Whether :obj:`flag` holds on some rank (every rank gets the same
    answer, so all ranks take the same branch)."""
    import torch.distributed as dist
    flags = [None] * dist.get_world_size()
    dist.all_gather_object(flags, bool(flag))
    return any(flags)


def triton_cache_dir() -> str:
    return os.environ.get('TRITON_CACHE_DIR',
                          os.path.expanduser('~/.triton/cache'))


def triton_cache_entries() -> set:
    r"""The entries of Triton's kernel cache (new ones after an epoch are
    kernels compiled in it)."""
    path = triton_cache_dir()
    return set(os.listdir(path)) if os.path.isdir(path) else set()


def triton_kernel_names(entries: set) -> List[str]:
    r"""The kernel names in Triton cache :obj:`entries`."""
    path = triton_cache_dir()
    names = []
    for e in sorted(entries):
        d = os.path.join(path, e)
        if os.path.isdir(d):
            names += [f[:-5] for f in os.listdir(d)
                      if f.endswith('.json') and not f.startswith('__grp__')]
    return sorted(names)


def ddp_epoch(loader, step: Callable[[Any], None], device: torch.device,
              limit: Optional[int] = None) -> Dict:
    r"""One pass over the loader (or :obj:`limit` batches) on every rank,
    between barriers; the host's time in the loader and in the step."""
    import torch.distributed as dist
    sync(device)
    dist.barrier()
    compiled_before = triton_cache_entries()
    n, load_s, step_s = 0, 0.0, 0.0
    start = time.perf_counter()
    it = iter(loader)
    while n != limit:
        t = time.perf_counter()
        batch = next(it, None)
        if batch is None:
            break
        t1 = time.perf_counter()
        step(batch)
        step_s += time.perf_counter() - t1
        load_s += t1 - t
        n += 1
    sync(device)
    dist.barrier()
    sec = time.perf_counter() - start
    return {'seconds': sec, 'batches': n, 'batches_per_epoch': len(loader),
            'complete': n == len(loader),
            'ms_per_batch': 1e3 * sec / max(n, 1),
            'host_loader_ms_per_batch': 1e3 * load_s / max(n, 1),
            'host_step_ms_per_batch': 1e3 * step_s / max(n, 1),
            'triton_new_kernels': triton_kernel_names(
                triton_cache_entries() - compiled_before)}


def kernel_profile(loader, step: Callable[[Any], None],
                   device: torch.device, num: int) -> Dict:
    r"""GPU kernel time per batch over :obj:`num` training batches, by kind
    (:obj:`KERNEL_KINDS`) and for the costliest kernels."""
    from torch.profiler import ProfilerActivity, profile
    it = iter(loader)
    step(next(it))
    sync(device)
    with profile(activities=[ProfilerActivity.CPU,
                             ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for _ in range(num):
            step(next(it))
        sync(device)
        wall = time.perf_counter() - start
    del it
    kinds: Dict[str, float] = {}
    kernels = []
    for evt in prof.key_averages():
        us = getattr(evt, 'self_device_time_total', None)
        if us is None:
            us = getattr(evt, 'self_cuda_time_total', 0)
        if not us or str(getattr(evt, 'device_type', '')).split('.')[-1] \
                != 'CUDA':
            continue
        kind = next((k for k, keys in KERNEL_KINDS
                     if any(key in evt.key for key in keys)), 'model')
        kinds[kind] = kinds.get(kind, 0.0) + us / 1e3 / num
        kernels.append((us / 1e3 / num, evt.count / num, kind,
                        evt.key[:90]))
    kernels.sort(reverse=True)
    return {'batches': num, 'wall_ms_per_batch': 1e3 * wall / num,
            'gpu_ms_per_batch_by_kind': kinds,
            'top_kernels': [dict(ms_per_batch=k[0], calls_per_batch=k[1],
                                 kind=k[2], name=k[3])
                            for k in kernels[:15]]}


def ddp_mode(mode: str, loader, args, device: torch.device) -> Dict:
    r"""Warm-up batches, then one epoch of DDP training in :obj:`mode`
    (and the kernel profile of :obj:`--profile-batches` more batches)."""
    from torch.nn.parallel import DistributedDataParallel
    model = make_model(args, device)
    offload, build_s = None, None
    if mode == 'offload':
        start = time.perf_counter()
        model = offload = BottomLayerOffload(model, loader)
        build_s = time.perf_counter() - start
    ddp = DistributedDataParallel(
        model, device_ids=[device.index] if device.type == 'cuda' else None)
    compiled = mode == 'compiled'
    opt = adam(ddp.parameters(), fused=compiled and device.type == 'cuda')
    net = compile_model(ddp, 'default') if compiled else ddp
    trim = mode != 'eager'

    def step(b):
        train_step(net, opt, b, trim)

    if device.type == 'cuda':
        torch.cuda.reset_peak_memory_stats(device)
    reset_host_peak()
    start = time.perf_counter()
    warm = ddp_epoch(loader, step, device, limit=args.warmup)
    res: Dict[str, Any] = {'trim': trim, 'compiled': compiled,
                           'fused_adam': compiled and device.type == 'cuda',
                           'warmup': dict(warm, wall_s=time.perf_counter() -
                                          start)}
    if args.fit_gpu_cache and offload is None:
        res['gpu_cache_fit'] = timed_fit(loader)
    if offload is not None:  # Its first epoch carries the set-up and trial.
        res['build_s'] = build_s
        res['first_epoch'] = ddp_epoch(loader, step, device,
                                       limit=args.max_batches)
    loader.reset_stats()
    res['epoch'] = ddp_epoch(loader, step, device, limit=args.max_batches)
    res['epoch_s'] = res['epoch']['seconds'] if res['epoch']['complete'] \
        else res['epoch']['seconds'] * len(loader) / res['epoch']['batches']
    st = loader.stats()
    res['loader'] = {'stages_ms_per_batch': {
        k: v.get('ms_per_batch') for k, v in st['stages'].items()},
        'features': st['features'],
        'topology_reads': st.get('topology_reads')}
    res['gpu_memory'] = gpu_memory(device)
    res['host_memory'] = host_memory()
    if args.profile_batches > 0:
        res['profile'] = kernel_profile(loader, step, device,
                                        args.profile_batches)
    if offload is not None:
        st = offload.stats()
        res['offload_stats'] = {
            k: st.get(k) for k in ('decision', 'hot_sizes', 'split',
                                   'full_neighbors', 'hot_set_ranks',
                                   'cpu_cores_per_rank', 'gpu_cache_fit')}
        offload.close()
    del net, ddp, model, opt, offload
    return res


def run_modes(loader, args, device: torch.device, t0: float,
              name: str) -> Dict[str, Any]:
    r"""Every mode of :obj:`--modes` once over :obj:`loader` (those that
    would start past :obj:`--time-budget-s` skipped on every rank)."""
    import torch.distributed as dist
    out: Dict[str, Any] = {}
    for mode in [m for m in args.modes.split(',') if m]:
        if mode == 'offload' and \
                name not in args.offload_placements.split(','):
            continue
        key = mode if mode not in out else f'{mode}_again'
        if all_agree(time.perf_counter() - t0 > args.time_budget_s):
            out[key] = {'error': 'skipped: budget'}
            continue
        out[key] = r = ddp_mode(mode, loader, args, device)
        if dist.get_rank() == 0:
            log(f"{name}/{mode}: epoch {r['epoch_s']:.2f} s, "
                f"{r['epoch']['ms_per_batch']:.2f} ms per batch")
        gc.collect()
    return out


#: What :func:`timed_build_steps` times: (module, function) or (module,
#: class, method), each where it is defined.
BUILD_STEPS = (
    ('pyg_orch.sampling.sampler', 'HybridNeighborSampler', '__init__'),
    ('pyg_orch.topology.sharded', 'shard_graph_topology'),
    ('pyg_orch.topology.sharded', 'check_same_graph'),
    ('pyg_orch.topology.sharded', 'expansion_weight'),
    ('pyg_orch.topology.sharded', 'shard_topology'),
    ('pyg_orch.topology.sharded', 'choose_replicated'),
    ('pyg_orch.loader.features', 'build_store'),
    ('pyg_orch.features.gpu_cache', 'hottest_first'),
    ('pyg_orch.features.tiered', 'TieredFeatureStore', '__init__'),
    ('pyg_orch.features.tiered', 'TieredFeatureStore', '_fill_cache'),
    ('pyg_orch.features.tiered', 'copy_rows'),
    ('pyg_orch.features.sharded', 'ShardedFeatureStore', '__init__'),
    ('pyg_orch.features.sharded', 'ShardedFeatureStore', '_host_rows'),
    ('pyg_orch.features.sharded', 'ShardedFeatureStore', '_fill_cache'),
    ('pyg_orch.features.sharded', 'ShardedFeatureStore', '_map'),
    ('pyg_orch.parallel.peer_memory', 'PeerGroup', '__init__'),
    ('pyg_orch.parallel.peer_memory', 'PeerGroup', 'allocate'),
    ('pyg_orch.parallel.peer_memory', 'PeerGroup', 'barrier'),
    ('pyg_orch.parallel.peer_memory', 'PeerGroup', 'all_gather_object'),
    ('pyg_orch.parallel.peer_memory', 'PeerGroup', 'all_reduce_sum'),
    ('pyg_orch.parallel.peer_memory', 'PeerGroup', 'share_host'),
)


@contextlib.contextmanager
def timed_build_steps(enabled: bool = True):
    r"""Wall time and calls of every :obj:`BUILD_STEPS` entry called inside
    the block (inclusive: a step's time holds the steps it calls), as a
    dictionary filled on exit. Functions are replaced in every loaded
    :mod:`pyg_orch` module that imported them, and restored."""
    import importlib
    steps: Dict[str, Dict[str, float]] = {}
    if not enabled:
        yield steps
        return
    patched = []

    def timed(name: str, fn: Callable) -> Callable:
        def wrapper(*a, **kw):
            start = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                st = steps.setdefault(name, {'calls': 0, 'seconds': 0.0})
                st['calls'] += 1
                st['seconds'] += time.perf_counter() - start
        return wrapper

    for entry in BUILD_STEPS:
        module = importlib.import_module(entry[0])
        if len(entry) == 3:
            cls = getattr(module, entry[1])
            fn = cls.__dict__[entry[2]]
            patched.append((cls, entry[2], fn))
            setattr(cls, entry[2], timed(f'{entry[1]}.{entry[2]}', fn))
            continue
        fn = getattr(module, entry[1])
        for mod in [m for n, m in list(sys.modules.items())
                    if n.startswith('pyg_orch') and m is not None]:
            if mod.__dict__.get(entry[1]) is fn:
                patched.append((mod, entry[1], fn))
                setattr(mod, entry[1], timed(entry[1], fn))
    try:
        yield steps
    finally:
        for owner, name, fn in reversed(patched):
            setattr(owner, name, fn)


def faster_blocks(bounds_: Dict) -> Optional[Dict[str, Optional[int]]]:
    r"""The gather's number of thread blocks (:obj:`None`: no cap) that
    beat the store's own setting by over 10% alone, as
    :obj:`{'gather_blocks': ...}`; :obj:`None` if none did."""
    ms = bounds_.get('gather_ms_by_blocks')
    if not ms:
        return None
    own = str(bounds_.get('gather_blocks'))
    best = min(ms, key=ms.get)
    if best == own or own not in ms or ms[best] > 0.9 * ms[own]:
        return None
    return {'gather_blocks': None if best == 'None' else int(best)}


def rank_main(rank: int, world: int, args, feat: Dict, node_data,
              out_dir: str) -> None:
    r"""One rank of :func:`run_multi`: writes its results as JSON."""
    from torch_geometric.data import Data

    from pyg_orch.multigpu import (
        MULTICAST_OFF_ENV,
        destroy_distributed,
        init_distributed,
        rank_input_nodes,
    )
    os.environ.update(MULTICAST_OFF_ENV)
    os.environ['LOCAL_WORLD_SIZE'] = str(world)
    t0 = time.perf_counter()
    device = init_distributed(
        device=torch.device('cuda', rank) if args.device == 'cuda' else
        'cpu', rank=rank, world_size=world, master_port=args.port)
    torch.backends.cuda.matmul.allow_tf32 = True
    res: Dict[str, Any] = {'rank': rank, 'setup': {}, 'placements': {}}
    setup = res['setup']
    start = time.perf_counter()
    x = map_features(feat['path'], args.num_nodes, args.num_features, device)
    setup['map_and_pin_s'] = time.perf_counter() - start
    start = time.perf_counter()
    kw = dict(num_nodes=args.num_nodes, num_edges=args.num_edges,
              exponent=args.exponent, device=device,
              cache_dir=args.cache_dir)
    import torch.distributed as dist
    if args.cache_dir is not None and rank > 0:
        dist.barrier()  # Rank 0 writes the disk cache first.
    topo = papers_like_topology(**kw)
    if args.cache_dir is not None and rank == 0:
        dist.barrier()
    sync(device)
    setup['topology_s'] = time.perf_counter() - start
    data = Data(x=x, y=node_data.y, train_mask=node_data.train_mask,
                num_nodes=args.num_nodes)
    seeds = rank_input_nodes(data.train_mask, rank, world, seed=0)
    setup['seeds'] = int(seeds.numel())
    setup['host_memory'] = host_memory()
    placements = [p for p in args.placements.split(',') if p]
    for i, placement in enumerate(placements):
        if all_agree(time.perf_counter() - t0 > args.time_budget_s):
            res['placements'][placement] = {'error': 'skipped: budget'}
            continue
        out: Dict[str, Any] = {}
        res['placements'][placement] = out
        sync(device)
        dist.barrier()
        start = time.perf_counter()
        with timed_build_steps(args.profile_build) as steps:
            loader = HybridNeighborLoader(
                data, args.fanout, input_nodes=seeds,
                batch_size=args.batch_size, shuffle=True, device=device,
                topology=topo, placement=PlacementOptions(topology=placement),
                seed=rank, cache=cache_options(args))
            sync(device)
        out['build_s'] = time.perf_counter() - start
        if args.profile_build:
            out['build_steps'] = steps
        out['batches_per_epoch'] = len(loader)
        st = loader.stats()
        out['memory'] = st['memory']
        out['build_stages_s'] = {k: v['total_s']
                                 for k, v in st['stages'].items()}
        if i == len(placements) - 1:  # The loader holds what it needs.
            del topo
            gc.collect()
            if device.type == 'cuda':
                torch.cuda.empty_cache()
        if rank == 0:
            log(f'{placement}: loader built in {out["build_s"]:.1f} s')
        blocks = ()
        if device.type == 'cuda' and args.gather_sweep:
            sms = torch.cuda.get_device_properties(
                device).multi_processor_count
            blocks = (max(sms // 2, 1), 2 * sms, 4 * sms, 8 * sms, None)
        try:
            out['bounds'] = bounds(loader, data, device, args.bound_batches,
                                   blocks)
        except Exception as e:
            out['bounds'] = {'error': f'{type(e).__name__}: {e}'}
        out['modes'] = run_modes(loader, args, device, t0, placement)
        # Rank 0's choice on every rank (each rank timed its own):
        best = [None] * world
        dist.all_gather_object(best, faster_blocks(out['bounds']))
        if best[0] is not None:
            blocks_ = best[0]['gather_blocks']
            loader.feature_store.gather_blocks = blocks_
            out['tuned'] = {'gather_blocks': blocks_, 'modes': run_modes(
                loader, args, device, t0, f'{placement}+blocks{blocks_}')}
        del loader
        gc.collect()
        if device.type == 'cuda':
            torch.cuda.empty_cache()
    res['wall_s'] = time.perf_counter() - t0
    with open(os.path.join(out_dir, f'rank{rank}.json'), 'w') as f:
        json.dump(res, f, default=str)
    destroy_distributed()


def summarize_multi(ranks: List[Dict]) -> Dict:
    r"""Per placement and mode: the epoch (the slowest rank's), memory per
    rank, and sharded over replicated."""
    out: Dict[str, Any] = {}
    for placement, p0 in ranks[0]['placements'].items():
        for mode, m0 in p0.get('modes', {}).items():
            if 'epoch_s' not in m0:
                continue
            per = [r['placements'][placement]['modes'][mode] for r in ranks]
            out[f'{placement}/{mode}'] = {
                'epoch_s': max(m['epoch_s'] for m in per),
                'ms_per_batch': max(m['epoch']['ms_per_batch']
                                    for m in per),
                'build_s': max(r['placements'][placement]['build_s']
                               for r in ranks),
                'peak_gpu_allocated_gb': [
                    m['gpu_memory'].get('peak_allocated_gb') for m in per],
                'peak_gpu_reserved_gb': [
                    m['gpu_memory'].get('peak_reserved_gb') for m in per],
                'rss_peak_gb': [m['host_memory'].get('rss_peak_gb')
                                for m in per],
                'rss_anon_gb': [m['host_memory'].get('rss_anon_gb')
                                for m in per],
                'rss_shmem_gb': [m['host_memory'].get('rss_shmem_gb')
                                 for m in per],
                'system_used_gb': per[0]['host_memory'].get(
                    'system_used_gb'),
            }
    for placement, p0 in ranks[0]['placements'].items():
        tuned = p0.get('tuned')
        for mode, m0 in (tuned or {}).get('modes', {}).items():
            if 'epoch_s' not in m0:
                continue
            per = [r['placements'][placement]['tuned']['modes'][mode]
                   for r in ranks]
            out[f"{placement}+blocks{tuned['gather_blocks']}/{mode}"] = {
                'epoch_s': max(m['epoch_s'] for m in per),
                'ms_per_batch': max(m['epoch']['ms_per_batch']
                                    for m in per)}
    for mode in sorted({k.split('/', 1)[1] for k in out if '/' in k}):
        a, b = out.get(f'device/{mode}'), out.get(f'sharded/{mode}')
        if a and b:
            out[f'sharded_over_replicated_speed/{mode}'] = \
                a['epoch_s'] / b['epoch_s']
    return out


def run_multi(args) -> Dict:
    r"""The whole-epoch benchmark over :obj:`--gpus` processes of one
    machine (one per GPU), results in one JSON."""
    import tempfile

    import torch.multiprocessing as mp

    from pyg_orch.multigpu import MULTICAST_OFF_ENV
    os.environ.update(MULTICAST_OFF_ENV)
    t0 = time.perf_counter()
    device = torch.device(args.device, 0) if args.device == 'cuda' else \
        torch.device('cpu')
    res: Dict[str, Any] = {'machine': machine_info(), 'config': vars(args),
                           'date': datetime.date.today().isoformat()}
    out = args.out or (f"benchmarks/results/epoch_scale_{args.gpus}gpu_"
                       f"{res['date']}{'_' + args.tag if args.tag else ''}"
                       ".json")
    gen: Dict[str, Any] = {}
    res['generate'] = gen
    gen['features'] = shared_features(args, device)
    log(f"features: {json.dumps(gen['features'])}")
    start = time.perf_counter()
    node_data = papers_like_node_data(args.num_nodes, 0, args.num_classes,
                                      args.num_train)
    for key in ('y', 'train_mask'):
        node_data[key].share_memory_()
    gen['node_data_s'] = time.perf_counter() - start
    if device.type == 'cuda':
        torch.cuda.empty_cache()
    gen['host_memory'] = host_memory()
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(rank_main, args=(args.gpus, args, gen['features'],
                                  node_data, tmp), nprocs=args.gpus,
                 join=True)
        res['ranks'] = [json.load(open(os.path.join(tmp, f'rank{r}.json')))
                        for r in range(args.gpus)]
    res['summary'] = summarize_multi(res['ranks'])
    res['wall_s'] = time.perf_counter() - t0
    log(json.dumps(res['summary'], indent=1))
    write_report(res, out)
    if os.environ.get('OUT'):
        write_report(res, Path(os.environ['OUT'], Path(out).name))
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
    p.add_argument('--modes', default=None,
                   help=f"comma-separated, of {', '.join(MODES)} (default: "
                   f"all; with --gpus > 1, of {', '.join(MULTI_MODES)}, "
                   "default trim,compiled)")
    p.add_argument('--gpus', type=int, default=1,
                   help='processes (GPUs) of this machine, with DDP')
    p.add_argument('--placements', default='device,sharded',
                   help="with --gpus > 1: comma-separated topology "
                   "placements, 'device' (replicated) and 'sharded'")
    p.add_argument('--offload-placements', default='device',
                   help="with --gpus > 1: the --placements that time the "
                   "'offload' mode (default: device)")
    p.add_argument('--shm-dir', default='/dev/shm/pyg_orch',
                   help='with --gpus > 1: where the shared features file '
                   'lives (tmpfs; kept for later runs on this machine)')
    p.add_argument('--gpu-memory-budget', default=None,
                   help="the loader's GPU cache: a fraction (<= 1) of free "
                   "GPU memory, bytes, or 'auto' (default: the loader's "
                   "default)")
    p.add_argument('--fit-gpu-cache', action='store_true',
                   help="after each mode's warm-up (not offload's: "
                   "BottomLayerOffload fits by itself), grow the loader's "
                   "GPU cache into the memory training left free "
                   "(HybridNeighborLoader.fit_gpu_cache; on every rank "
                   "with --gpus > 1)")
    p.add_argument('--profile-build', action='store_true',
                   help="with --gpus > 1: time the steps of each loader's "
                   "construction (BUILD_STEPS) on every rank")
    p.add_argument('--profile-batches', type=int, default=None,
                   help='batches profiled after each epoch (GPU kernel '
                   'time by kind; 0: none; default 20 with --gpus > 1, '
                   'else 0: on one H200 the modes timed after a profile '
                   'ran slower)')
    p.add_argument('--max-batches', type=int, default=None,
                   help='with --gpus > 1: stop each epoch after this many '
                   'batches and project it')
    p.add_argument('--no-gather-sweep', dest='gather_sweep',
                   action='store_false',
                   help='with --gpus > 1: skip timing the feature gather '
                   'with other numbers of thread blocks (and the modes '
                   'again with a faster one)')
    p.add_argument('--port', type=int, default=29650,
                   help='with --gpus > 1: the process group\'s port')
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
    try:
        cache_options(args)
    except ValueError as e:
        p.error(f'--gpu-memory-budget: {e}')
    for k, v in SCALES[args.scale].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    allowed = MODES if args.gpus == 1 else MULTI_MODES
    if args.profile_batches is None:
        args.profile_batches = 20 if args.gpus > 1 else 0
    if args.modes is None:
        args.modes = ','.join(allowed if args.gpus == 1 else
                              ('trim', 'compiled'))
    if args.gpus == 1 and len(set(args.modes.split(','))) < \
            len(args.modes.split(',')):
        p.error('a mode given twice in --modes is only timed twice with '
                '--gpus > 1')
    unknown = set(args.modes.split(',')) - set(allowed) - {''}
    if unknown:
        p.error(f"unknown --modes {sorted(unknown)} (expected {allowed}"
                f"{' with --gpus > 1' if args.gpus > 1 else ''})")
    if args.device == 'cuda' and not torch.cuda.is_available():
        p.error('--device cuda, but CUDA is not available (use --device '
                'cpu with --scale tiny)')
    if args.gpus < 1 or (args.device == 'cuda' and args.gpus >
                         max(torch.cuda.device_count(), 1)):
        p.error(f"--gpus must be an integer >= 1, at most the "
                f"{torch.cuda.device_count()} CUDA devices with --device "
                f"cuda (got {args.gpus})")
    bad = set(args.placements.split(',')) - {'device', 'sharded', ''}
    if bad:
        p.error(f"unknown --placements {sorted(bad)} (expected 'device' "
                f"and/or 'sharded')")
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
    if args.gpus > 1:
        return run_multi(args)
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
                                  device=device, topology=topo, seed=0,
                                  cache=cache_options(args))
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
