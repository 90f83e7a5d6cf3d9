"""What :class:`~pyg_orch.offload.BottomLayerOffload` needs from a loader."""
from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    Dict,
    Optional,
    Protocol,
    Tuple,
    Union,
    runtime_checkable,
)

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_orch.sampling.contract import HotNodeSampler

#: A tensor of training seeds, or one per node type.
Seeds = Union[Tensor, Dict[Any, Tensor]]


@runtime_checkable
class OffloadableLoader(Protocol):
    r"""The loader contract of :class:`BottomLayerOffload`."""
    #: The device batches are delivered on.
    device: torch.device
    #: The loader's :class:`~pyg_orch.StageTimer`, or :obj:`None`.
    timer: Any
    #: Whether batches are sampled one step before they train.
    lookahead: bool
    #: Worker processes (each holds a copy of the sampler).
    num_workers: int
    #: Whether worker processes live across epochs.
    persistent_workers: bool
    #: Over a partition folder, what builds the batches, else :obj:`None`.
    partition_batches: Any

    @property
    def offload_sampler(self) -> HotNodeSampler:
        r"""The sampler whose bottom hop skips hot vertices."""

    @property
    def offload_data(self) -> Optional[Union[Data, HeteroData]]:
        r"""The host-memory graph the CPU side reads, or :obj:`None`."""

    @property
    def batches_ahead(self) -> int:
        r"""The most batches built ahead of the one training."""

    @property
    def gpu_cache_capacity(self) -> int:
        r"""Rows the loader's GPU cache can hold (:obj:`0`: none)."""

    def offload_seeds(self) -> Tuple[Seeds, int]:
        r"""This process's training seeds and the batch size."""

    def register_batch_hook(self, hook: Callable,
                            when: str = 'received') -> Callable[[], None]:
        r"""Calls :obj:`hook` on every batch; returns its remover."""

    def set_gpu_cache_nodes(self, nodes: Any) -> bool:
        r"""Caches the features of :obj:`nodes` on the GPU."""

    def get_gpu_cache_nodes(self) -> Optional[Any]:
        r"""The nodes the GPU cache holds, or :obj:`None`."""

    def fit_gpu_cache(self, reserve: Optional[int] = None,
                      working_set: Optional[int] = None) -> Any:
        r"""Grows the GPU cache into the memory training left free; returns
        a :class:`~pyg_orch.gpu.CacheFit`."""


@dataclass(frozen=True)
class LoaderFacts:
    r"""What a loader tells an offload plan."""
    #: The sampler is heterogeneous.
    is_hetero: bool
    #: The number of sampled hops.
    num_hops: int
    #: The device batches are delivered on.
    device: torch.device
    #: The loader samples a partition folder (a rank's part).
    partitioned: bool
    #: Why offload can not work with the loader (:obj:`None`: it can).
    unsupported: Optional[str]
    #: Worker processes, and whether they live across epochs.
    num_workers: int = 0
    persistent_workers: bool = False
    #: Batches built ahead of the one training.
    batches_ahead: int = 0
    #: Whether batches are sampled one step before they train.
    lookahead: bool = False
    #: Rows the loader's GPU cache can hold.
    gpu_cache_capacity: int = 0
    #: The sampler draws neighbors by edge weight.
    weighted: bool = False

    @property
    def sampled_in_loop(self) -> bool:
        r"""Whether batches are sampled in the loop's thread."""
        return self.batches_ahead == 0 and self.num_workers == 0


#: Why temporal loaders are not offloaded (see :doc:`/offload`).
TEMPORAL_REASON = (
    "temporal sampling (the loader's 'time_attr'): a seed sees only "
    "neighbors older than its time, so a vertex's first-layer embedding "
    "depends on the seed that samples it, while hot rows computed ahead on "
    "the CPU are shared by all seeds whatever their time")

#: Why sharded topologies are not offloaded.
SHARDED_REASON = (
    "a topology sharded over the machine's processes (PlacementOptions("
    "topology='sharded')): the CPU side computes bottom-layer rows from the "
    "whole topology in host memory, and a rank holds only its shard; place "
    "the topology on 'device' or 'host' to offload")

#: Why :obj:`(FeatureStore, GraphStore)` inputs are not offloaded.
STORES_REASON = ("(FeatureStore, GraphStore) inputs (it supports Data and "
                 "HeteroData objects)")


def not_offloadable_reason(loader: Any) -> Optional[str]:
    r"""Why :obj:`loader` is not offloadable, or :obj:`None`."""
    if not isinstance(loader, OffloadableLoader):
        return (f"a {type(loader).__name__}, which does not implement "
                f"pyg_orch.offload.protocol.OffloadableLoader (use "
                f"pyg_orch.HybridNeighborLoader or HybridLinkNeighborLoader)")
    if not isinstance(loader.offload_sampler, HotNodeSampler):
        return (f"a sampler ({type(loader.offload_sampler).__name__}) that "
                f"does not implement pyg_orch.sampling.contract."
                f"HotNodeSampler")
    return None


def loader_facts(loader: OffloadableLoader,
                 partitioned: bool = False) -> LoaderFacts:
    r"""The facts of an :class:`OffloadableLoader`."""
    sampler = loader.offload_sampler
    unsupported, weighted = None, False
    if not partitioned:  # A partition's sampler holds a part's topology.
        topology = sampler.topology
        weighted = bool(topology.is_weighted)
        kind = HeteroData if sampler.is_hetero else Data
        if not isinstance(loader.offload_data, kind):
            unsupported = STORES_REASON
        elif topology.is_temporal:
            unsupported = TEMPORAL_REASON
        elif topology.is_sharded:
            unsupported = SHARDED_REASON
    return LoaderFacts(
        is_hetero=bool(sampler.is_hetero), num_hops=int(sampler.num_hops),
        device=torch.device(loader.device), partitioned=partitioned,
        unsupported=unsupported, num_workers=int(loader.num_workers or 0),
        persistent_workers=bool(loader.persistent_workers),
        batches_ahead=int(loader.batches_ahead or 0),
        lookahead=bool(loader.lookahead),
        gpu_cache_capacity=int(loader.gpu_cache_capacity),
        weighted=weighted)
