r"""The same training script on one machine or several:
:class:`~pyg_orch.HybridNeighborLoader` given a partition folder instead of
a graph (:obj:`HybridNeighborLoader('parts/', num_neighbors=[10, 5],
batch_size=512)`) returns a
:class:`~pyg_orch.distributed.DistributedNeighborLoader` over this rank's
part (the rank in the default process group, or in :obj:`group`).

:func:`partition_loader` maps the loader's arguments: those that describe a
graph held in memory (its topology, sampler, feature store, look-ahead,
...) are rejected with a :class:`ValueError` when set to anything but their
defaults; :obj:`num_workers` builds batches in threads (see
:class:`~pyg_orch.distributed.DistributedNeighborLoader`). This
module imports nothing from :mod:`pyg_orch.loader` (which imports it
lazily)."""
from __future__ import annotations

import os
from typing import Any, Dict, NamedTuple, Optional

import torch
from torch import Tensor

from pyg_orch.distributed.loader import DistributedNeighborLoader
from pyg_orch.distributed.stores import open_partition
from pyg_orch.distributed.machines import rank_layout
from pyg_orch.sampling.arguments import parse_subgraph_type, resolve_device

__all__ = ['partition_loader']

# Arguments that make sense only for a graph held in memory, with their
# defaults (accepted when passed with these values).
_IN_MEMORY = {
    'is_sorted': False,
    'filter_per_worker': None,
    'neighbor_sampler': None,
    'topology': None,
    'lookahead': None,
}

# Fields of the option objects that make sense only for a graph held in
# memory, with their defaults.
_IN_MEMORY_OPTIONS = {
    'placement': {'backend': 'auto'},
    'cache': {'store': 'auto', 'gpu_memory_budget': 'auto',
              'cache_ratio': None},
}

# DataLoader arguments with no meaning here (no worker processes, no
# DataLoader), with their defaults.
_DATALOADER = {
    'pin_memory': False,
    'persistent_workers': False,
    'prefetch_factor': None,
    'worker_init_fn': None,
    'timeout': 0,
    'collate_fn': None,
    'sampler': None,
    'batch_sampler': None,
    'generator': None,
    'multiprocessing_context': None,
    'pin_memory_device': '',
    'in_order': True,
}

# Arguments of DistributedNeighborLoader that pass through.
_DISTRIBUTED = ('even', 'cache_size', 'edge_cache_size', 'group',
                'expected_fingerprint', 'sampling_device', 'feature_device',
                'feature_placement', 'replace',
                'disjoint', 'drop_last', 'weight_attr', 'time_attr',
                'temporal_strategy', 'subgraph_type',
                'transform_sampler_output', 'prefetch', 'num_workers')


def _is_default(value: Any, default: Any) -> bool:
    if default is None or isinstance(value, (Tensor, torch.Generator)):
        return value is default
    try:
        return bool(value == default) and type(value) is type(default)
    except Exception:  # e.g. a feature store object.
        return False


class RankSeeds(NamedTuple):
    r"""This rank's share of the seeds given to a partition folder's
    loader."""
    #: The seeds (or what names them), as
    #: :class:`~pyg_orch.distributed.DistributedNeighborLoader` takes them.
    nodes: Optional[Any]
    #: Their times (where :obj:`input_time` was given).
    time: Optional[Tensor] = None
    #: Their positions among the seeds of all ranks (where given as ids or
    #: a mask): what batches report as :obj:`input_id`.
    input_id: Optional[Tensor] = None


