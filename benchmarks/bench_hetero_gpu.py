"""Heterogeneous sampling on the GPU (one run, one JSON): per batch and per
sampled edge, the fused Triton path (``backend='triton'``) against the
PyTorch path (``backend='torch'``) on a synthetic paper / author /
institution graph, against the homogeneous graph of the same size (the same
edges, ``to_homogeneous``) on the fused path, and against PyG's
NeighborLoader where ``pyg_lib`` or ``torch_sparse`` imports. Loader rows
add the feature gather (features in host memory): the hetero loader with its
automatic ``HeteroTieredFeatureStore`` (one GPU budget across node types)
and without a store (CPU gather and copy); every loader row says which
feature path ran (``feature_path``) and, with a store, its cached rows per
type and hit rates.

``--train`` (on by default) times heterogeneous end-to-end training per
batch (``_hetero_train.py``): a ``to_hetero`` GraphSAGE (``--layers``,
``--hidden``) on our loader's batches (fused sampling, feature store,
features in host memory), on the same batches kept on the device (the
compute-only bound), and on PyG's ``NeighborLoader`` at each
``--pyg-workers`` (``persistent_workers``, ``pin_memory``), each timing
repeated ``--repeats`` times (median, min, max), with the ratios.

GPU box (H100), about 2 minutes (PyG's rows need ``torch_sparse`` or
``pyg_lib``, e.g. from ``.device_wheels``):

    python benchmarks/bench_hetero_gpu.py --small --out hetero_small.json
    python benchmarks/bench_hetero_gpu.py --out hetero.json   # ~2M / ~30M

CPU smoke test (about a minute; few batches, two worker counts):

    python benchmarks/bench_hetero_gpu.py --device cpu --small

Every section is timed on its own; a section that fails records its error in
the JSON instead of ending the run.
"""
import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, Dict, List

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torch_geometric.data import HeteroData  # noqa: E402
from torch_geometric.sampler import NodeSamplerInput  # noqa: E402

from pyg_orch import CacheOptions  # noqa: E402
from pyg_orch import HybridNeighborLoader, HybridNeighborSampler  # noqa
from _bench_common import int_list, log, machine_info, sync  # noqa: E402

WRITES = ('author', 'writes', 'paper')
REV_WRITES = ('paper', 'rev_writes', 'author')
CITES = ('paper', 'cites', 'paper')
EMPLOYS = ('institution', 'employs', 'author')
AFFILIATED = ('author', 'affiliated_with', 'institution')


