"""Counting weight versions (optimizer steps or forward passes)."""
import weakref
from typing import Callable, Iterable, Optional

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook


class StepCounter:
    r"""Counts the versions of a set of parameters: the steps of every
    optimizer holding one of them (through a global step post-hook), and
    until one is seen, every training forward pass after the first.

    Args:
        params (callable): Returns the parameters to watch.
    """
    def __init__(self, params: Callable[[], Iterable[torch.Tensor]]):
        self._params = params
        self.version = 0
        self.num_forwards = 0
        self.seen_optimizer = False
        self._cache: 'weakref.WeakKeyDictionary' = weakref.WeakKeyDictionary()
        self._handle = register_optimizer_step_post_hook(
            self._on_step)

    @property
    def source(self) -> str:
        r""":obj:`'optimizer'` or :obj:`'forward'`: what versions count."""
        return 'optimizer' if self.seen_optimizer else 'forward'

    def _watches(self, optimizer) -> bool:
        groups = getattr(optimizer, 'param_groups', None) or []
        key = tuple(id(p) for g in groups for p in g.get('params', []))
        try:
            cached = self._cache.get(optimizer)
        except TypeError:  # pragma: no cover (not weak-referenceable)
            cached = None
        if cached is not None and cached[0] == key:
            return cached[1]
        mine = {id(p) for p in self._params()}
        result = any(i in mine for i in key)
        try:
            self._cache[optimizer] = (key, result)
        except TypeError:  # pragma: no cover
            pass
        return result

    def _on_step(self, optimizer, args, kwargs) -> None:
        if self._handle is None:
            return
        if self._watches(optimizer):
            self.seen_optimizer = True
            self.version += 1

    def next_forward_version(self) -> int:
        r"""The version the next training forward pass will have."""
        if self.num_forwards > 0 and not self.seen_optimizer:
            return self.version + 1
        return self.version

    def on_forward(self) -> int:
        r"""Records a training forward pass; returns the current version."""
        if self.num_forwards > 0 and not self.seen_optimizer:
            self.version += 1
        self.num_forwards += 1
        return self.version

    def close(self) -> None:
        r"""Removes the optimizer hook."""
        handle: Optional[object] = self._handle
        self._handle = None
        if handle is not None:
            handle.remove()
