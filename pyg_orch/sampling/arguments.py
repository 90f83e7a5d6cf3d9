"""Argument checks of the samplers and loaders."""
import warnings
from typing import Any, Dict, List, Optional, Union

import torch
from torch import Tensor
from torch_geometric.sampler.base import NumNeighbors, SubgraphType

from pyg_orch.core.checks import (  # noqa: F401 (re-exported)
    check_bool,
    check_bools,
    check_int,
    check_callable,
    check_choice,
    check_fraction,
    check_seconds,
    resolve_device,
)
from pyg_orch.topology.graph import check_not_nan
from pyg_orch.typing import EdgeType, NumNeighborsType


def check_placement(placement, name: str = 'topology_placement'):
    r"""Checks :obj:`topology_placement` (errors name :obj:`name`)."""
    from pyg_orch.topology.sharded import TopologySharding

    if isinstance(placement, TopologySharding):
        return placement
    check_choice(name, placement,
                 ('auto', 'device', 'host', 'sharded'))
    return TopologySharding() if placement == 'sharded' else placement


def parse_subgraph_type(subgraph_type: Union[SubgraphType, str],
                        directed: bool, disjoint: bool,
                        temporal: bool = False) -> SubgraphType:
    r"""Validates :obj:`subgraph_type` (:obj:`directed=False`: induced)."""
    directed = check_bool('directed', directed)
    disjoint = check_bool('disjoint', disjoint)
    if not directed:
        warnings.warn(
            "The usage of the 'directed' argument is deprecated. Use "
            "`subgraph_type='induced'` instead.", stacklevel=3)
        subgraph_type = SubgraphType.induced
    try:
        subgraph_type = SubgraphType(subgraph_type)
    except ValueError:
        raise ValueError(f"'subgraph_type' must be one of 'directional', "
                         f"'bidirectional' or 'induced': {subgraph_type!r} "
                         f"is not a valid SubgraphType") from None
    if disjoint and subgraph_type == SubgraphType.induced:
        raise ValueError(DISJOINT_INDUCED)
    if temporal and subgraph_type == SubgraphType.induced:
        raise ValueError(f"subgraph_type='induced' is not supported with "
                         f"temporal sampling ('time_attr'), which always "
                         f"samples disjoint subgraphs, as in PyG: "
                         f"{DISJOINT_INDUCED}")
    return subgraph_type


def as_subgraph_type(out: Any, subgraph_type: SubgraphType) -> Any:
    r""":obj:`out`, made bidirectional if :obj:`subgraph_type` says so."""
    if subgraph_type == SubgraphType.bidirectional:
        return out.to_bidirectional()
    return out


#: PyG's wording (from its sampling step) when disjoint subgraphs meet
#: :obj:`subgraph_type='induced'`, which we raise at construction.
DISJOINT_INDUCED = ("'disjoint' sampling not supported for neighbor sampling "
                    "with `subgraph_type='induced'`")


def check_attr_names(**names: Optional[str]) -> None:
    r"""Checks that every given attribute name is a string or :obj:`None`."""
    for name, value in names.items():
        if value is not None and not isinstance(value, str):
            raise ValueError(f"'{name}' must be the name of an attribute "
                             f"(got {type(value).__name__})")


def check_fanouts(values, where: str = '') -> List[int]:
    r"""Checks a fan-out list (:obj:`where` locates it)."""
    if not isinstance(values, (list, tuple)):
        raise ValueError(f"'num_neighbors'{where} must be a list of "
                         f"integers (got {type(values).__name__})")
    # -1 takes all neighbors:
    return [check_int(f'num_neighbors{where}', v, -1) for v in values]


def _edge_type_of(key) -> tuple:
    # PyG's `EdgeTypeStr`: an edge type tuple or its '__'-joined string.
    return tuple(key.split('__')) if isinstance(key, str) else tuple(key)


