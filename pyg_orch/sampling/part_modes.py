r"""A partition's sampling weights and times, checked on all ranks together."""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional, Tuple

import torch
import torch.distributed as dist
from torch import Tensor

from pyg_orch.topology.csc import CSCTopology, segment_ids, time_order
from pyg_orch.topology.graph import (
    WEIGHT_PROBLEMS,
    check_time_level,
    weight_problem,
)
from pyg_orch.parallel.exchange import comm_device
from pyg_orch.sampling.arguments import check_attr_names

__all__ = ['agree_on_problem', 'part_node_times', 'part_weights',
           'sort_by_time', 'time_per_position']


def _by_type(attrs: Any, is_hetero: bool) -> Dict[Any, Dict[str, Tensor]]:
    return attrs if is_hetero else {None: attrs}


def agree_on_problem(problem: int, group: Any, world_size: int) -> int:
    r"""The largest of every rank's :obj:`problem` code (a collective)."""
    if world_size <= 1:
        return problem
    flag = torch.tensor([problem], device=comm_device(group))
    dist.all_reduce(flag, dist.ReduceOp.MAX, group=group)
    return int(flag.item())


def part_weights(partition, weight_attr: str, is_hetero: bool, group: Any,
                 world_size: int) -> Dict[Any, Tensor]:
    r"""The part's sampling weights per edge type, checked on every rank."""
    check_attr_names(weight_attr=weight_attr)
    attrs = _by_type(partition.edge_attrs, is_hetero)
    found = {et: a[weight_attr] for et, a in attrs.items()
             if weight_attr in a}
    if not found:
        raise ValueError(
            f"The weight attribute 'weight_attr'={weight_attr!r} is not an "
            f"edge attribute of the partition (it has "
            f"{sorted({k for a in attrs.values() for k in a})})")
    problem = max(weight_problem(w) for w in found.values())
    problem = agree_on_problem(problem, group, world_size)
    if problem:
        raise ValueError(f"'weight_attr': the partition's {weight_attr!r} "
                         f"{WEIGHT_PROBLEMS[problem - 1]} (on at least one "
                         f"part)")
    return found


def _check_times(times: Dict[Any, Tensor], time_attr: str, group: Any,
                 world_size: int) -> bool:
    # Whether some part's times are floating-point; raises on every rank
    # where a part's are not one number per node or edge, or hold NaN.
    problem = 0  # 3: NaN, 2: not a vector of numbers, 1: floating-point.
    for t in times.values():
        if t.dim() != 1 or t.is_complex() or t.dtype == torch.bool:
            problem = max(problem, 2)
        elif t.is_floating_point():
            problem = max(problem, 3 if bool(torch.isnan(t).any()) else 1)
    problem = agree_on_problem(problem, group, world_size)
    if problem == 2:
        raise ValueError(f"'time_attr': the partition's {time_attr!r} must "
                         f"be one timestamp (an integer or floating-point "
                         f"number) per node or edge")
    if problem == 3:
        raise ValueError(f"'time_attr': the partition's {time_attr!r} holds "
                         f"NaN (on at least one part); every node or edge "
                         f"needs a time")
    return problem == 1


def part_node_times(partition, time_attr: str, is_hetero: bool,
                    num_nodes: Dict[Any, int], group: Any, world_size: int,
                    device: torch.device
                    ) -> Tuple[Optional[Dict[Any, Tensor]],
                               Dict[Any, Tensor], bool]:
    r""":obj:`(node_time, edge_time, floating)`: node-level or edge-level
    times for :obj:`time_attr`, and whether some part's are floating-point."""
    nodes = _by_type(partition.node_attrs, is_hetero)
    edges = _by_type(partition.edge_attrs, is_hetero)
    node_level = {t: a[time_attr] for t, a in nodes.items()
                  if time_attr in a}
    edge_level = {et: a[time_attr] for et, a in edges.items()
                  if time_attr in a}
    check_time_level(time_attr, bool(node_level), bool(edge_level),
                     'the partition')
    floating = _check_times(node_level or edge_level, time_attr, group,
                            world_size)
    if not node_level:
        return None, {et: t.to(device, _time_dtype(t))
                      for et, t in edge_level.items()}, floating
    ids = partition.node_ids if is_hetero else {None: partition.node_ids}
    node_time = {}
    for t in sorted(node_level, key=str):  # The same order on every rank.
        # Summed in int64 or float64 (exact: every vertex is owned by
        # exactly one part, the others add zeros), kept in the part's type.
        dtype = _time_dtype(node_level[t])
        wide = torch.float64 if dtype.is_floating_point else torch.int64
        full = torch.zeros(num_nodes[t], dtype=wide,
                           device=comm_device(group) if world_size > 1
                           else device)
        full[ids[t].to(full.device, torch.int64)] = node_level[t].to(
            full.device, wide)
        if world_size > 1:
            dist.all_reduce(full, group=group)
        node_time[t] = full.to(device, dtype)
    return node_time, {}, floating


def _time_dtype(time: Tensor) -> torch.dtype:
    return time.dtype if time.is_floating_point() else torch.int64


def time_per_position(csc: CSCTopology, src_time: Optional[Tensor],
                      edge_time: Optional[Tensor]) -> Optional[Tensor]:
    r"""The time of every CSC position (:obj:`None`: no time)."""
    if src_time is not None:
        return src_time.index_select(0, csc.row.to(torch.int64))
    return edge_time


def sort_by_time(csc: CSCTopology, time: Tensor
                 ) -> Tuple[CSCTopology, Tensor]:
    r""":obj:`csc` with every neighborhood stably sorted by :obj:`time`."""
    colptr = csc.colptr.to(torch.int64)
    deg = colptr[1:] - colptr[:-1]
    perm = time_order(segment_ids(deg, time.numel()), time)
    out = dataclasses.replace(
        csc, row=csc.row[perm],
        edge_id=None if csc.edge_id is None else csc.edge_id[perm],
        time=time[perm], weight=None, _weight_cumsum=None)
    return out, perm
