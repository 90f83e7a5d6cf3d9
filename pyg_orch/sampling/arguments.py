"""Argument parsing for :class:`~pyg_orch.HybridNeighborSampler` and
:class:`~pyg_orch.HybridNeighborLoader`: bad input fails early, with the
argument named and the expected form given."""
import numbers
import warnings
from typing import Dict, List, Optional, Sequence, Union

import torch
from torch_geometric.sampler.base import NumNeighbors, SubgraphType

from pyg_orch.typing import DeviceLike, EdgeType, NumNeighborsType


def check_choice(name: str, value, choices: Sequence[str]) -> None:
    r"""Raises a :class:`ValueError` naming :obj:`name` unless :obj:`value`
    is one of :obj:`choices`."""
    if value not in choices:
        options = ', '.join(repr(c) for c in choices[:-1])
        options = f'{options} or {choices[-1]!r}' if options else \
            repr(choices[-1])
        raise ValueError(f"'{name}' must be {options} (got {value!r})")


def resolve_device(device: DeviceLike) -> torch.device:
    r"""Returns :obj:`device`, defaulting to CUDA when available."""
    if device is None:
        device = 'cuda' if torch.cuda.is_available() else 'cpu'
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"'device' must be a torch.device or a string such "
                         f"as 'cpu' or 'cuda:0' (got {device!r})") from e
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise ValueError(f"'device' is {str(device)!r}, but CUDA is not "
                         f"available on this machine; use device='cpu'")
    if device.type not in ('cpu', 'cuda'):
        raise ValueError(f"'device' must be a CPU or CUDA device "
                         f"(got {str(device)!r})")
    if device.type == 'cuda' and device.index is None:
        device = torch.device('cuda', torch.cuda.current_device())
    return device


def parse_subgraph_type(subgraph_type: Union[SubgraphType, str],
                        directed: bool, disjoint: bool) -> SubgraphType:
    r"""Validates :obj:`subgraph_type` (and the deprecated
    :obj:`directed=False`, which means :obj:`'induced'`)."""
    if not directed:
        warnings.warn(
            "The usage of the 'directed' argument is deprecated. Use "
            "`subgraph_type='induced'` instead.", stacklevel=3)
        subgraph_type = SubgraphType.induced
    try:
        subgraph_type = SubgraphType(subgraph_type)
    except ValueError:
        raise ValueError(f"'subgraph_type' must be one of 'directional', "
                         f"'bidirectional' or 'induced' (got "
                         f"{subgraph_type!r})") from None
    if disjoint and subgraph_type == SubgraphType.induced:
        raise ValueError("'disjoint' sampling is not supported with "
                         "subgraph_type='induced'")
    return subgraph_type


def check_attr_names(**names: Optional[str]) -> None:
    r"""Checks that every given attribute name (e.g. :obj:`time_attr`) is a
    string or :obj:`None`."""
    for name, value in names.items():
        if value is not None and not isinstance(value, str):
            raise ValueError(f"'{name}' must be the name of an attribute "
                             f"(got {type(value).__name__})")


def _check_fanouts(values, where: str) -> List[int]:
    if not isinstance(values, (list, tuple)):
        raise ValueError(f"'num_neighbors'{where} must be a list of "
                         f"integers (got {type(values).__name__})")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise ValueError(f"'num_neighbors'{where} must hold integers "
                             f"(got {v!r})")
        if v < -1:
            raise ValueError(f"'num_neighbors'{where} must hold integers "
                             f">= -1, where -1 takes all neighbors "
                             f"(got {v})")
        out.append(int(v))
    return out


def parse_num_neighbors(num_neighbors: NumNeighborsType,
                        edge_types: List[Optional[EdgeType]]
                        ) -> Dict[Optional[EdgeType], List[int]]:
    r"""Validates :obj:`num_neighbors` (a list, or a dict per edge type) and
    returns the fan-out list of every edge type."""
    if isinstance(num_neighbors, NumNeighbors):
        if num_neighbors.default is not None:
            raise NotImplementedError(
                "'num_neighbors' with a 'default' is not supported yet; pass "
                "a dict with every edge type")
        num_neighbors = num_neighbors.values
    if isinstance(num_neighbors, dict):
        if edge_types == [None]:
            raise ValueError("'num_neighbors' must be a list for homogeneous "
                             "graphs (got a dict)")
        given = {}
        for key, values in num_neighbors.items():
            et = tuple(key.split('__')) if isinstance(key, str) else tuple(key)
            if et not in edge_types:
                raise ValueError(f"'num_neighbors' names the edge type {key!r}"
                                 f", which is not in the graph (edge types: "
                                 f"{edge_types})")
            given[et] = _check_fanouts(values, f"[{key!r}]")
        missing = [et for et in edge_types if et not in given]
        if missing:
            raise ValueError(f"'num_neighbors' misses the edge types "
                             f"{missing}; give a fan-out list for every edge "
                             f"type (0 to skip one)")
        hops = {len(v) for v in given.values()}
        if len(hops) > 1:
            raise ValueError(f"'num_neighbors' must give the same number of "
                             f"hops for every edge type (got {sorted(hops)})")
        return given
    values = _check_fanouts(num_neighbors, '')
    return {et: values for et in edge_types}
