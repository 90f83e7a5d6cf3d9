"""End-to-end heterogeneous training per batch for ``bench_hetero_gpu.py
--train``: a plain PyG model (``to_hetero`` of a GraphSAGE-like model,
``aggr='sum'``) trained on the batches of

* our ``HybridNeighborLoader`` (fused sampling, automatic feature store,
  features in host memory), the model step included;
* the same batches, sampled beforehand and kept on the device, only the
  model step timed (the compute-only bound);
* PyG's ``NeighborLoader`` (``pyg_lib`` or ``torch_sparse``) at each
  ``num_workers`` of a sweep, with ``persistent_workers`` and
  ``pin_memory``, batches moved to the device, the same model step.

Every timing is repeated (``repeats``): the JSON has the median, min and
max of the repeats' ms per batch, and the ratios of the medians.
"""
import itertools
import warnings
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import HeteroData

from _bench_common import (
    compile_model,
    dynamo_graphs,
    endless,
    log,
    time_pyg_workers,
    time_steps,
)


class SAGE(torch.nn.Module):
    r"""GraphSAGE layers (lazy input sizes) and a linear head, to be made
    heterogeneous by :func:`~torch_geometric.nn.to_hetero`."""
    def __init__(self, hidden: int, out: int, num_layers: int):
        super().__init__()
        from torch_geometric.nn import Linear, SAGEConv
        self.convs = torch.nn.ModuleList(
            [SAGEConv((-1, -1), hidden) for _ in range(num_layers)])
        self.lin = Linear(-1, out)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for conv in self.convs:
            x = conv(x, edge_index).relu()
        return self.lin(x)


def hetero_model(data: HeteroData, hidden: int, out: int, num_layers: int,
                 device: torch.device) -> torch.nn.Module:
    r"""The heterogeneous model (lazy sizes: :func:`init_model` runs a
    batch through it before the optimizer is made)."""
    from torch_geometric.nn import to_hetero
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        model = to_hetero(SAGE(hidden, out, num_layers), data.metadata(),
                          aggr='sum')
    return model.to(device)


