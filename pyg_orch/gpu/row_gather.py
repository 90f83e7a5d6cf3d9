r"""Rows of a matrix on the GPU by index: :obj:`x.index_select(0, index)`
through a Triton kernel that reads whole rows in wide tiles, with
:meth:`~torch.Tensor.index_select` as the reference and the fallback."""
from typing import Optional

import torch
from torch import Tensor

from pyg_orch.core.triton_util import triton_available

_MAX_BLOCK_C = 128
_ROWS_TIMES_COLS = 2048


def can_gather_rows(x: Tensor, index: Tensor) -> bool:
    r"""Whether :func:`gather_rows` runs the Triton kernel for :obj:`x` and
    :obj:`index`: a contiguous 1-D or 2-D tensor on a GPU that autograd
    does not track, an integer index on the same device, and Triton
    installed."""
    return (x.is_cuda and index.device == x.device and x.dim() in (1, 2)
            and x.numel() > 0 and x.is_contiguous()
            and index.dtype in (torch.int32, torch.int64)
            and not (x.requires_grad and torch.is_grad_enabled())
            and triton_available())


def gather_rows(x: Tensor, index: Tensor,
                use_triton: Optional[bool] = None) -> Tensor:
    r"""Returns :obj:`x.index_select(0, index)`.

    Args:
        x (torch.Tensor): The matrix (rows of node features), or a vector
            (e.g. node labels).
        index (torch.Tensor): The rows to take, each in
            :obj:`[0, x.size(0))` (not checked on the Triton path: indices
            from a sampler are in range by construction).
        use_triton (bool, optional): Run the Triton kernel (:obj:`True`,
            e.g. under Triton's interpreter on the CPU) or
            :meth:`~torch.Tensor.index_select` (:obj:`False`); by default
            the kernel wherever :func:`can_gather_rows` holds.
    """
    if use_triton is None:
        use_triton = can_gather_rows(x, index)
    if not use_triton:
        return x.index_select(0, index)
    from pyg_orch.gpu import triton_kernels as tk

    if x.dim() not in (1, 2) or not x.is_contiguous():
        raise ValueError(f"'x' must be a contiguous 1-D or 2-D tensor for "
                         f"the Triton row gather (got shape "
                         f"{tuple(x.shape)})")
    index = index.view(-1)
    n = index.numel()
    if x.dim() == 1:
        return gather_rows(x.view(-1, 1), index, use_triton=True).view(n)
    width = x.size(1)
    out = torch.empty(n, width, dtype=x.dtype, device=x.device)
    if n == 0 or width == 0:
        return out
    block_c = min(tk.next_power_of_2(width), _MAX_BLOCK_C)
    block_r = max(_ROWS_TIMES_COLS // block_c, 1)
    tk.index_rows_kernel[((n + block_r - 1) // block_r, )](
        x, index, out, n, WIDTH=width, BLOCK_R=block_r, BLOCK_C=block_c)
    return out
