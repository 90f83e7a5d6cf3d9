r"""A rank's part of a partition folder, opened collectively: every rank
checks that all ranks hold their own part of one partitioning."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

import torch.distributed as dist

from pyg_orch.parallel.exchange import group_rank, group_size
from pyg_orch.partition.storage import (
    GraphPartition,
    PartitionFileError,
    load_partition,
)

__all__ = ['open_partition']


def _load_error(error: BaseException) -> str:
    # What every rank says of a rank that could not load its part.
    if isinstance(error, PartitionFileError):
        return str(error)  # 'could not load part_1/...: ...'
    return (f'could not load its part of the partition, so no rank can '
            f'sample: {type(error).__name__}: {error}')


def open_partition(partition: Union[str, Path, GraphPartition],
                   group: Optional[Any] = None,
                   expected_fingerprint: Optional[str] = None,
                   verify: Optional[bool] = None) -> GraphPartition:
    r"""Loads this rank's part of :obj:`partition` (a folder or a
    :class:`~pyg_orch.distributed.GraphPartition`) and checks with every rank
    of :obj:`group` (a collective) that they hold their own part of one
    partitioning. Where a rank cannot load its part, or the parts come from
    different graphs or partitionings, every rank raises a :class:`ValueError`
    naming the rank, the file and why."""
    world_size, rank = group_size(group), group_rank(group)
    error: Optional[BaseException] = None
    if not isinstance(partition, GraphPartition):
        try:
            partition = load_partition(
                partition, rank, expected_num_parts=world_size,
                expected_fingerprint=expected_fingerprint, verify=verify)
        except Exception as exc:  # Told to every rank before it raises.
            error = exc
    elif (expected_fingerprint is not None
          and partition.fingerprint != expected_fingerprint):
        error = ValueError(
            f"'{partition.out_dir}' was partitioned from another graph: its "
            f"graph fingerprint is {partition.fingerprint!r}, expected "
            f"{expected_fingerprint!r}")
    mine = (_load_error(error), None) if error is not None else (None, (
        partition.part, partition.num_parts, partition.fingerprint,
        partition.partitioning_id, str(partition.out_dir)))
    everything = [mine]
    if world_size > 1:
        everything = [None] * world_size
        dist.all_gather_object(everything, mine, group=group)
    elif error is not None:
        raise error
    for r, (err, _) in enumerate(everything):
        if err is not None:
            raise ValueError(f'rank {r} {err}') from error
    _, num_parts0, fp0, id0, dir0 = everything[0][1]
    for r, (_, (part, num_parts, fp, pid, out_dir)) in enumerate(everything):
        if fp != fp0:
            raise ValueError(
                f"rank {r}'s partition folder '{out_dir}' was cut from "
                f"another graph (fingerprint {fp!r}) than rank 0's "
                f"'{dir0}' (fingerprint {fp0!r}): copy the parts of one "
                f"partitioning to every machine")
        if num_parts != num_parts0 or pid != id0:
            raise ValueError(
                f"rank {r}'s partition folder '{out_dir}' holds another "
                f"partitioning of the graph ({num_parts} parts, id "
                f"{pid!r}) than rank 0's '{dir0}' ({num_parts0} parts, id "
                f"{id0!r}): another method, seed or number of parts; copy "
                f"the parts of one partitioning to every machine")
        if part != r:
            raise ValueError(f'rank {r} holds part {part}: rank k must '
                             f'hold part k')
    return partition
