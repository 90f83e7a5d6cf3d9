"""pyg_orch: fast sample-based GNN training for PyTorch Geometric."""
from pyg_orch.loader import (
    HybridLinkNeighborLoader,
    HybridNeighborLoader,
    StageTimer,
)
from pyg_orch.offload import BottomLayerOffload
from pyg_orch.sampling import GraphTopology, HybridNeighborSampler

__version__ = '0.1.0'

__all__ = [
    'BottomLayerOffload',
    'GraphTopology',
    'HybridLinkNeighborLoader',
    'HybridNeighborLoader',
    'HybridNeighborSampler',
    'StageTimer',
    '__version__',
]
