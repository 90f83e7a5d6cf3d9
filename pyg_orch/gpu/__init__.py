r"""The GPU data path, as a public namespace: the tiered feature stores, the
GPU cache over any feature store and the fused Triton sampling (its kernels
imported lazily, only on GPUs). This package holds no module of its own."""
from pyg_orch.features.cache_fit import CacheFit, GpuMemory
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
    'CacheFit',
    'FusedSampler',
    'GpuMemory',
    'GPUCachedFeatureStore',
    'HeteroTieredFeatureStore',
    'TieredFeatureStore',
    'fused_sample_multi_hop',
    'supports',
    'triton_available',
]
