"""Finding the first message-passing layer and computing it on the CPU."""
import copy
import threading
from typing import Any, Dict, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.nn.conv import MessagePassing

from pyg_orch.offload.aggregate_split import (
    OUTPUT,
    aggregation_copy,
    bag_aggregate,
    bag_mode,
    call_layer,
    check_split,
    choose_split,
    depends_on_source_degrees,
    rows_close,
)
from pyg_orch.sampling.neighbors import sample_neighbors, sampled_counts
from pyg_orch.topology.csc import CSCTopology


def find_first_layer(
    model: torch.nn.Module,
    layer: Union[None, str, torch.nn.Module] = None,
) -> Tuple[str, MessagePassing]:
    r"""The name and module of the first message-passing layer."""
    named = list(model.named_modules())
    if layer is not None:
        for name, module in named:
            if module is layer or (isinstance(layer, str) and name == layer):
                if not isinstance(module, MessagePassing):
                    raise ValueError(
                        f"'layer' must be a MessagePassing module (got "
                        f"{type(module).__name__} {name!r})")
                return name, module
        what = layer if isinstance(layer, str) else type(layer).__name__
        raise ValueError(f"'layer' ({what!r}) is not a module of the model")
    for name, module in named:
        if isinstance(module, MessagePassing):
            return name, module
    raise ValueError(
        f"{type(model).__name__} has no MessagePassing layer: bottom-layer "
        f"offload computes the first message-passing layer on the CPU")


def message_passing_layers(
        model: torch.nn.Module) -> Dict[str, MessagePassing]:
    r"""The outermost message-passing modules of :obj:`model`."""
    out: Dict[str, MessagePassing] = {}
    for name, module in model.named_modules():
        if not isinstance(module, MessagePassing):
            continue
        if any(name.startswith(prefix + '.') for prefix in out):
            continue
        out[name] = module
    return out


def deeper_than_loader(model: torch.nn.Module,
                       num_hops: int) -> Optional[str]:
    r"""Why a model deeper than the loader's hops is left alone."""
    num_layers = len(message_passing_layers(model))
    if num_layers <= num_hops:
        return None
    return (f"the model has {num_layers} message-passing layers but the "
            f"loader samples {num_hops} hops: its upper layers read the "
            f"bottom-hop neighbors of hot vertices too, so pruning them "
            f"would change the outputs (use as many hops as layers, e.g. "
            f"num_neighbors with {num_layers} entries)")


def needs_degree_compensation(model: torch.nn.Module) -> bool:
    r"""Whether a layer of :obj:`model` may weigh messages by the sender's
    in-degree (:obj:`False` only for classes known not to)."""
    from torch_geometric.nn import conv
    names = ('SAGEConv', 'GINConv', 'GATConv', 'GATv2Conv', 'GraphConv',
             'TransformerConv', 'ResGatedGraphConv', 'EdgeConv')
    free = tuple(getattr(conv, n) for n in names if hasattr(conv, n))
    return any(
        type(m) not in free for m in message_passing_layers(model).values())


def check_materialized(layer: torch.nn.Module, name: str) -> None:
    r"""Raises if :obj:`layer` holds lazily initialized parameters."""
    from torch.nn.parameter import UninitializedParameter
    for pname, p in layer.named_parameters():
        if isinstance(p, UninitializedParameter):
            raise ValueError(
                f"The first message-passing layer {name!r} has lazily "
                f"initialized parameters ({pname!r}); run one forward pass "
                f"(or set 'in_channels') before wrapping the model")


def placeholder_in_edges(colptr: Tensor, nodes: Tensor, rows: Tensor,
                         num_neighbors: int, replace: bool) -> Tensor:
    r"""Placeholder in-edges (from row :obj:`0`) of :obj:`rows`."""
    deg = colptr.index_select(0, nodes + 1) - colptr.index_select(0, nodes)
    count = sampled_counts(deg, num_neighbors, replace)
    dst = torch.repeat_interleave(rows, count.to(torch.int64))
    return torch.stack([torch.zeros_like(dst), dst])


def check_autocast_dtype(name: str, dtype: Optional[torch.dtype]) -> None:
    r"""Raises unless :obj:`dtype` is :obj:`None` or bfloat16."""
    if dtype not in (None, torch.bfloat16):
        raise ValueError(f"'{name}' must be None or torch.bfloat16 (got "
                         f"{dtype!r})")


