r"""Which part of a partitioned graph a rank holds, and with whom it samples:
one rank per part (the world size equals the number of parts), or one part
per machine with :obj:`LOCAL_WORLD_SIZE` ranks each, which exchange only
with the ranks of their local rank on other machines (their part group)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import torch.distributed as dist

from pyg_orch.parallel.ddp import rank_info
from pyg_orch.parallel.exchange import group_rank, group_size

__all__ = ['RankLayout', 'rank_layout']


@dataclass
class RankLayout:
    r"""How this rank takes part in sampling a partitioned graph.

    Attributes:
        part_group (ProcessGroup, optional): The ranks that exchange
            frontiers and rows, one per part (:obj:`None`: the default
            group).
        batch_group (ProcessGroup, optional): The ranks that agree on the
            number of batches of an epoch.
        local_rank (int): This rank among the ranks that share its part.
        local_world_size (int): The ranks that share a part.
        seed_rank (int): The rank that offsets this rank's seeds (unique)."""
    part_group: Optional[Any] = None
    batch_group: Optional[Any] = None
    local_rank: int = 0
    local_world_size: int = 1
    seed_rank: int = 0

    @property
    def shares_part(self) -> bool:
        r"""Whether several ranks (of one machine) share this part."""
        return self.local_world_size > 1

    def machine_group(self) -> Any:
        r"""The ranks that share this rank's part (this machine's)."""
        if not self.shares_part:
            raise ValueError('every rank holds its own part: no ranks share '
                             'it')
        from pyg_orch.parallel.peer_memory import machine_group
        return machine_group()


# Part groups per (world size, ranks per machine), created once: creating
# a group is a collective of every rank, in the same order.
_PART_GROUPS: Dict[Tuple[int, int], Any] = {}


def _num_parts(partition: Any) -> Optional[int]:
    if hasattr(partition, 'num_parts'):
        return int(partition.num_parts)
    from pyg_orch.partition.storage import read_meta
    try:
        return int(read_meta(partition)['num_parts'])
    except (ValueError, OSError, TypeError):
        return None  # `open_partition` reports it on every rank.


def rank_layout(partition: Any, group: Optional[Any] = None) -> RankLayout:
    r"""The :class:`RankLayout` of this rank over :obj:`partition` (a folder or
    a :class:`~pyg_orch.distributed.GraphPartition`): one rank per part of
    :obj:`group` (or of a world of as many ranks), else one part per machine
    (a collective over the default group)."""
    flat = RankLayout(part_group=group, batch_group=group,
                      seed_rank=group_rank(group))
    if group is not None or not (dist.is_available()
                                 and dist.is_initialized()):
        return flat
    world = group_size()
    local = rank_info().local_world_size
    if local <= 1 or local > world:
        return flat
    read = [None] * world
    dist.all_gather_object(read, _num_parts(partition))
    parts = read[0]
    if any(p != parts for p in read) or parts is None \
            or parts * local != world:
        return flat  # One rank per part; `open_partition` checks it.
    rank = dist.get_rank()
    key = (world, local)
    if key not in _PART_GROUPS:
        _PART_GROUPS[key], _ = dist.new_subgroups_by_enumeration(
            [[m * local + r for m in range(parts)] for r in range(local)])
    return RankLayout(part_group=_PART_GROUPS[key], batch_group=None,
                      local_rank=rank % local, local_world_size=local,
                      seed_rank=rank)


def shard_part_topology(partition: Any, layout: RankLayout, device: Any,
                        sharding: Any = None,
                        max_fanout: Optional[int] = None,
                        csc: Optional[Dict[Any, Any]] = None
                        ) -> Dict[Any, Any]:
    r"""This rank's part's topology per edge type, its lists split across
    the ranks that share the part (a collective of those ranks); :obj:`csc`
    replaces the part's own topology (e.g. with edge times attached)."""
    from pyg_orch.parallel.peer_memory import PeerGroup
    from pyg_orch.topology.sharded import TopologySharding
    sharding = sharding or TopologySharding()
    if not (isinstance(sharding.split_by, str)
            and sharding.split_by == 'ranges'):
        raise NotImplementedError(
            "TopologySharding(split_by=...) on a partition folder: a part's "
            "neighbor lists are split across the machine's ranks by ranges "
            "only (split_by='ranges'); the part itself is the partition "
            "(e.g. METIS, see partition_graph)")
    peers = PeerGroup(layout.machine_group(), device=device)
    own, node_part, local_id = (
        (x if partition.is_hetero else {None: x})
        for x in (partition.csc, partition.node_part, partition.local_id))

    def own_local(src: Any, t: Any) -> Any:  # The part's own sources, local.
        return local_id[t][src[node_part[t][src] == partition.part]].to(
            src.dtype)

    return sharding.shard(own if csc is None else csc, peers, max_fanout,
                          counted=own_local)
