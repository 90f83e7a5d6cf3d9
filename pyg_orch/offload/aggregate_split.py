"""Splitting the first layer at its weight-free aggregation."""
import copy
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn.conv import MessagePassing

from pyg_orch.core.checks import check_choice

#: The CPU side computes the layer's output with a weight snapshot.
OUTPUT = 'output'
#: The CPU side computes the aggregation, which uses no parameter.
AGGREGATE = 'aggregate'
#: The layer applies a bias-free :obj:`lin` before propagating (as
#: :class:`~torch_geometric.nn.conv.GCNConv`): the CPU aggregates raw features.
PRE_LINEAR = 'pre_linear'


def check_split(split: str) -> None:
    r"""Raises a :class:`ValueError` for an unknown :obj:`split`."""
    check_choice('split', split, ('auto', AGGREGATE, OUTPUT))


class Aggregated(Exception):
    r"""Carries the aggregation out of a CPU copy's layer."""
    def __init__(self, out: Tensor):
        super().__init__()
        self.out = out


def _stop_after_aggregate(module, inputs, out):
    raise Aggregated(out)


def call_layer(layer: torch.nn.Module, x, edge_index: Tensor) -> Tensor:
    r"""The (first) output of :obj:`layer`, or its aggregation."""
    try:
        out = layer(x, edge_index)
    except Aggregated as stop:
        out = stop.out
    return out[0] if isinstance(out, (tuple, list)) else out


def aggregation_copy(layer: MessagePassing,
                     kind: str) -> MessagePassing:
    r"""A copy of :obj:`layer` that returns its aggregation."""
    out = copy.deepcopy(layer)
    if kind == PRE_LINEAR:
        out.lin = torch.nn.Identity()
    out.register_aggregate_forward_hook(_stop_after_aggregate)
    out.register_message_and_aggregate_forward_hook(_stop_after_aggregate)
    return out


def _perturbed(layer: torch.nn.Module) -> torch.nn.Module:
    out = copy.deepcopy(layer)
    gen = torch.Generator().manual_seed(12345)
    with torch.no_grad():
        for p in out.parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            p.add_(noise.to(p.dtype) + 1.0)
    return out


def rows_close(a: Tensor, b: Tensor) -> bool:
    r"""Whether two row blocks agree to float32 rounding."""
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-4,
                                                 atol=1e-5)


def choose_split(layer: torch.nn.Module, x: Tensor, edge_index: Tensor,
                 num_targets: int) -> Tuple[str, str]:
    r""":obj:`'aggregate'`, :obj:`'pre_linear'` or :obj:`'output'` (and why)
    for :obj:`layer`, checked on its first :obj:`num_targets` rows."""
    if not isinstance(layer, MessagePassing):
        return OUTPUT, f'{type(layer).__name__} is not a MessagePassing layer'
    if getattr(layer, 'decomposed_layers', 1) != 1:
        return OUTPUT, ('it aggregates in several parts (decomposed_layers '
                        '> 1)')
    if getattr(layer, 'explain', False):
        return OUTPUT, 'it is in explain mode'

    def aggregate(module, kind):
        return call_layer(aggregation_copy(module, kind), x,
                          edge_index)[:num_targets]

    with torch.no_grad():
        try:
            agg = aggregate(layer, AGGREGATE)
            other = aggregate(_perturbed(layer), AGGREGATE)
        except Exception as exc:  # E.g. a fused path without hooks.
            return OUTPUT, f'its aggregation can not be hooked ({exc})'
        if rows_close(agg, other):
            return AGGREGATE, ''
        lin = getattr(layer, 'lin', None)
        if isinstance(lin, torch.nn.Module) and getattr(
                lin, 'bias', None) is None and hasattr(lin, 'weight'):
            try:
                raw = aggregate(layer, PRE_LINEAR)
                other = aggregate(_perturbed(layer), PRE_LINEAR)
                ok = rows_close(raw, other) and rows_close(lin(raw), agg)
            except Exception:
                ok = False
            if ok:
                return PRE_LINEAR, ''
    return OUTPUT, ('its aggregation depends on its parameters (e.g. '
                    'attention, or a projection before aggregating)')


def depends_on_source_degrees(layer: torch.nn.Module, x: Tensor,
                              edge_index: Tensor, num_targets: int) -> bool:
    r"""Whether the targets' rows depend on their sources' degrees."""
    if not isinstance(x, Tensor):  # Bipartite inputs: not probed.
        return False
    row, col = edge_index
    sources = row[(col < num_targets) & (row >= num_targets)]
    if sources.numel() == 0 or x.size(0) < 2:
        return False
    src = int(sources[0])
    other = 0 if src != 0 else 1  # Any other vertex.
    extra = torch.tensor([[other] * 3, [src] * 3], dtype=edge_index.dtype)
    with torch.no_grad():
        try:
            before = call_layer(layer, x, edge_index)[:num_targets]
            after = call_layer(layer, x, torch.cat([edge_index, extra], 1))
        except Exception:  # A layer that can not take the probe.
            return False
    return not rows_close(before, after[:num_targets])


#: PyG aggregation names and their embedding_bag modes.
BAG_MODES = {'mean': 'mean', 'add': 'sum', 'sum': 'sum', 'max': 'max'}


def bag_mode(layer: torch.nn.Module) -> Optional[str]:
    r"""The :func:`~torch.nn.functional.embedding_bag` mode of the layer."""
    aggr = getattr(layer, 'aggr', None)
    return BAG_MODES.get(aggr) if isinstance(aggr, str) else None


def bag_aggregate(x: Tensor, src: Tensor, dst: Tensor, num_targets: int,
                  mode: str) -> Tensor:
    r"""Aggregates rows :obj:`x[src]` per target :obj:`dst` (embedding_bag)."""
    counts = torch.bincount(dst, minlength=num_targets)
    offsets = counts.cumsum(0) - counts
    return F.embedding_bag(src, x, offsets, mode=mode)


def finish(layer: torch.nn.Module, kind: str, rows: Tensor) -> Tensor:
    r"""The device-side part of aggregated rows (:obj:`lin` or none)."""
    if kind == PRE_LINEAR:
        return layer.lin(rows)
    return rows
