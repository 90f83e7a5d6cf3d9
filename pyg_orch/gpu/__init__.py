r"""The GPU data path: fused Triton sampling kernels (imported lazily, only on
GPUs), a tiered feature store, and zero-copy access to pinned host memory.
The :obj:`'triton'` sampling backend (:mod:`pyg_orch.sampling.triton.backend`) is
imported by the backend registry (:mod:`pyg_orch.sampling.backends`) on
demand; this package imports only :mod:`pyg_orch.core` of the rest."""
from pyg_orch.features.tiered import TieredFeatureStore
from pyg_orch.features.hetero_tiered import HeteroTieredFeatureStore
from pyg_orch.sampling.triton.fused_sampler import (
    FusedSampler,
    fused_sample_multi_hop,
    supports,
    triton_available,
)

__all__ = [
    'FusedSampler',
    'HeteroTieredFeatureStore',
    'TieredFeatureStore',
    'fused_sample_multi_hop',
    'supports',
    'triton_available',
]
