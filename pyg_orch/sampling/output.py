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
        for name in ('node', 'row', 'col', 'edge', 'batch'):
            d = getattr(self, name)
            if d is not None:
                setattr(self, name, {k: v.to(device) if isinstance(
                    v, Tensor) else v for k, v in d.items()})
        return self

    def to_pyg(self, is_hetero: bool
               ) -> Union[SamplerOutput, HeteroSamplerOutput]:
        r"""The batch as PyG's
        :class:`~torch_geometric.sampler.SamplerOutput` or
        :class:`~torch_geometric.sampler.HeteroSamplerOutput`."""
        fields = dict(vars(self))
        if is_hetero:
            return HeteroSamplerOutput(**fields)
        return SamplerOutput(**{k: None if v is None else v[None]
                                for k, v in fields.items()})
