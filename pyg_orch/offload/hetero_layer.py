"""The first layer of a heterogeneous model, computed on the CPU."""
import itertools
import os
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.typing import EdgeType, NodeType

from pyg_orch.offload.aggregate_split import (
    AGGREGATE,
    OUTPUT,
    call_layer,
    check_split,
)
from pyg_orch.offload.bottom_layer import (
    BottomLayerComputer,
    message_passing_layers,
)


def find_hetero_first_layer(
    model: torch.nn.Module,
    edge_types: List[EdgeType],
    layer: Optional[str] = None,
) -> Tuple[str, Dict[EdgeType, MessagePassing]]:
    r"""The name of a heterogeneous model's first layer and its module per edge
    type."""
    # Per-edge-type module names: 'src__rel__dst' or '<src___rel___dst>'.
    keys = {k: et for et in edge_types
            for k in ('__'.join(et), '<' + '___'.join(et) + '>')}
    groups: Dict[str, Dict[EdgeType, MessagePassing]] = {}
    for name, module in message_passing_layers(model).items():
        prefix, _, key = name.rpartition('.')
        if key in keys:
            groups.setdefault(prefix, {})[keys[key]] = module
    if layer is not None:
        if not isinstance(layer, str) or layer not in groups:
            raise ValueError(
                f"'layer' must name the module holding the first layer's "
                f"per-edge-type message-passing modules (one of "
                f"{sorted(groups)}); got {layer!r}")
        return layer, groups[layer]
    if not groups:
        raise ValueError(
            f"{type(model).__name__} has no message-passing module named "
            f"after an edge type of the graph ({list(edge_types)}): "
            f"bottom-layer offload on heterogeneous graphs needs a model "
            f"made by torch_geometric.nn.to_hetero() or built from HeteroConv")
    name = next(iter(groups))
    return name, groups[name]


def common_prefix(model: torch.nn.Module,
                  convs: Dict[EdgeType, torch.nn.Module]) -> str:
    r"""The longest dotted module path of :obj:`model` that all
    :obj:`convs` lie under."""
    names = {id(m): name for name, m in model.named_modules()}
    parts = [names[id(m)].split('.') for m in convs.values()]
    return '.'.join(os.path.commonprefix(parts))


def combined_ids(edge_types: List[EdgeType], num_nodes: Dict[NodeType, int]
                 ) -> Tuple[List[NodeType], Dict[NodeType, int]]:
    r"""The destination types of :obj:`edge_types` and where their ids start
    in one id space."""
    node_types = list(dict.fromkeys(et[-1] for et in edge_types))
    starts = itertools.accumulate((int(num_nodes[t]) for t in node_types),
                                  initial=0)
    return node_types, dict(zip(node_types, starts))


