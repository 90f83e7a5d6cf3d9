r"""Glue for PyG's multi-GPU recipe with
:class:`~torch.nn.parallel.DistributedDataParallel`: one process per GPU,
each training on its share of the seed nodes. Every rank gets as many seeds,
so none is left waiting in DDP's gradient all-reduce."""
import math
import os
import time
from datetime import timedelta
from numbers import Number
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple, \
    Union

import torch
import torch.distributed as dist
from torch import Tensor
from torch.utils.data import Sampler

from pyg_orch.core.checks import check_int, check_seconds, resolve_device
from pyg_orch.parallel.exchange import comm_device, group_size
from pyg_orch.parallel.peer_memory import disable_multicast_env


#: Default timeout of collectives in :func:`init_distributed`.
DEFAULT_TIMEOUT = timedelta(minutes=10)

SeedNodes = Union[Tensor, Tuple[str, Tensor]]


class RankInfo(NamedTuple):
    r"""Where this process stands: global rank and world size, rank and
    number of processes on this machine."""
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"The environment variable {name} must be an "
                         f"integer (got {value!r})") from None


def rank_info(group: Optional[Any] = None) -> RankInfo:
    r"""This process's :class:`RankInfo`, from the process group if
    initialized, else from ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and
    ``LOCAL_WORLD_SIZE``."""
    if dist.is_available() and dist.is_initialized():
        rank = dist.get_rank(group)
        world_size = dist.get_world_size(group)
    else:
        rank = _env_int('RANK', 0)
        world_size = _env_int('WORLD_SIZE', 1)
    local_rank = _env_int('LOCAL_RANK', rank)
    local_world_size = _env_int('LOCAL_WORLD_SIZE', world_size)
    return RankInfo(rank, world_size, local_rank, local_world_size)


def init_distributed(
    backend: Optional[str] = None,
    timeout: Union[timedelta, float] = DEFAULT_TIMEOUT,
    *,
    device: Union[None, str, torch.device] = None,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
    master_addr: Optional[str] = None,
    master_port: Optional[int] = None,
) -> torch.device:
    r"""Joins the default process group (unless joined already) and returns
    this rank's device (``cuda:LOCAL_RANK``, set as current, or the CPU).
    Unset arguments come from ``torchrun``'s variables; the variables of
    :obj:`MULTICAST_OFF_ENV` are set where not set.

    Args:
        backend (str, optional): :obj:`'nccl'`, :obj:`'gloo'`, ...; picked
            from the device if not set.
        timeout (timedelta or float): How long a collective waits for a
            missing rank (seconds as a float). (default: 10 minutes)
        device (torch.device or str, optional): :obj:`'cuda'` or
            :obj:`'cpu'`; CUDA when available if not set.
        rank (int, optional): This process's rank.
        world_size (int, optional): The number of processes.
        master_addr (str, optional): The address of rank 0's store.
            (default: ``127.0.0.1``)
        master_port (int, optional): Its port. (default: ``29500``)"""
    disable_multicast_env()
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        timeout = timedelta(seconds=timeout)
    if not isinstance(timeout, timedelta) or timeout.total_seconds() <= 0:
        raise ValueError(f"'timeout' must be a positive timedelta or number "
                         f"of seconds (got {timeout!r})")
    rank = check_int('rank', rank, 0, optional=True)
    world_size = check_int('world_size', world_size, 0, optional=True)
    master_port = check_int('master_port', master_port, 0, optional=True)
    if world_size is not None and rank is not None and rank >= world_size:
        raise ValueError(f"'rank' must be smaller than 'world_size' (got "
                         f"rank={rank}, world_size={world_size})")

    if torch.cuda.is_available() and (device is None or torch.device(
            device) == torch.device('cuda')):  # LOCAL_RANK's GPU.
        local = _env_int('LOCAL_RANK', rank if rank is not None else 0)
        device = torch.device('cuda', local % torch.cuda.device_count())
    device = resolve_device(device)
    if device.type == 'cuda':
        torch.cuda.set_device(device)

    if not dist.is_initialized():
        if backend is None:
            backend = 'nccl' if device.type == 'cuda' else 'gloo'
        rank = _env_int('RANK', 0) if rank is None else rank
        world_size = _env_int('WORLD_SIZE', 1) if world_size is None else \
            world_size
        if not 0 <= rank < world_size:
            raise ValueError(f"The rank must lie in [0, world_size) (got "
                             f"rank={rank}, world_size={world_size}; set "
                             f"'rank' and 'world_size' or RANK and "
                             f"WORLD_SIZE)")
        if master_addr is None and master_port is None \
                and 'MASTER_ADDR' in os.environ \
                and 'MASTER_PORT' in os.environ:
            # torchrun's rendezvous (its agent may serve the store).
            init_method = 'env://'
        else:
            addr = master_addr or os.environ.get('MASTER_ADDR', '127.0.0.1')
            port = master_port if master_port is not None else \
                _env_int('MASTER_PORT', 29500)
            init_method = f'tcp://{addr}:{port}'
        kwargs: Dict[str, Any] = {}
        if device.type == 'cuda' and backend == 'nccl':
            kwargs['device_id'] = device  # Eager NCCL init, bound to it.
        dist.init_process_group(backend, init_method=init_method,
                                rank=rank, world_size=world_size,
                                timeout=timeout, **kwargs)
    return device


