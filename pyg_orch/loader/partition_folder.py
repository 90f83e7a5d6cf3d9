r"""A partition folder (or its stores) as a hybrid loader's :obj:`data`:
:func:`partition_batches` builds the loader's batches."""
from __future__ import annotations

import os
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.sampler import EdgeSamplerInput

from pyg_orch.features.partition_stores import (
    PartitionFeatureStore,
    PartitionGraphStore,
    open_stores,
)
from pyg_orch.loader.partition_pipeline import PartitionBatches
from pyg_orch.loader.validation import (
    check_edge_label,
    check_edge_label_time,
    check_neg_sampling,
    check_temporal_args,
)
from pyg_orch.parallel.exchange import group_size
from pyg_orch.sampling.arguments import parse_subgraph_type, resolve_device

__all__ = ['STORE_KEYWORDS', 'agree_on_batches', 'is_partitioned',
           'partition_batches', 'partition_stores']

# Arguments that make sense only for a graph held in memory, with their
# defaults (accepted when passed with these values).
_IN_MEMORY = {'is_sorted': False, 'filter_per_worker': None,
              'neighbor_sampler': None, 'topology': None, 'lookahead': None}

# Fields of the option objects that make sense only for a graph held in
# memory, with their defaults.
_IN_MEMORY_OPTIONS = {
    'placement': {'backend': 'auto'},
    'cache': {'store': 'auto', 'gpu_memory_budget': 'auto',
              'cache_ratio': None},
}

#: Keywords of :class:`~pyg_orch.HybridNeighborLoader` over a folder that
#: go to :func:`~pyg_orch.distributed.open_stores` (the placement).
STORE_KEYWORDS = ('group', 'expected_fingerprint', 'sampling_device',
                  'feature_device', 'feature_placement', 'cache_size',
                  'edge_cache_size')

# Arguments of HybridLinkNeighborLoader that give its label edges.
_LINK = ('edge_label_index', 'edge_label', 'edge_label_time', 'neg_sampling',
         'neg_sampling_ratio')

# Keywords that go to PartitionBatches as they are.
_BATCHES = ('even', 'replace', 'disjoint', 'drop_last', 'weight_attr',
            'time_attr', 'temporal_strategy', 'subgraph_type',
            'transform_sampler_output', 'prefetch', 'num_workers',
            'batch_size', 'shuffle', 'transform')

# Of those, what every rank must pass alike (batches are collectives).
_AGREED = tuple(key for key in _BATCHES if not key.startswith('transform'))

Stores = Tuple[PartitionFeatureStore, PartitionGraphStore]


def is_partitioned(data: Any) -> bool:
    r"""Whether :obj:`data` is a partition folder or a pair of partition
    stores."""
    if isinstance(data, (str, os.PathLike)):
        return True
    return isinstance(data, (tuple, list)) and len(data) == 2 and \
        isinstance(data[1], PartitionGraphStore)


def partition_stores(data: Any, device: torch.device) -> Stores:
    r"""The stores of a folder (opened, a collective) or of a checked pair."""
    if isinstance(data, (str, os.PathLike)):
        return open_stores(data, device=device)
    fs, gs = data
    if not isinstance(fs, PartitionFeatureStore):
        raise TypeError(f"'data' must pair a PartitionGraphStore with a "
                        f"PartitionFeatureStore (got "
                        f"{type(fs).__name__})")
    if fs.partition is not gs.partition and (
            fs.partition.part != gs.partition.part
            or fs.partition.partitioning_id != gs.partition.partitioning_id):
        raise ValueError("'data' pairs stores of different parts or "
                         "partitionings; open both with open_stores()")
    return fs, gs


def agree_on_batches(arguments: Dict[str, Any],
                     error: Optional[BaseException] = None,
                     group: Optional[Any] = None) -> None:
    r"""Raises on every rank of :obj:`group` where ranks disagree on
    :obj:`arguments` or one hit :obj:`error`. A collective."""
    mine = (None if error is None else f'{type(error).__name__}: {error}',
            {k: repr(v) for k, v in arguments.items()})
    everything: List[Any] = [mine]
    if group_size(group) > 1:
        everything = [None] * group_size(group)
        dist.all_gather_object(everything, mine, group=group)
    if error is not None:
        raise error  # Its own error on the rank that hit it.
    for r, (err, _) in enumerate(everything):
        if err is not None:
            raise ValueError(f'rank {r} could not build its loader, so no '
                             f'rank can sample: {err}')
    first = everything[0][1]
    for r, (_, args) in enumerate(everything):
        for name in sorted(set(first) | set(args)):
            if first.get(name) != args.get(name):
                raise ValueError(
                    f"the ranks disagree on {name!r}: rank 0 passed "
                    f"{first.get(name)}, rank {r} passed {args.get(name)}; "
                    f"every rank must pass the same value (batches are "
                    f"sampled collectively)")


