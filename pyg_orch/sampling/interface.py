r"""The interface between :class:`~pyg_orch.HybridNeighborSampler` and its
sampling backends."""
from dataclasses import dataclass
from typing import Dict, List, Optional, Protocol, runtime_checkable

import torch
from torch import Tensor

from pyg_orch.sampling.output import MultiHopOutput
from pyg_orch.topology.graph import GraphTopology
from pyg_orch.typing import EdgeType, NodeType


@dataclass(frozen=True)
class BackendConfig:
    r"""What a sampler asks of its backend, fixed at construction.

    Args:
        topology (GraphTopology): The graph, already placed (on
            :obj:`device`, or in pinned host memory).
        num_neighbors (Dict[EdgeType, List[int]]): The fan-outs per edge type
            (the key :obj:`None` for homogeneous graphs).
        device (torch.device): Where batches land.
        replace (bool): Sample with replacement.
        disjoint (bool): Give every seed its own subgraph.
        induced (bool): Return the induced subgraph of the sampled nodes.
        temporal_strategy (str): :obj:`'uniform'` or :obj:`'last'`.
        relabel (str): :obj:`'auto'`, :obj:`'dense'` or :obj:`'sort'`.
    """
    topology: GraphTopology
    num_neighbors: Dict[Optional[EdgeType], List[int]]
    device: torch.device
    replace: bool = False
    disjoint: bool = False
    induced: bool = False
    temporal_strategy: str = 'uniform'
    relabel: str = 'auto'


@dataclass
class SampleRequest:
    r"""One batch to sample.

    Args:
        seeds (Dict[NodeType, torch.Tensor]): Seed node ids per node type.
        generator (torch.Generator, optional): Random numbers on the
            sampler's device.
        host_generator (torch.Generator, optional): Random numbers on the
            topology's device, where it differs from the sampler's.
        seed_time (Dict[NodeType, torch.Tensor], optional): The time bound of
            every seed, for temporal sampling.
        hot_nodes (Dict[NodeType, torch.Tensor], optional): Boolean masks of
            nodes the last hop does not expand.
    """
    seeds: Dict[Optional[NodeType], Tensor]
    generator: Optional[torch.Generator] = None
    host_generator: Optional[torch.Generator] = None
    seed_time: Optional[Dict[Optional[NodeType], Tensor]] = None
    hot_nodes: Optional[Dict[Optional[NodeType], Tensor]] = None


class PendingOutput(Protocol):
    r"""A batch that may still be in flight on the device."""
    def result(self) -> MultiHopOutput:
        ...


@runtime_checkable
class SamplingBackend(Protocol):
    r"""A sampling backend, built by its factory from a
    :class:`BackendConfig`."""
    #: The name it is registered under.
    name: str
    #: Whether :meth:`launch` returns before the batch is sampled (kernels
    #: queued on the current stream).
    asynchronous: bool

    def sample(self, request: SampleRequest) -> MultiHopOutput:
        r"""Samples the batch and returns it."""

    def launch(self, request: SampleRequest) -> PendingOutput:
        r"""Starts the batch; :meth:`PendingOutput.result` returns it."""
