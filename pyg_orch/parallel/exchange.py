r"""Variable-size exchanges between all ranks of a process group, one
:func:`torch.distributed.all_to_all_single` per payload: the transport of
the collective sampler and the distributed feature gather. Every rank
calls :func:`exchange` the same number of times in the same order."""
from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ['comm_device', 'exchange', 'exchange_rows',
           'exchange_stacked_rows', 'group_rank',
           'group_size', 'split_by_value']


def group_size(group: Optional[Any] = None) -> int:
    r"""The number of ranks of :obj:`group` (:obj:`1` without one)."""
    if not (dist.is_available() and dist.is_initialized()):
        return 1
    return dist.get_world_size(group)


def group_rank(group: Optional[Any] = None) -> int:
    r"""This process's rank in :obj:`group` (:obj:`0` without one)."""
    if not (dist.is_available() and dist.is_initialized()):
        return 0
    return dist.get_rank(group)


_CPU = torch.device('cpu')


def gloo_twin(group: Optional[Any] = None) -> Optional[Any]:
    r"""A new gloo group of the ranks of :obj:`group`, for another thread's
    collectives (a collective of the default group)."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    mine = sorted(dist.get_process_group_ranks(
        group if group is not None else dist.group.WORLD))
    everyone: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    twin = None
    for ranks in sorted({tuple(r) for r in everyone}):
        made = dist.new_group(list(ranks), backend='gloo')
        if list(ranks) == mine:
            twin = made
    return twin


def split_by_value(values: Tensor, num: int
                   ) -> Tuple[List[Tensor], List[int], Tensor]:
    r"""The positions of the entries equal to each of :obj:`0, ..., num - 1`,
    their counts (on the host) and all positions in that order."""
    order = torch.sort(values, stable=True).indices
    counts = torch.bincount(values, minlength=num).tolist()
    return list(torch.split(order, counts)), counts, order


def comm_device(group: Optional[Any] = None) -> torch.device:
    r"""The device of :obj:`group`'s collectives: the CPU for gloo and
    without a process group, else the current CUDA device."""
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
             out_device: Optional[torch.device] = None,
             recv_sizes: Optional[Sequence[int]] = None) -> List[Tensor]:
    r"""Sends :obj:`send[r]` to rank :obj:`r` of :obj:`group` and returns the
    tensors every rank sent to this one, in rank order (a collective).
    Rows may differ in number, dtype and trailing shape may not.

    Args:
        send (Sequence[torch.Tensor]): One tensor per rank of the group.
        group (ProcessGroup, optional): The process group (default: the
            default group).
        out_device (torch.device, optional): Where the received tensors
            land (default: the device of :obj:`send[0]`).
        recv_sizes (Sequence[int], optional): The rows every rank sends to
            this one, where known (then the sizes are not exchanged and the
            host does not wait); a wrong size mixes up rows."""
    world_size = group_size(group)
    if len(send) != world_size:
        raise ValueError(f"'send' must hold one tensor per rank "
                         f"({world_size}), got {len(send)}")
    first = send[0]
    out_device = first.device if out_device is None else torch.device(
        out_device)
    if recv_sizes is not None:
        recv_sizes = _check_sizes(recv_sizes, world_size)
    if world_size == 1:
        if recv_sizes is not None and recv_sizes[0] != first.size(0):
            raise ValueError(f"'recv_sizes' says {recv_sizes[0]} rows, but "
                             f"this rank sends itself {first.size(0)}")
        return [first.to(out_device)]
    trailing = tuple(first.shape[1:])
    for t in send:
        if t.dtype != first.dtype or tuple(t.shape[1:]) != trailing:
            raise ValueError('exchange: every tensor must have the same '
                             'dtype and trailing shape')
    out, recv_list = _exchange_flat(
        torch.cat([t.contiguous() for t in send]),
        [int(t.size(0)) for t in send], group, out_device, recv_sizes)
    return list(torch.split(out, recv_list))


def _exchange_flat(flat: Tensor, send_list: List[int], group: Optional[Any],
                   out_device: torch.device,
                   recv_sizes: Optional[List[int]]
                   ) -> Tuple[Tensor, List[int]]:
    # `send_list[r]` rows of `flat` to rank r; what is received, and how
    # many rows from every rank.
    device = comm_device(group)
    if recv_sizes is None:
        sizes = torch.tensor(send_list, dtype=torch.int64).to(device)
        received = torch.empty_like(sizes)
        dist.all_to_all_single(received, sizes, group=group)
        recv_list = received.tolist()  # The one sync: the receive sizes.
    else:
        recv_list = recv_sizes
    flat = flat.contiguous().to(device)
    out = flat.new_empty((sum(recv_list), ) + tuple(flat.shape[1:]))
    dist.all_to_all_single(out, flat, output_split_sizes=recv_list,
                           input_split_sizes=send_list, group=group)
    return out.to(out_device), recv_list


def _check_sizes(sizes: Sequence[int], world_size: int,
                 name: str = 'recv_sizes') -> List[int]:
    out = [int(n) for n in sizes]
    if len(out) != world_size or any(n < 0 for n in out):
        raise ValueError(f"'{name}' must hold one non-negative row "
                         f"count per rank ({world_size}), got {list(sizes)}")
    return out


def _row_bytes(t: Tensor) -> Tensor:
    # The rows of `t` as bytes: (rows, bytes per row), uint8.
    width = math.prod(t.shape[1:])
    return t.contiguous().reshape(t.size(0), width).view(torch.uint8)


def exchange_rows(send: Sequence[Sequence[Tensor]],
                  recv_sizes: Sequence[int], group: Optional[Any] = None,
                  out_device: Optional[torch.device] = None
                  ) -> List[Tensor]:
    r"""Sends the rows of several fields in one
    :func:`torch.distributed.all_to_all_single` (a collective):
    :obj:`send[r]` holds one tensor per field for rank :obj:`r`, all with
    as many rows; :obj:`recv_sizes` is required. Returns one tensor per
    field, the rows of every rank in rank order."""
    world_size = group_size(group)
    if len(send) != world_size:
        raise ValueError(f"'send' must hold the fields for every rank "
                         f"({world_size}), got {len(send)}")
    first = list(send[0])
    if not first:
        return []
    for fields in send:
        if len(fields) != len(first) or any(
                t.dtype != f.dtype or tuple(t.shape[1:]) != tuple(f.shape[1:])
                or t.size(0) != fields[0].size(0)
                for t, f in zip(fields, first)):
            raise ValueError('exchange_rows: every rank must get the same '
                             'fields (dtype, trailing shape), each with '
                             'the same number of rows')
    stacked = [torch.cat([fields[i] for fields in send])
               for i in range(len(first))] if world_size > 1 else first
    return exchange_stacked_rows(
        stacked, [int(fields[0].size(0)) for fields in send], recv_sizes,
        group, out_device=first[0].device if out_device is None
        else out_device)


def exchange_stacked_rows(fields: Sequence[Tensor],
                          send_sizes: Sequence[int],
                          recv_sizes: Sequence[int],
                          group: Optional[Any] = None,
                          out_device: Optional[torch.device] = None
                          ) -> List[Tensor]:
    r"""As :func:`exchange_rows`, for fields that hold the rows for every rank
    one after another (:obj:`send_sizes[r]` rows for rank :obj:`r`)."""
    world_size = group_size(group)
    fields = list(fields)
    if not fields:
        return []
    send_list = _check_sizes(send_sizes, world_size, 'send_sizes')
    recv_list = _check_sizes(recv_sizes, world_size)
    first = fields[0]
    out_device = first.device if out_device is None else torch.device(
        out_device)
    if any(f.size(0) != sum(send_list) for f in fields):
        raise ValueError(f"exchange_stacked_rows: every field must have "
                         f"sum(send_sizes) = {sum(send_list)} rows (got "
                         f"{[int(f.size(0)) for f in fields]})")
    if world_size == 1:
        if recv_list[0] != first.size(0):
            raise ValueError(f"'recv_sizes' says {recv_list[0]} rows, but "
                             f"this rank sends itself {first.size(0)}")
        return [f.to(out_device) for f in fields]
    if len(fields) == 1:  # As it is: no packing.
        got, _ = _exchange_flat(first, send_list, group, out_device,
                                recv_list)
        return [got]
    packed = torch.cat([_row_bytes(f) for f in fields], dim=1)
    got, _ = _exchange_flat(packed, send_list, group, out_device, recv_list)
    out, offset = [], 0
    for f in fields:
        width = _row_bytes(f[:0]).size(1)
        # A copy: a lone row's slice is contiguous at an unaligned offset.
        part = got[:, offset:offset + width].clone(
            memory_format=torch.contiguous_format).view(f.dtype)
        out.append(part.reshape((got.size(0), ) + tuple(f.shape[1:])))
        offset += width
    return out
