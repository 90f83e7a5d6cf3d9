from pyg_orch.sampling.multi_hop import MultiHopOutput, sample_multi_hop
from pyg_orch.sampling.neighbors import sample_neighbors
from pyg_orch.sampling.pending import PendingSample
from pyg_orch.sampling.sampler import HybridNeighborSampler
from pyg_orch.sampling.topology import CSCTopology, GraphTopology

__all__ = [
    'CSCTopology',
    'GraphTopology',
    'HybridNeighborSampler',
    'MultiHopOutput',
    'PendingSample',
    'sample_multi_hop',
    'sample_neighbors',
]
