"""pyg_orch: fast sample-based GNN training for PyTorch Geometric."""
from pyg_orch.loader import (
    CacheOptions,
    DistributedNeighborLoader,
    HybridLinkNeighborLoader,
    HybridNeighborLoader,
    PlacementOptions,
    StageTimer,
)
from pyg_orch.offload import BottomLayerOffload, OffloadOptions
from pyg_orch.sampling import GraphTopology, HybridNeighborSampler

__version__ = '0.1.0'

__all__ = [
    'BottomLayerOffload',
    'CacheOptions',
    'DistributedNeighborLoader',
    'GraphTopology',
    'HybridLinkNeighborLoader',
    'HybridNeighborLoader',
    'HybridNeighborSampler',
    'OffloadOptions',
    'PlacementOptions',
    'StageTimer',
    '__version__',
]