def _input_nodes(input_nodes: Any, partition,
                 input_time: Optional[Tensor] = None) -> RankSeeds:
    r"""This rank's seeds: the part's vertices among :obj:`input_nodes`
    (the seeds of all ranks: global ids or a mask over all vertices), or a
    node attribute name, or :obj:`None`; for a heterogeneous partition, a
    node type or a (node type, seeds) tuple. Also their times, the entries
    of :obj:`input_time` (one per seed of all ranks) that it keeps, and
    their positions among all ranks' seeds."""
    typed = isinstance(input_nodes, (tuple, list)) and \
        len(input_nodes) == 2 and isinstance(input_nodes[0], str)
    nodes = input_nodes[1] if typed else input_nodes
    if input_time is not None and (nodes is None or isinstance(nodes, str)):
        raise ValueError("'input_time' on a partition folder needs "
                         "'input_nodes' as the seeds of all ranks (global "
                         "ids or a mask over all vertices), one time each")
    if not partition.is_hetero:
        if typed:
            raise ValueError("'input_nodes' as a (node type, seeds) tuple "
                             "is for heterogeneous partitions")
        if input_nodes is None or isinstance(input_nodes, str):
            return RankSeeds(input_nodes)
        return _owned(input_nodes, partition.node_part, partition.part,
                      input_time)
    if isinstance(input_nodes, str):
        return RankSeeds(input_nodes)  # The part's vertices of that type.
    if not typed:
        raise ValueError("'input_nodes' must be a node type or a (node "
                         "type, seeds) tuple for a heterogeneous partition "
                         f"(got {input_nodes!r})")
    node_type, nodes = input_nodes
    if node_type not in partition.node_part:
        raise ValueError(f"'input_nodes' names the node type {node_type!r}, "
                         f"not one of {list(partition.node_part)}")
    if nodes is None or isinstance(nodes, str):
        return RankSeeds((node_type, nodes))
    owned = _owned(nodes, partition.node_part[node_type], partition.part,
                   input_time)
    return owned._replace(nodes=(node_type, owned.nodes))


def _owned(input_nodes: Any, node_part: Tensor, part: int,
           input_time: Optional[Tensor] = None) -> RankSeeds:
    nodes = torch.as_tensor(input_nodes)
    num_nodes = int(node_part.numel())
    if nodes.dtype == torch.bool:
        if nodes.dim() != 1 or nodes.numel() != num_nodes:
            raise ValueError(f"'input_nodes' as a mask must have one entry "
                             f"per vertex of the partitioned graph "
                             f"({num_nodes}), got shape "
                             f"{tuple(nodes.shape)}")
        nodes = nodes.nonzero().view(-1)
    elif nodes.is_floating_point() or nodes.dim() != 1:
        raise ValueError(f"'input_nodes' must be a 1-D tensor of global "
                         f"vertex ids, a boolean mask over all vertices, or "
                         f"the name of a boolean node attribute (got shape "
                         f"{tuple(nodes.shape)}, {nodes.dtype})")
    nodes = nodes.to(torch.int64).cpu()
    if nodes.numel() and (int(nodes.min()) < 0
                          or int(nodes.max()) >= num_nodes):
        raise ValueError(f"'input_nodes' must be global vertex ids in "
                         f"[0, {num_nodes})")
    keep = (node_part[nodes] == part).nonzero().view(-1)
    if input_time is None:
        return RankSeeds(nodes[keep], None, keep)
    time = torch.as_tensor(input_time)
    if time.dim() != 1 or time.numel() != nodes.numel():
        raise ValueError(f"'input_time' must hold one time per seed of all "
                         f"ranks ({nodes.numel()}), got shape "
                         f"{tuple(time.shape)}")
    return RankSeeds(nodes[keep], time.cpu()[keep], keep)


