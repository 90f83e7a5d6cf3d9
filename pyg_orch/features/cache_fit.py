r"""How far a GPU feature cache may grow into the memory training leaves
free (:meth:`~pyg_orch.HybridNeighborLoader.fit_gpu_cache`)."""
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional

import torch

#: The least memory kept free beside the largest working set seen ...
MIN_RESERVE = 2 * 2**30
#: ... and at least this fraction of the GPU.
RESERVE_FRACTION = 0.05


@dataclass(frozen=True)
class GpuMemory:
    r"""A GPU's memory as PyTorch's caching allocator and the driver see it,
    in bytes."""
    #: The card's memory.
    total: int
    #: Free for new allocations, as the driver reports it.
    free: int
    #: Held by PyTorch's caching allocator (in use or cached).
    reserved: int
    #: In use by tensors now.
    allocated: int
    #: The most in use at once so far (:func:`torch.cuda.max_memory_allocated`).
    peak: int

    @classmethod
    def of(cls, device: torch.device) -> 'GpuMemory':
        r"""The memory of :obj:`device` now."""
        free, total = torch.cuda.mem_get_info(device)
        return cls(total=total, free=free,
                   reserved=torch.cuda.memory_reserved(device),
                   allocated=torch.cuda.memory_allocated(device),
                   peak=torch.cuda.max_memory_allocated(device))

    @property
    def working_set(self) -> int:
        r"""The most held above what is held now: a training step's
        temporaries, measured between steps."""
        return max(self.peak - self.allocated, 0)

    def growth(self, reserve: Optional[int] = None,
               working_set: Optional[int] = None) -> int:
        r"""The bytes a cache may add and still leave :obj:`working_set`
        (default: :attr:`working_set`, the largest seen so far, an upper
        bound for the steps to come) plus :obj:`reserve` free (default: the
        larger of 2 GiB and 5% of the card)."""
        if reserve is None:
            reserve = max(MIN_RESERVE, int(RESERVE_FRACTION * self.total))
        if working_set is None:
            working_set = self.working_set
        usable = self.free + max(self.reserved - self.allocated, 0)
        return max(usable - int(working_set) - int(reserve), 0)


@dataclass(frozen=True)
class CacheFit:
    r"""What :meth:`~pyg_orch.HybridNeighborLoader.fit_gpu_cache` did."""
    #: Rows in this GPU's memory before and after (a cache split over GPUs:
    #: its shard and its copies of other rows).
    rows_before: int
    rows_after: int
    #: The node rows in all (the cache can not hold more).
    num_rows: int
    #: Bytes the cache grew by.
    bytes_added: int
    #: The memory seen before growing (:obj:`None` without a GPU).
    memory: Optional[GpuMemory]
    #: Why the cache did not grow (:obj:`None` when it grew).
    reason: Optional[str] = None
    #: The working set kept free beside the reserve (:obj:`None`: not
    #: measured).
    working_set: Optional[int] = None

    @property
    def grew(self) -> bool:
        return self.rows_after > self.rows_before

    def as_dict(self) -> Dict[str, Any]:
        out = asdict(self)
        out['grew'] = self.grew
        return out