def make_step(model: torch.nn.Module, target: str = 'paper'
              ) -> Callable[[HeteroData], None]:
    r"""One training step on a batch (no host synchronization): the loss of
    the :obj:`target` seeds, backward, Adam."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(batch: HeteroData) -> None:
        n = batch[target].batch_size
        opt.zero_grad(set_to_none=True)
        out = model(batch.x_dict, batch.edge_index_dict)[target][:n]
        F.cross_entropy(out, batch[target].y[:n]).backward()
        opt.step()

    return step


def init_model(model: torch.nn.Module, batch: HeteroData) -> None:
    r"""Materializes the lazy parameters."""
    with torch.no_grad():
        model(batch.x_dict, batch.edge_index_dict)


def batch_size_info(batch: HeteroData) -> Dict:
    return {'nodes_per_type': {t: int(batch[t].num_nodes)
                               for t in batch.node_types},
            'edges': sum(int(s.edge_index.size(1))
                         for s in batch.edge_stores)}


def run_train(data: HeteroData, fanout: List[int], batch_size: int,
              device: torch.device, hidden: int, num_layers: int,
              warmup: int, batches: int, repeats: int,
              pyg_workers: List[int], pyg_batches: int,
              loader_kwargs: Optional[Dict] = None,
              compile_mode: str = 'none') -> Dict:
    r"""The three timings and their ratios (see the module's docstring).
    With a :obj:`compile_mode` other than ``'none'``, every row trains
    ``torch.compile(model, dynamic=True)`` (PyG's too), and the
    compute-only bound is also timed with the eager model."""
    from pyg_orch import HybridNeighborLoader
    num_classes = int(data['paper'].y.max()) + 1
    torch.manual_seed(0)
    model = hetero_model(data, hidden, num_classes, num_layers, device)
    res: Dict = {'model': f'to_hetero(SAGE x{num_layers}, hidden {hidden}, '
                          f"aggr='sum'), Adam",
                 'num_parameters': None}

    # (a) Ours: sampling, features and the step, batch after batch.
    log('train: ours (HybridNeighborLoader + step)')
    loader = HybridNeighborLoader(
        data, fanout, batch_size=batch_size, shuffle=True,
        input_nodes='paper', device=device, seed=0, **(loader_kwargs or {}))
    batches_a = endless(loader)
    first = next(batches_a)
    init_model(model, first)
    res['num_parameters'] = sum(p.numel() for p in model.parameters())
    res['batch'] = batch_size_info(first)
    if compile_mode != 'none':
        eager_step = make_step(model)
        res['compile'] = compile_mode
        model = compile_model(model, compile_mode)
    step = make_step(model)
    loader.reset_stats()
    ours = time_steps(lambda: next(batches_a), step, warmup, batches,
                      repeats, device)
    fs = loader.feature_store
    ours.update(backend=loader.node_sampler.backend,
                lookahead=loader.lookahead,
                feature_path='cpu gather + copy (no feature store)'
                if fs is None else type(fs).__name__,
                feature_store=None if fs is None else fs.describe(),
                loader_stages=loader.stats()['stages'])
    res['ours'] = ours
    log(f"  ours: {ours['ms_per_batch']:.2f} ms/batch "
        f"({ours['backend']}, {ours['feature_path']})")

    # (b) Compute-only: the same loader's batches, on the device already.
    log('train: compute-only bound (pre-sampled batches on the device)')
    loader = HybridNeighborLoader(
        data, fanout, batch_size=batch_size, shuffle=True,
        input_nodes='paper', device=device, seed=0, **(loader_kwargs or {}))
    batches_b = endless(loader)
    kept = [next(batches_b) for _ in range(warmup + batches)]
    batches_b.close()
    loader = None
    cycle = itertools.cycle(kept)
    res['compute_only'] = time_steps(lambda: next(cycle), step, warmup,
                                     batches, repeats, device)
    if compile_mode != 'none':
        res['compute_only_eager'] = time_steps(
            lambda: next(cycle), eager_step, warmup, batches, repeats, device)
        res['compute_only_over_eager'] = (
            res['compute_only']['ms_per_batch'] /
            res['compute_only_eager']['ms_per_batch'])
        log(f"  compute-only, eager model: "
            f"{res['compute_only_eager']['ms_per_batch']:.2f} ms/batch")
    res['dynamo_graphs_before_pyg'] = dynamo_graphs()
    kept.clear()
    log(f"  compute-only: {res['compute_only']['ms_per_batch']:.2f} "
        f"ms/batch")

    # (c) PyG's NeighborLoader at each num_workers.
    res['pyg'] = run_pyg(data, fanout, batch_size, device, step,
                         pyg_workers, pyg_batches, repeats)
    res['dynamo_graphs_after_pyg'] = dynamo_graphs()

    ours_ms = ours['ms_per_batch']
    res['ratio_ours_vs_compute_only'] = \
        ours_ms / res['compute_only']['ms_per_batch']
    best = res['pyg'].get('best')
    if best is not None:
        res['pyg_best_ms_per_batch'] = best['ms_per_batch']
        res['pyg_best_num_workers'] = best['num_workers']
        res['speedup_ours_vs_pyg_best'] = best['ms_per_batch'] / ours_ms
    return res


def run_pyg(data: HeteroData, fanout: List[int], batch_size: int,
            device: torch.device, step: Callable[[HeteroData], None],
            workers: List[int], batches: int, repeats: int) -> Dict:
    r"""PyG's :class:`~torch_geometric.loader.NeighborLoader` at each
    :obj:`num_workers` (see :func:`_bench_common.time_pyg_workers`)."""
    from torch_geometric.loader import NeighborLoader

    def make_loader(w: int) -> NeighborLoader:
        return NeighborLoader(data, fanout, batch_size=batch_size,
                              shuffle=True, input_nodes='paper',
                              num_workers=w, persistent_workers=w > 0,
                              pin_memory=device.type == 'cuda')

    return time_pyg_workers(make_loader, 'train: PyG NeighborLoader', device,
                            step, workers, batches, repeats)
