"""Per-stage wall-clock accounting for loaders and training loops."""
import time
from collections import OrderedDict
from contextlib import contextmanager
from typing import Dict, Iterator, Optional

import torch


class StageTimer:
    r"""Accumulates the time spent in named stages (e.g. :obj:`'sample'`,
    :obj:`'gather'`, :obj:`'transfer'`, :obj:`'train'`).

    On CUDA devices, the calling thread's stream is synchronized around each
    stage so that asynchronous kernels are charged to the stage that
    launched them (other streams, e.g. a prefetch thread's, run on).

    .. code-block:: python

        for batch in loader:
            with loader.timer.stage('train'):
                ...
        print(loader.timer.table())
    """
    def __init__(self, device: Optional[torch.device] = None):
        self.device = torch.device(device or 'cpu')
        self.reset()

    def reset(self) -> None:
        r"""Forgets everything recorded so far."""
        self.total: Dict[str, float] = OrderedDict()
        self.calls: Dict[str, int] = OrderedDict()
        self.num_batches = 0

    def _sync(self) -> None:
        if self.device.type == 'cuda':
            torch.cuda.current_stream(self.device).synchronize()

    def add(self, name: str, seconds: float) -> None:
        self.total[name] = self.total.get(name, 0.0) + seconds
        self.calls[name] = self.calls.get(name, 0) + 1

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        r"""Times the enclosed block as stage :obj:`name`."""
        self._sync()
        start = time.perf_counter()
        try:
            yield
        finally:
            self._sync()
            self.add(name, time.perf_counter() - start)

    def summary(self) -> Dict[str, Dict[str, float]]:
        r"""Per stage: total seconds, number of calls and milliseconds per
        batch."""
        n = max(self.num_batches, 1)
        return {
            name: {
                'total_s': total,
                'calls': self.calls[name],
                'ms_per_batch': 1e3 * total / n,
            }
            for name, total in self.total.items()
        }

    def table(self, title: str = 'stage times') -> str:
        r"""The summary as a fixed-width text table."""
        rows = self.summary()
        total = sum(r['total_s'] for r in rows.values()) or 1.0
        lines = [
            f'{title} ({self.num_batches} batches)',
            f"{'stage':<10} {'ms/batch':>10} {'total s':>10} {'share':>7}",
        ]
        for name, r in rows.items():
            lines.append(f"{name:<10} {r['ms_per_batch']:>10.2f} "
                         f"{r['total_s']:>10.3f} "
                         f"{100 * r['total_s'] / total:>6.1f}%")
        lines.append(f"{'total':<10} "
                     f"{1e3 * total / max(self.num_batches, 1):>10.2f} "
                     f"{total:>10.3f} {100.0:>6.1f}%")
        return '\n'.join(lines)