def snapshot_state(layer: torch.nn.Module) -> Dict[str, Tensor]:
    r"""Clones the state of :obj:`layer` where it lives."""
    return {
        k: v.detach().clone()
        for k, v in layer.state_dict(keep_vars=False).items()
    }


class BottomLayerComputer:
    r"""Computes the first message-passing layer (or, after
    :meth:`choose_split`, its weight-free aggregation) of given vertices on
    a per-thread CPU copy, from their sampled in-neighbors.

    Args:
        num_neighbors (int): Fan-out, :obj:`-1` for all neighbors.
        dedup (bool, optional): Give a neighbor sampled several times one row
            with all its sampled in-edges, as in a mini-batch; by default only
            for layers that need it (see :func:`needs_degree_compensation`).
        autocast_dtype (torch.dtype, optional): Run the layer under CPU
            autocast in this dtype (:obj:`torch.bfloat16`).
        x_src (torch.Tensor, optional): The neighbors' features for an edge
            type between two node types (:obj:`x`: the targets'); the layer
            is then called on :obj:`(x_src, x_dst)` without dedup.
        table (HaloTable, optional): Maps the global ids of the vertices
            computed to rows of :obj:`x` and columns of :obj:`csc` (a
            partition's halo table).
    """
    def __init__(self, layer: torch.nn.Module, x: Tensor, csc: CSCTopology,
                 num_neighbors: int, replace: bool = False,
                 seed: Optional[int] = None, dedup: Optional[bool] = None,
                 autocast_dtype: Optional[torch.dtype] = None,
                 x_src: Optional[Tensor] = None, table: Any = None):
        check_autocast_dtype('autocast_dtype', autocast_dtype)
        # Copied before any hook of ours is registered on `layer`:
        self.template = copy.deepcopy(layer).to('cpu').eval()
        for p in self.template.parameters():
            p.requires_grad_(False)
        # Neighbors' rows come from `x_src` (bipartite: another type):
        self.two_types = x_src is not None
        self.x = x
        self.x_src = x if x_src is None else x_src
        self.table = table
        self.csc = csc
        self.num_neighbors = int(num_neighbors)
        self.replace = bool(replace)
        self.seed = seed
        self.dedup = False if self.two_types else \
            needs_degree_compensation(layer) if dedup is None else bool(dedup)
        self.autocast_dtype = autocast_dtype
        self.in_edge_mask = None
        self.split = OUTPUT
        #: The embedding_bag mode of a weight-free split (see choose_split).
        self.bag_mode: Optional[str] = None
        #: Whether the layer normalizes by its neighbors' degrees.
        self.degree_dependent = False
        self._layer = self.template
        self._local = threading.local()
        self._lock = threading.Lock()
        self._num_threads_seen = 0
        # Call the layer on (x_src, x_dst) if `calibrate` finds it the same:
        self.bipartite = self.two_types

    @property
    def in_edge_mask(self) -> Optional[Tensor]:
        r"""With dedup: vertices that get placeholder in-edges (by row)."""
        return self._in_edge_mask

    @in_edge_mask.setter
    def in_edge_mask(self, mask: Optional[Tensor]) -> None:
        # Given over all global ids (a table's rows are global ids):
        if mask is not None and self.table is not None:
            mask = mask.index_select(0, self.table.ids)
        self._in_edge_mask = mask

    def _rows(self, nodes: Tensor) -> Tensor:
        # The rows of `nodes` in `x` and `csc`.
        return nodes if self.table is None else self.table.rows(nodes)

    def choose_split(self, nodes: Tensor, split: str = 'auto') -> str:
        r"""Decides on a few of :obj:`nodes` what the CPU computes."""
        check_split(split)
        kind, reason = OUTPUT, 'there are no vertices to check it on'
        self.degree_dependent = False
        probe = None
        if nodes.numel() > 0:
            gen = torch.Generator().manual_seed(0)
            nodes = nodes[:64].to(torch.int64)
            x, edge_index = probe = self.inputs(nodes, gen)
            self.degree_dependent = depends_on_source_degrees(
                self._layer, x, edge_index, nodes.numel())
            if split != OUTPUT:
                kind, reason = choose_split(self._layer, x, edge_index,
                                            nodes.numel())
        if split == 'aggregate' and kind == OUTPUT:
            raise ValueError(
                f"split='aggregate' needs a first layer whose neighbor "
                f"aggregation uses no weights, but for "
                f"{type(self._layer).__name__} {reason}; use split='auto' "
                f"or 'output'")
        self.split = kind
        self.template = self._layer if kind == OUTPUT else \
            aggregation_copy(self._layer, kind)
        self.bag_mode = None
        if kind != OUTPUT and not self.dedup and probe is not None:
            self.bag_mode = self._check_bag_mode(nodes, *probe)
        return kind

    def _check_bag_mode(self, nodes: Tensor, x: Any,
                        edge_index: Tensor) -> Optional[str]:
        # The embedding_bag mode giving the aggregation's rows, else None.
        mode = bag_mode(self._layer)
        if mode is None:
            return None
        n = nodes.numel()
        with torch.no_grad():
            try:
                ref = call_layer(self.template, x, edge_index)[:n]
                fast = bag_aggregate(*self.sampled_sources(
                    nodes, torch.Generator().manual_seed(0)), n, mode)
            except Exception:  # E.g. a dtype embedding_bag does not take.
                return None
        return mode if rows_close(ref, fast) else None

    def calibrate(self, nodes: Tensor) -> bool:
        r"""Checks the layer on the CPU; uses a bipartite call if equal."""
        layer = self.template
        gen = torch.Generator().manual_seed(0)
        nodes = nodes[:64].to(torch.int64)
        if self.two_types:  # Always bipartite: checks that it runs.
            with torch.no_grad():
                call_layer(layer, *self.inputs(nodes, gen))
            return True
        with torch.no_grad():
            ids, edge_index = self.subgraph(nodes, gen)
            x = self.x.index_select(0, ids)
            full = call_layer(layer, x, edge_index)[:nodes.numel()]
            try:
                part = call_layer(layer, (x, x[:nodes.numel()]), edge_index)
                ok = part.shape == full.shape and torch.allclose(
                    part, full, rtol=1e-4, atol=1e-5)
            except Exception:
                ok = False
        self.bipartite = bool(ok)
        return self.bipartite

    def _thread_state(self):
        local = self._local
        if not hasattr(local, 'layer'):
            with self._lock:
                index = self._num_threads_seen
                self._num_threads_seen += 1
                local.layer = copy.deepcopy(self.template)
            local.key = None
            local.generator = torch.Generator()
            if self.seed is None:
                local.generator.seed()
            else:
                local.generator.manual_seed(self.seed * 1_000_003 + index)
        return local

    def layer_for(self, key, state: Dict[str, Tensor]) -> torch.nn.Module:
        r"""The calling thread's copy of the layer, holding :obj:`key`."""
        local = self._thread_state()
        if local.key is not key:
            # An aggregation copy of a 'pre_linear' layer has no 'lin':
            local.layer.load_state_dict(state, strict=self.split == OUTPUT)
            local.key = key
        return local.layer

    def release(self) -> None:
        r"""Drops the topology, features and layer copies."""
        self.x = self.x_src = self.csc = None
        self._layer = self.template = None
        self._local = threading.local()

    @property
    def released(self) -> bool:
        r"""Whether :meth:`release` was called."""
        return self.csc is None

    @property
    def cpu_aggregation(self) -> str:
        r""":obj:`'embedding_bag'` or :obj:`'layer'`."""
        return 'layer' if self.bag_mode is None else 'embedding_bag'

    @property
    def row_bytes(self) -> int:
        r"""Bytes of one feature row."""
        return self.x_src[0].numel() * self.x_src.element_size()

    def sample(self, nodes: Tensor, generator: Optional[torch.Generator]
               ) -> Tuple[Tensor, Tensor]:
        r"""In-neighbors of :obj:`nodes` and their targets' positions."""
        csc = self.csc
        pos, dst = sample_neighbors(
            csc.colptr, nodes, self.num_neighbors, self.replace, generator,
            weight=csc.weight, weight_cumsum=csc.weight_cumsum
            if csc.weight is not None and self.replace else None)
        return (csc.neighbors(pos, nodes.index_select(0, dst)).to(
            torch.int64),
                dst.to(torch.int64))

    def sampled_sources(self, nodes: Tensor,
                        generator: Optional[torch.Generator]
                        ) -> Tuple[Tensor, Tensor, Tensor]:
        r"""The rows of sampled neighbors and their targets' positions."""
        src, dst = self.sample(self._rows(nodes), generator)
        return self.x_src, src, dst

    def subgraph(self, nodes: Tensor, generator: Optional[torch.Generator]
                 ) -> Tuple[Tensor, Tensor]:
        r"""The sampled subgraph's ids (:obj:`nodes` first; two types: one
        source id per edge) and edges."""
        csc = self.csc
        n = nodes.numel()
        nodes = self._rows(nodes)
        src, dst = self.sample(nodes, generator)
        if self.two_types:
            return src, torch.stack([torch.arange(src.numel()), dst])
        nodes = nodes.to(torch.int64)
        if not self.dedup:
            return self._edge_rows(nodes, src, dst)
        ids, inv = torch.unique(torch.cat([nodes, src]),
                                return_inverse=True)
        # Renumber so that `nodes` come first, in their order:
        is_target = torch.zeros(ids.numel(), dtype=torch.bool)
        is_target[inv[:n]] = True
        order = torch.cat([inv[:n], (~is_target).nonzero().view(-1)])
        new_id = torch.empty_like(order)
        new_id[order] = torch.arange(order.numel())
        edge_index = torch.stack([new_id[inv[n:]], dst])
        ids = ids[order]
        mask = self.in_edge_mask
        if mask is not None and ids.numel() > n:
            rows = torch.arange(n, ids.numel())
            rows = rows[mask.index_select(0, ids[n:])]
            extra = placeholder_in_edges(csc.colptr, ids[rows], rows,
                                         self.num_neighbors, self.replace)
            edge_index = torch.cat([edge_index, extra], 1)
        return ids, edge_index

    @staticmethod
    def _edge_rows(nodes: Tensor, src: Tensor,
                   dst: Tensor) -> Tuple[Tensor, Tensor]:
        # One source row per sampled edge, but a self-loop's source is the
        # target's own row, so that GATConv sees it as in a mini-batch.
        n = nodes.numel()
        loop = src == nodes.index_select(0, dst)
        src_row = torch.where(loop, dst, torch.arange(n, n + src.numel()))
        return torch.cat([nodes, src]), torch.stack([src_row, dst])

    def item_generator(self, *key: int) -> Optional[torch.Generator]:
        r"""A generator for one work item (:obj:`None` without a seed)."""
        if self.seed is None:
            return None
        value = int(self.seed)
        for k in key:
            value = (value * 1_000_003 + int(k)) % (2**63 - 1)
        return torch.Generator().manual_seed(value)

    def compute(self, layer: torch.nn.Module, nodes: Tensor,
                generator: Optional[torch.Generator] = None) -> Tensor:
        r"""The layer's output for :obj:`nodes`."""
        local = self._thread_state()
        if generator is None:
            generator = local.generator
        dtype = self.autocast_dtype
        with torch.no_grad():
            if self.bag_mode is not None:
                x, src, dst = self.sampled_sources(nodes, generator)
                return bag_aggregate(x, src, dst, nodes.numel(),
                                     self.bag_mode)
            x, edge_index = self.inputs(nodes, generator)
            with torch.autocast('cpu', dtype=dtype or torch.bfloat16,
                                enabled=dtype is not None):
                out = call_layer(layer, x, edge_index)[:nodes.numel()]
            if dtype is not None and out.is_floating_point():
                out = out.to(self.x.dtype)
            return out

    def inputs(self, nodes: Tensor, generator: Optional[torch.Generator]
               ) -> Tuple[Any, Tensor]:
        r"""The layer's inputs for the subgraph of :obj:`nodes`."""
        ids, edge_index = self.subgraph(nodes, generator)
        if self.two_types:
            dst = self._rows(nodes).to(torch.int64)
            return (self.x_src.index_select(0, ids),
                    self.x.index_select(0, dst)), edge_index
        x = self.x.index_select(0, ids)
        if self.bipartite:
            return (x, x[:nodes.numel()]), edge_index
        return x, edge_index
