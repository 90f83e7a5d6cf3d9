r"""Variable-size exchanges between all ranks of a process group, one
:func:`torch.distributed.all_to_all_single` per payload (after one for the
sizes): the transport of the collective sampler
(:class:`~pyg_orch.distributed.DistributedNeighborSampler`) and feature
gather (:class:`~pyg_orch.distributed.DistributedFeatureGather`).

Every rank of the group must call :func:`exchange` the same number of times
in the same order (an empty list of rows for a rank is fine). A lost rank
makes the others raise after the process group's timeout (set it with
:func:`~pyg_orch.multigpu.init_distributed` or
:func:`torch.distributed.init_process_group`), never hang."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ['exchange', 'group_rank', 'group_size']


def group_size(group: Optional[Any] = None) -> int:
    r"""The number of ranks of :obj:`group` (:obj:`1` without an initialized
    process group)."""
    if not (dist.is_available() and dist.is_initialized()):
        return 1
    return dist.get_world_size(group)


def group_rank(group: Optional[Any] = None) -> int:
    r"""This process's rank in :obj:`group` (:obj:`0` without an initialized
    process group)."""
    if not (dist.is_available() and dist.is_initialized()):
        return 0
    return dist.get_rank(group)


def exchange(send: Sequence[Tensor], group: Optional[Any] = None
             ) -> List[Tensor]:
    r"""Sends :obj:`send[r]` to rank :obj:`r` of :obj:`group` and returns
    the tensors every rank sent to this one, in rank order (a collective).

    The tensors may have different numbers of rows (dimension 0), but must
    have the same dtype and trailing shape on every rank (which also fixes
    the dtype of what is received). Without an initialized process group
    (one rank), returns :obj:`send` itself.
    """
    world_size = group_size(group)
    if len(send) != world_size:
        raise ValueError(f"'send' must hold one tensor per rank "
                         f"({world_size}), got {len(send)}")
    if world_size == 1:
        return [send[0]]
    first = send[0]
    trailing = tuple(first.shape[1:])
    for t in send:
        if t.dtype != first.dtype or tuple(t.shape[1:]) != trailing:
            raise ValueError('exchange: every tensor must have the same '
                             'dtype and trailing shape')
    send_sizes = torch.tensor([int(t.size(0)) for t in send],
                              dtype=torch.int64)
    recv_sizes = torch.empty_like(send_sizes)
    dist.all_to_all_single(recv_sizes, send_sizes, group=group)
    flat = torch.cat([t.contiguous() for t in send]) if send else first
    recv_list = recv_sizes.tolist()
    out = flat.new_empty((sum(recv_list), ) + trailing)
    dist.all_to_all_single(out, flat, output_split_sizes=recv_list,
                           input_split_sizes=send_sizes.tolist(),
                           group=group)
    return list(torch.split(out, recv_list))