def _option_fields(placement: Any, cache: Any) -> Dict[str, Any]:
    r"""The arguments of
    :class:`~pyg_orch.distributed.DistributedNeighborLoader` that a
    :class:`~pyg_orch.PlacementOptions` and a
    :class:`~pyg_orch.CacheOptions` (or :obj:`None`) stand for; their
    fields that apply to a graph held in memory only must keep their
    defaults."""
    out: Dict[str, Any] = {}
    for group, value in (('placement', placement), ('cache', cache)):
        if value is None:
            continue
        for field, default in _IN_MEMORY_OPTIONS[group].items():
            if not _is_default(getattr(value, field), default):
                raise ValueError(
                    f"HybridNeighborLoader on a partition folder: "
                    f"'{group}.{field}' applies to a graph held in memory; "
                    f"leave it unset")
    if placement is not None:
        if isinstance(placement.topology, str) and \
                placement.topology in ('device', 'host'):
            raise ValueError(
                f"HybridNeighborLoader on a partition folder: "
                f"'placement.topology' must be 'auto' or 'sharded' (got "
                f"{placement.topology!r}); the part's topology is sampled "
                f"on 'sampling_device'")
        out['topology_placement'] = placement.topology
    if cache is not None:
        out.update(cache_policy=cache.policy, cache_ranking=cache.ranking,
                   num_presample_batches=cache.num_presample_batches)
    return out


