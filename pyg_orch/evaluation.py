r"""Accuracy protocol for node classification with and without bottom-layer
offload: the one that ``benchmarks/bench_offload.py --accuracy`` reports and
that the test suite checks in a shorter form."""
from typing import Any, Dict, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import GCN, GraphSAGE

from pyg_orch import BottomLayerOffload, HybridNeighborLoader
from pyg_orch.core.checks import check_fraction, check_int
from pyg_orch.datasets.power_law import split_masks
from pyg_orch.offload import OffloadOptions


def train_and_test(data, arch: str, seed: int, offload: bool, epochs: int,
                   max_staleness: int = 1,
                   full_neighbors: Union[bool, str] = 'auto',
                   split: str = 'auto',
                   hot_ratio: float = 0.05,
                   batch_size: int = 32,
                   model_kwargs: Optional[Dict[str, Any]] = None
                   ) -> Dict[str, Any]:
    r"""Trains a 2-layer model (64 hidden channels) on the :obj:`train_mask`
    nodes of :obj:`data` with :class:`pyg_orch.HybridNeighborLoader` (fan-out
    :obj:`[10, 5]`) and Adam for :obj:`epochs` epochs, then evaluates it on the
    full graph; returns :obj:`{'acc': ...}` (and the offload's statistics with
    :obj:`offload`).

    Args:
        data (torch_geometric.data.Data): A graph with :obj:`x`, :obj:`y`,
            :obj:`train_mask` and :obj:`test_mask`.
        arch (str): :obj:`'sage'` or :obj:`'gcn'`.
        seed (int): Seeds the model's initialization and the loader.
        offload (bool): Whether to wrap the model in
            :class:`pyg_orch.BottomLayerOffload`.
        epochs (int): Training epochs.
        batch_size (int, optional): Seed nodes per batch. (default: :obj:`32`)
        model_kwargs (dict, optional): More arguments of the model."""
    torch.manual_seed(seed)
    loader = HybridNeighborLoader(data, [10, 5], batch_size=batch_size,
                                  shuffle=True, input_nodes=data.train_mask,
                                  device='cpu', seed=seed)
    Model = GraphSAGE if arch == 'sage' else GCN
    model = Model(data.num_features, 64, 2, int(data.y.max()) + 1,
                  dropout=0.5, **(model_kwargs or {}))
    if offload:
        model = BottomLayerOffload(model, loader, options=OffloadOptions(
            seed=seed, max_staleness=max_staleness,
            full_neighbors=full_neighbors, split=split, hot_ratio=hot_ratio))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01,
                                 weight_decay=5e-4)
    for _ in range(epochs):
        model.train()
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(dim=-1)
    mask = data.test_mask
    out = {'acc': float((pred[mask] == data.y[mask]).float().mean())}
    if offload:
        stats = model.stats()
        out.update({key: stats[key] for key in (
            'num_hot', 'split', 'max_staleness_seen', 'max_table_age',
            'hot_rows_per_batch')})
        model.close()
    return out


def random_split(num_nodes: int, train_ratio: float = 0.1,
                 val_ratio: float = 0.1,
                 seed: int = 0) -> Tuple[Tensor, Tensor, Tensor]:
    r"""Seeded random node split (independent of the global RNG):
    :obj:`(train_mask, val_mask, test_mask)`, disjoint and covering all
    nodes, with fractions :obj:`train_ratio` and :obj:`val_ratio`."""
    num_nodes = check_int('num_nodes', num_nodes, 1)
    train_ratio = check_fraction('train_ratio', train_ratio)
    val_ratio = check_fraction('val_ratio', val_ratio)
    if train_ratio + val_ratio > 1.0:
        raise ValueError(f"'train_ratio' + 'val_ratio' must be at most 1 "
                         f"(got {train_ratio!r} + {val_ratio!r})")
    perm = torch.randperm(num_nodes,
                          generator=torch.Generator().manual_seed(seed))
    num_train = round(train_ratio * num_nodes)
    num_val = min(round(val_ratio * num_nodes), num_nodes - num_train)
    return split_masks(perm, num_train, num_val)