def destroy_distributed(settle: float = 0.1) -> None:
    r"""Ends every process group after a barrier and a pause of :obj:`settle`
    seconds; does nothing without one. Drop what holds the group (above all
    the DDP model) before calling it.

    Args:
        settle (float): Seconds to wait after the barrier.
            (default: :obj:`0.1`)"""
    settle = check_seconds('settle', settle)
    if not (dist.is_available() and dist.is_initialized()):
        return
    dist.barrier()
    # Avoids a gloo deadlock at exit: a worker thread still destroying a
    # finished collective needs the GIL that the destroying thread holds.
    time.sleep(settle)
    dist.destroy_process_group()


def _resolve_seeds(input_nodes: Any) -> Tuple[Optional[str], Tensor]:
    node_type: Optional[str] = None
    nodes = input_nodes
    if isinstance(input_nodes, tuple) and len(input_nodes) == 2 \
            and isinstance(input_nodes[0], str):
        node_type, nodes = input_nodes
    if isinstance(nodes, (list, range)):
        nodes = torch.as_tensor(list(nodes), dtype=torch.long)
    if not isinstance(nodes, Tensor) or nodes.dim() != 1 or not (
            nodes.dtype == torch.bool or not nodes.is_floating_point()):
        got = type(input_nodes).__name__ if not isinstance(
            input_nodes, Tensor) else (f'a tensor of shape '
                                       f'{tuple(input_nodes.shape)} and '
                                       f'dtype {input_nodes.dtype}')
        raise ValueError(
            f"'input_nodes' must be a 1-dimensional index tensor or boolean "
            f"mask, or a (node_type, index or mask) tuple (got {got})")
    if nodes.dtype == torch.bool:
        nodes = nodes.nonzero().view(-1)
    return node_type, nodes


def _check_rank(rank: Optional[int],
                world_size: Optional[int]) -> Tuple[int, int]:
    if rank is None or world_size is None:
        info = rank_info()
        rank = info.rank if rank is None else rank
        world_size = info.world_size if world_size is None else world_size
    world_size = check_int('world_size', world_size, 1)
    if isinstance(rank, bool) or not isinstance(rank, int) \
            or not 0 <= rank < world_size:
        raise ValueError(f"'rank' must be an integer in [0, {world_size}) "
                         f"(got {rank!r})")
    return rank, world_size


