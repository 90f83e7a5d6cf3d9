"""Type aliases shared across :mod:`pyg_orch`, following PyG's
(:mod:`torch_geometric.typing`)."""
from typing import Dict, List, Tuple, Union

import torch
from torch_geometric.data import Data, FeatureStore, GraphStore, HeteroData
from torch_geometric.sampler.base import NumNeighbors
from torch_geometric.typing import (
    EdgeType,
    InputNodes,
    NodeType,
    OptTensor,
)

#: A graph as PyG's loaders take it.
GraphData = Union[Data, HeteroData, Tuple[FeatureStore, GraphStore]]

#: Fan-outs per hop, per edge type, or PyG's :class:`NumNeighbors`.
NumNeighborsType = Union[NumNeighbors, List[int], Dict[EdgeType, List[int]]]

#: A device, by object or name; :obj:`None` picks CUDA when available.
DeviceLike = Union[None, str, torch.device]

#: A seed for reproducible sampling, or a generator to draw from.
SeedLike = Union[None, int, torch.Generator]

__all__ = [
    'DeviceLike',
    'EdgeType',
    'GraphData',
    'InputNodes',
    'NodeType',
    'NumNeighborsType',
    'OptTensor',
    'SeedLike',
]
