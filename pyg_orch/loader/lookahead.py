"""Keeps the next batch in flight while the current one trains, in the
training loop's own thread (no interpreter lock to share)."""
from contextlib import nullcontext
from typing import Any, Callable, Iterator, Optional, Tuple

import torch

from pyg_orch.core.devices import use_stream, with_index
from pyg_orch.loader.prefetch import Failure, hand_over, record_stream
from pyg_orch.sampling.pending import PendingSample


#: The priority of the side stream (lower is higher; PyTorch's default is 0).
SIDE_PRIORITY = -1


class LookaheadIterator:
    r"""Runs a loader ahead of the training loop on side CUDA streams, in
    the loop's own thread: when the loop takes batch :obj:`t`, batch
    :obj:`t + 2`'s sampling and batch :obj:`t + 1`'s gathering are queued.
    Batches are the same, in the same order; an error is raised when the
    loop asks for that batch.

    Args:
        iterator (Iterator): Yields pending samples.
        finish (callable): Turns a pending sample into a mini-batch.
        device (torch.device): Where batches live.
        resolve (callable, optional): Waits for a pending sample before the
            next one is launched (default: waits for it).
    """
    def __init__(self, iterator: Iterator, finish: Callable[[PendingSample],
                                                            Any],
                 device: torch.device,
                 resolve: Optional[Callable[[PendingSample],
                                            PendingSample]] = None):
        self.iterator = iterator
        self.finish = finish
        self.resolve = resolve if resolve is not None else _wait
        self.device = device = with_index(device)
        # A high-priority stream: its kernels (sampling, and gathers from
        # host memory, which wait on the host link and need few resources)
        # are scheduled as soon as multiprocessors free up, not behind the
        # training step's kernels.
        cuda = device.type == 'cuda'
        self.stream = (torch.cuda.Stream(device, priority=SIDE_PRIORITY)
                       if cuda else None)
        self.gather_stream = (torch.cuda.Stream(
            device, priority=SIDE_PRIORITY) if cuda else None)
        self._pending: Optional[PendingSample] = None
        self._ready: Optional[Tuple[Any, Any]] = None
        self._exhausted = False
        self._started = False

    def __iter__(self) -> 'LookaheadIterator':
        return self

    def _on_side_stream(self, stream=None):
        stream = stream if stream is not None else self.stream
        if stream is None:
            return nullcontext()
        return use_stream(stream)

    def _launch(self) -> None:
        # Draws the next pending sample on the current (sampling) stream.
        if self._exhausted:
            return
        try:
            self._pending = next(self.iterator)
        except StopIteration:
            self._exhausted = True
        except Exception as e:  # Raised when that batch is asked for.
            self._pending = PendingSample(finish=_raiser(e))

    def _prepare(self) -> None:
        # Finishes the pending batch into `_ready` and launches the next.
        # The next batch's sampling is queued as soon as this one's sample is
        # known and before its features are gathered: a long gather (rows
        # from host memory) then never stands between the loop and the
        # sampled counts it waits for next time.
        if self._pending is None:
            return
        pending, self._pending = self._pending, None
        sampled = None
        with self._on_side_stream():
            try:
                pending = self.resolve(pending)
            except Exception as e:
                pending = PendingSample(finish=_raiser(e))
            if self.stream is not None:
                sampled = torch.cuda.Event()
                sampled.record(self.stream)
            self._launch()
        gather = self.gather_stream
        with self._on_side_stream(gather):
            try:
                if sampled is not None:
                    gather.wait_event(sampled)
                    # The sample's tensors, made on the sampling stream, are
                    # read (and some kept in the batch) on the gather stream.
                    if pending.done:
                        record_stream(pending.result(), gather)
                batch = self.finish(pending)
            except Exception as e:
                self._ready = (Failure(e), None)
            else:
                event = None
                if gather is not None:
                    event = torch.cuda.Event()
                    event.record(gather)
                self._ready = (batch, event)

    def __next__(self) -> Any:
        if not self._started:
            self._started = True
            if self.stream is not None:  # Inputs made on the consumer's side.
                consumer = torch.cuda.current_stream(self.device)
                self.stream.wait_stream(consumer)
                self.gather_stream.wait_stream(consumer)
            with self._on_side_stream():
                self._launch()
            self._prepare()
        if self._ready is None:
            raise StopIteration
        (batch, event), self._ready = self._ready, None
        self._prepare()
        if isinstance(batch, Failure):
            raise batch.exc
        return hand_over(batch, event, self.device)

    def __len__(self) -> int:
        return len(self.iterator)

    def _reset(self, loader: Any, first_iter: bool = False):
        raise RuntimeError('persistent workers are not supported with '
                           'look-ahead; set lookahead=False')


def _wait(pending: PendingSample) -> PendingSample:
    pending.result()  # Raised again by `finish`, if it fails.
    return pending


def _raiser(exc: BaseException) -> Callable[[], Any]:
    def fail() -> Any:
        raise exc

    return fail
