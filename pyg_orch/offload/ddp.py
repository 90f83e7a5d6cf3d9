r"""Offload under DDP: collectives over the ranks of a machine."""
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist
from torch import Tensor

from pyg_orch.parallel.peer_memory import machine_group
from pyg_orch.offload.autotune import StepTimeChooser


def process_group_active() -> bool:
    r"""Whether a :mod:`torch.distributed` process group is initialized."""
    return dist.is_available() and dist.is_initialized()


class MachineRanks:
    r"""The ranks of this machine (or :obj:`group`), for collectives."""
    def __init__(self, group: Optional[Any] = None):
        self.group = machine_group() if group is None else group
        self.size = dist.get_world_size(self.group)
        self.rank = dist.get_rank(self.group)
        backend = str(dist.get_backend(self.group)).lower()
        self.device = torch.device('cpu')
        if 'nccl' in backend and 'gloo' not in backend \
                and torch.cuda.is_available():
            self.device = torch.device('cuda', torch.cuda.current_device())

    def sum(self, tensor: Tensor) -> Tensor:
        r"""The element-wise sum of :obj:`tensor` over the ranks."""
        work = tensor.to(self.device).clone()
        dist.all_reduce(work, group=self.group)
        return work.to(tensor.device)

    def min(self, value: int) -> int:
        r"""The smallest of the ranks' :obj:`value`."""
        work = torch.tensor([int(value)], dtype=torch.int64,
                            device=self.device)
        dist.all_reduce(work, op=dist.ReduceOp.MIN, group=self.group)
        return int(work.item())

    def mean_times(self, times: Dict[int, List[float]]
                   ) -> Dict[int, List[float]]:
        r"""Step times per hot-set size, averaged over the ranks."""
        keys = list(times)
        flat = torch.tensor([t for k in keys for t in times[k]],
                            dtype=torch.float64)
        parts = torch.split(self.sum(flat) / self.size,
                            [len(times[k]) for k in keys])
        return {k: part.tolist() for k, part in zip(keys, parts)}


def machine_ranks() -> Optional[MachineRanks]:
    r"""This machine's ranks if several train on it, else :obj:`None`."""
    if not process_group_active():
        return None
    ranks = MachineRanks()
    return ranks if ranks.size > 1 else None


class AgreedStepTimeChooser(StepTimeChooser):
    r"""A :class:`~pyg_orch.offload.autotune.StepTimeChooser` whose
    :obj:`ranks` time the same steps and decide from their mean times."""
    def __init__(self, *args, ranks: MachineRanks, **kwargs):
        super().__init__(*args, **kwargs)
        self.ranks = ranks

    def _agreed_times(self) -> Dict[int, List[float]]:
        # Every rank gives up on larger sizes alike (a collective).
        return self.ranks.mean_times(self.times)

    def tick(self, count: bool = True,
             unusable: bool = False) -> Optional[int]:
        r"""As :meth:`StepTimeChooser.tick`, a collective."""
        if self.done:
            return None
        # A step counts only where every rank times it:
        counts = self.ranks.sum(torch.tensor(
            [int(bool(count) and self._last is not None),
             int(bool(unusable))], dtype=torch.int64)).tolist()
        # Decides (and gives up on sizes) from the ranks' mean step times:
        return super().tick(counts[0] == self.ranks.size,
                            unusable=counts[1] > 0)
