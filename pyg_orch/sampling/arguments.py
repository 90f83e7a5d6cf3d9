"""Argument parsing for :class:`~pyg_orch.HybridNeighborSampler` and
:class:`~pyg_orch.HybridNeighborLoader`: bad input fails early, with the
argument named and the expected form given."""
import math
import numbers
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np
import torch
from torch_geometric.sampler.base import NumNeighbors, SubgraphType

from pyg_orch.core.errors import ArgumentTypeError
from pyg_orch.core.topology import check_not_nan
from pyg_orch.typing import DeviceLike, EdgeType, NumNeighborsType


def check_choice(name: str, value, choices: Sequence[str]) -> None:
    r"""Raises a :class:`ValueError` naming :obj:`name` unless :obj:`value`
    is one of :obj:`choices`."""
    if value not in choices:
        options = ', '.join(repr(c) for c in choices[:-1])
        options = f'{options} or {choices[-1]!r}' if options else \
            repr(choices[-1])
        raise ValueError(f"'{name}' must be {options} (got {value!r})")


def check_bool(name: str, value: Any, optional: bool = False,
               also: Sequence[str] = ()) -> Any:
    r"""Returns :obj:`value` as a :class:`bool` if it is one (a NumPy bool
    too), or :obj:`None` with :obj:`optional`, or one of the strings
    :obj:`also` (e.g. :obj:`'auto'`); else raises an
    :class:`~pyg_orch.core.errors.ArgumentTypeError` (a :class:`TypeError`)
    naming :obj:`name`: a truthy string such as :obj:`'no'` or a number
    would silently mean :obj:`True`."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if (value is None and optional) or (isinstance(value, str)
                                        and value in also):
        return value
    options = (['None'] if optional else []) + ['True', 'False'] + [
        repr(a) for a in also
    ]
    raise ArgumentTypeError(
        f"'{name}' must be {', '.join(options[:-1])} or {options[-1]} (got "
        f"{value!r} of type {type(value).__name__})")


def check_bools(**flags: Any) -> None:
    r"""Checks every keyword argument with :func:`check_bool`."""
    for name, value in flags.items():
        check_bool(name, value)


def check_fraction(name: str, value: Any, optional: bool = False) -> Any:
    r"""Returns :obj:`value` as a :class:`float` if it is a real number in
    :obj:`[0, 1]` (or :obj:`None` with :obj:`optional`); else raises naming
    :obj:`name` (an :class:`~pyg_orch.core.errors.ArgumentTypeError` for a
    wrong type such as the string :obj:`'0.5'`, a :class:`ValueError` for
    a number out of range or NaN)."""
    if value is None and optional:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, numbers.Real):
        raise ArgumentTypeError(f"'{name}' must be a float in [0, 1]"
                                f"{' or None' if optional else ''} (got "
                                f"{value!r} of type {type(value).__name__})")
    if not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"'{name}' must be a float in [0, 1] (got {value})")
    return float(value)


def check_seconds(name: str, value: Any) -> float:
    r"""Returns :obj:`value` as a :class:`float` if it is a finite number of
    seconds :obj:`>= 0`; else raises a :class:`ValueError` naming
    :obj:`name`."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise ValueError(f"'{name}' must be a finite number of seconds "
                         f">= 0 (got {value!r})")
    return float(value)


def check_callable(name: str, value: Optional[Callable]) -> None:
    r"""Raises an :class:`~pyg_orch.core.errors.ArgumentTypeError` naming
    :obj:`name` unless :obj:`value` is callable or :obj:`None`."""
    if value is not None and not callable(value):
        raise ArgumentTypeError(f"'{name}' must be callable or None (got "
                                f"{value!r} of type {type(value).__name__})")


def check_placement(placement):
    r"""Returns :obj:`topology_placement` checked: :obj:`'auto'`,
    :obj:`'device'`, :obj:`'host'`, or a
    :class:`~pyg_orch.multigpu.TopologySharding` (for :obj:`'sharded'`)."""
    from pyg_orch.multigpu.sharded_topology import TopologySharding

    if isinstance(placement, TopologySharding):
        return placement
    check_choice('topology_placement', placement,
                 ('auto', 'device', 'host', 'sharded'))
    return TopologySharding() if placement == 'sharded' else placement


