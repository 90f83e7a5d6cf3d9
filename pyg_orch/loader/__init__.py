from pyg_orch.loader.neighbor_loader import HybridNeighborLoader
from pyg_orch.loader.stats import StageTimer

__all__ = ['HybridNeighborLoader', 'StageTimer']
