"""Placeholder in-edges for pruned hot vertices (degree compensation)."""
from typing import Any, Dict, Optional, Tuple

import torch
from torch import Tensor

from pyg_orch.offload.bottom_layer import placeholder_in_edges
from pyg_orch.offload.replacement import same_tensor


class DegreeCompensation:
    r"""Gives a pruned hot vertex as many placeholder in-edges (from row
    :obj:`0`) as the last hop would have sampled: they change only its own
    outputs, which are replaced or unused.

    Args:
        sampler (HotNodeSampler): The loader's sampler (homogeneous).
        colptr (torch.Tensor, optional): Column offsets that give the hot
            vertices' in-degrees instead of the sampler's topology.
            (default: :obj:`None`)
        column_ids (torch.Tensor, optional): The ascending global ids of
            :obj:`colptr`'s columns. (default: :obj:`None`)
    """
    def __init__(self, sampler: Any, colptr: Optional[Tensor] = None,
                 column_ids: Optional[Tensor] = None):
        self.sampler = sampler
        self.fanout = sampler.bottom_fanout()
        self.colptr = colptr
        self.column_ids = column_ids
        self._on: Dict[torch.device, Tuple[Tensor, Optional[Tensor]]] = {}

    def _columns_on(self, device: torch.device
                    ) -> Tuple[Tensor, Optional[Tensor]]:
        out = self._on.get(device)
        if out is None:
            colptr = self.colptr
            if colptr is None:
                colptr = self.sampler.topology.csc[None].colptr
            ids = self.column_ids
            out = (colptr.to(device, torch.int64),
                   None if ids is None else ids.to(device, torch.int64))
            self._on[device] = out
        return out

    def placeholder_edges(self, n_id: Tensor, rows: Tensor) -> Tensor:
        r"""Placeholder in-edges of the hot rows :obj:`rows`."""
        colptr, ids = self._columns_on(n_id.device)
        nodes = n_id.index_select(0, rows).to(torch.int64)
        if ids is not None:  # Hot vertices are columns (no host sync).
            nodes = torch.searchsorted(ids, nodes)
        return placeholder_in_edges(colptr, nodes, rows, self.fanout,
                                    self.sampler.replace)

    @staticmethod
    def add_placeholders(extra: Optional[Tensor], batch_edge_index: Any,
                         args: tuple, kwargs: dict
                         ) -> Optional[Tuple[tuple, dict]]:
        r"""A layer's inputs with the placeholder edges :obj:`extra` appended
        to its :obj:`edge_index` if that is :obj:`batch_edge_index` and no
        edge-level tensor comes with it; :obj:`None` to leave them."""
        if extra is None or extra.numel() == 0:
            return None
        in_args = len(args) > 1
        edge_index = args[1] if in_args else kwargs.get('edge_index')
        if not isinstance(edge_index, Tensor) or not same_tensor(
                edge_index, batch_edge_index):
            return None  # E.g. trimmed by trim_to_layer: nothing to do.
        if any(isinstance(v, Tensor) for v in args[2:]) or any(
                isinstance(v, Tensor) for k, v in kwargs.items()
                if k not in ('x', 'edge_index')):
            return None  # Edge-level tensors would need placeholders too.
        extra = extra.to(edge_index.device, edge_index.dtype)
        edge_index = torch.cat([edge_index, extra], dim=1)
        if in_args:
            args = (args[0], edge_index) + tuple(args[2:])
        else:
            kwargs = dict(kwargs, edge_index=edge_index)
        return args, kwargs
