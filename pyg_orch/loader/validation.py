"""Argument checks of the hybrid loaders: the argument named, the expected
form given."""
import math
from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_orch.features.partition_stores import (
    PartitionGraphStore,
    check_label_edges,
    check_seeds,
    split_edge_type,
    split_node_type,
)
from pyg_orch.topology.sparse_adj import edge_index_of
from pyg_orch.topology.graph import check_not_nan
from pyg_orch.core.checks import (
    check_bool,
    check_choice,
    check_int,
    check_seconds,
)


#: The boolean arguments of :class:`torch.utils.data.DataLoader` (a truthy
#: string such as :obj:`shuffle='no'` would mean :obj:`True`).
_LOADER_FLAGS = ('shuffle', 'drop_last', 'pin_memory', 'persistent_workers')


def check_loader_kwargs(kwargs: dict, device: torch.device) -> None:
    if kwargs.get('batch_sampler') is None:
        check_int('batch_size', kwargs.get('batch_size', 1), 1)
    for name in _LOADER_FLAGS:
        if name in kwargs:
            check_bool(name, kwargs[name])
    if 'timeout' in kwargs:
        check_seconds('timeout', kwargs['timeout'])
    num_workers = check_int('num_workers', kwargs.get('num_workers', 0))
    if device.type == 'cuda' and num_workers > 0:
        raise ValueError(
            "'num_workers' > 0 is not supported with a CUDA 'device': "
            "sampling then runs on the GPU in the main process; use "
            "num_workers=0, or device='cpu' to sample in worker processes")


def check_input_nodes(data: Any, input_nodes: Any) -> Any:
    r"""Validates :obj:`input_nodes` and returns it in a form that PyG's
    :func:`~torch_geometric.loader.utils.get_input_nodes` accepts."""
    node_type: Optional[str] = None
    nodes = input_nodes
    if isinstance(data, HeteroData):
        node_type, nodes = split_node_type(input_nodes, data.node_types, True)
        num_nodes = data[node_type].num_nodes
    elif isinstance(data, Data):
        if isinstance(input_nodes, (tuple, str)):
            raise ValueError("'input_nodes' must be None, an index tensor or "
                             "a boolean mask for homogeneous graphs")
        num_nodes = data.num_nodes
    else:
        return input_nodes  # Remote backends: PyG resolves it.

    if nodes is None:
        return input_nodes
    nodes = check_seeds(nodes, num_nodes, node_type)
    return (node_type, nodes) if node_type is not None else nodes


def check_temporal_args(input_time, time_attr, temporal_strategy,
                        weight_attr) -> None:
    if input_time is not None and time_attr is None:
        raise ValueError("Received conflicting 'input_time' and 'time_attr' "
                         "arguments: 'input_time' is set while 'time_attr' "
                         "is not set.")
    check_choice('temporal_strategy', temporal_strategy, ('uniform', 'last'))


def check_pipeline_args(prefetch: Any, lookahead: Any,
                        num_workers: int) -> None:
    r"""Checks :obj:`prefetch` and :obj:`lookahead`, which both keep batches
    in flight in the main process."""
    check_int('prefetch', prefetch)
    if prefetch > 0 and num_workers > 0:
        raise ValueError("'prefetch' > 0 needs num_workers=0 (workers "
                         "already prepare batches ahead)")
    check_bool('lookahead', lookahead, optional=True)
    if lookahead and (prefetch > 0 or num_workers > 0):
        raise ValueError("'lookahead=True' needs num_workers=0 and "
                         "prefetch=0 (it keeps one batch ahead in the "
                         "loop's own thread)")


def _check_1d(t: Any, name: str, per: str) -> None:
    if not isinstance(t, Tensor) or t.dim() != 1:
        raise ValueError(f"{name} must be a one-dimensional tensor with one "
                         f"{per}")
    if t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"{name} must be integer or floating point (got "
                         f"{t.dtype})")


def _check_times(times: Any, name: str, per: str, what: str) -> None:
    _check_1d(times, f"'{name}'", f'time per {per}')
    check_not_nan(times, f"'{name}'", what)


