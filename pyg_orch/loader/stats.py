"""Per-stage wall-clock accounting for loaders and training loops."""
import time
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, Optional

import torch
from torch_geometric.loader.base import DataLoaderIterator

#: The stages a loader times in the training loop's own thread.
IN_PROCESS_STAGES = ('sample', 'gather', 'transfer')


class StageTimer:
    r"""Accumulates the time spent in named stages (e.g. :obj:`'sample'`,
    :obj:`'gather'`, :obj:`'transfer'`, :obj:`'train'`); with
    :obj:`sync=True` on CUDA, the stream is synchronized around each stage.

    .. code-block:: python

        for batch in loader:
            with loader.timer.stage('train'):
                ...
        print(loader.timer.table())
    """
    def __init__(self, device: Optional[torch.device] = None,
                 sync: bool = True):
        self.device = torch.device(device or 'cpu')
        self.sync = sync
        self.reset()

    def reset(self) -> None:
        r"""Forgets everything recorded so far."""
        self.total: Dict[str, float] = OrderedDict()
        self.calls: Dict[str, int] = OrderedDict()
        self.num_batches = 0

    def _sync(self) -> None:
        if self.sync and self.device.type == 'cuda':
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
        w = max([10] + [len(name) for name in rows])
        lines = [
            f'{title} ({self.num_batches} batches)',
            f"{'stage':<{w}} {'ms/batch':>10} {'total s':>10} {'share':>7}",
        ]
        for name, r in rows.items():
            lines.append(f"{name:<{w}} {r['ms_per_batch']:>10.2f} "
                         f"{r['total_s']:>10.3f} "
                         f"{100 * r['total_s'] / total:>6.1f}%")
        lines.append(f"{'total':<{w}} "
                     f"{1e3 * total / max(self.num_batches, 1):>10.2f} "
                     f"{total:>10.3f} {100.0:>6.1f}%")
        return '\n'.join(lines)


class TimedIterator(DataLoaderIterator):
    r"""Hands a loader's batches to the training loop: runs the batch hooks
    and charges the time the loop blocks to :obj:`'wait'`."""
    def __init__(self, iterator, timer: StageTimer,
                 hooks: Dict[int, Callable], in_thread: bool):
        super().__init__(iterator, _identity)
        self.timer = timer
        self.hooks = hooks
        self.in_thread = in_thread

    def __next__(self) -> Any:
        before = self._in_process()
        start = time.perf_counter()
        out = super().__next__()
        spent = time.perf_counter() - start
        if self.in_thread:
            inside = self._in_process() - before
            self.timer.add('wait', max(spent - inside, 0.0))
        else:
            self.timer.add('wait', spent)
        self.timer.num_batches += 1
        for hook in list(self.hooks.values()):
            hook(out)
        return out

    def _in_process(self) -> float:
        return sum(self.timer.total.get(s, 0.0) for s in IN_PROCESS_STAGES)


def _identity(x: Any) -> Any:
    return x


def plot_stage_times(runs, ax=None, stages: Optional[list] = None):
    r"""Draws milliseconds per batch per stage as stacked bars, one bar per
    run (needs :obj:`matplotlib`); returns the
    :class:`matplotlib.axes.Axes`.

    Args:
        runs (dict): Label to a stage summary: :meth:`StageTimer.summary`,
            :obj:`loader.stats()['stages']`, or a :class:`StageTimer`.
        ax (matplotlib.axes.Axes, optional): Where to draw.
        stages (list, optional): Stage order (bottom first).
    """
    import matplotlib.pyplot as plt

    summaries = {
        label: run.summary() if isinstance(run, StageTimer) else run
        for label, run in runs.items()
    }
    if stages is None:
        stages = []
        for summary in summaries.values():
            stages += [s for s in summary if s not in stages]
    if ax is None:
        _, ax = plt.subplots(figsize=(1.6 + 1.1 * len(summaries), 3.5))
    labels = list(summaries)
    bottom = [0.0] * len(labels)
    for stage in stages:
        heights = [
            summaries[label].get(stage, {}).get('ms_per_batch', 0.0)
            for label in labels
        ]
        ax.bar(labels, heights, bottom=bottom, label=stage)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_ylabel('ms per batch')
    ax.legend(fontsize='small')
    return ax