def hetero_graph(num_papers: int, num_features: int, seed: int = 0
                 ) -> HeteroData:
    r"""Papers, authors (60% of papers), institutions (2%); 10 citations
    and 3 authors per paper (both directions), one institution per author
    (both directions); citations drawn with a skewed (power-law-like)
    popularity."""
    g = torch.Generator().manual_seed(seed)
    sizes = {'paper': num_papers, 'author': max(num_papers * 6 // 10, 1),
             'institution': max(num_papers // 50, 1)}
    data = HeteroData()
    for t, n in sizes.items():
        data[t].x = torch.randn(n, num_features, generator=g)
    data['paper'].y = torch.randint(0, 16, (num_papers, ), generator=g)
    n_cites, n_writes = 10 * num_papers, 3 * num_papers
    popular = (torch.rand(n_cites, generator=g)**3 * num_papers).long()
    data[CITES].edge_index = torch.stack([
        torch.randint(0, num_papers, (n_cites, ), generator=g), popular])
    writes = torch.stack([
        torch.randint(0, sizes['author'], (n_writes, ), generator=g),
        torch.randint(0, num_papers, (n_writes, ), generator=g)])
    data[WRITES].edge_index = writes
    data[REV_WRITES].edge_index = writes.flip(0)
    employs = torch.stack([
        torch.randint(0, sizes['institution'], (sizes['author'], ),
                      generator=g),
        torch.arange(sizes['author'])])
    data[EMPLOYS].edge_index = employs
    data[AFFILIATED].edge_index = employs.flip(0)
    return data


def time_batches(step: Callable[[torch.Tensor], int], batches, warmup: int,
                 rounds: int, device) -> Dict:
    r"""Median of :obj:`rounds` passes over :obj:`batches[warmup:]`, each
    batch waited for; :obj:`step` returns the batch's sampled edges."""
    for s in batches[:warmup]:
        step(s)
    sync(device)
    passes = []
    for _ in range(rounds):
        start, edges = time.perf_counter(), 0
        for s in batches[warmup:]:
            edges += step(s)
        sync(device)
        passes.append((time.perf_counter() - start, edges))
    passes.sort()
    secs, edges = passes[len(passes) // 2]
    n = max(len(batches) - warmup, 1)
    return {'ms_per_batch': 1e3 * secs / n,
            'edges_per_batch': edges / n,
            'ns_per_edge': 1e9 * secs / max(edges, 1)}


def sampler_step(sampler, input_type):
    def step(seeds):
        out = sampler.sample_from_nodes(
            NodeSamplerInput(None, seeds, input_type=input_type))
        row = out.row
        if isinstance(row, dict):
            return sum(int(r.numel()) for r in row.values())
        return int(row.numel())
    return step


def loader_step(loader):
    it = {'iter': None}

    def step(_):
        if it['iter'] is None:
            it['iter'] = iter(loader)
        try:
            batch = next(it['iter'])
        except StopIteration:
            it['iter'] = iter(loader)
            batch = next(it['iter'])
        if isinstance(batch, HeteroData):
            return sum(int(s.edge_index.size(1)) for s in batch.edge_stores)
        return int(batch.edge_index.size(1))
    return step


def feature_info(loader) -> Dict:
    r"""Which feature path a loader ran: its store (class and description)
    or the CPU gather and copy, and, with a store, cached rows (per node
    type for heterogeneous graphs) and the counters of the timed passes."""
    fs = loader.feature_store
    if fs is None:
        return {'feature_path': 'cpu gather + copy (no feature store)'}
    stats = loader.stats()
    return {'feature_path': type(fs).__name__,
            'feature_store': fs.describe(),
            'feature_cache_rows': stats['memory']['feature_cache_rows'],
            'feature_cache_rows_per_type':
            stats['memory'].get('feature_cache_rows_per_type'),
            'feature_cache_bytes': stats['memory']['feature_cache_bytes'],
            'features': stats['features']}


def section(results: Dict, name: str, fn: Callable[[], Dict]) -> None:
    log(f'--- {name}')
    start = time.perf_counter()
    try:
        res = fn()
    except Exception as e:  # Recorded; the other sections still run.
        res = {'error': f'{type(e).__name__}: {e}',
               'traceback': traceback.format_exc(limit=4)}
    res['wall_s'] = time.perf_counter() - start
    results[name] = res
    log(json.dumps({k: v for k, v in res.items() if k != 'traceback'}))


def _budget(text: str):
    if text == 'auto':
        return text
    return float(text) if '.' in text else int(text)


def main(argv: List[str] = None) -> Dict:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--small', action='store_true',
                        help='100k papers instead of 1M (quick check)')
    parser.add_argument('--num-papers', type=int, default=None)
    parser.add_argument('--num-features', type=int, default=128)
    parser.add_argument('--fanout', type=str, default='15,10',
                        help='fan-out per hop for every edge type')
    parser.add_argument('--batch-size', type=int, default=None,
                        help='seed papers per batch (default: 1024; 128 on '
                        'the CPU)')
    parser.add_argument('--batches', type=int, default=None,
                        help='timed batches per round (default: 20; 3 on '
                        'the CPU)')
    parser.add_argument('--warmup', type=int, default=3)
    parser.add_argument('--rounds', type=int, default=None,
                        help='sampling and loader rounds, the median kept '
                        '(default: 3; 1 on the CPU)')
    train = parser.add_argument_group('end-to-end training (--train)')
    train.add_argument('--train', action=argparse.BooleanOptionalAction,
                       default=True, help='time training per batch: ours, '
                       "compute-only, PyG's NeighborLoader (default: on)")
    train.add_argument('--hidden', type=int, default=256)
    train.add_argument('--layers', type=int, default=2)
    train.add_argument('--train-batches', type=int, default=None,
                       help='timed batches per repeat (default: 30; 2 on '
                       'the CPU)')
    train.add_argument('--train-warmup', type=int, default=None,
                       help='warm-up batches (default: 10; 1 on the CPU)')
    train.add_argument('--repeats', type=int, default=None,
                       help='repeats of every training timing (default: '
                       '3; 2 on the CPU)')
    train.add_argument('--pyg-workers', type=int_list, default=None,
                       help="PyG NeighborLoader's num_workers to try "
                       '(default: 0,4,8,12,16; 0,2 on the CPU)')
    train.add_argument('--pyg-batches', type=int, default=None,
                       help='timed PyG batches per repeat and num_workers '
                       '(default: 10; 2 on the CPU)')
    train.add_argument('--compile', default='none',
                       help="train a torch.compile'd model (dynamic=True) "
                       "in every row, PyG's included: 'default' or another "
                       "torch.compile mode; the eager compute-only bound is "
                       "timed too (default: 'none', eager)")
    parser.add_argument('--device', default='cuda')
    parser.add_argument('--gpu-memory-budget', type=_budget, default='auto',
                        help="feature cache budget of the loaders: bytes, a "
                        "fraction of free GPU memory, or 'auto'")
    parser.add_argument('--gpu-cache-ratio', type=float, default=None,
                        help='cache at most this fraction of the rows')
    parser.add_argument('--out', type=str, default=None,
                        help='write the results as JSON here')
    args = parser.parse_args(argv)
    if args.device == 'cuda' and not torch.cuda.is_available():
        parser.error('--device cuda, but CUDA is not available')
    device = torch.device(args.device)
    cpu = device.type == 'cpu'
    for name, gpu_value, cpu_value in (
            ('batch_size', 1024, 128), ('batches', 20, 3), ('rounds', 3, 1),
            ('train_batches', 30, 2),
            ('train_warmup', 10, 1), ('repeats', 3, 2),
            ('pyg_workers', [0, 4, 8, 12, 16], [0, 2]),
            ('pyg_batches', 10, 2)):
        if getattr(args, name) is None:
            setattr(args, name, cpu_value if cpu else gpu_value)
    fanout = [int(k) for k in args.fanout.split(',') if k]
    num_papers = args.num_papers or (100_000 if args.small else 1_000_000)

    log(f'building the graph ({num_papers} papers)')
    data = hetero_graph(num_papers, args.num_features)
    homo = data.to_homogeneous()
    gen = torch.Generator().manual_seed(1)
    count = args.warmup + args.batches
    paper_batches = [
        torch.randint(0, num_papers, (args.batch_size, ), generator=gen)
        for _ in range(count)
    ]
    # Homogeneous seeds: the same papers (their ids in `homo`).
    paper_start = int((homo.node_type == data.node_types.index('paper'))
                      .nonzero()[0])
    homo_batches = [s + paper_start for s in paper_batches]
    results: Dict = {
        'config': dict(vars(args), num_papers=num_papers,
                       num_nodes={t: data[t].num_nodes
                                  for t in data.node_types},
                       num_edges={'/'.join(et): data[et].num_edges
                                  for et in data.edge_types},
                       total_nodes=homo.num_nodes,
                       total_edges=homo.num_edges),
        'machine': machine_info(),
    }
    timing = dict(warmup=args.warmup, rounds=args.rounds, device=device)

    def hetero_sampler(backend):
        def run():
            s = HybridNeighborSampler(data, fanout, device=device,
                                      backend=backend, seed=0)
            res = time_batches(sampler_step(s, 'paper'), paper_batches,
                               **timing)
            res['backend'] = s.backend
            return res
        return run

    def homo_sampler():
        s = HybridNeighborSampler(homo, fanout, device=device,
                                  backend='auto', seed=0)
        res = time_batches(sampler_step(s, None), homo_batches, **timing)
        res['backend'] = s.backend
        return res

    section(results, 'sample/hetero/triton', hetero_sampler('auto'))
    section(results, 'sample/hetero/torch', hetero_sampler('torch'))
    section(results, 'sample/homogeneous', homo_sampler)

    budget = dict(gpu_memory_budget=args.gpu_memory_budget,
                  cache_ratio=args.gpu_cache_ratio)

    def hetero_loader(feature_store):
        def run():
            loader = HybridNeighborLoader(
                data, fanout, batch_size=args.batch_size, shuffle=True,
                input_nodes='paper', device=device, seed=0,
                cache=CacheOptions(store=feature_store, **budget))
            loader.reset_stats()  # Not the pre-sampling.
            res = time_batches(loader_step(loader), list(range(count)),
                               **timing)
            res['backend'] = loader.node_sampler.backend
            res.update(feature_info(loader))
            return res
        return run

    def homo_loader():
        loader = HybridNeighborLoader(
            homo, fanout, batch_size=args.batch_size, shuffle=True,
            input_nodes=torch.arange(paper_start, paper_start + num_papers),
            device=device, seed=0, **budget)
        loader.reset_stats()
        res = time_batches(loader_step(loader), list(range(count)),
                           **timing)
        res['backend'] = loader.node_sampler.backend
        res.update(feature_info(loader))
        return res

    section(results, 'loader/hetero (sample + gather)', hetero_loader('auto'))
    section(results, 'loader/hetero (sample + gather, no store)',
            hetero_loader(None))
    section(results, 'loader/homogeneous (sample + gather)', homo_loader)

    def pyg_loader():
        from torch_geometric.typing import WITH_PYG_LIB, WITH_TORCH_SPARSE
        if not (WITH_PYG_LIB or WITH_TORCH_SPARSE):
            return {'skipped': 'neither pyg_lib nor torch_sparse imports'}
        from torch_geometric.loader import NeighborLoader
        loader = NeighborLoader(data, fanout, batch_size=args.batch_size,
                                shuffle=True, input_nodes='paper')

        def step(_):
            if step.it is None:
                step.it = iter(loader)
            try:
                batch = next(step.it)
            except StopIteration:
                step.it = iter(loader)
                batch = next(step.it)
            batch = batch.to(device, non_blocking=True)
            return sum(int(s.edge_index.size(1)) for s in batch.edge_stores)

        step.it = None
        return time_batches(step, list(range(count)), **timing)

    section(results, 'loader/hetero/pyg NeighborLoader', pyg_loader)

    if args.train:
        from _hetero_train import run_train

        def train():
            return run_train(
                data, fanout, args.batch_size, device, hidden=args.hidden,
                num_layers=args.layers, warmup=args.train_warmup,
                batches=args.train_batches, repeats=args.repeats,
                pyg_workers=args.pyg_workers, pyg_batches=args.pyg_batches,
                loader_kwargs=budget, compile_mode=args.compile)

        section(results, 'train/hetero', train)

    summary = {}
    for name, res in results.items():
        if isinstance(res, dict) and 'ms_per_batch' in res:
            summary[name] = round(res['ms_per_batch'], 3)
    train_res = results.get('train/hetero', {})
    for key, name in (('ours', 'train/hetero/ours (loader + step)'),
                      ('compute_only', 'train/hetero/compute-only')):
        if key in train_res:
            summary[name] = round(train_res[key]['ms_per_batch'], 3)
    if 'pyg_best_ms_per_batch' in train_res:
        summary[f"train/hetero/pyg NeighborLoader (num_workers="
                f"{train_res['pyg_best_num_workers']}) + step"] = round(
                    train_res['pyg_best_ms_per_batch'], 3)
        summary['train/hetero speedup ours vs pyg best'] = round(
            train_res['speedup_ours_vs_pyg_best'], 2)
    if 'compute_only_eager' in train_res:
        summary['train/hetero/compute-only, eager model'] = round(
            train_res['compute_only_eager']['ms_per_batch'], 3)
    if 'ratio_ours_vs_compute_only' in train_res:
        summary['train/hetero ours / compute-only'] = round(
            train_res['ratio_ours_vs_compute_only'], 2)
    results['summary_ms_per_batch'] = summary
    log(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1,
                                             default=str))
        log(f'wrote {args.out}')
    return results


if __name__ == '__main__':
    main()
