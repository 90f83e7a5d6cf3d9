r"""What the loader, pre-sampling and bottom-layer offload need from a sampler,
declared once."""
from contextlib import contextmanager
from typing import (
    Any,
    Dict,
    Iterator,
    List,
    Optional,
    Protocol,
    runtime_checkable,
)

import torch
from torch import Tensor

from pyg_orch.sampling.pending import PendingSample
from pyg_orch.typing import EdgeType, NodeType

#: Mini-batches pre-sampled by default to rank vertices (GPU cache, hot set):
#: an epoch's worth, at most this many.
DEFAULT_PRESAMPLE_BATCHES = 256


def presample_batches(num_seeds: int, batch_size: int,
                      cap: int = DEFAULT_PRESAMPLE_BATCHES) -> int:
    r"""The default number of pre-sampled mini-batches: an epoch of
    :obj:`num_seeds` seeds in batches of :obj:`batch_size`, at most
    :obj:`cap`."""
    return max(1, min(-(-int(num_seeds) // max(int(batch_size), 1)), cap))


@runtime_checkable
class HotNodeSampler(Protocol):
    r"""The sampler contract of pre-sampling, hot-vertex selection and
    :class:`~pyg_orch.offload.BottomLayerOffload` (:obj:`isinstance(sampler,
    HotNodeSampler)` checks the names)."""
    is_hetero: bool
    replace: bool
    num_neighbors: Dict[Optional[EdgeType], List[int]]

    @property
    def topology(self) -> Any:
        r"""The :class:`~pyg_orch.GraphTopology` sampled from."""

    @property
    def num_hops(self) -> int:
        r"""The number of hops (layers) sampled."""

    def bottom_fanout(self, edge_type: Optional[EdgeType] = None) -> int:
        r"""The fan-out of the last (bottom) hop for :obj:`edge_type`
        (:obj:`None` for homogeneous graphs)."""

    @property
    def hot_nodes(self) -> Optional[Dict[Optional[NodeType], Tensor]]:
        r"""The masks of hot nodes the last hop does not expand, per node
        type (:obj:`None` if pruning is off)."""

    def set_hot_nodes(self, hot_nodes: Any) -> None:
        r"""Sets (or with :obj:`None` clears) the hot nodes."""

    def presampling(self, prune_hot: bool = False
                    ) -> 'contextmanager[None]':
        r"""A context in which batches can be drawn without changing later
        ones: the random state and the hot nodes are restored on exit, and
        pruning is off inside unless :obj:`prune_hot`."""

    def sample_from_nodes(self, inputs: Any) -> Any:
        r"""PyG's :meth:`~torch_geometric.sampler.BaseSampler.sample_from_nodes`."""


@runtime_checkable
class LaunchingSampler(Protocol):
    r"""What :class:`~pyg_orch.HybridNeighborLoader` needs from its sampler
    beyond PyG's :class:`~torch_geometric.sampler.BaseSampler` (look-ahead,
    feature cache, :attr:`topology`); without it the loader runs as PyG's."""
    device: torch.device

    @property
    def topology(self) -> Any:
        r"""The :class:`~pyg_orch.GraphTopology` sampled from."""

    @property
    def launches_async(self) -> bool:
        r"""Whether :meth:`launch_from_nodes` returns before the batch is
        sampled (work queued on the current CUDA stream)."""

    def launch_from_nodes(self, inputs: Any) -> PendingSample:
        r"""Starts :meth:`sample_from_nodes`;
        :meth:`~pyg_orch.sampling.PendingSample.result` returns its
        output."""

    def sample_from_nodes(self, inputs: Any) -> Any:
        r"""PyG's :meth:`~torch_geometric.sampler.BaseSampler.sample_from_nodes`."""


@contextmanager
def preserved_generators(*generators: Optional[torch.Generator]
                         ) -> Iterator[None]:
    r"""Restores the states of :obj:`generators` (:obj:`None` entries are
    skipped) on exit."""
    states = [(g, g.get_state()) for g in generators
              if isinstance(g, torch.Generator)]
    try:
        yield
    finally:
        for gen, state in states:
            gen.set_state(state)
