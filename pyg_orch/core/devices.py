r"""Device helpers shared by the loaders and the samplers."""
from contextlib import contextmanager
from typing import Iterator, Optional

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


def argsort_descending(values: Tensor,
                       device: Optional[torch.device] = None) -> Tensor:
    r"""The stable descending order of :obj:`values` (ties in index order)
    on the CPU, sorted on :obj:`device` where it is a GPU (on the CPU where
    the GPU has no room: the same order, slower)."""
    if device is not None and torch.device(device).type == 'cuda':
        try:
            return torch.argsort(values.to(device), descending=True,
                                 stable=True).cpu()
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
    return torch.argsort(values.cpu(), descending=True, stable=True)
