r"""What the loader, pre-sampling and bottom-layer offload need from a
sampler."""
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

from pyg_orch.sampling.arguments import check_node_masks
from pyg_orch.sampling.pending import PendingSample
from pyg_orch.typing import EdgeType, NodeType

#: Mini-batches pre-sampled by default to rank vertices (GPU cache, hot set):
#: an epoch's worth, at most this many.
DEFAULT_PRESAMPLE_BATCHES = 256


def presample_batches(num_seeds: int, batch_size: int,
                      cap: int = DEFAULT_PRESAMPLE_BATCHES) -> int:
    r"""The default number of pre-sampled mini-batches (an epoch, capped)."""
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
        r"""Samples the subgraphs of :obj:`inputs`, as PyG's samplers."""


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
        r"""Starts :meth:`sample_from_nodes`; the result returns its output."""

    def sample_from_nodes(self, inputs: Any) -> Any:
        r"""Samples the subgraphs of :obj:`inputs`, as PyG's samplers."""


@contextmanager
def preserved_generators(*generators: Optional[torch.Generator]
                         ) -> Iterator[None]:
    r"""Restores the states of :obj:`generators` on exit."""
    states = [(g, g.get_state()) for g in generators
              if isinstance(g, torch.Generator)]
    try:
        yield
    finally:
        for gen, state in states:
            gen.set_state(state)


class HotNodes:
    r"""The hot-node masks of a sampler (shared with its views)."""
    masks: Optional[Dict[Optional[NodeType], Tensor]] = None


class HotNodesMixin:
    r"""The hot-node part of :class:`HotNodeSampler`."""
    _hot: HotNodes
    device: torch.device

    @property
    def hot_nodes(self) -> Optional[Dict[Optional[NodeType], Tensor]]:
        r"""The hot-node masks per node type, or :obj:`None` (no pruning)."""
        return self._hot.masks

    def set_hot_nodes(self, hot_nodes: Any) -> None:
        r"""Sets the nodes the last hop does not expand (a boolean mask, or
        masks per node type; :obj:`None` clears)."""
        self._hot.masks = check_node_masks(hot_nodes, self.global_num_nodes,
                                           self.device)

    @contextmanager
    def presampling(self, prune_hot: bool = False) -> Iterator[None]:
        r"""See :meth:`~pyg_orch.sampling.HotNodeSampler.presampling`."""
        saved = self._hot.masks
        if not prune_hot:
            self._hot.masks = None
        try:
            with preserved_generators(*self._generators()):
                yield
        finally:
            self._hot.masks = saved

    def _generators(self) -> List[Optional[torch.Generator]]:
        raise NotImplementedError
