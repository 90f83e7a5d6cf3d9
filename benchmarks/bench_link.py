"""Link prediction end to end: a GraphSAGE encoder and a dot-product decoder
trained with binary negatives on the batches of

* our ``HybridLinkNeighborLoader`` (with and without look-ahead), the model
  step included, the graph and its features on ``--device``;
* the same batches, sampled beforehand and kept on the device, only the
  model step timed (the compute-only bound);
* PyG's ``LinkNeighborLoader`` (``pyg_lib`` or ``torch_sparse``) at each
  ``--pyg-workers``, with ``persistent_workers`` (and ``pin_memory`` on
  CUDA), batches moved to the device, the same model step.

Every timing is the median of ``--repeats`` passes of ``--batches``
batches after ``--warmup`` batches (PyG's warm-up: ``2 * num_workers + 3``
batches). Ratios are of medians measured in the same run.

    python benchmarks/bench_link.py                  # 2.4M nodes, on CUDA
    python benchmarks/bench_link.py --tiny --device cpu --pyg-workers 0,1
"""
import argparse
import itertools
import json
import time
from typing import Callable, Dict, List

import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import GraphSAGE

from _bench_common import (
    REPO,
    add_preset_args,
    apply_preset,
    endless,
    int_list,
    log,
    machine_info,
    resolve_device,
    time_pyg_workers,
    time_steps,
)
from pyg_orch import HybridLinkNeighborLoader
from pyg_orch.datasets import power_law_graph


def make_step(model: torch.nn.Module, opt: torch.optim.Optimizer
              ) -> Callable[[Data], None]:
    def step(batch: Data) -> None:
        opt.zero_grad(set_to_none=True)
        z = model(batch.x, batch.edge_index)
        src, dst = batch.edge_label_index
        pred = (z[src] * z[dst]).sum(-1)
        F.binary_cross_entropy_with_logits(pred, batch.edge_label).backward()
        opt.step()

    return step


def run_pyg(data: Data, fanout: List[int], kwargs: Dict,
            device: torch.device, step: Callable[[Data], None],
            workers: List[int], args) -> Dict:
    from torch_geometric.loader import LinkNeighborLoader

    def make_loader(w: int) -> LinkNeighborLoader:
        return LinkNeighborLoader(data, fanout, num_workers=w,
                                  persistent_workers=w > 0,
                                  pin_memory=device.type == 'cuda', **kwargs)

    return time_pyg_workers(make_loader, 'PyG LinkNeighborLoader', device,
                            step, workers, args.pyg_batches, args.repeats)


def main() -> Dict:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    add_preset_args(p)
    p.add_argument('--num-nodes', type=int, default=None)
    p.add_argument('--num-edges', type=int, default=None)
    p.add_argument('--num-features', type=int, default=100)
    p.add_argument('--label-edges', type=int, default=200_000,
                   help='label edges (a random subset of the edges)')
    p.add_argument('--fanout', type=int_list, default=[15, 10])
    p.add_argument('--batch-size', type=int, default=1024,
                   help='label edges per batch (plus as many negatives)')
    p.add_argument('--hidden', type=int, default=256)
    p.add_argument('--device', default='auto',
                   choices=['auto', 'cpu', 'cuda'])
    p.add_argument('--warmup', type=int, default=5)
    p.add_argument('--batches', type=int, default=40)
    p.add_argument('--repeats', type=int, default=5)
    p.add_argument('--pyg-workers', type=int_list, default=None,
                   help="num_workers of PyG's loader to try (default: "
                   "8,12,16 on CUDA, 0 on the CPU)")
    p.add_argument('--pyg-batches', type=int, default=20)
    p.add_argument('--no-pyg', action='store_true')
    p.add_argument('--out', default=None)
    args = p.parse_args()
    apply_preset(args, 'num_nodes', 'num_edges')
    resolve_device(p, args)
    device = torch.device(args.device)
    if args.pyg_workers is None:
        args.pyg_workers = [8, 12, 16] if device.type == 'cuda' else [0]
    res: Dict = {'machine': machine_info(), 'config': vars(args)}
    torch.backends.cuda.matmul.allow_tf32 = True

    log(f'graph: {args.num_nodes} nodes, {args.num_edges} edges')
    data = power_law_graph(args.num_nodes, args.num_edges, args.num_features,
                           2, seed=0)
    del data.y, data.train_mask, data.val_mask, data.test_mask
    gen = torch.Generator().manual_seed(0)
    perm = torch.randperm(data.num_edges, generator=gen)
    label_index = data.edge_index[:, perm[:args.label_edges]]
    kwargs = dict(edge_label_index=label_index, neg_sampling='binary',
                  batch_size=args.batch_size, shuffle=True)
    data_dev = data.to(device)

    torch.manual_seed(0)
    model = GraphSAGE(args.num_features, args.hidden, len(args.fanout),
                      args.hidden).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    step = make_step(model, opt)

    def ours_loader(lookahead: bool) -> HybridLinkNeighborLoader:
        return HybridLinkNeighborLoader(data_dev, args.fanout, device=device,
                                        seed=0, lookahead=lookahead,
                                        **kwargs)

    for lookahead in (False, True):
        key = 'ours_lookahead' if lookahead else 'ours'
        log(f'{key}: HybridLinkNeighborLoader + step')
        loader = ours_loader(lookahead)
        it = endless(loader)
        res[key] = time_steps(lambda: next(it), step, args.warmup,
                              args.batches, args.repeats, device)
        res[key]['stages_ms_per_batch'] = {
            k: v['ms_per_batch']
            for k, v in loader.stats()['stages'].items()
        }
        it.close()
        log(f"  {res[key]['ms_per_batch']:.2f} ms/batch")

    log('compute-only bound (batches sampled beforehand, on the device)')
    it = endless(ours_loader(False))
    kept = [next(it) for _ in range(args.warmup + args.batches)]
    it.close()
    cycle = itertools.cycle(kept)
    res['compute_only'] = time_steps(lambda: next(cycle), step, args.warmup,
                                     args.batches, args.repeats, device)
    res['batch'] = {'nodes': kept[0].num_nodes,
                    'edges': kept[0].edge_index.size(1),
                    'label_edges': kept[0].edge_label_index.size(1)}
    kept.clear()
    log(f"  {res['compute_only']['ms_per_batch']:.2f} ms/batch")

    if not args.no_pyg:
        res['pyg'] = run_pyg(data, args.fanout, kwargs, device, step,
                             args.pyg_workers, args)
    best_ours = min(res['ours']['ms_per_batch'],
                    res['ours_lookahead']['ms_per_batch'])
    res['ours_over_compute_only'] = (res['ours_lookahead']['ms_per_batch'] /
                                     res['compute_only']['ms_per_batch'])
    best = res.get('pyg', {}).get('best')
    if best is not None:
        res['speedup_vs_pyg_best'] = {
            'ours': best['ms_per_batch'] / res['ours']['ms_per_batch'],
            'ours_lookahead':
            best['ms_per_batch'] / res['ours_lookahead']['ms_per_batch'],
            'best_of_ours': best['ms_per_batch'] / best_ours,
        }
    for key in ('ours_over_compute_only', 'speedup_vs_pyg_best'):
        if key in res:
            log(f'{key}: {res[key]}')
    out = args.out or str(REPO / 'benchmarks' / 'results' /
                          f'link_{device.type}.json')
    with open(out, 'w') as f:
        json.dump(res, f, indent=1)
    log(f'wrote {out}')
    return res


if __name__ == '__main__':
    start = time.perf_counter()
    main()
    log(f'took {time.perf_counter() - start:.0f} s')