def link_inputs(stores: Stores, num_neighbors: Any, options: Dict[str, Any],
                edge_label_index: Any = None, edge_label: Any = None,
                edge_label_time: Any = None, neg_sampling: Any = None,
                neg_sampling_ratio: Any = None) -> Dict[str, Any]:
    r"""This rank's checked label edges (:obj:`input_edges`) and
    :obj:`neg_sampling`, agreed on with every rank (a collective)."""
    graph_store = stores[1]
    error: Optional[BaseException] = None
    edge_type, neg, inputs = None, None, None
    time_attr = options.get('time_attr')
    try:
        check_temporal_args(None, time_attr,
                            options.get('temporal_strategy', 'uniform'),
                            options.get('weight_attr'))
        edge_type, index = graph_store.label_edges(edge_label_index)
        num = index.size(1)
        check_edge_label(edge_label, num)
        check_edge_label_time(edge_label_time, time_attr, num)
        neg_sampling = check_neg_sampling(neg_sampling, neg_sampling_ratio,
                                          edge_label, stores,
                                          (edge_type, index))
        if neg_sampling is not None:
            neg = (neg_sampling.mode.value, neg_sampling.amount,
                   neg_sampling.src_weight is not None,
                   neg_sampling.dst_weight is not None)
            if neg_sampling.is_binary() and edge_label is not None and \
                    edge_label.numel() and edge_label.min() == 0:
                edge_label = edge_label + 1  # As PyG: 0 means negative.
        inputs = EdgeSamplerInput(torch.arange(num), index[0], index[1],
                                  edge_label, edge_label_time, edge_type)
    except (ValueError, TypeError, NotImplementedError) as exc:
        error = exc
    agree_on_batches({
        'num_neighbors': num_neighbors, 'neg_sampling': neg,
        'edge_label_index (edge type)': edge_type,
        'edge_label_time (given or not)': edge_label_time is not None,
        **{k: options.get(k) for k in _AGREED}},
        error, graph_store.layout.batch_group)
    return {'input_edges': inputs, 'neg_sampling': neg_sampling}


def _is_default(value: Any, default: Any) -> bool:
    if default is None or isinstance(value, (Tensor, torch.Generator)):
        return value is default
    try:
        return bool(value == default) and type(value) is type(default)
    except Exception:  # e.g. a feature store object.
        return False


class RankSeeds(NamedTuple):
    r"""This rank's seeds, their times and their :obj:`input_id`."""
    nodes: Optional[Any]
    time: Optional[Tensor] = None
    input_id: Optional[Tensor] = None


def _input_nodes(input_nodes: Any, graph_store: PartitionGraphStore,
                 input_time: Optional[Tensor] = None) -> RankSeeds:
    r"""This part's seeds among :obj:`input_nodes`, the seeds of all
    ranks (named seeds: resolved by :class:`PartitionBatches`)."""
    if _named(input_nodes):
        if input_time is not None:
            raise ValueError("'input_time' on a partition folder needs "
                             "'input_nodes' as the seeds of all ranks "
                             "(global ids or a mask over all vertices), "
                             "one time each")
        return RankSeeds(input_nodes)
    node_type, nodes = graph_store.seed_nodes(input_nodes)
    nodes = nodes.cpu()
    node_part = graph_store.partition.node_part
    if node_type is not None:
        node_part = node_part[node_type]
    keep = (node_part[nodes] == graph_store.rank).nonzero().view(-1)
    time = None
    if input_time is not None:
        time = torch.as_tensor(input_time)
        if time.dim() != 1 or time.numel() != nodes.numel():
            raise ValueError(f"'input_time' must hold one time per seed of "
                             f"all ranks ({nodes.numel()}), got shape "
                             f"{tuple(time.shape)}")
        time = time.cpu()[keep]
    nodes = nodes[keep]
    return RankSeeds(nodes if node_type is None else (node_type, nodes), time,
                     keep)


def _named(input_nodes: Any) -> bool:
    # Seeds named rather than given: the default, a node attribute or a
    # node type (and a (node type, attribute or None) tuple).
    if isinstance(input_nodes, (tuple, list)) and len(input_nodes) == 2 \
            and isinstance(input_nodes[0], str):
        input_nodes = input_nodes[1]
    return input_nodes is None or isinstance(input_nodes, str)


