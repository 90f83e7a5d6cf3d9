r"""The GPU data path: fused Triton sampling kernels (imported lazily, only on
GPUs) and zero-copy access to pinned host memory."""
from pyg_orch.gpu.fused_sampler import (
    fused_sample_multi_hop,
    supports,
    triton_available,
)

__all__ = ['fused_sample_multi_hop', 'supports', 'triton_available']
