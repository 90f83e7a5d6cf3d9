"""Compute-only bound by edge format (one run, one JSON): what the loader can
hand PyG's layers so that they run faster, without touching the model.

The same sampled mini-batches are materialized on the GPU once; then each
model (GraphSAGE, GCN, GAT; 3 layers) trains on them with ``edge_index`` as

- ``tensor``: a plain ``[2, E]`` int64 tensor, as PyG's loader gives it;
- ``edge_index``: PyG's :class:`~torch_geometric.EdgeIndex` with
  ``sort_order='col'`` and ``sparse_size`` set, so that layers with a fused
  sparse path (``SAGEConv``, ``GCNConv``) take it, and the others aggregate
  by segments;
- ``edge_index_int32``: the same with int32 indices.

with and without :func:`~torch_geometric.utils.trim_to_layer`. Every
variant's output on the first batch is compared with the ``tensor`` one
(``max_abs_diff``). ``HybridNeighborLoader`` returns its edges sorted by
destination (checked here, ``sorted_by_col``), so ``EdgeIndex`` needs no
sort.

GPU box (H100):

    python benchmarks/bench_compute_bound.py
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_common import (  # noqa: E402
    PRESETS,
    add_preset_args,
    log,
    machine_info,
)
from torch_geometric import EdgeIndex  # noqa: E402
from torch_geometric.nn import GAT, GCN, GraphSAGE  # noqa: E402

from pyg_orch import HybridNeighborLoader  # noqa: E402
from pyg_orch.datasets import power_law_graph  # noqa: E402

MODELS = {'sage': GraphSAGE, 'gcn': GCN, 'gat': GAT}
FORMATS = ('tensor', 'edge_index', 'edge_index_int32')


def as_format(edge_index: torch.Tensor, num_nodes: int, fmt: str):
    if fmt == 'tensor':
        return edge_index
    ei = edge_index.to(torch.int32) if fmt.endswith('int32') else edge_index
    return EdgeIndex(ei, sparse_size=(num_nodes, num_nodes),
                     sort_order='col')


def step(model, opt, batch, ei, trim: bool):
    opt.zero_grad(set_to_none=True)
    kw = {}
    if trim:
        kw = dict(num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                  num_sampled_edges_per_hop=batch.num_sampled_edges)
    out = model(batch.x, ei, **kw)[:batch.batch_size]
    loss = F.cross_entropy(out, batch.y[:batch.batch_size])
    loss.backward()
    opt.step()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    add_preset_args(p)
    p.add_argument('--num-features', type=int, default=100)
    p.add_argument('--hidden', type=int, default=256)
    p.add_argument('--fanout', default='15,10,5')
    p.add_argument('--batch-size', type=int, default=1024)
    p.add_argument('--batches', type=int, default=20)
    p.add_argument('--reps', type=int, default=3)
    p.add_argument('--models', default='sage,gcn,gat')
    p.add_argument('--out', default='benchmarks/results/compute_bound.json')
    args = p.parse_args()
    dev = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
    torch.backends.cuda.matmul.allow_tf32 = True
    fanout = [int(k) for k in args.fanout.split(',')]
    size = PRESETS[args.preset]
    data = power_law_graph(size['num_nodes'], size['num_edges'],
                           num_features=args.num_features, num_classes=47,
                           device=dev, seed=0)
    loader = HybridNeighborLoader(data, fanout, batch_size=args.batch_size,
                                  input_nodes=data.train_mask, shuffle=True,
                                  device=dev, seed=0)
    batches = []
    for b in loader:
        batches.append(b)
        if len(batches) == args.batches:
            break
    sorted_by_col = all(
        bool((b.edge_index[1, 1:] >= b.edge_index[1, :-1]).all())
        for b in batches)
    res = {'machine': machine_info(), 'config': vars(args),
           'sorted_by_col': sorted_by_col, 'runs': {}}
    log(f'{len(batches)} batches, edges sorted by destination: '
        f'{sorted_by_col}')
    for name in args.models.split(','):
        for trim in (True, False):
            torch.manual_seed(0)
            model = MODELS[name](args.num_features, args.hidden, 3,
                                 47).to(dev)
            init = {k: v.clone() for k, v in model.state_dict().items()}
            ref = None
            for fmt in FORMATS:
                model.load_state_dict(init)
                opt = torch.optim.Adam(model.parameters(), lr=1e-3)
                eis = [as_format(b.edge_index, b.num_nodes, fmt)
                       for b in batches]
                key = f'{name}/{"trim" if trim else "no_trim"}/{fmt}'
                model.eval()
                try:
                    with torch.no_grad():
                        out = model(batches[0].x, eis[0]).float()
                except (RuntimeError, TypeError, ValueError) as e:
                    res['runs'][key] = {'error': f'{type(e).__name__}: {e}'}
                    log(f'{key}: not supported ({e})')
                    continue
                diff = 0.0 if ref is None else float(
                    (out - ref).abs().max())
                ref = out if ref is None else ref
                model.train()
                for b, ei in zip(batches[:3], eis[:3]):
                    step(model, opt, b, ei, trim)
                if dev.type == 'cuda':
                    torch.cuda.synchronize()
                t = time.perf_counter()
                for _ in range(args.reps):
                    for b, ei in zip(batches, eis):
                        step(model, opt, b, ei, trim)
                if dev.type == 'cuda':
                    torch.cuda.synchronize()
                ms = 1e3 * (time.perf_counter() - t) / (args.reps *
                                                        len(batches))
                res['runs'][key] = {'ms_per_batch': ms,
                                    'max_abs_diff': diff}
                log(f'{key}: {ms:.2f} ms/batch, max |diff| {diff:.2e}')
    for key, v in res['runs'].items():
        base = res['runs'][key.rsplit('/', 1)[0] + '/tensor']
        if 'ms_per_batch' in v:
            v['speedup'] = base['ms_per_batch'] / v['ms_per_batch']
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1, default=str))
    log(f'wrote {args.out}')


if __name__ == '__main__':
    main()