def split_positions(num_seeds: int, rank: int, world_size: int, *,
                    shuffle: bool = True, seed: Optional[int] = None,
                    epoch: int = 0, drop_last: bool = False) -> Tensor:
    r"""The positions (in :obj:`[0, num_seeds)`) of the seeds of :obj:`rank`,
    as :class:`~torch.utils.data.DistributedSampler` picks them: shuffled by
    :obj:`seed + epoch` (the same on every rank), cut to a multiple of
    :obj:`world_size` by repeating the first positions (or dropping the last
    ones with :obj:`drop_last`), and dealt out round-robin."""
    if shuffle:
        seed = 0 if seed is None else int(seed)
        gen = torch.Generator().manual_seed(seed + int(epoch))
        order = torch.randperm(num_seeds, generator=gen)
    else:
        order = torch.arange(num_seeds)
    total = world_size * (num_seeds // world_size if drop_last else
                          math.ceil(num_seeds / world_size))
    if num_seeds > 0:  # Cut, or padded with the first positions.
        order = order.repeat(math.ceil(total / num_seeds))[:total]
    return order[rank:total:world_size]


def rank_input_nodes(input_nodes: SeedNodes, rank: Optional[int] = None,
                     world_size: Optional[int] = None, *,
                     shuffle: bool = True, seed: Optional[int] = None,
                     epoch: int = 0, drop_last: bool = False) -> SeedNodes:
    r"""The seed nodes of :obj:`rank`, split as in :func:`split_positions`:
    every rank gets as many seeds, so loaders with the same
    :obj:`batch_size` give every rank the same number of batches.

    Args:
        input_nodes (torch.Tensor or Tuple[str, torch.Tensor]): The seeds of
            all ranks: node indices or a boolean mask, or a (node type,
            indices or mask) tuple.
        rank (int, optional): The rank; the process group's (or ``RANK``)
            if not set.
        world_size (int, optional): The number of ranks; the process
            group's (or ``WORLD_SIZE``) if not set.
        shuffle (bool): Shuffle before splitting. (default: :obj:`True`)
        seed (int, optional): The shuffling seed, the same on all ranks;
            :obj:`None` is :obj:`0`. (default: :obj:`None`)
        epoch (int): Added to :obj:`seed`. (default: :obj:`0`)
        drop_last (bool): Drop the last seeds instead of repeating the
            first ones. (default: :obj:`False`)"""
    return DistributedSeedSplit(input_nodes, rank, world_size,
                                shuffle=shuffle, seed=seed,
                                drop_last=drop_last).rank_nodes(epoch)


