"""The GPU feature store a hybrid loader builds for itself
(:obj:`CacheOptions(store='auto')`)."""
from typing import Any, Callable, Dict, Optional, Union

import torch
from torch_geometric.data import Data, HeteroData

from pyg_orch.features.gpu_cache import out_degrees
from pyg_orch.features.tiered import TieredFeatureStore
from pyg_orch.features.hetero_tiered import HeteroTieredFeatureStore
from pyg_orch.loader.options import CacheOptions
from pyg_orch.loader.stats import StageTimer
from pyg_orch.sampling.contract import HotNodeSampler

AnyStore = Union[TieredFeatureStore, HeteroTieredFeatureStore]
#: Access counts from pre-sampled batches: an int64 tensor per node, or a
#: dictionary of them per node type (see
#: :func:`pyg_orch.sampling.presample.count_node_access`).
Counts = Union[torch.Tensor, Dict[str, torch.Tensor]]


def build_feature_store(
    cache: CacheOptions,
    data,
    sampler,
    device: torch.device,
    count_access: Callable[[], Counts],
    timer: StageTimer,
) -> Optional[AnyStore]:
    r""":obj:`cache.store` if given (checked); for :obj:`'auto'` on CUDA,
    :func:`build_store`."""
    store = cache.store
    if isinstance(store, (TieredFeatureStore, HeteroTieredFeatureStore)):
        check_given_store(store, data)
        return store
    if store is None or device.type != 'cuda':
        return None
    return build_store(data, sampler, device, count_access, timer,
                       cache.gpu_memory_budget, cache.cache_ratio,
                       cache.ranking)


def build_store(
    data,
    sampler,
    device: torch.device,
    count_access: Callable[[], Counts],
    timer: StageTimer,
    budget: Union[None, int, float, str],
    ratio: Optional[float],
    ranking: str,
) -> Optional[AnyStore]:
    r"""A store of the features of :func:`host_features`, rows ranked by
    :obj:`ranking`; :obj:`None` without them or a :class:`HotNodeSampler`."""
    x_dict = host_features(data)
    if not x_dict or not isinstance(sampler, HotNodeSampler):
        return None
    if ranking == 'degree':
        # Rows are fetched when their node is sampled as someone's
        # in-neighbor: that follows the out-degree.
        hotness = out_degrees(
            {et: csc.row for et, csc in sampler.topology.csc.items()},
            {t: x.size(0) for t, x in x_dict.items()})
    else:
        with timer.stage('presample'):
            counts = count_access()
        hotness = {t: counts if t is None else counts[t] for t in x_dict}
    if None not in x_dict:
        return HeteroTieredFeatureStore(x_dict, device, hotness=hotness,
                                        gpu_memory_budget=budget,
                                        cache_ratio=ratio)
    x, hotness = x_dict[None], hotness[None]
    if sampler.topology.is_sharded:
        # The machine's GPUs share one cache; host rows live once per
        # machine (a collective: every rank builds its loader in turn).
        from pyg_orch.parallel.peer_memory import PeerGroup
        from pyg_orch.features.sharded import ShardedFeatureStore
        return ShardedFeatureStore(x, PeerGroup(device=device),
                                   hotness=hotness, gpu_memory_budget=budget,
                                   cache_ratio=ratio)
    return TieredFeatureStore(x, device, hotness=hotness,
                              gpu_memory_budget=budget, cache_ratio=ratio)


def check_given_store(store: AnyStore, data) -> None:
    r"""Raises a :class:`ValueError` naming :obj:`'store'` where
    :obj:`store` cannot serve :obj:`data`."""
    if isinstance(store, HeteroTieredFeatureStore):
        if not isinstance(data, HeteroData):
            raise ValueError("'store' is a HeteroTieredFeatureStore, "
                             "but the graph is not a HeteroData")
        for t, tier in store.stores.items():
            if t not in data.node_types:
                raise ValueError(f"'store' holds node type '{t}', "
                                 f"which the graph lacks "
                                 f"({data.node_types})")
            x = getattr(data[t], store.attr_name, None)
            shape = (tier.num_nodes, tier.width)
            if not isinstance(x, torch.Tensor) or tuple(x.shape) != shape:
                raise ValueError(
                    f"'store' holds {shape} rows for node type "
                    f"'{t}', but the graph's '{store.attr_name}' is "
                    f"{None if x is None else tuple(x.shape)}")
    elif isinstance(data, HeteroData):
        raise ValueError("'store' must be a HeteroTieredFeatureStore "
                         "for a HeteroData (got a TieredFeatureStore)")


def host_features(data) -> Dict[Any, torch.Tensor]:
    r"""The 2-dimensional node features :obj:`x` in host memory that a
    store serves, per node type (:obj:`None` for a :class:`Data`)."""
    if isinstance(data, Data):
        xs = {None: getattr(data, 'x', None)}
    elif isinstance(data, HeteroData):
        xs = {t: data[t].get('x') for t in data.node_types}
    else:
        return {}
    return {t: x for t, x in xs.items() if isinstance(x, torch.Tensor)
            and not x.is_cuda and x.dim() == 2}
