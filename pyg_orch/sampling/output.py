"""What one multi-hop sampling call returns, on every backend."""
from dataclasses import dataclass
from typing import Dict, Optional, Union

import torch
from torch import Tensor
from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput


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
        r"""Moves the tensors to :obj:`device`, in place."""
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

    def to_pyg(self, is_hetero: bool
               ) -> Union[SamplerOutput, HeteroSamplerOutput]:
        r"""The batch as PyG's
        :class:`~torch_geometric.sampler.SamplerOutput` or
        :class:`~torch_geometric.sampler.HeteroSamplerOutput`."""
        fields = dict(node=self.node, row=self.row, col=self.col,
                      edge=self.edge, batch=self.batch,
                      num_sampled_nodes=self.num_sampled_nodes,
                      num_sampled_edges=self.num_sampled_edges)
        if is_hetero:
            return HeteroSamplerOutput(**fields)
        return SamplerOutput(**{k: None if v is None else v[None]
                                for k, v in fields.items()})