def check_input_time(input_time, input_nodes, data) -> Optional[Tensor]:
    r"""Checks that :obj:`input_time` gives one time per seed."""
    if input_time is None:
        return None
    _check_times(input_time, 'input_time', 'seed', 'seed')
    node_type, nodes = None, input_nodes
    if isinstance(input_nodes, tuple):
        node_type, nodes = input_nodes
    elif isinstance(input_nodes, str):
        node_type, nodes = input_nodes, None
    num = None
    if isinstance(nodes, Tensor):
        num = int(nodes.sum()) if nodes.dtype == torch.bool else nodes.numel()
    elif nodes is None and isinstance(data, HeteroData) and node_type:
        num = data[node_type].num_nodes
    elif nodes is None and isinstance(data, Data):
        num = data.num_nodes
    if num is not None:
        if input_time.numel() != num:
            raise ValueError(f"'input_time' has {input_time.numel()} entries, "
                             f"but there are {num} seeds in 'input_nodes'")
    return input_time


# Link-level loading ##########################################################


def check_edge_label_index(data: Any, edge_label_index: Any) -> Any:
    r"""Validates :obj:`edge_label_index` and returns it as PyG's
    :func:`~torch_geometric.loader.utils.get_edge_label_index` takes it."""
    if not isinstance(data, (Data, HeteroData)):
        return edge_label_index  # Remote backends: PyG resolves it.
    if isinstance(data, Data):
        _, index = split_edge_type(edge_label_index, False)
        return None if index is None else check_label_edges(
            index, data.num_nodes, data.num_nodes)
    edge_type, index = split_edge_type(edge_label_index, True)
    if isinstance(edge_type, (tuple, list)) and all(
            isinstance(t, str) for t in edge_type) and \
            len(edge_type) in (2, 3):
        try:
            edge_type = data._to_canonical(*edge_type)
        except (TypeError, ValueError, KeyError, AssertionError):
            pass
    # As in PyG, label edges may be of a type the graph holds no edges of
    # (e.g. a graph without edges), if both node types exist:
    if edge_type not in data.edge_types and (
            index is None or not isinstance(edge_type, tuple)
            or len(edge_type) != 3
            or edge_type[0] not in data.node_types
            or edge_type[-1] not in data.node_types):
        raise ValueError(f"'edge_label_index' names the edge type "
                         f"{edge_type!r}, which is not in the graph (edge "
                         f"types: {data.edge_types})")
    if index is None:
        return (edge_type, edge_index_of(data[edge_type]))
    index = check_label_edges(index, data[edge_type[0]].num_nodes,
                              data[edge_type[-1]].num_nodes, edge_type[0],
                              edge_type[-1])
    return (edge_type, index)


def num_label_edges(edge_label_index: Any, data: Any) -> Optional[int]:
    r"""The number of label edges (:obj:`None` if not known here)."""
    if edge_label_index is None and isinstance(data, Data):
        return data.num_edges
    if isinstance(edge_label_index, tuple):
        edge_label_index = edge_label_index[1]
    if isinstance(edge_label_index, Tensor):
        return edge_label_index.size(-1)
    return None


def check_edge_label(edge_label: Any, num: Optional[int]) -> None:
    r"""Checks that :obj:`edge_label` has one row per label edge."""
    if edge_label is None:
        return
    if not isinstance(edge_label, Tensor) or edge_label.dim() == 0:
        raise ValueError("'edge_label' must be a tensor with one label per "
                         "edge of 'edge_label_index'")
    if num is not None and edge_label.size(0) != num:
        raise ValueError(f"'edge_label' has {edge_label.size(0)} entries, "
                         f"but 'edge_label_index' holds {num} edges")


def check_edge_label_time(edge_label_time: Any, time_attr: Optional[str],
                          num: Optional[int]) -> None:
    r"""Checks :obj:`edge_label_time` (with PyG's message when it is given
    without :obj:`time_attr` or the other way around)."""
    if (edge_label_time is not None) != (time_attr is not None):
        raise ValueError(
            f"Received conflicting 'edge_label_time' and 'time_attr' "
            f"arguments: 'edge_label_time' is "
            f"{'set' if edge_label_time is not None else 'not set'} "
            f"while 'time_attr' is "
            f"{'set' if time_attr is not None else 'not set'}. "
            f"Both arguments must be provided for temporal sampling.")
    if edge_label_time is None:
        return
    _check_times(edge_label_time, 'edge_label_time',
                 "edge of 'edge_label_index'", 'label edge')
    if num is not None and edge_label_time.numel() != num:
        raise ValueError(f"'edge_label_time' has {edge_label_time.numel()} "
                         f"entries, but 'edge_label_index' holds {num} "
                         f"edges")


