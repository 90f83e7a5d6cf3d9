from pyg_orch.loader.lookahead import LookaheadIterator
from pyg_orch.loader.link_loader import HybridLinkNeighborLoader
from pyg_orch.loader.neighbor_loader import (
    HybridNeighborLoader,
)
from pyg_orch.loader.options import CacheOptions, PlacementOptions
from pyg_orch.loader.stats import StageTimer, plot_stage_times

__all__ = [
    'CacheOptions',
    'HybridLinkNeighborLoader',
    'HybridNeighborLoader',
    'LookaheadIterator',
    'PlacementOptions',
    'StageTimer',
    'plot_stage_times',
]
