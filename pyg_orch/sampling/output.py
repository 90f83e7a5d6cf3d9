"""What one multi-hop sampling call returns, on every backend."""
from dataclasses import dataclass
from typing import Dict, Optional

import torch
from torch import Tensor


@dataclass
class MultiHopOutput:
    r"""Sampled subgraph, keyed by node type and edge type (:obj:`None` for
    homogeneous graphs). Nodes are in hop order; :obj:`row` and :obj:`col`
    hold local source and destination ids; :obj:`edge` original edge ids."""
    node: Dict
    row: Dict
    col: Dict
    edge: Dict
    batch: Optional[Dict]
    num_sampled_nodes: Dict
    num_sampled_edges: Optional[Dict]

    def to(self, device: torch.device) -> 'MultiHopOutput':
        r"""Moves the tensors to :obj:`device`, in place; returns
        :obj:`self`."""
        def move(d: Optional[Dict]) -> Optional[Dict]:
            return None if d is None else {
                k: v.to(device) if isinstance(v, Tensor) else v
                for k, v in d.items()
            }

        self.node, self.row, self.col, self.edge = (move(self.node),
                                                    move(self.row),
                                                    move(self.col),
                                                    move(self.edge))
        self.batch = move(self.batch)
        return self
