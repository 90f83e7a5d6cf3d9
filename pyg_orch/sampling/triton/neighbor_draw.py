r"""One hop's neighbor draw in one Triton launch."""
from typing import Optional, Tuple

import torch
from torch import Tensor

from pyg_orch.core.triton_util import triton_available

#: The largest fan-out the kernel draws (as the fused sampler).
MAX_FANOUT = 64
_INT32_MAX = 2**31 - 1


def draw_applies(colptr: Tensor, num_neighbors: int,
                 time: Optional[Tensor] = None,
                 weight: Optional[Tensor] = None) -> bool:
    r"""Whether :func:`draw_neighbors` handles a hop."""
    if weight is not None or not 0 <= num_neighbors <= MAX_FANOUT:
        return False
    if not isinstance(colptr, Tensor) or not colptr.is_cuda:
        return False
    if time is not None and not (isinstance(time, Tensor) and time.is_cuda):
        return False
    return triton_available()


def draw_neighbors(colptr: Tensor, nodes: Tensor, num_neighbors: int,
                   replace: bool = False,
                   generator: Optional[torch.Generator] = None,
                   time: Optional[Tensor] = None,
                   time_bound: Optional[Tensor] = None,
                   temporal_strategy: str = 'uniform',
                   weight: Optional[Tensor] = None,
                   ) -> Optional[Tuple[Tensor, Tensor]]:
    r"""Samples in-neighbors of :obj:`nodes` as
    :func:`~pyg_orch.sampling.neighbors.sample_neighbors` in one launch, or
    :obj:`None` where :func:`draw_applies` says no."""
    k = int(num_neighbors)
    if not draw_applies(colptr, k, time, weight):
        return None
    device = colptr.device
    nodes = nodes.to(device=device, dtype=torch.int64)
    n = nodes.numel()
    if time is not None:
        if time_bound is None:
            raise ValueError("'time_bound' is needed with 'time'")
        time_bound = time_bound.to(device)
        if time_bound.is_floating_point() != time.is_floating_point():
            return None
        time_bound = time_bound.to(time.dtype).contiguous()
    if k == 0 or n == 0:
        empty = torch.empty(0, dtype=torch.int64, device=device)
        return empty, empty.clone()
    if n >= _INT32_MAX // max(k, 1):
        return None
    from pyg_orch.sampling.triton import kernels as tk
    seed = torch.randint(_INT32_MAX, (1, ), dtype=torch.int64, device=device,
                         generator=generator)
    out = torch.empty(n * k, dtype=torch.int64, device=device)
    kpad = max(tk.next_power_of_2(k), 2)
    block = max(2048 // kpad, 16)
    temporal = time is not None
    tk.draw_neighbors_kernel[((n + block - 1) // block, )](
        colptr, nodes, time if temporal else colptr,
        time_bound if temporal else nodes, seed, out, n, K=k, KPAD=kpad,
        REPLACE=bool(replace), TEMPORAL=temporal,
        LAST=temporal and temporal_strategy == 'last', BLOCK=block)
    slot = (out >= 0).nonzero().view(-1)  # The one synchronization.
    return out.index_select(0, slot), slot.div_(k, rounding_mode='floor')