class DistributedSeedSplit(Sampler):
    r"""Splits a loader's seeds across ranks, reshuffled every epoch, as
    :class:`~torch.utils.data.DistributedSampler` does: pass it as the
    loader's :obj:`sampler` (with :obj:`shuffle=False`) and call
    :meth:`set_epoch` before every epoch.

    Args:
        input_nodes (torch.Tensor or Tuple[str, torch.Tensor] or int): The
            seeds as the loader takes them (indices or a boolean mask), or
            their number.
        rank (int, optional): The rank; the process group's (or ``RANK``)
            if not set.
        world_size (int, optional): The number of ranks.
        shuffle (bool): Shuffle every epoch. (default: :obj:`True`)
        seed (int, optional): The shuffling seed, the same on all ranks;
            :obj:`None` is :obj:`0`. (default: :obj:`None`)
        drop_last (bool): Drop the last seeds instead of repeating the
            first ones. (default: :obj:`False`)"""
    def __init__(self, input_nodes: Union[SeedNodes, int],
                 rank: Optional[int] = None,
                 world_size: Optional[int] = None, *, shuffle: bool = True,
                 seed: Optional[int] = None, drop_last: bool = False):
        if isinstance(input_nodes, int) and not isinstance(input_nodes,
                                                           bool):
            if input_nodes < 0:
                raise ValueError(f"'input_nodes' as a number of seeds must "
                                 f"be non-negative (got {input_nodes})")
            self.node_type, self.seeds = None, torch.arange(input_nodes)
        else:
            self.node_type, self.seeds = _resolve_seeds(input_nodes)
        self.rank, self.world_size = _check_rank(rank, world_size)
        seed = check_int('seed', seed, -2**63, optional=True)
        self.shuffle = bool(shuffle)
        self.seed = 0 if seed is None else seed
        self.drop_last = bool(drop_last)
        self.epoch = 0

    @property
    def num_seeds(self) -> int:
        r"""The number of seeds of all ranks."""
        return self.seeds.numel()

    def set_epoch(self, epoch: int) -> None:
        r"""Picks the split of :obj:`epoch` (the same on every rank)."""
        self.epoch = check_int('epoch', epoch, 0)

    def positions(self, epoch: Optional[int] = None) -> Tensor:
        r"""This rank's seeds as positions in the loader's seed list."""
        return split_positions(
            self.num_seeds, self.rank, self.world_size, shuffle=self.shuffle,
            seed=self.seed, epoch=self.epoch if epoch is None else epoch,
            drop_last=self.drop_last)

    def rank_nodes(self, epoch: Optional[int] = None) -> SeedNodes:
        r"""This rank's seeds as node indices (with the node type, if any)."""
        out = self.seeds[self.positions(epoch).to(self.seeds.device)]
        return out if self.node_type is None else (self.node_type, out)

    def __iter__(self) -> Iterator[int]:
        return iter(self.positions().tolist())

    def __len__(self) -> int:
        if self.drop_last:
            return self.num_seeds // self.world_size
        return math.ceil(self.num_seeds / self.world_size)

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}(num_seeds={self.num_seeds}, '
                f'rank={self.rank}, world_size={self.world_size}, '
                f'epoch={self.epoch})')


def equal_batch_count(num_batches: int, group: Optional[Any] = None) -> int:
    r"""The smallest :obj:`num_batches` over all ranks of :obj:`group` (a
    collective), e.g. for :obj:`itertools.islice(loader, steps)`;
    :obj:`num_batches` without an initialized process group."""
    num_batches = check_int('num_batches', num_batches, 0)
    if not (dist.is_available() and dist.is_initialized()):
        return num_batches
    t = torch.tensor([num_batches], dtype=torch.long,
                     device=comm_device(group))
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=group)
    return int(t.item())


def _combine(values: List[Any], reduce) -> Any:
    first = values[0]
    if isinstance(first, dict):
        out = {}
        for key, value in first.items():
            same = [v.get(key) if isinstance(v, dict) else None
                    for v in values]
            out[key] = _combine(same, reduce) if all(
                s is not None for s in same) else value
        return out
    if all(isinstance(v, Number) and not isinstance(v, bool) for v in values):
        return reduce(values)
    return first


def all_ranks_stats(stats: Dict[str, Any],
                    group: Optional[Any] = None) -> Dict[str, Any]:
    r"""Gathers every rank's statistics (nested dicts of numbers, e.g.
    :meth:`loader.stats() <pyg_orch.HybridNeighborLoader.stats>`) on every
    rank (a collective) and returns :obj:`'per_rank'` (the dicts) and their
    :obj:`'total'`, :obj:`'mean'` and :obj:`'max'` over the ranks.
    Non-numbers and keys not every rank has are taken from rank 0."""
    if not isinstance(stats, dict):
        raise ValueError(f"'stats' must be a dict, as loader.stats() "
                         f"returns (got {type(stats).__name__})")
    per_rank: List[Any] = [stats] * group_size(group)
    if dist.is_available() and dist.is_initialized():
        dist.all_gather_object(per_rank, stats, group=group)
    n = len(per_rank)
    return {
        'per_rank': per_rank,
        'total': _combine(per_rank, sum),
        'mean': _combine(per_rank, lambda v: sum(v) / n),
        'max': _combine(per_rank, max),
    }
