r"""Variable-size exchanges between all ranks of a process group, one
:func:`torch.distributed.all_to_all_single` per payload (after one for the
sizes): the transport of the collective sampler
(:class:`~pyg_orch.distributed.DistributedNeighborSampler`) and feature
gather (:class:`~pyg_orch.distributed.DistributedFeatureGather`).

Every rank of the group must call :func:`exchange` the same number of times
in the same order (an empty list of rows for a rank is fine). A lost rank
makes the others raise after the process group's timeout (set it with
:func:`~pyg_orch.multigpu.init_distributed` or
:func:`torch.distributed.init_process_group`), never hang.

With a NCCL process group (which moves CUDA tensors only), the payloads
travel on the group's device (:func:`comm_device`: this process's current
CUDA device) and come back on the device of what was sent, or on
:obj:`out_device`; with gloo they stay on the CPU."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ['comm_device', 'exchange', 'group_rank', 'group_size',
           'split_by_value']


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


_CPU = torch.device('cpu')


def split_by_value(values: Tensor, num: int
                   ) -> Tuple[List[Tensor], List[int], Tensor]:
    r"""The positions of the entries of :obj:`values` equal to each of
    :obj:`0, ..., num - 1` (e.g. the owner rank of every id), ascending
    (one stable sort); how many there are of each (read on the host: the
    sizes of an :func:`exchange`); and all positions in that order (their
    concatenation)."""
    order = torch.sort(values, stable=True).indices
    counts = torch.bincount(values, minlength=num).tolist()
    return list(torch.split(order, counts)), counts, order


def comm_device(group: Optional[Any] = None) -> torch.device:
    r"""The device whose tensors :obj:`group`'s collectives move: the CPU
    for gloo (or a group that has a CPU backend, e.g.
    :obj:`'cpu:gloo,cuda:nccl'`) and without a process group; this
    process's current CUDA device for a NCCL-only group (set it with
    :func:`torch.cuda.set_device` before the first collective)."""
    if not (dist.is_available() and dist.is_initialized()):
        return _CPU
    backend = str(dist.get_backend(group)).lower()
    if ':' in backend:  # 'cpu:gloo,cuda:nccl'
        devices = {pair.split(':')[0].strip()
                   for pair in backend.split(',') if ':' in pair}
        if 'cpu' in devices:
            return _CPU
    elif backend != 'nccl':
        return _CPU
    return torch.device('cuda', torch.cuda.current_device())


def exchange(send: Sequence[Tensor], group: Optional[Any] = None,
             out_device: Optional[torch.device] = None) -> List[Tensor]:
    r"""Sends :obj:`send[r]` to rank :obj:`r` of :obj:`group` and returns
    the tensors every rank sent to this one, in rank order (a collective).

    The tensors may have different numbers of rows (dimension 0), but must
    have the same dtype and trailing shape on every rank (which also fixes
    the dtype of what is received). They travel on :func:`comm_device`
    (copied there if needed) and are returned on :obj:`out_device`
    (default: the device of :obj:`send[0]`). Without an initialized process
    group (one rank), returns :obj:`send[0]` (on :obj:`out_device`).

    Args:
        send (Sequence[torch.Tensor]): One tensor per rank of the group.
        group (ProcessGroup, optional): The process group (default: the
            default group).
        out_device (torch.device, optional): Where the received tensors
            land.
    """
    world_size = group_size(group)
    if len(send) != world_size:
        raise ValueError(f"'send' must hold one tensor per rank "
                         f"({world_size}), got {len(send)}")
    first = send[0]
    out_device = first.device if out_device is None else torch.device(
        out_device)
    if world_size == 1:
        return [first.to(out_device)]
    trailing = tuple(first.shape[1:])
    for t in send:
        if t.dtype != first.dtype or tuple(t.shape[1:]) != trailing:
            raise ValueError('exchange: every tensor must have the same '
                             'dtype and trailing shape')
    device = comm_device(group)
    send_list = [int(t.size(0)) for t in send]
    send_sizes = torch.tensor(send_list, dtype=torch.int64).to(device)
    recv_sizes = torch.empty_like(send_sizes)
    dist.all_to_all_single(recv_sizes, send_sizes, group=group)
    flat = torch.cat([t.contiguous() for t in send]).to(device)
    recv_list = recv_sizes.tolist()  # The one sync: the receive sizes.
    out = flat.new_empty((sum(recv_list), ) + trailing)
    dist.all_to_all_single(out, flat, output_split_sizes=recv_list,
                           input_split_sizes=send_list, group=group)
    return list(torch.split(out.to(out_device), recv_list))
