"""Argument checks for :class:`pyg_orch.HybridNeighborLoader`: bad input
fails early, with the argument named and the expected form given."""
from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_orch.core.errors import GraphTypeError, graph_type_message
from pyg_orch.sampling.arguments import check_choice

# Attributes that PyG always slices per node:
_NODE_KEYS = ('x', 'y', 'pos', 'node_type', 'batch')


def check_data(data: Any) -> None:
    r"""Checks the type of :obj:`data` and that node attributes have one row
    per node."""
    if isinstance(data, Data):
        _check_node_rows(data, data.num_nodes, 'data')
    elif isinstance(data, HeteroData):
        for node_type in data.node_types:
            _check_node_rows(data[node_type], data[node_type].num_nodes,
                             f'data[{node_type!r}]')
    elif isinstance(data, (tuple, list)) and len(data) == 2:
        from torch_geometric.data import FeatureStore, GraphStore
        if not (isinstance(data[0], FeatureStore)
                and isinstance(data[1], GraphStore)):
            raise GraphTypeError(graph_type_message(data) + " ('data' "
                                 "given as a pair must be (FeatureStore, "
                                 "GraphStore))")
    else:
        raise GraphTypeError(graph_type_message(data))


def _check_node_rows(store, num_nodes: Optional[int], where: str) -> None:
    if num_nodes is None:
        raise ValueError(f"Could not infer the number of nodes of {where}; "
                         f"set {where}.num_nodes")
    for key, value in store.items():
        if not isinstance(value, Tensor) or value.dim() == 0:
            continue
        if key in _NODE_KEYS or store.is_node_attr(key):
            if key == 'y' and value.size(0) == 1 and num_nodes != 1:
                continue  # A graph-level label.
            if value.size(0) != num_nodes:
                raise ValueError(
                    f"Node attribute {where}.{key} has {value.size(0)} rows, "
                    f"but the graph has {num_nodes} nodes; node features "
                    f"need one row per node")


def check_loader_kwargs(kwargs: dict, device: torch.device) -> None:
    batch_size = kwargs.get('batch_size', 1)
    if kwargs.get('batch_sampler') is None:
        if (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                or batch_size < 1):
            raise ValueError(f"'batch_size' must be a positive integer "
                             f"(got {batch_size!r})")
    num_workers = kwargs.get('num_workers', 0)
    if not isinstance(num_workers, int) or num_workers < 0:
        raise ValueError(f"'num_workers' must be a non-negative integer "
                         f"(got {num_workers!r})")
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
        if input_nodes is None:
            raise ValueError("'input_nodes' must name the node type of the "
                             "seeds for heterogeneous graphs, as a node type "
                             "string or a (node_type, index) tuple")
        if isinstance(input_nodes, str):
            node_type, nodes = input_nodes, None
        elif isinstance(input_nodes, (tuple, list)) and len(input_nodes) == 2:
            node_type, nodes = input_nodes
        else:
            raise ValueError("'input_nodes' must be a node type or a "
                             "(node_type, index) tuple for heterogeneous "
                             "graphs")
        if node_type not in data.node_types:
            raise ValueError(f"'input_nodes' names the node type "
                             f"{node_type!r}, which is not in the graph "
                             f"(node types: {data.node_types})")
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
    if isinstance(nodes, (list, range)):
        nodes = torch.as_tensor(list(nodes), dtype=torch.long)
    if not isinstance(nodes, Tensor):
        raise ValueError(f"'input_nodes' must be an index tensor or a boolean "
                         f"mask (got {type(nodes).__name__})")
    if nodes.dtype == torch.bool:
        if nodes.dim() != 1 or nodes.numel() != num_nodes:
            raise ValueError(f"'input_nodes' as a boolean mask must have "
                             f"shape [{num_nodes}] (got {list(nodes.shape)})")
    elif nodes.dtype in (torch.int64, torch.int32, torch.int16, torch.uint8,
                         torch.int8):
        if nodes.dim() != 1:
            raise ValueError(f"'input_nodes' must be one-dimensional (got "
                             f"shape {list(nodes.shape)})")
        if nodes.numel() > 0:
            lo, hi = int(nodes.min()), int(nodes.max())
            if lo < 0 or hi >= num_nodes:
                raise ValueError(f"'input_nodes' must lie in [0, {num_nodes})"
                                 f" (got values in [{lo}, {hi}])")
        nodes = nodes.to(torch.long)
    else:
        raise ValueError(f"'input_nodes' must hold integer indices or be a "
                         f"boolean mask (got dtype {nodes.dtype})")
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
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or \
            prefetch < 0:
        raise ValueError(f"'prefetch' must be a non-negative integer "
                         f"(got {prefetch!r})")
    if prefetch > 0 and num_workers > 0:
        raise ValueError("'prefetch' > 0 needs num_workers=0 (worker "
                         "processes already prepare batches ahead)")
    if lookahead not in (None, True, False):
        raise ValueError(f"'lookahead' must be None, True or False (got "
                         f"{lookahead!r})")
    if lookahead and (prefetch > 0 or num_workers > 0):
        raise ValueError("'lookahead=True' needs num_workers=0 and "
                         "prefetch=0 (it keeps one batch ahead in the "
                         "loop's own thread)")


def check_input_time(input_time, input_nodes, data) -> Optional[Tensor]:
    r"""Checks that :obj:`input_time` gives one time per seed."""
    if input_time is None:
        return None
    if not isinstance(input_time, Tensor) or input_time.dim() != 1:
        raise ValueError("'input_time' must be a one-dimensional tensor with "
                         "one time per seed")
    if input_time.dtype == torch.bool or input_time.is_complex():
        raise ValueError(f"'input_time' must be integer or floating point "
                         f"(got {input_time.dtype})")
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
