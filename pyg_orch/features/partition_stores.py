r"""A rank's part of a partitioned graph as PyG's remote backend."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import GraphStore
from torch_geometric.data.feature_store import TensorAttr
from torch_geometric.data.graph_store import EdgeAttr, EdgeLayout

from pyg_orch.core.checks import check_choice, check_int
from pyg_orch.features.gpu_cache import ReadOnlyFeatureStore
from pyg_orch.features.partition_gather import DistributedFeatureGather
from pyg_orch.features.tiered import ID_DTYPES
from pyg_orch.parallel.machines import (RankLayout, rank_layout,
                                        shard_part_topology)
from pyg_orch.sampling.collective import DistributedNeighborSampler
from pyg_orch.partition.opening import open_partition
from pyg_orch.partition.storage import GraphPartition
from pyg_orch.sampling.arguments import check_placement, resolve_device

__all__ = ['PartitionFeatureStore', 'PartitionGraphStore', 'open_partition',
           'open_stores']


def _max_fanout(num_neighbors: Any) -> Optional[int]:
    # The largest fan-out of any hop (None where a hop takes all neighbors).
    lists = num_neighbors.values() if isinstance(num_neighbors, dict) \
        else [num_neighbors]
    try:
        values = [int(k) for v in lists for k in v]
    except (TypeError, ValueError):
        return None  # The sampler says what is wrong.
    if any(k < 0 for k in values):
        return None
    return max(values, default=0)


def _check_ids(name: str, ids: Tensor, num: Optional[int], node_type: Any,
               what: str = 'ids', scope: str = 'global ') -> None:
    if ids.numel():
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or (num is not None and hi >= num):
            raise ValueError(f"'{name}' holds {what} outside [0, {num}); "
                             f"expected {scope}node ids in [0, {num}) of "
                             f"node type {node_type!r} (got [{lo}, {hi}])")


def check_seeds(nodes: Any, num_nodes: int, node_type: Any = None,
                scope: str = '') -> Tensor:
    r"""Checks seeds: a boolean mask over :obj:`num_nodes` nodes (returned
    as it is) or 1-D node ids (returned as int64)."""
    if isinstance(nodes, (list, tuple, range, np.ndarray)):
        nodes = _as_tensor(nodes)
    if not isinstance(nodes, Tensor):
        raise ValueError(f"'input_nodes' must be an index tensor or a boolean "
                         f"mask (got {type(nodes).__name__})")
    if nodes.dtype == torch.bool:
        if nodes.shape != (num_nodes, ):
            raise ValueError(f"'input_nodes' as a boolean mask must have one "
                             f"entry per vertex ({num_nodes} of node type "
                             f"{node_type!r}; got shape {list(nodes.shape)})")
        return nodes
    if nodes.dtype not in ID_DTYPES:
        raise ValueError(f"'input_nodes' must hold integer {scope}node ids or "
                         f"be a boolean mask (got dtype {nodes.dtype})")
    if nodes.dim() != 1:
        raise ValueError(f"'input_nodes' must be one-dimensional (got shape "
                         f"{list(nodes.shape)})")
    _check_ids('input_nodes', nodes, num_nodes, node_type,
               f'{scope}vertex ids', scope)
    return nodes.to(torch.int64)


def _as_tensor(nodes: Any) -> Tensor:
    # A list, tuple, range or NumPy array of integer ids as a tensor. Bools
    # are refused: PyG reads a list of bools as the ids 0 and 1.
    if len(nodes) == 0:
        return torch.empty(0, dtype=torch.long)
    try:
        out = torch.as_tensor(nodes if isinstance(nodes, np.ndarray) else
                              list(nodes))
    except (TypeError, ValueError, RuntimeError) as e:
        raise ValueError(f"'input_nodes' must be an index tensor or a "
                         f"boolean mask ({e})") from None
    if out.dtype == torch.bool and not isinstance(nodes, np.ndarray):
        raise ValueError("'input_nodes' is a list of bools: pass a mask as "
                         "a boolean tensor (torch.tensor(mask)), or the "
                         "node ids as integers")
    return out


def split_node_type(input_nodes: Any, node_types: Iterable[Any],
                    hetero: bool, where: str = 'graph') -> Tuple[Any, Any]:
    r"""Splits heterogeneous seeds (a node type or a tuple) into both."""
    typed = isinstance(input_nodes, (tuple, list)) and \
        len(input_nodes) == 2 and isinstance(input_nodes[0], str)
    if not hetero:
        if typed or isinstance(input_nodes, str):
            raise ValueError(f"'input_nodes' as a node type or a (node type, "
                             f"seeds) tuple is for a heterogeneous {where}")
        return None, input_nodes
    if isinstance(input_nodes, str):
        input_nodes, typed = (input_nodes, None), True
    if not typed:
        raise ValueError(f"'input_nodes' must be a node type or a (node "
                         f"type, seeds) tuple for a heterogeneous {where} "
                         f"(got {input_nodes!r:.100})")
    if input_nodes[0] not in node_types:
        raise ValueError(f"'input_nodes' names the node type "
                         f"{input_nodes[0]!r}, which is not in the {where} "
                         f"(node types: {list(node_types)})")
    return input_nodes[0], input_nodes[1]


def split_edge_type(edge_label_index: Any, hetero: bool,
                    where: str = 'graph') -> Tuple[Any, Any]:
    r"""Splits heterogeneous label edges (an edge type or a tuple) into
    both."""
    index = edge_label_index
    if not hetero:
        if isinstance(index, (tuple, str)):
            raise ValueError(f"'edge_label_index' must be None or a tensor of "
                             f"shape [2, num_edges] for a homogeneous {where}")
        return None, index
    if isinstance(index, (tuple, list)) and index and \
            isinstance(index[0], str):
        return tuple(index), None
    if not isinstance(index, (tuple, list)) or len(index) != 2:
        raise ValueError(f"'edge_label_index' must be an edge type or an "
                         f"(edge_type, edge_label_index) tuple for a "
                         f"heterogeneous {where} (got {index!r:.100})")
    edge_type, index = index
    return tuple(edge_type) if isinstance(edge_type, list) else edge_type, \
        index


def check_label_edges(index: Any, num_src: Optional[int],
                      num_dst: Optional[int], src: Any = None,
                      dst: Any = None, scope: str = '') -> Tensor:
    r"""Checks label edges of :obj:`num_src` and :obj:`num_dst` nodes."""
    if not isinstance(index, Tensor):
        raise ValueError(f"'edge_label_index' must be a tensor of shape "
                         f"[2, num_edges] (got {type(index).__name__})")
    if index.dtype not in ID_DTYPES:
        raise ValueError(f"'edge_label_index' must hold integer node "
                         f"indices (got dtype {index.dtype})")
    if index.dim() != 2 or index.size(0) != 2:
        raise ValueError(f"'edge_label_index' must have shape [2, num_edges]"
                         f" (got {list(index.shape)})")
    for row, n, t, end in ((index[0], num_src, src, 'source'),
                           (index[1], num_dst, dst, 'destination')):
        _check_ids('edge_label_index', row, n, t, f'{end} ids', scope)
    return index.to(torch.int64)


#: What to do instead of writing to a partition's stores.
_INSTEAD = ('it serves the files of a partition folder (write a new one with '
            'partition_graph())')


class _PartStore:
    r"""What both stores of a part share."""
    def _init_part(self, partition: GraphPartition) -> None:
        if not isinstance(partition, GraphPartition):
            raise TypeError(f"'partition' must be a GraphPartition (got "
                            f"{type(partition).__name__})")
        self.partition = partition
        self.is_hetero = partition.is_hetero
        #: The global number of vertices per node type (:obj:`None` of a
        #: homogeneous part).
        self.num_nodes: Dict[Any, int] = {
            t: int(v.numel()) for t, v in self._typed(
                partition.node_part).items()}

    def _typed(self, value: Any) -> Dict[Any, Any]:
        # Per type; a homogeneous part's as one type, `None`.
        return value if self.is_hetero else {None: value}

    @property
    def rank(self) -> int:
        r"""This rank (the part it holds)."""
        return self.partition.part

    @property
    def num_parts(self) -> int:
        r"""The number of parts (and ranks)."""
        return self.partition.num_parts

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}(part={self.rank}, '
                f'num_parts={self.num_parts})')


class PartitionGraphStore(_PartStore, GraphStore):
    r"""This rank's part of a partitioned graph as a PyG
    :class:`~torch_geometric.data.GraphStore` (in-edges in global ids,
    :obj:`'coo'`), with its collective :meth:`sampler`.

    Args:
        partition (GraphPartition): This rank's part.
        group (ProcessGroup, optional): The process group (rank :obj:`k`
            holds part :obj:`k`).
        layout (RankLayout, optional): This rank's layout (default: one
            part per rank).
        sampling_device (torch.device, optional): Where the sampler runs
            (default: the loader's device).
        topology_placement (str or TopologySharding): :obj:`'auto'`, or a
            :class:`~pyg_orch.multigpu.TopologySharding` splitting the
            part's neighbor lists across the machine's ranks that share it.
    """
    def __init__(self, partition: GraphPartition,
                 group: Optional[Any] = None,
                 layout: Optional[RankLayout] = None,
                 sampling_device: Optional[torch.device] = None,
                 topology_placement: Any = 'auto'):
        self._init_part(partition)
        super().__init__()
        self.group = group
        self.layout = layout or RankLayout(group, group,
                                           seed_rank=partition.part)
        self.sampling_device = sampling_device
        self.topology_placement = topology_placement
        self.edge_types: List[Any] = list(self._typed(partition.csc))

    def sampler(self, num_neighbors: Any,
                **options: Any) -> DistributedNeighborSampler:
        r"""The collective sampler of this part (a PyG
        :class:`~torch_geometric.sampler.BaseSampler`)."""
        if self.sampling_device is not None:
            options.setdefault('device', self.sampling_device)
        if self.topology_placement != 'auto':
            # A collective, once the sampler attached times and weights:
            options.setdefault('topology', functools.partial(
                shard_part_topology, self.partition, self.layout,
                options.get('device'), self.topology_placement,
                _max_fanout(num_neighbors)))
        return DistributedNeighborSampler(self.partition, num_neighbors,
                                          group=self.group, **options)

    def _csc(self, edge_type: Any):
        if edge_type not in self.edge_types:
            raise ValueError(f"'edge_type' must be one of {self.edge_types} "
                             f"(got {edge_type!r})")
        return self._typed(self.partition.csc)[edge_type]

    def local_edge_index(self, edge_type: Any = None) -> Tensor:
        r"""The part's in-edges (of :obj:`edge_type`), global ids."""
        csc = self._csc(tuple(edge_type) if edge_type is not None else None)
        node_ids = self._own(None if edge_type is None else edge_type[-1])
        colptr = csc.colptr.to(torch.int64)
        col = torch.repeat_interleave(node_ids.to(torch.int64),
                                      colptr.diff(),
                                      output_size=int(csc.row.numel()))
        return torch.stack([csc.row.to(torch.int64), col])

    def _own(self, node_type: Any) -> Tensor:
        # The part's own vertices (of `node_type`).
        return self._typed(self.partition.node_ids)[node_type]

    def seed_nodes(self, input_nodes: Any) -> Tuple[Any, Tensor]:
        r"""Checks a node loader's seeds: returns :obj:`(node_type, ids)`;
        global ids, a mask, or a node type alone (the part's own vertices)."""
        node_type, nodes = split_node_type(input_nodes, self.num_nodes,
                                           self.is_hetero, 'partition')
        if nodes is None:
            return node_type, self._own(node_type).to(torch.int64)
        nodes = check_seeds(nodes, self.num_nodes[node_type], node_type,
                            'global ')
        return node_type, (nodes.nonzero().view(-1)
                           if nodes.dtype == torch.bool else nodes)

    def label_edges(self, edge_label_index: Any) -> Tuple[Any, Tensor]:
        r"""Checks a link loader's label edges: :obj:`(edge_type, index)`."""
        edge_type, index = split_edge_type(edge_label_index, self.is_hetero,
                                           'partition')
        if self.is_hetero and edge_type not in self.edge_types:
            raise ValueError(f"'edge_label_index' names the edge type "
                             f"{edge_type!r}, which is not in the partition "
                             f"(edge types: {self.edge_types})")
        if index is None:
            return edge_type, self.local_edge_index(edge_type)
        src, dst = (None, None) if edge_type is None else (edge_type[0],
                                                           edge_type[-1])
        return edge_type, check_label_edges(index, self.num_nodes[src],
                                            self.num_nodes[dst], src, dst,
                                            'global ')

    def get_all_edge_attrs(self) -> List[EdgeAttr]:
        out = []
        for et in self.edge_types:
            src, dst = (None, None) if et is None else (et[0], et[-1])
            out.append(EdgeAttr(et, EdgeLayout.COO, is_sorted=True,
                                size=(self.num_nodes[src],
                                      self.num_nodes[dst])))
        return out

    def _get_edge_index(self, edge_attr: EdgeAttr) -> Tuple[Tensor, Tensor]:
        if edge_attr.layout != EdgeLayout.COO:
            raise NotImplementedError(
                f"PartitionGraphStore holds one part's in-edges in global ids "
                f"and answers layout 'coo' only (got "
                f"{edge_attr.layout.value!r})")
        row, col = self.local_edge_index(edge_attr.edge_type)
        return row, col

    def _put_edge_index(self, edge_index: Any, edge_attr: EdgeAttr) -> bool:
        raise NotImplementedError(f'PartitionGraphStore is read-only; '
                                  f'{_INSTEAD}')

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        return self._put_edge_index(None, edge_attr)



class PartitionFeatureStore(_PartStore, ReadOnlyFeatureStore):
    r"""This rank's part of a partitioned graph as a PyG
    :class:`~torch_geometric.data.FeatureStore` over global vertex ids;
    :meth:`multi_get_tensor` is a collective (every rank calls it once per
    batch, for the same attributes).

    Args:
        partition (GraphPartition): This rank's part.
        group (ProcessGroup, optional): The process group.
        keys (Iterable[str], optional): The node attributes served (default:
            :obj:`'x'` and :obj:`'y'` where present).
        device (torch.device or str, optional): Where the rows and the cache
            live (default: the CPU).
        feature_device (torch.device or str, optional): Where the part's
            rows are read and other ranks' requests served (default: the
            CPU, over the memory-mapped files).
        cache_size (int): Remote rows to cache (an :obj:`'lru'` cache's
            capacity per node type).
        policy (str): :obj:`'static'` (filled by :meth:`build_cache`) or
            :obj:`'lru'`.
        edge_keys (Iterable[str], optional): The edge attributes served by
            :meth:`gather_edges` (default: none).
        edge_cache_size (int): Edge attribute rows of remote edges to
            cache.
        peers (PeerGroup, optional): The ranks of this machine that share
            the part, to split its rows across.
    """
    instead = _INSTEAD

    def __init__(self, partition: GraphPartition,
                 group: Optional[Any] = None,
                 keys: Optional[List[str]] = None,
                 device: Optional[Union[str, torch.device]] = None,
                 feature_device: Optional[Union[str, torch.device]] = None,
                 cache_size: int = 0, policy: str = 'static',
                 edge_keys: Optional[List[str]] = (),
                 edge_cache_size: int = 0, peers: Optional[Any] = None):
        self._init_part(partition)
        check_int('edge_cache_size', edge_cache_size)
        super().__init__()
        #: The collective row fetch behind the store.
        self.feature_gather = DistributedFeatureGather(
            partition, keys=keys, group=group, policy=policy,
            cache_size=cache_size if policy == 'lru' else 0,
            edge_keys=edge_keys, device=device,
            feature_device=feature_device, peers=peers)
        check_int('cache_size', cache_size)
        #: Remote rows and remote edges' attribute rows to cache.
        self.cache_size = cache_size
        self.edge_cache_size = edge_cache_size
        attrs = self._typed(partition.node_attrs)
        #: The global size of every attribute served.
        self.sizes: Dict[Tuple[Any, str], Tuple[int, ...]] = {
            (t, k): (self.num_nodes[t], ) + tuple(attrs[t][k].shape[1:])
            for t, ks in self._typed(self.feature_gather.keys).items()
            for k in ks}

    def build_cache(self, counts: Any, cache_size: int) -> int:
        r"""Caches the rows of the :obj:`cache_size` remote vertices
        counted most often in :obj:`counts`; a collective."""
        return self.feature_gather.build_cache(counts, cache_size)

    def get_all_tensor_attrs(self) -> List[TensorAttr]:
        return [TensorAttr(group_name=t, attr_name=k)
                for (t, k) in self.sizes]

    def _get_tensor_size(self, attr: TensorAttr) -> Tuple[int, ...]:
        return self.sizes[self._key(attr)]

    def _key(self, attr: TensorAttr) -> Tuple[Any, str]:
        key = (attr.group_name, attr.attr_name)
        if key not in self.sizes:
            raise ValueError(
                f"PartitionFeatureStore has no attribute {attr.attr_name!r} "
                f"of node type {attr.group_name!r} (it serves "
                f"{sorted(self.sizes, key=str)})")
        return key

    def _get_tensor(self, attr: TensorAttr) -> Tensor:
        return self._multi_get_tensor([attr])[0]

    def _multi_get_tensor(self, attrs: List[TensorAttr]) -> List[Tensor]:
        # One collective gather of all requested rows (every node type on
        # a heterogeneous partition), split back per attribute.
        ids: Dict[Any, List[Tensor]] = {}
        for attr in attrs:
            node_type, _ = self._key(attr)
            index = attr.index
            if not isinstance(index, Tensor) or index.dim() != 1 or \
                    index.is_floating_point() or index.dtype == torch.bool:
                got = repr(index) if not isinstance(index, Tensor) else \
                    f'shape {tuple(index.shape)}, {index.dtype}'
                raise ValueError(f"PartitionFeatureStore needs 'index' as a "
                                 f"1-D tensor of global node ids (got "
                                 f"{got:.100})")
            ids.setdefault(node_type, []).append(index.to(torch.int64))
        if not attrs:
            return []
        cat = {t: torch.cat(v) for t, v in ids.items()}
        for t, v in cat.items():
            _check_ids('index', v, self.num_nodes[t], t)
        gather = self.feature_gather.gather
        rows = self._typed(gather(cat if self.is_hetero else cat[None]))
        out, offsets = [], {t: 0 for t in cat}
        for attr in attrs:
            t, k = attr.group_name, attr.attr_name
            n = attr.index.numel()
            out.append(rows[t][k][offsets[t]:offsets[t] + n])
            offsets[t] += n
        return out


def _check_shared(layout: RankLayout, num_parts: int,
                  **placements: Any) -> None:
    for name, value in placements.items():
        if value != 'auto' and not layout.shares_part:
            what = 'neighbor lists' if name.startswith('topology') \
                else 'feature rows'
            raise ValueError(
                f"{name}='sharded' splits a part's {what} across the ranks "
                f"of a machine that share it: it needs one part per machine "
                f"and LOCAL_WORLD_SIZE > 1 ranks on each (a world of parts x "
                f"LOCAL_WORLD_SIZE ranks); here every rank holds its own "
                f"part ({num_parts} parts)")


def open_stores(
    partition: Union[str, Path, GraphPartition],
    group: Optional[Any] = None,
    expected_fingerprint: Optional[str] = None,
    verify: Optional[bool] = None,
    *,
    keys: Optional[List[str]] = None,
    edge_keys: Optional[List[str]] = None,
    device: Optional[Union[str, torch.device]] = None,
    sampling_device: Optional[Union[str, torch.device]] = None,
    feature_device: Optional[Union[str, torch.device]] = None,
    topology_placement: Any = 'auto',
    feature_placement: str = 'auto',
    cache_size: int = 0,
    edge_cache_size: int = 0,
    policy: str = 'static',
    layout: Optional[RankLayout] = None,
) -> Tuple[PartitionFeatureStore, PartitionGraphStore]:
    r"""Loads this rank's part of the folder :obj:`partition` with
    :func:`open_partition` (a collective) and returns
    :obj:`(feature_store, graph_store)` over it, the :obj:`data` of the
    hybrid loaders.

    Args:
        sampling_device (torch.device, optional): Where sampling runs
            (default: the loader's device).
        feature_device (torch.device, optional): Where the part's rows are
            read and other ranks' requests served (default: the CPU).
        device (torch.device, optional): Where gathered rows and the cache
            live.
        topology_placement (str or TopologySharding): :obj:`'auto'` or
            :obj:`'sharded'` (split the part's neighbor lists across the
            ranks of a machine that share it).
        feature_placement (str): :obj:`'auto'` or :obj:`'sharded'` (split
            the part's feature rows likewise).
        cache_size, edge_cache_size, policy: The caches of remote rows (see
            :class:`PartitionFeatureStore`).
        keys, edge_keys: The node and edge attributes served (default:
            :obj:`'x'` and :obj:`'y'`; all edge attributes).
        layout (RankLayout, optional): This rank's layout where already
            agreed (default: agreed here, a collective).
    """
    if sampling_device is not None:
        sampling_device = resolve_device(sampling_device, 'sampling_device')
    sharding = check_placement(topology_placement)
    if sharding in ('device', 'host'):
        raise ValueError(f"'topology_placement' must be 'auto' or 'sharded' "
                         f"on a partitioned graph (got "
                         f"{topology_placement!r}); the part's topology is "
                         f"sampled on 'sampling_device'")
    check_choice('feature_placement', feature_placement, ('auto', 'sharded'))
    if layout is None:
        layout = rank_layout(partition, group)
    group = layout.part_group
    part = open_partition(partition, group, expected_fingerprint, verify)
    _check_shared(layout, part.num_parts, topology_placement=sharding,
                  feature_placement=feature_placement)
    peers = None
    if feature_placement == 'sharded':  # A collective of the machine.
        from pyg_orch.parallel.peer_memory import PeerGroup
        peers = PeerGroup(layout.machine_group(),
                          device=resolve_device(feature_device,
                                                'feature_device',
                                                default='cpu'))
    feature_store = PartitionFeatureStore(
        part, group, keys=keys, device=device, feature_device=feature_device,
        cache_size=cache_size, policy=policy, edge_keys=edge_keys,
        edge_cache_size=edge_cache_size, peers=peers)
    return feature_store, PartitionGraphStore(part, group, layout,
                                              sampling_device, sharding)