def parse_num_neighbors(num_neighbors: NumNeighborsType,
                        edge_types: List[Optional[EdgeType]]
                        ) -> Dict[Optional[EdgeType], List[int]]:
    r"""The fan-out list of every edge type, with PyG's error wording."""
    default = None
    if isinstance(num_neighbors, NumNeighbors):
        default = num_neighbors.default
        num_neighbors = num_neighbors.values
        if default is not None and not isinstance(num_neighbors, dict):
            # `NumNeighbors.__init__` rejects this; its fields may be set
            # after construction.
            raise ValueError(f"'default' must be set to 'None' in case a "
                             f"single list is given as the number of "
                             f"neighbors (got {default!r})")
    if isinstance(num_neighbors, dict):
        if edge_types == [None]:
            raise ValueError("'num_neighbors' must be a list for homogeneous "
                             "graphs (got a dict)")
        given = {}
        for key, values in num_neighbors.items():
            et = _edge_type_of(key)
            if et not in edge_types:
                raise ValueError(
                    f"'num_neighbors' names the edge type {key!r}, which is "
                    f"not in the graph (edge types: {edge_types}). Not all "
                    f"edge types specified in 'num_neighbors' exist in the "
                    f"graph")
            given[et] = check_fanouts(values, f"[{key!r}]")
        if default is not None:
            default = check_fanouts(default, '.default')
        missing = [et for et in edge_types if et not in given]
        if missing and default is None:
            raise ValueError(
                f"Missing number of neighbors for edge type "
                f"'{missing[0]}': 'num_neighbors' misses the edge types "
                f"{missing}; give a fan-out list for every edge type (0 to "
                f"skip one), or pass a NumNeighbors with a 'default'")
        out = {et: given.get(et, default) for et in edge_types}
        hops = {len(v) for v in out.values()}
        if len(hops) > 1:
            raise ValueError(
                f"Number of hops must be the same across all edge types: "
                f"'num_neighbors' gives {sorted(hops)} hops"
                f"{' (with its default)' if missing else ''}")
        return out
    values = check_fanouts(num_neighbors, '')
    return {et: values for et in edge_types}


def integers_per_seed(value, num_seeds: int, name: str,
                      what: str = 'time') -> torch.Tensor:
    r""":obj:`value` checked as one integer per seed, as :obj:`int64`."""
    value = torch.as_tensor(value)
    if value.dim() != 1 or value.numel() != num_seeds or \
            value.is_floating_point() or value.is_complex() or \
            value.dtype == torch.bool:
        raise ValueError(f"'{name}' must hold one integer {what} per seed "
                         f"({num_seeds}), got shape {tuple(value.shape)} of "
                         f"{value.dtype}")
    return value.to(torch.int64)


def times_per_seed(value, num_seeds: int, name: str) -> torch.Tensor:
    r"""Checks that :obj:`value` holds one timestamp (not NaN) per seed;
    returns it as a tensor (:obj:`int64` for integers)."""
    value = torch.as_tensor(value)
    if value.dim() != 1 or value.numel() != num_seeds or \
            value.is_complex() or value.dtype == torch.bool:
        raise ValueError(f"'{name}' must hold one time (an integer or "
                         f"floating-point number) per seed ({num_seeds}), "
                         f"got shape {tuple(value.shape)} of {value.dtype}")
    if not value.is_floating_point():
        return value.to(torch.int64)
    check_not_nan(value, f"'{name}'", 'seed')
    return value


def node_seed_times(node_time: Optional[Dict], time_attr: Optional[str],
                    seeds: Dict, pass_what: str = "'input_time'") -> Dict:
    r"""The seeds' own node times as their time bounds, per node type."""
    if node_time is None:
        raise ValueError(
            f"Edge-level temporal sampling needs a time per seed: pass "
            f"{pass_what} (Seed time needs to be specified)")
    missing = [t for t in seeds if t not in node_time]
    if missing:
        raise ValueError(
            f"Temporal sampling needs a time per seed, but the seed node "
            f"type {missing[0]!r} has no {time_attr!r} attribute: pass "
            f"{pass_what}")
    return {
        t: node_time[t].index_select(
            0, s.to(node_time[t].device, torch.int64))
        for t, s in seeds.items()
    }


def per_node_type(value: Any, num_nodes: Dict[Any, int], name: str,
                  what: str) -> Dict[Any, Any]:
    r""":obj:`value` per node type (:obj:`{None: value}` if homogeneous)."""
    if not isinstance(value, dict):
        if None not in num_nodes:
            raise ValueError(f"'{name}' must be a dictionary of {what} per "
                             f"node type on a heterogeneous graph (got "
                             f"{type(value).__name__})")
        value = {None: value}
    for t in value:
        if t not in num_nodes:
            raise ValueError(f"'{name}' names the node type {t!r}, not one "
                             f"of {list(num_nodes)}")
    return value


def check_node_masks(masks: Any, num_nodes: Dict[Any, int],
                     device: torch.device, name: str = 'hot_nodes'
                     ) -> Optional[Dict[Any, Tensor]]:
    r"""Boolean masks per node type, checked and moved to :obj:`device`."""
    if masks is None:
        return None
    out = {}
    for t, mask in per_node_type(masks, num_nodes, name, 'masks').items():
        n = num_nodes[t]
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool \
                or tuple(mask.shape) != (n, ):
            got = f'{mask.dtype} of shape {tuple(mask.shape)}' \
                if isinstance(mask, Tensor) else type(mask).__name__
            raise ValueError(f"'{name}' must be a boolean mask of shape "
                             f"[{n}] for node type {t!r} (got {got})")
        out[t] = mask.to(device)
    return out
