"""Reuses the :class:`~pyg_orch.GraphTopology` built for the same
:obj:`edge_index` tensors across loaders (train, validation, test)."""
import weakref
from typing import Dict, Iterable, Optional, Tuple

import torch
from torch import Tensor

from pyg_orch.topology.sparse_adj import has_adj_t
from pyg_orch.topology.graph import GraphTopology


class TopologyCache:
    r"""Reuses the topology of the same :obj:`edge_index` tensors across
    loaders, invalidated when a tensor is modified in place."""
    def __init__(self):
        self._entries: Dict[tuple, Tuple[list, int, GraphTopology]] = {}

    @staticmethod
    def _tensors(data) -> Iterable[Tensor]:
        from torch_geometric.data import Data, HeteroData
        if has_adj_t(data):
            return []  # Keyed by `edge_index` only: built each time.
        if isinstance(data, Data):
            return [data.edge_index] if data.edge_index is not None else []
        if isinstance(data, HeteroData):
            return [s.edge_index for s in data.edge_stores
                    if 'edge_index' in s]
        return []

    def get_or_build(self, data, is_sorted: bool, device: torch.device,
                     time_attr: Optional[str] = None,
                     weight_attr: Optional[str] = None) -> GraphTopology:
        tensors = list(self._tensors(data))
        if not tensors or time_attr is not None or weight_attr is not None:
            # Time and weight tensors may change without notice: no caching.
            return GraphTopology.from_data(data, is_sorted, device, time_attr,
                                           weight_attr)
        key = (tuple(id(t) for t in tensors), str(device), bool(is_sorted),
               repr(data.num_nodes) if hasattr(data, 'num_nodes') else '')
        version = sum(t._version for t in tensors)
        entry = self._entries.get(key)
        if entry is not None:
            refs, ver, topo = entry
            if ver == version and all(r() is t
                                      for r, t in zip(refs, tensors)):
                return topo
        topo = GraphTopology.from_data(data, is_sorted, device)
        # Drop entries whose tensors are gone:
        self._entries = {k: v for k, v in self._entries.items()
                         if all(r() is not None for r in v[0])}
        self._entries[key] = ([weakref.ref(t) for t in tensors], version,
                              topo)
        return topo


#: The cache every :class:`~pyg_orch.HybridNeighborSampler` builds through.
topology_cache = TopologyCache()
