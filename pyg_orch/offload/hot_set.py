"""The hot set in use, held once: :class:`HotSetSizer`."""
from typing import Any, Callable, Dict, List, Optional

import torch
from torch import Tensor


class HotSetSizer:
    r"""The hot set: :attr:`planned` (rows of tables queued from now on) and
    :attr:`size` (rows in use) prefixes of :obj:`candidates`; the only code
    that tells the sampler what to prune."""
    #: :obj:`hot_ratio='auto'` starts with this fraction of the vertices ...
    AUTO_START_RATIO = 0.01
    #: ... and may grow up to this fraction of them (the candidates).
    AUTO_MAX_RATIO = 0.5
    #: Grow when a table took at most :obj:`1 / GROW_ROOM` of its time, aiming
    #: at :obj:`GROW_TARGET`, by at most :obj:`GROW_MAX` at once.
    GROW_ROOM = 1.6
    GROW_TARGET = 0.7
    GROW_MAX = 2.0

    def __init__(self, candidates: Tensor, num_nodes: Optional[int] = None,
                 size: Optional[int] = None, auto: bool = False):
        self.candidates = candidates.view(-1).to('cpu', torch.int64)
        total = self.candidates.numel()
        if num_nodes is None:
            num_nodes = int(self.candidates.max()) + 1 if total else 0
        self.num_nodes = int(num_nodes)
        size = total if size is None else int(size)
        if not 0 <= size <= total:
            raise ValueError(f"'size' must be between 0 and the number of "
                             f"candidates ({total}); got {size}")
        self.auto = bool(auto)
        self.planned = size
        #: The sizes planned so far, the first one included.
        self.sizes: List[int] = [size]
        # Ranks of the candidates, -1 for other vertices:
        self.rank = torch.full((self.num_nodes, ), -1, dtype=torch.int32)
        self.rank[self.candidates] = torch.arange(total, dtype=torch.int32)
        self._sampler: Any = None
        self._to_masks: Callable[[Tensor], Any] = lambda mask: mask
        self._pruning = False
        # Masks in shared memory, updated in place (see `share_masks`):
        self._shared: Any = None
        self._share = False
        self._train = False  # Pruning wanted (training mode).
        self._prune_size = size  # Vertices pruned, at most `size`.
        self._shrink_to: Optional[int] = None  # See `resize()`.
        self._set_size(size)

    @classmethod
    def auto_start(cls, candidates: Tensor, num_nodes: int) -> 'HotSetSizer':
        r"""A hot set growing from :attr:`AUTO_START_RATIO`."""
        start = max(1, int(round(cls.AUTO_START_RATIO * num_nodes)))
        return cls(candidates, num_nodes, min(start, candidates.numel()),
                   auto=True)

    def _set_size(self, size: int) -> None:
        self.size = size
        self.mask = (self.rank >= 0) & (self.rank < size)
        # Row of every vertex in the embedding tables, -1 if not hot:
        self._positions: Dict[torch.device, Tensor] = {
            torch.device('cpu'): torch.where(self.mask, self.rank, -1)
        }

    @property
    def hot_nodes(self) -> Tensor:
        r"""The vertices in use, most accessed first."""
        return self.candidates[:self.size]

    @property
    def planned_nodes(self) -> Tensor:
        r"""The vertices of the tables queued from now on."""
        return self.candidates[:self.planned]

    def positions(self, device: torch.device,
                  rows: Optional[int] = None) -> Tensor:
        r"""The table row of every vertex (:obj:`-1`: not hot) on
        :obj:`device`."""
        rows = self.size if rows is None else max(0, min(int(rows),
                                                          self.size))
        key = device if rows == self.size else (device, rows)
        out = self._positions.get(key)
        if out is None:
            cpu = self._positions[torch.device('cpu')]
            if rows != self.size:
                cpu = torch.where(cpu < rows, cpu, -1)
            out = self._positions[key] = cpu.to(device)
        return out

    def drop_device_copies(self) -> None:
        r"""Frees the device copies of :meth:`positions`."""
        cpu = torch.device('cpu')
        self._positions = {cpu: self._positions[cpu]}

    def bind(self, sampler: Any,
             to_masks: Optional[Callable[[Tensor], Any]] = None) -> None:
        r"""The sampler to tell what to prune, through :obj:`to_masks`."""
        self._sampler = sampler
        if to_masks is not None:
            self._to_masks = to_masks

    @property
    def prune_size(self) -> int:
        r"""The vertices the sampler prunes."""
        return self._prune_size

    def prune_masks(self) -> Any:
        r"""What the sampler prunes while :meth:`prune` is on."""
        if self._prune_size == self.size:
            return self._to_masks(self.mask)
        return self._to_masks((self.rank >= 0)
                              & (self.rank < self._prune_size))

    def prune(self, on: bool) -> None:
        r"""Turns the sampler's pruning of the hot set in use on or off."""
        self._train = bool(on)
        self._tell_sampler()

    def share_masks(self) -> None:
        r"""Keeps the sampler's masks in shared memory from now on."""
        self._share = True
        self._tell_sampler()

    def _tell_sampler(self) -> None:
        self._pruning = self._train and self._prune_size > 0
        if self._sampler is None:
            return
        masks = self.prune_masks() if self._pruning else None
        if self._share:
            masks = self._shared_masks(masks)
        self._sampler.set_hot_nodes(masks)

    def _shared_masks(self, masks: Any) -> Any:
        # Copies `masks` into the shared ones (cleared for None).
        if masks is None:
            for mask in _tensors(self._shared):
                mask.zero_()
            return None
        if self._shared is None:
            self._shared = {k: v.clone().share_memory_()
                            for k, v in masks.items()} if isinstance(
                                masks, dict) else masks.clone().share_memory_()
        else:
            for shared, mask in zip(_tensors(self._shared),
                                    _tensors(masks)):
                shared.copy_(mask)
        return self._shared

    def resize(self, size: int, settle: bool = False) -> None:
        r"""Plans a hot set of the first :obj:`size` candidates; a smaller one
        stays in use until :meth:`settle`."""
        size = max(0, min(int(size), self.candidates.numel()))
        if size < self.size:
            self._shrink_to = size
            self._prune_size = min(self._prune_size, size)
            self._tell_sampler()
            if settle:
                self.settle()
        else:
            self._shrink_to = None
            self.planned = size
        if self.sizes[-1] != size:
            self.sizes.append(size)

    @property
    def settling(self) -> bool:
        r"""Whether a shrink waits for :meth:`settle`."""
        return self._shrink_to is not None

    def settle(self) -> None:
        r"""Ends a shrink: rows beyond the new size are no longer replaced."""
        if self._shrink_to is None:
            return
        size, self._shrink_to = self._shrink_to, None
        self.planned = size
        self._prune_size = size
        self._set_size(size)

    def use(self, rows: int) -> bool:
        r"""A table of :obj:`rows` rows is in use; whether the set grew."""
        if rows <= self._prune_size or self._shrink_to is not None:
            return False
        rows = min(int(rows), self.planned, self.candidates.numel())
        if rows <= self._prune_size:
            return False
        grew = rows > self.size
        if grew:
            self._set_size(rows)
        self._prune_size = rows
        if self._train:
            self._tell_sampler()
        return grew

    def maybe_grow(self, table_rows: int, compute_s: Optional[float],
                   budget_s: Optional[float], waited: bool) -> bool:
        r"""With :obj:`auto`: plans a larger hot set if the CPU keeps up."""
        n = self.planned
        if (not self.auto or waited or compute_s is None or budget_s is None
                or table_rows < n or n >= self.candidates.numel()):
            return False
        room = budget_s / max(compute_s, 1e-9)
        if room < self.GROW_ROOM:
            return False
        factor = min(self.GROW_MAX, self.GROW_TARGET * room)
        size = min(int(n * factor), self.candidates.numel())
        if size <= n:
            return False
        self.planned = size
        self.sizes.append(size)
        return True


def _tensors(masks: Any) -> List[Tensor]:
    # The masks of a mask or of a dictionary of masks, in key order.
    if masks is None:
        return []
    if isinstance(masks, dict):
        return [masks[k] for k in sorted(masks, key=str)]
    return [masks]