def resolve_device(device: DeviceLike, name: str = 'device',
                   default: Optional[str] = None) -> torch.device:
    r"""Returns :obj:`device` checked: a CPU or an available CUDA device (one
    without an index is this process's current one). :obj:`None` is
    :obj:`default`, or CUDA where available if :obj:`default` is
    :obj:`None`. Errors name the argument :obj:`name`."""
    if device is None:
        device = default or ('cuda' if torch.cuda.is_available() else 'cpu')
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"'{name}' must be a torch.device or a string such "
                         f"as 'cpu' or 'cuda:0' (got {device!r})") from e
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise ValueError(f"'{name}' is {str(device)!r}, but CUDA is not "
                         f"available on this machine; use {name}='cpu'")
    if device.type not in ('cpu', 'cuda'):
        raise ValueError(f"'{name}' must be a CPU or CUDA device "
                         f"(got {str(device)!r})")
    if device.type == 'cuda':
        if device.index is None:
            device = torch.device('cuda', torch.cuda.current_device())
        elif device.index >= torch.cuda.device_count():
            raise ValueError(f"'{name}' is {str(device)!r}, but this "
                             f"machine has {torch.cuda.device_count()} CUDA "
                             f"device(s)")
    return device


def parse_subgraph_type(subgraph_type: Union[SubgraphType, str],
                        directed: bool, disjoint: bool) -> SubgraphType:
    r"""Validates :obj:`subgraph_type` (and the deprecated
    :obj:`directed=False`, which means :obj:`'induced'`)."""
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
    return subgraph_type


#: PyG's wording (from its sampling step) when disjoint subgraphs meet
#: :obj:`subgraph_type='induced'`, which we raise at construction.
DISJOINT_INDUCED = ("'disjoint' sampling not supported for neighbor sampling "
                    "with `subgraph_type='induced'`")


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


def _edge_type_of(key) -> tuple:
    # PyG's `EdgeTypeStr`: an edge type tuple or its '__'-joined string.
    return tuple(key.split('__')) if isinstance(key, str) else tuple(key)


def parse_num_neighbors(num_neighbors: NumNeighborsType,
                        edge_types: List[Optional[EdgeType]]
                        ) -> Dict[Optional[EdgeType], List[int]]:
    r"""Validates :obj:`num_neighbors` (a list, a dict per edge type, or a
    PyG :class:`~torch_geometric.sampler.NumNeighbors`) and returns the
    fan-out list of every edge type, as
    :meth:`NumNeighbors.get_values(edge_types)
    <torch_geometric.sampler.NumNeighbors.get_values>` does: edge types a dict
    leaves out get the :obj:`default` of a :class:`NumNeighbors` (an error
    without one), and every edge type must have the same number of hops.
    Errors carry PyG's wording too, for code that matches on it."""
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
            given[et] = _check_fanouts(values, f"[{key!r}]")
        if default is not None:
            default = _check_fanouts(default, '.default')
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
    values = _check_fanouts(num_neighbors, '')
    return {et: values for et in edge_types}


def integers_per_seed(value, num_seeds: int, name: str,
                      what: str = 'time') -> torch.Tensor:
    r"""Checks that :obj:`value` holds one integer (a :obj:`what`) per seed
    of :obj:`num_seeds`; returns it as an :obj:`int64` tensor."""
    value = torch.as_tensor(value)
    if value.dim() != 1 or value.numel() != num_seeds or \
            value.is_floating_point() or value.is_complex() or \
            value.dtype == torch.bool:
        raise ValueError(f"'{name}' must hold one integer {what} per seed "
                         f"({num_seeds}), got shape {tuple(value.shape)} of "
                         f"{value.dtype}")
    return value.to(torch.int64)


def times_per_seed(value, num_seeds: int, name: str) -> torch.Tensor:
    r"""Checks that :obj:`value` holds one timestamp (an integer or a
    floating-point number, not NaN) per seed of :obj:`num_seeds`; returns it
    as a tensor: :obj:`int64` for integers, its own type otherwise."""
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
    r"""Without given seed times, every seed's time bound is its node's own
    time (node-level :obj:`time_attr`): the times of :obj:`seeds` per node
    type from :obj:`node_time`. Raises PyG's error for edge-level times
    (no :obj:`node_time`) and where a seed type has no time, telling to
    pass :obj:`pass_what`."""
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
