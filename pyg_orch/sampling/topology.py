"""The topology types, under the import path they had before they moved to
:mod:`pyg_orch.core` (tests, benchmarks and :mod:`pyg_orch.offload` import
them from here)."""
from pyg_orch.core.csc import CSCTopology, smallest_index_dtype
from pyg_orch.core.topology import GraphTopology

__all__ = ['CSCTopology', 'GraphTopology', 'smallest_index_dtype']
