r"""The GPU data path, as a public namespace: the tiered feature stores
(:mod:`pyg_orch.features.tiered`, :mod:`pyg_orch.features.hetero_tiered`),
the GPU cache over any feature store
(:mod:`pyg_orch.features.cached_store`)
and the fused Triton sampling (:mod:`pyg_orch.sampling.triton`, its kernels
imported lazily, only on GPUs). The :obj:`'triton'` sampling backend is
imported by the backend registry (:mod:`pyg_orch.sampling.backends`) on
demand. This package holds no module of its own."""
from pyg_orch.features.cached_store import GPUCachedFeatureStore
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
    'GPUCachedFeatureStore',
    'HeteroTieredFeatureStore',
    'TieredFeatureStore',
    'fused_sample_multi_hop',
    'supports',
    'triton_available',
]
