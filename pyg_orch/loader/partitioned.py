r"""What the hybrid loaders do with a partitioned graph as :obj:`data` (a
folder written by :func:`~pyg_orch.distributed.partition_graph`, or the
pair :obj:`(PartitionFeatureStore, PartitionGraphStore)`): open the stores,
check a link loader's label edges and keep the ranks in step
(:func:`agree_on_batches`)."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling

from pyg_orch.features.partition_stores import (
    PartitionFeatureStore,
    PartitionGraphStore,
    open_stores,
)
from pyg_orch.loader.validation import (
    check_edge_label,
    check_edge_label_time,
    check_neg_sampling,
    check_temporal_args,
)
from pyg_orch.parallel.exchange import group_size

__all__ = ['agree_on_batches', 'is_partitioned', 'link_inputs',
           'partition_stores']

Stores = Tuple[PartitionFeatureStore, PartitionGraphStore]

# Batch arguments every rank must pass alike (batches are collectives).
_AGREED = ('replace', 'subgraph_type', 'disjoint', 'temporal_strategy',
           'time_attr', 'weight_attr', 'batch_size', 'drop_last', 'even',
           'shuffle', 'prefetch', 'num_workers')


def is_partitioned(data: Any) -> bool:
    r"""Whether :obj:`data` is a partition folder or a pair of partition
    stores."""
    if isinstance(data, (str, os.PathLike)):
        return True
    return isinstance(data, (tuple, list)) and len(data) == 2 and \
        isinstance(data[1], PartitionGraphStore)


def partition_stores(data: Any, device: torch.device) -> Stores:
    r"""The stores of :obj:`data`: a folder is opened
    (:func:`~pyg_orch.features.partition_stores.open_stores`, a collective,
    rows gathered to :obj:`device`); a pair is checked."""
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
    r"""Tells every rank of :obj:`group` this rank's collective
    :obj:`arguments` (compared by :func:`repr`) and the :obj:`error` it hit
    while checking its own, so that every rank raises instead of waiting
    in a later collective: the same :class:`ValueError` where the ranks
    disagree on an argument; where a rank hit an error, that error there
    and a :class:`ValueError` naming it on the others. A collective."""
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
    r"""This rank's label edges, checked, as
    :class:`~pyg_orch.loader.partition_pipeline.PartitionBatches` takes
    them (:obj:`input_edges` and :obj:`neg_sampling`); the ranks agree on
    :obj:`num_neighbors`, the negatives and the batch :obj:`options` first
    (:func:`agree_on_batches`, a collective)."""
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
        _check_global_weights(neg_sampling, edge_type, graph_store)
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


def _check_global_weights(neg_sampling: Optional[NegativeSampling],
                          edge_type: Any, graph_store: Any) -> None:
    # Negative-sampling weights over a partitioned graph: one per vertex of
    # the whole graph (global ids).
    if neg_sampling is None:
        return
    for name, weight, end in (('src_weight', neg_sampling.src_weight, 0),
                              ('dst_weight', neg_sampling.dst_weight, -1)):
        node_type = None if edge_type is None else edge_type[end]
        n = graph_store.num_nodes[node_type]
        if weight is not None and weight.numel() != n:
            raise ValueError(f"'neg_sampling.{name}' must hold one weight "
                             f"per vertex of the whole graph ({n} of node "
                             f"type {node_type!r}; got {weight.numel()})")
