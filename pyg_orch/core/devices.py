r"""Device helpers shared by the loaders and the samplers."""
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

import torch
from torch import Tensor


def with_index(device: torch.device) -> torch.device:
    r"""Returns :obj:`device` with its index set (the current CUDA device), so
    that PyTorch finds its current stream without a lookup in Python."""
    if device.type == 'cuda' and device.index is None:
        return torch.device('cuda', torch.cuda.current_device())
    return device


@contextmanager
def use_stream(stream: Optional['torch.cuda.Stream']) -> Iterator[None]:
    r"""Like :func:`torch.cuda.stream`, for a stream of the current device
    without its device lookups in Python; other streams (or :obj:`None`) go
    through :func:`torch.cuda.stream`."""
    if stream is None or stream.device_index != torch.cuda.current_device():
        with torch.cuda.stream(stream):
            yield
        return
    previous = torch.cuda.current_stream(stream.device_index)
    torch.cuda.set_stream(stream)
    try:
        yield
    finally:
        torch.cuda.set_stream(previous)


def current_stream(device: torch.device) -> Optional['torch.cuda.Stream']:
    r"""The current stream of the indexed CUDA :obj:`device` (see
    :func:`with_index`), or :obj:`None` elsewhere."""
    if device.type != 'cuda':
        return None
    # An index skips PyTorch's device parsing in Python.
    return torch.cuda.current_stream(
        device if device.index is None else device.index)


def on_gpu_or_cpu(compute: Callable[[torch.device], Tensor],
                  device: Optional[torch.device] = None) -> Tensor:
    r""":obj:`compute(device)` where :obj:`device` is a GPU, else (and where
    the GPU has no room) :obj:`compute(cpu)`: the same result, slower."""
    if device is not None and torch.device(device).type == 'cuda':
        try:
            return compute(torch.device(device))
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
    return compute(torch.device('cpu'))


def argsort_descending(values: Tensor,
                       device: Optional[torch.device] = None) -> Tensor:
    r"""The stable descending order of :obj:`values` (ties in index order)
    on the CPU, sorted on :obj:`device` where it is a GPU (see
    :func:`on_gpu_or_cpu`)."""
    return on_gpu_or_cpu(lambda on: torch.argsort(
        values.to(on), descending=True, stable=True), device).cpu()
