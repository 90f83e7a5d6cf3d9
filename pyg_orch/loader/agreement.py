r"""Keeping the ranks of a loader over a partitioned graph in step: every
batch is a collective, so all ranks must run as many batches, with the same
collective arguments. :func:`agree_on_batches` settles both at construction
(one :func:`torch.distributed.all_gather_object`), and
:class:`CappedBatchSampler` stops every epoch after the agreed number of
batches."""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional

import torch.distributed as dist
from torch.utils.data import Sampler

from pyg_orch.parallel.exchange import group_size

__all__ = ['CappedBatchSampler', 'agree_on_batches', 'num_batches']


def num_batches(num_seeds: int, batch_size: int, drop_last: bool) -> int:
    r"""The number of batches a :class:`~torch.utils.data.DataLoader` makes
    of :obj:`num_seeds` seeds."""
    if drop_last:
        return num_seeds // batch_size
    return -(-num_seeds // batch_size)


def agree_on_batches(
    count: int,
    arguments: Dict[str, Any],
    error: Optional[BaseException] = None,
    group: Optional[Any] = None,
) -> int:
    r"""Tells every rank of :obj:`group` this rank's batch :obj:`count`, its
    collective :obj:`arguments` (compared by :func:`repr`) and the
    :obj:`error` it hit while checking its own arguments, and returns the
    smallest count (a collective). Every rank raises the same
    :class:`ValueError`, instead of waiting in a later collective, where
    the ranks disagree on an argument (naming it and the values); where a
    rank hit an error, it raises that error and every other rank a
    :class:`ValueError` naming the rank and the error."""
    mine = (None if error is None else
            f'{type(error).__name__}: {error}', int(count),
            {k: repr(v) for k, v in arguments.items()})
    everything: List[Any] = [mine]
    if group_size(group) > 1:
        everything = [None] * group_size(group)
        dist.all_gather_object(everything, mine, group=group)
    if error is not None:
        raise error  # Its own error on the rank that hit it.
    for r, (err, _, _) in enumerate(everything):
        if err is not None:
            raise ValueError(f'rank {r} could not build its loader, so no '
                             f'rank can sample: {err}')
    first = everything[0][2]
    for r, (_, _, args) in enumerate(everything):
        for name in sorted(set(first) | set(args)):
            if first.get(name) != args.get(name):
                raise ValueError(
                    f"the ranks disagree on {name!r}: rank 0 passed "
                    f"{first.get(name)}, rank {r} passed {args.get(name)}; "
                    f"every rank must pass the same value (batches are "
                    f"sampled collectively)")
    return min(c for _, c, _ in everything)


class CappedBatchSampler(Sampler):
    r"""The first :obj:`num_batches` batches of :obj:`batch_sampler` in
    every epoch (the agreed number of every rank; a rank's other seeds are
    skipped in that epoch, other ones with shuffling)."""
    def __init__(self, batch_sampler: Any, num_batches: int):
        self.batch_sampler = batch_sampler
        self.num_batches = num_batches

    def __iter__(self) -> Iterator[List[int]]:
        for i, batch in enumerate(self.batch_sampler):
            if i >= self.num_batches:
                return
            yield batch

    def __len__(self) -> int:
        return min(len(self.batch_sampler), self.num_batches)
