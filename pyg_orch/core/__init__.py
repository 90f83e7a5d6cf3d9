r"""What every concept shares: argument checks, errors, devices and streams,
reusable buffers, and the helpers that present tensors to Triton kernels.
This package imports no other package of :mod:`pyg_orch`, nor Triton."""
from pyg_orch.core.buffers import DenseBufferPool
from pyg_orch.core.devices import with_index
from pyg_orch.core.triton_util import kernel_view, triton_available

__all__ = [
    'DenseBufferPool',
    'kernel_view',
    'triton_available',
    'with_index',
]
