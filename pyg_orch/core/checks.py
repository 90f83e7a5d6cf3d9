"""Checks of arguments shared by every layer (loaders, samplers, feature
stores, data sets): bad input fails early, with an exception that names the
argument, the value given and the expected form."""
import math
import numbers
import warnings
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_orch.core.errors import (ArgumentTypeError, GraphTypeError,
                                  graph_type_message)
from pyg_orch.typing import DeviceLike


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
    r"""Returns :obj:`value` as a :class:`bool`, :obj:`None` with
    :obj:`optional`, or one of the strings :obj:`also`; else raises."""
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
    r"""Returns :obj:`value` as a :class:`float` in :obj:`[0, 1]` (or
    :obj:`None` with :obj:`optional`); else raises naming :obj:`name`."""
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


def check_int(name: str, value: Any, minimum: int = 0,
              optional: bool = False) -> Any:
    r"""Returns :obj:`value` as an integer :obj:`>= minimum` (or :obj:`None`
    with :obj:`optional`); else raises a :class:`ValueError` naming it."""
    if value is None and optional:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, numbers.Integral) or value < minimum:
        raise ValueError(f"'{name}' must be an integer >= {minimum}"
                         f"{' or None' if optional else ''} (got {value!r})")
    return int(value)


def check_real(name: str, value: Any, minimum: float,
               exclusive: bool = False) -> float:
    r"""Returns :obj:`value` as a finite :class:`float` :obj:`>= minimum`
    (:obj:`> minimum` with :obj:`exclusive`); else raises naming it."""
    op = '>' if exclusive else '>='
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, numbers.Real):
        raise ValueError(f"'{name}' must be a number {op} {minimum:g} (got "
                         f"{value!r})")
    if not math.isfinite(value) or value < minimum or (exclusive
                                                       and value == minimum):
        raise ValueError(f"'{name}' must be a finite number {op} "
                         f"{minimum:g} (got {value!r})")
    return float(value)


def warn_renamed(old: str, new: str, stacklevel: int = 3) -> None:
    r"""Warns that the keyword argument :obj:`old` is deprecated for
    :obj:`new` (e.g. :obj:`"cache=CacheOptions(cache_ratio=0.2)"`)."""
    warnings.warn(f"'{old}' is deprecated; pass {new}", DeprecationWarning,
                  stacklevel=stacklevel)


def check_seconds(name: str, value: Any, positive: bool = False,
                  optional: bool = False) -> Optional[float]:
    r"""Returns :obj:`value` as seconds (:obj:`> 0` with :obj:`positive`,
    else finite and :obj:`>= 0`) or :obj:`None` with :obj:`optional`."""
    if value is None and optional:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, numbers.Real) or not (value > 0 if positive else
                                         math.isfinite(value) and value >= 0):
        kind = 'positive' if positive else 'finite'
        raise ValueError(f"'{name}' must be a {kind} number of seconds"
                         f"{'' if positive else ' >= 0'}"
                         f"{' or None' if optional else ''} (got {value!r})")
    return float(value)


def check_callable(name: str, value: Optional[Callable]) -> None:
    r"""Raises an :class:`~pyg_orch.core.errors.ArgumentTypeError` naming
    :obj:`name` unless :obj:`value` is callable or :obj:`None`."""
    if value is not None and not callable(value):
        raise ArgumentTypeError(f"'{name}' must be callable or None (got "
                                f"{value!r} of type {type(value).__name__})")


def resolve_device(device: DeviceLike, name: str = 'device',
                   default: Optional[str] = None) -> torch.device:
    r"""Returns :obj:`device` checked: a CPU or an available CUDA device (with
    the current index if none). :obj:`None` is :obj:`default`, else CUDA where
    available. Errors name :obj:`name`."""
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


# Attributes that PyG always slices per node:
_NODE_KEYS = ('x', 'y', 'pos', 'node_type', 'batch')


def check_data(data: Any) -> None:
    r"""Checks the type of :obj:`data` and that node attributes have one row
    per node."""
    if isinstance(data, Data):
        _check_node_rows(data, data.num_nodes, 'data')
        _check_edge_index_type(data, 'data')
    elif isinstance(data, HeteroData):
        for node_type in data.node_types:
            _check_node_rows(data[node_type], data[node_type].num_nodes,
                             f'data[{node_type!r}]')
        for edge_type in data.edge_types:
            _check_edge_index_type(data[edge_type], f'data[{edge_type!r}]')
    elif isinstance(data, (tuple, list)) and len(data) == 2:
        from torch_geometric.data import FeatureStore, GraphStore
        if not (isinstance(data[0], FeatureStore)
                and isinstance(data[1], GraphStore)):
            raise GraphTypeError(graph_type_message(data) + " ('data' "
                                 "given as a pair must be (FeatureStore, "
                                 "GraphStore))")
    else:
        raise GraphTypeError(graph_type_message(data))


def _check_edge_index_type(store, where: str) -> None:
    edge_index = store.get('edge_index', None)
    if edge_index is not None and not isinstance(edge_index, Tensor):
        raise ValueError(f"'{where}.edge_index' must be a tensor of shape "
                         f"[2, num_edges] (got {type(edge_index).__name__})")


def _check_node_rows(store, num_nodes: Optional[int], where: str) -> None:
    given = store.get('num_nodes', None)
    if given is not None and (isinstance(given, bool) or not isinstance(
            given, numbers.Integral) or given < 0):
        raise ValueError(f"'{where}.num_nodes' must be a non-negative "
                         f"integer (got {given!r})")
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