def partition_loader(path: os.PathLike,
                     arguments: Dict[str, Any]) -> DistributedNeighborLoader:
    r"""The :class:`~pyg_orch.distributed.DistributedNeighborLoader` that
    :obj:`HybridNeighborLoader(path, ...)` stands for: a collective, every
    rank of the process group calls it (see :doc:`/distributed`).

    :obj:`arguments` are those passed to
    :class:`~pyg_orch.HybridNeighborLoader` (by name, :obj:`kwargs`
    merged in). Supported:

    * :obj:`num_neighbors`: a list of fan-outs (:obj:`-1`: all); for a
      heterogeneous partition also a dictionary per edge type.
    * :obj:`input_nodes`: the seeds of **all** ranks, each rank keeping
      those its part owns (global ids, or a boolean mask over all
      vertices; batches' :obj:`input_id` are then positions among all
      ranks' seeds, as one machine's loader would give), or the name of a
      boolean node attribute of the parts (e.g. :obj:`'train_mask'`);
      :obj:`None`: the part's :obj:`train_mask` vertices where it has one,
      else all of its vertices. For a heterogeneous partition: a node type
      (all of the part's vertices of that type), or a (node type, seeds)
      tuple, the seeds as above (or the name of a boolean attribute of
      that type).
    * :obj:`prefetch`: batches built ahead by a background thread, whose
      exchanges go over their own gloo group (overlapped with training).
    * :obj:`num_workers`: threads that build batches in parallel, each
      over a gloo group of its own (see
      :class:`~pyg_orch.distributed.DistributedNeighborLoader`).
    * :obj:`batch_size`, :obj:`shuffle`, :obj:`drop_last`,
      :obj:`transform`, :obj:`transform_sampler_output`, :obj:`replace`,
      :obj:`disjoint`, :obj:`weight_attr` (an edge attribute of the
      partition; as in PyG),
      :obj:`time_attr` (a node or edge attribute of the partition holding
      integer or floating-point times) and :obj:`temporal_strategy`,
      :obj:`input_time` (one time per seed of :obj:`input_nodes`, given as
      the seeds of all ranks; each rank keeps those of its seeds),
      :obj:`subgraph_type` (and the deprecated :obj:`directed`).
    * :obj:`device`: where batches land (default: this process's CUDA
      device where CUDA is available, else the CPU).
    * :obj:`sampling_device`: where sampling runs (default: the CPU; e.g.
      :obj:`device` to sample on the GPU, over a copy of the part's
      topology made there once).
    * :obj:`feature_device`: where the part's feature rows are read and
      served (default: the CPU; e.g. :obj:`device` to gather on the GPU,
      over a copy of the part's gathered attributes made there once).
    * :obj:`seed` (an integer or a generator, whose initial seed is used;
      :obj:`None`, the default, is :obj:`0`, so that batches are
      reproducible): shuffling and sampling, offset by the rank.
    * :obj:`cache` (a :class:`~pyg_orch.CacheOptions`): the cache of remote
      rows. :obj:`ranking`: :obj:`'frequency'` (the remote rows read most
      often in :obj:`num_presample_batches` pre-sampled batches, default
      8) or :obj:`'degree'` (the remote vertices that are the sources of
      the most in-edges of the part's vertices; nothing pre-sampled);
      :obj:`policy`: :obj:`'static'` or :obj:`'lru'`. Its other fields
      describe a graph held in memory and must keep their defaults.
    * :obj:`placement` (a :class:`~pyg_orch.PlacementOptions`):
      :obj:`topology='auto'`, or :obj:`'sharded'` to split a part's
      neighbor lists across the ranks of a machine that share it (one part
      per machine, see :mod:`~pyg_orch.distributed.machines`); its
      :obj:`backend` must stay :obj:`'auto'`.
    * The arguments of
      :class:`~pyg_orch.distributed.DistributedNeighborLoader`:
      :obj:`cache_size`, :obj:`edge_cache_size` (remote edges' attribute
      rows to cache per rank), :obj:`even`, :obj:`group`,
      :obj:`expected_fingerprint`, :obj:`sampling_device`,
      :obj:`feature_device` and :obj:`feature_placement`
      (:obj:`'auto'`, or :obj:`'sharded'` to split the part's feature rows
      across those ranks).

    :class:`~pyg_orch.HybridNeighborLoader` turns its deprecated keywords
    (:obj:`cache_policy`, :obj:`presample_batches`,
    :obj:`topology_placement`, ...) into :obj:`cache` and :obj:`placement`
    before it calls this function (see
    :func:`pyg_orch.loader.options.resolve_options`).
    """
    args = dict(arguments)
    refusals = (
        (_IN_MEMORY, ValueError, "{key!r} applies to a graph held in "
         "memory; leave it unset (each rank samples its part of "
         f"'{os.fspath(path)}')"),
        (_DATALOADER, ValueError, "the DataLoader argument {key!r} does not "
         "apply (batches are assembled by DistributedNeighborLoader, "
         "without a DataLoader)"),
    )
    for defaults, error, reason in refusals:
        for key, default in defaults.items():
            if key in args and not _is_default(args.pop(key), default):
                raise error("HybridNeighborLoader on a partition folder: "
                            + reason.format(key=key))
    if 'num_neighbors' not in args:
        raise ValueError("HybridNeighborLoader needs 'num_neighbors'")
    num_neighbors = args.pop('num_neighbors')
    seed = args.pop('seed', None)
    if isinstance(seed, torch.Generator):
        seed = seed.initial_seed()
    if seed is not None and (isinstance(seed, bool)
                             or not isinstance(seed, int)):
        raise ValueError(f"'seed' must be an integer, a torch.Generator or "
                         f"None (got {seed!r})")
    device = resolve_device(args.pop('device', None))
    options = {key: args.pop(key) for key in _DISTRIBUTED if key in args}
    options.update(_option_fields(args.pop('placement', None),
                                  args.pop('cache', None)))
    batch_size = args.pop('batch_size', 1)
    shuffle = args.pop('shuffle', False)
    transform = args.pop('transform', None)
    input_nodes = args.pop('input_nodes', None)
    input_time = args.pop('input_time', None)
    directed = args.pop('directed', True)
    if not directed:  # PyG's deprecated spelling of 'induced' (warns):
        options['subgraph_type'] = parse_subgraph_type(
            options.get('subgraph_type', 'directional'), False, False)
    if args:
        raise ValueError(f"HybridNeighborLoader on a partition folder does "
                         f"not take {sorted(args)}")
    # Collectives: which part this rank holds, and whether every rank can
    # load its own.
    layout = rank_layout(path, options.get('group'))
    partition = open_partition(path, layout.part_group,
                               options.pop('expected_fingerprint', None))
    seeds = _input_nodes(input_nodes, partition, input_time)
    return DistributedNeighborLoader(
        partition, num_neighbors, batch_size,
        input_nodes=seeds.nodes, input_time=seeds.time,
        input_id=seeds.input_id,
        shuffle=bool(shuffle), seed=seed, device=device, transform=transform,
        layout=layout, **options)