def _option_fields(placement: Any, cache: Any,
                   name: str) -> Dict[str, Any]:
    r"""The store and batch arguments :obj:`placement` and :obj:`cache`
    stand for (their in-memory fields must keep their defaults)."""
    out: Dict[str, Any] = {}
    for group, value in (('placement', placement), ('cache', cache)):
        if value is None:
            continue
        for field, default in _IN_MEMORY_OPTIONS[group].items():
            if not _is_default(getattr(value, field), default):
                raise ValueError(
                    f"{name} on a partition folder: "
                    f"'{group}.{field}' applies to a graph held in memory; "
                    f"leave it unset")
    if placement is not None:
        if isinstance(placement.topology, str) and \
                placement.topology in ('device', 'host'):
            raise ValueError(
                f"{name} on a partition folder: "
                f"'placement.topology' must be 'auto' or 'sharded' (got "
                f"{placement.topology!r}); the part's topology is sampled "
                f"on 'sampling_device'")
        if not _is_default(placement.topology, 'auto'):
            out['topology_placement'] = placement.topology
    if cache is not None:
        out.update(cache_ranking=cache.ranking,
                   num_presample_batches=cache.num_presample_batches)
        if cache.policy != 'static':
            out['policy'] = cache.policy
    return out


def partition_batches(data: Any, arguments: Dict[str, Any]
                      ) -> Optional[PartitionBatches]:
    r"""The :class:`~pyg_orch.loader.partition_pipeline.PartitionBatches`
    of a hybrid loader over a partition folder or its stores (else
    :obj:`None`), from its :obj:`arguments`; arguments of a graph held in
    memory raise unless left at their defaults. A collective."""
    if not is_partitioned(data):
        return None
    folder = isinstance(data, (str, os.PathLike))
    where = f"'{os.fspath(data)}'" if folder else 'the stores'
    args = dict(arguments)
    link = {key: args.pop(key) for key in _LINK if key in args} \
        if 'edge_label_index' in args else None
    name = 'HybridNeighborLoader' if link is None else \
        'HybridLinkNeighborLoader'
    for key, default in _IN_MEMORY.items():
        if key in args and not _is_default(args.pop(key), default):
            raise ValueError(
                f"{name} on a partition folder: {key!r} "
                f"applies to a graph held in memory; leave it unset (each "
                f"rank samples its part of {where})")
    seed = args.pop('seed', None)
    if isinstance(seed, torch.Generator):
        seed = seed.initial_seed()
    if seed is not None and (isinstance(seed, bool)
                             or not isinstance(seed, int)):
        raise ValueError(f"'seed' must be an integer, a torch.Generator or "
                         f"None (got {seed!r})")
    device = resolve_device(args.pop('device', None))
    options = _option_fields(args.pop('placement', None),
                             args.pop('cache', None), name)
    stores = {key: args.pop(key) for key in STORE_KEYWORDS if key in args}
    for key in ('topology_placement', 'policy'):
        if key in options:
            stores[key] = options.pop(key)
    options.update({key: args.pop(key) for key in _BATCHES if key in args})
    num_neighbors = args.pop('num_neighbors')
    options.setdefault('batch_size', 1)
    input_nodes = args.pop('input_nodes', None)
    input_time = args.pop('input_time', None)
    if not args.pop('directed', True):  # PyG's deprecated 'induced' (warns):
        options['subgraph_type'] = parse_subgraph_type(
            options.get('subgraph_type', 'directional'), False, False)
    if args:
        raise ValueError(f"{name} on a partition folder does "
                         f"not take {sorted(args)} (batches are built "
                         f"without a DataLoader's workers)")
    if folder:
        feature_store, graph_store = open_stores(data, device=device,
                                                 **stores)
    else:
        if stores:
            raise ValueError(f"{sorted(stores)} place the stores: pass them "
                             f"to open_stores(), not to the loader of "
                             f"(feature_store, graph_store)")
        feature_store, graph_store = partition_stores(data, device)
    if link is not None:
        options.update(link_inputs((feature_store, graph_store),
                                   num_neighbors, options, **link))
        seeds = RankSeeds(None)
    elif folder:
        seeds = _input_nodes(input_nodes, graph_store, input_time)
    else:
        seeds = RankSeeds(input_nodes, input_time)
        if not _named(input_nodes):  # Else named by the part's attributes.
            node_type, ids = graph_store.seed_nodes(input_nodes)
            seeds = RankSeeds(ids if node_type is None else (node_type, ids),
                              input_time)
    return PartitionBatches(
        feature_store, graph_store, num_neighbors,
        input_nodes=seeds.nodes, input_time=seeds.time,
        input_id=seeds.input_id, seed=seed, device=device, **options)
