"""The feature store a :class:`~pyg_orch.HybridNeighborLoader` builds for
itself (:obj:`feature_store='auto'`): node features in host memory served to
a CUDA device from a :class:`~pyg_orch.gpu.TieredFeatureStore` whose cache
holds the rows batches touch most."""
from typing import Optional, Union

import torch
from torch_geometric.data import Data

from pyg_orch.gpu.feature_store import TieredFeatureStore
from pyg_orch.loader.stats import StageTimer
from pyg_orch.sampling.arguments import check_choice
from pyg_orch.sampling.contract import HotNodeSampler, presample_batches
from pyg_orch.sampling.presample import count_node_access


def build_feature_store(
    feature_store: Union[None, str, TieredFeatureStore],
    data,
    sampler,
    device: torch.device,
    seeds: torch.Tensor,
    seed_time: Optional[torch.Tensor],
    batch_size: Optional[int],
    timer: StageTimer,
    budget: Union[None, int, float, str],
    ratio: Optional[float],
    policy: str,
) -> Optional[TieredFeatureStore]:
    r"""Returns :obj:`feature_store` if one was given; for :obj:`'auto'`, a
    new store where it pays (CUDA, features :obj:`data.x` in host memory, a
    sampler with the :class:`~pyg_orch.sampling.HotNodeSampler` contract),
    with rows ranked by :obj:`policy` (for :obj:`'frequency'`, by
    pre-sampling batches of :obj:`batch_size` nodes of :obj:`seeds`, at
    :obj:`seed_time`); a
    :class:`~pyg_orch.multigpu.sharded_features.ShardedFeatureStore` over
    the machine's GPUs if the topology is sharded; else :obj:`None`."""
    if isinstance(feature_store, TieredFeatureStore):
        return feature_store
    if feature_store is None:
        return None
    if feature_store != 'auto':
        raise ValueError(f"'feature_store' must be 'auto', None or a "
                         f"TieredFeatureStore (got {feature_store!r})")
    check_choice('cache_policy', policy, ('frequency', 'degree'))
    x = getattr(data, 'x', None) if isinstance(data, Data) else None
    if (device.type != 'cuda' or not isinstance(x, torch.Tensor) or x.is_cuda
            or x.dim() != 2 or not isinstance(sampler, HotNodeSampler)):
        return None
    if policy == 'degree':
        # Rows are fetched when their node is sampled as someone's
        # in-neighbor: that follows the out-degree.
        topo = sampler.topology.csc[None]
        hotness = torch.bincount(topo.row.to(torch.int64),
                                 minlength=topo.num_src_nodes).cpu()
    else:
        batch_size = batch_size or 1
        with timer.stage('presample'):
            hotness = count_node_access(
                sampler, seeds, input_time=seed_time, batch_size=batch_size,
                num_batches=presample_batches(seeds.numel(), batch_size))
    if sampler.topology.is_sharded:
        # The machine's GPUs share one cache; host rows live once per
        # machine (a collective: every rank builds its loader in turn).
        from pyg_orch.multigpu import PeerGroup
        from pyg_orch.multigpu.sharded_features import ShardedFeatureStore
        return ShardedFeatureStore(x, PeerGroup(device=device),
                                   hotness=hotness, gpu_memory_budget=budget,
                                   cache_ratio=ratio)
    return TieredFeatureStore(x, device, hotness=hotness,
                              gpu_memory_budget=budget, cache_ratio=ratio)
