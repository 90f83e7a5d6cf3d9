r"""Neighbor sampling: the sampler, the PyTorch sampling core, the sampler
contract and the registry of backends."""
from pyg_orch.topology.csc import CSCTopology
from pyg_orch.sampling.output import MultiHopOutput
from pyg_orch.topology.graph import GraphTopology
from pyg_orch.sampling.backends import (
    choose_backend,
    register_backend,
)
from pyg_orch.sampling.contract import HotNodeSampler, LaunchingSampler
from pyg_orch.sampling.multi_hop import sample_multi_hop
from pyg_orch.sampling.neighbors import sample_neighbors
from pyg_orch.sampling.pending import PendingSample
from pyg_orch.sampling.sampler import HybridNeighborSampler

__all__ = [
    'CSCTopology',
    'GraphTopology',
    'HotNodeSampler',
    'HybridNeighborSampler',
    'LaunchingSampler',
    'MultiHopOutput',
    'PendingSample',
    'choose_backend',
    'register_backend',
    'sample_multi_hop',
    'sample_neighbors',
]
