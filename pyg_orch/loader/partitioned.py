r"""What the hybrid loaders do with a partitioned graph as :obj:`data` (a
folder written by :func:`~pyg_orch.distributed.partition_graph`, or the
pair :obj:`(PartitionFeatureStore, PartitionGraphStore)`): open the stores,
refuse the options that do not apply yet, seed the collective sampler, and
keep the ranks in step (:func:`in_step`)."""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

from pyg_orch.loader.agreement import (
    CappedBatchSampler,
    agree_on_batches,
    num_batches,
)
from pyg_orch.features.partition_stores import (
    PartitionFeatureStore,
    PartitionGraphStore,
    open_stores,
)

__all__ = ['in_step', 'is_partitioned', 'partition_stores',
           'reject_options', 'seeded_generator']

Stores = Tuple[PartitionFeatureStore, PartitionGraphStore]


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


def reject_options(options: Dict[str, bool]) -> None:
    r"""Raises :class:`NotImplementedError` for the first option (name ->
    whether it was given) that a partitioned graph does not support
    yet."""
    for name, given in options.items():
        if given:
            raise NotImplementedError(
                f"'{name}' is not supported yet with a partitioned 'data' "
                f"(a folder or (PartitionFeatureStore, PartitionGraphStore)): "
                f"feature placement and caches are arguments of the stores "
                f"(open_stores()), and batches are sampled collectively in "
                f"the main process")


def seeded_generator(seed: Any, rank: int,
                     device: torch.device) -> Optional[torch.Generator]:
    r"""This rank's generator for :obj:`seed` (an :obj:`int`: a generator
    on :obj:`device` seeded from it and the rank, so ranks draw different
    negatives; a generator is used as it is)."""
    if seed is None or isinstance(seed, torch.Generator):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"'seed' must be an int or a torch.Generator (got "
                         f"{type(seed).__name__})")
    gen = torch.Generator(device=device)
    gen.manual_seed((seed * 1_000_003 + rank) % 2**63)
    return gen


def in_step(graph_store: PartitionGraphStore, kwargs: dict,
            check: Callable[[], Tuple[int, Dict[str, Any]]]) -> int:
    r"""Runs this rank's own checks (:obj:`check` returns its number of
    seeds and its collective arguments, name -> value), agrees with every
    other rank on those arguments and on the number of batches (the
    smallest of all ranks: a rank's other seeds are skipped in every
    epoch, different ones with :obj:`shuffle=True`), and replaces :obj:`batch_size`,
    :obj:`shuffle` and :obj:`drop_last` in :obj:`kwargs` by a
    :obj:`batch_sampler` that stops there. A collective that fails on
    every rank where one fails (see :func:`agree_on_batches`). Returns the
    number of batches."""
    error: Optional[BaseException] = None
    count = num_seeds = 0
    arguments: Dict[str, Any] = {}
    batch_size = kwargs.get('batch_size', 1)
    drop_last = kwargs.get('drop_last', False)
    try:
        for name in ('sampler', 'batch_sampler'):
            if kwargs.get(name) is not None:
                raise NotImplementedError(
                    f"'{name}' is not supported with a partitioned 'data': "
                    f"all ranks must draw as many batches")
        num_seeds, arguments = check()
        count = num_batches(num_seeds, batch_size, drop_last)
    except (ValueError, TypeError, NotImplementedError) as exc:
        error = exc
    arguments = {**arguments, 'batch_size': batch_size,
                 'drop_last': drop_last}
    agreed = agree_on_batches(count, arguments, error, graph_store.group)
    seeds = range(num_seeds)
    base = RandomSampler(seeds, generator=kwargs.get('generator')) \
        if kwargs.pop('shuffle', False) else SequentialSampler(seeds)
    kwargs['batch_sampler'] = CappedBatchSampler(
        BatchSampler(base, batch_size, drop_last), agreed)
    kwargs.pop('batch_size', None)
    kwargs.pop('drop_last', None)
    return agreed