class HeteroBottomLayerComputer:
    r"""One :class:`BottomLayerComputer` per edge type; destination types
    share one id space (:attr:`offsets`), and a row holds every edge type's
    output at its :attr:`columns`.

    Args:
        num_neighbors (Dict[EdgeType, int]): Bottom-hop fan-out per edge
            type (:obj:`-1` for all neighbors).
        make_part (callable, optional): :obj:`make_part(edge_type, conv,
            num_neighbors, seed)` returns an edge type's computer instead
            (e.g. over a partition's tables).
    """
    def __init__(self, convs: Dict[EdgeType, torch.nn.Module],
                 x_dict: Dict[NodeType, Tensor], csc_dict: Dict[EdgeType, Any],
                 num_neighbors: Dict[EdgeType, int],
                 num_nodes: Dict[NodeType, int], replace: bool = False,
                 seed: Optional[int] = None,
                 autocast_dtype: Optional[torch.dtype] = None,
                 make_part: Optional[Callable[..., BottomLayerComputer]]
                 = None):
        self.edge_types = list(convs)
        self.node_types, self.offsets = combined_ids(self.edge_types,
                                                     num_nodes)
        self.sizes = {t: int(num_nodes[t]) for t in self.node_types}
        self.parts: List[BottomLayerComputer] = []
        for i, et in enumerate(self.edge_types):
            src, _, dst = et
            k = int(num_neighbors[et])
            gen_seed = None if seed is None else seed + 7919 * (i + 1)
            if make_part is not None:
                part = make_part(et, convs[et], k, gen_seed)
            else:
                part = BottomLayerComputer(
                    convs[et], x_dict[dst], csc_dict[et], k, replace=replace,
                    seed=gen_seed, dedup=False, autocast_dtype=autocast_dtype,
                    x_src=None if src == dst else x_dict[src])
            self.parts.append(part)
        self.autocast_dtype = autocast_dtype
        self.split = OUTPUT
        self.kinds: Dict[EdgeType, str] = {}
        # Every edge type's columns and the row width (set by `choose_split`):
        self.columns: Dict[EdgeType, Tuple[int, int]] = {}
        self.width = 0
        self._local = threading.local()

    @property
    def num_neighbors(self) -> int:
        r"""Most sampled neighbors per vertex (:obj:`-1`: all)."""
        if any(p.num_neighbors < 0 for p in self.parts):
            return -1
        per_type = {t: 0 for t in self.node_types}
        for et, p in zip(self.edge_types, self.parts):
            per_type[et[-1]] += p.num_neighbors
        return max(per_type.values(), default=0)

    @property
    def row_bytes(self) -> int:
        return max(p.row_bytes for p in self.parts)

    def release(self) -> None:
        r"""See :meth:`BottomLayerComputer.release`: every edge type's."""
        for p in self.parts:
            p.release()
        self._local = threading.local()

    @property
    def released(self) -> bool:
        return all(p.released for p in self.parts)

    def node_type_of(self, nodes: Tensor) -> Dict[NodeType, Tuple[Tensor,
                                                                 Tensor]]:
        r"""Positions and ids within the type, per node type."""
        out = {}
        for t in self.node_types:
            lo = self.offsets[t]
            hi = lo + self.sizes[t]
            pos = ((nodes >= lo) & (nodes < hi)).nonzero().view(-1)
            if pos.numel() > 0:
                out[t] = (pos, nodes.index_select(0, pos) - lo)
        return out

    def per_type(self, values: Tensor) -> Dict[NodeType, Tensor]:
        r"""Splits a tensor over combined ids by node type."""
        return {
            t: values[self.offsets[t]:self.offsets[t] + n]
            for t, n in self.sizes.items()
        }

    def choose_split(self, nodes: Dict[NodeType, Tensor],
                     split: str = 'auto') -> str:
        r"""Decides the split for all edge types together."""
        check_split(split)
        kinds = [
            part.choose_split(nodes[et[-1]], split)
            for et, part in zip(self.edge_types, self.parts)
        ]
        if OUTPUT in kinds:  # One table: weight-free for all or for none.
            none = torch.empty(0, dtype=torch.int64)
            kinds = [part.choose_split(none, OUTPUT) for part in self.parts]
        self.kinds = dict(zip(self.edge_types, kinds))
        kind = kinds[0] if len(set(kinds)) == 1 else AGGREGATE
        self.split = kind
        # Widths of every edge type's rows:
        gen = torch.Generator().manual_seed(0)
        starts: Dict[NodeType, int] = {t: 0 for t in self.node_types}
        for et, part in zip(self.edge_types, self.parts):
            probe = nodes[et[-1]][:4].to(torch.int64)
            part.calibrate(probe)
            with torch.no_grad():
                x, edge_index = part.inputs(probe, gen)
                out = call_layer(part.template, x, edge_index)
            if out.dim() != 2:
                raise NotImplementedError(
                    f"The first layer's module for {et} returns a "
                    f"{out.dim()}-dimensional output; only [num_nodes, "
                    f"channels] outputs are supported")
            lo = starts[et[-1]]
            self.columns[et] = (lo, lo + out.size(1))
            starts[et[-1]] = lo + out.size(1)
        self.width = max(starts.values())
        return kind

    @property
    def cpu_aggregation(self) -> str:
        r"""The edge types' one way, or :obj:`'mixed'`."""
        ways = {part.cpu_aggregation for part in self.parts}
        return ways.pop() if len(ways) == 1 else 'mixed'

    def layer_for(self, key, state: Dict[str, Tensor]) -> List:
        r"""The calling thread's layer copies, holding :obj:`key`."""
        local = self._local
        if getattr(local, 'key', None) is not key:
            states: List[Dict[str, Tensor]] = [{} for _ in self.parts]
            for name, value in state.items():
                index, _, rest = name.partition('.')
                states[int(index)][rest] = value
            local.layers = [
                part.layer_for(key, s) for part, s in zip(self.parts, states)
            ]
            local.key = key
        return local.layers

    def layer_group(self, convs: Dict[EdgeType, torch.nn.Module]
                    ) -> torch.nn.Module:
        r"""The device-side layers as one module."""
        return torch.nn.ModuleDict(
            {str(i): convs[et]
             for i, et in enumerate(self.edge_types)})

    def item_generator(self, *key: int) -> Optional[torch.Generator]:
        r"""One generator for all edge types of an item."""
        return self.parts[0].item_generator(*key)

    def compute(self, layers: List, nodes: Tensor,
                generator: Optional[torch.Generator] = None) -> Tensor:
        r"""Rows of :obj:`nodes`, every edge type at its columns."""
        nodes = nodes.to(torch.int64)
        out: Optional[Tensor] = None
        for t, (pos, local) in self.node_type_of(nodes).items():
            for i, et in enumerate(self.edge_types):
                if et[-1] != t:
                    continue
                rows = self.parts[i].compute(layers[i], local, generator)
                if out is None:
                    out = rows.new_zeros(nodes.numel(), self.width)
                lo, hi = self.columns[et]
                out[pos, lo:hi] = rows
        if out is None:
            dtype = self.parts[0].x.dtype
            out = torch.zeros(nodes.numel(), self.width, dtype=dtype)
        return out