def check_neg_sampling(neg_sampling: Any, neg_sampling_ratio: Any,
                       edge_label: Any, data: Any,
                       edge_label_index: Any) -> Any:
    r""":obj:`neg_sampling` (or :obj:`neg_sampling_ratio`) checked, as a
    :class:`NegativeSampling` or :obj:`None`."""
    from torch_geometric.sampler import NegativeSampling
    if neg_sampling_ratio is not None:
        if isinstance(neg_sampling_ratio, bool) or not isinstance(
                neg_sampling_ratio, (int, float)):
            raise ValueError(f"'neg_sampling_ratio' must be a number "
                             f"(got {neg_sampling_ratio!r})")
        if neg_sampling_ratio < 0:
            raise ValueError(f"'neg_sampling_ratio' must not be negative: "
                             f"the attribute 'amount' needs to be positive "
                             f"(got {neg_sampling_ratio})")
        if neg_sampling_ratio != 0.0:
            neg_sampling = NegativeSampling('binary', neg_sampling_ratio)
    if neg_sampling is None:
        return None
    if not isinstance(neg_sampling, NegativeSampling):
        try:
            neg_sampling = NegativeSampling.cast(neg_sampling)
        except (TypeError, ValueError) as e:
            raise ValueError(f"'neg_sampling' must be a NegativeSampling, a "
                             f"mode string ('binary' or 'triplet') or its "
                             f"arguments as a dict or tuple ({e})") from None
    if neg_sampling.mode.value not in ('binary', 'triplet'):
        raise ValueError(f"'neg_sampling' mode must be 'binary' or "
                         f"'triplet' (got {neg_sampling.mode!r})")
    _check_amount(neg_sampling.amount)
    if neg_sampling.is_triplet():
        if neg_sampling.amount != math.ceil(neg_sampling.amount):
            raise ValueError(f"'neg_sampling': the attribute 'amount' needs "
                             f"to be an integer with 'triplet' negative "
                             f"sampling (got {neg_sampling.amount})")
        if edge_label is not None:
            raise ValueError("'edge_label' needs to be undefined for "
                             "'triplet'-based negative sampling: use "
                             "'src_index', 'dst_pos_index' and "
                             "'dst_neg_index' of the returned mini-batch "
                             "instead")
    edge_type = edge_label_index[0] if isinstance(edge_label_index,
                                                  tuple) else None
    for name, end in (('src_weight', 0), ('dst_weight', -1)):
        node_type = None if edge_type is None else edge_type[end]
        n = None
        if isinstance(data, Data):
            n = data.num_nodes
        elif isinstance(data, HeteroData) and node_type is not None:
            n = data[node_type].num_nodes
        elif isinstance(data, tuple) and \
                isinstance(data[1], PartitionGraphStore):
            n = data[1].num_nodes[node_type]  # Of the whole graph.
        _check_weight(getattr(neg_sampling, name), name, n, node_type)
    return neg_sampling


def _check_amount(amount: Any) -> None:
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) \
            or not math.isfinite(amount):
        raise ValueError(f"'neg_sampling': the attribute 'amount' must be a "
                         f"positive number (got {amount!r})")
    if amount <= 0:
        raise ValueError(f"'neg_sampling': the attribute 'amount' needs to "
                         f"be positive (got {amount})")


def _check_weight(weight: Any, name: str, num_nodes: Optional[int],
                  node_type: Any) -> None:
    if weight is None:
        return
    where = f"'neg_sampling.{name}'"
    _check_1d(weight, where, 'weight per node')
    if num_nodes is not None and weight.numel() != num_nodes:
        raise ValueError(f"{where} must hold one weight per vertex of the "
                         f"whole graph: it needs to match the number of "
                         f"nodes {num_nodes} of node type {node_type!r} "
                         f"(got {weight.numel()})")
    w = weight.detach().to('cpu', torch.float64)
    if not bool(torch.isfinite(w).all()) or bool((w < 0).any()) or \
            not float(w.sum()) > 0:
        raise ValueError(f"{where} must be finite and non-negative, with a "
                         f"positive sum")
