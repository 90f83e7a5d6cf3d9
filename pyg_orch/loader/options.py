"""The option groups of the hybrid loaders (:class:`CacheOptions` lives
with the feature stores it configures)."""
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from pyg_orch.core.checks import check_choice, warn_renamed
from pyg_orch.features.cached_store import CacheOptions
from pyg_orch.sampling.arguments import check_placement
from pyg_orch.sampling.backends import backend_names

__all__ = ['CacheOptions', 'PlacementOptions', 'resolve_options']


@dataclass(frozen=True)
class PlacementOptions:
    r"""Where a loader keeps the graph topology and which kernels sample it.

    .. code-block:: python

        from pyg_orch import HybridNeighborLoader, PlacementOptions

        loader = HybridNeighborLoader(
            data, num_neighbors=[15, 10], batch_size=1024,
            placement=PlacementOptions(topology='host', backend='torch'))

    Args:
        topology (str or TopologySharding): On CUDA, :obj:`'device'`,
            :obj:`'host'` (pinned, read zero-copy), :obj:`'auto'`, or
            :obj:`'sharded'` / a :class:`~pyg_orch.multigpu.TopologySharding`
            (split across the machine's processes, see :doc:`/multi_gpu`).
            (default: :obj:`'auto'`)
        backend (str): Sampling kernels: :obj:`'triton'`, :obj:`'torch'`,
            :obj:`'auto'` or a registered backend (see
            :class:`~pyg_orch.HybridNeighborSampler`).
            (default: :obj:`'auto'`)
    """
    topology: Any = 'auto'
    backend: str = 'auto'

    def __post_init__(self) -> None:
        check_placement(self.topology, 'topology')
        check_choice('backend', self.backend, ['auto'] + backend_names())


# Deprecated keywords ########################################################

# Old keyword -> (option group, field).
RENAMED: Dict[str, Tuple[str, str]] = {
    'topology_placement': ('placement', 'topology'),
    'backend': ('placement', 'backend'),
    'feature_store': ('cache', 'store'),
    'gpu_memory_budget': ('cache', 'gpu_memory_budget'),
    'gpu_cache_ratio': ('cache', 'cache_ratio'),
    'cache_policy': ('cache', 'ranking'),
    'presample_batches': ('cache', 'num_presample_batches'),
}

_CLASSES = {'placement': PlacementOptions, 'cache': CacheOptions}


def _shown(value: Any) -> str:
    if value is None or isinstance(value, (str, int, float, bool)):
        return repr(value)
    return '...'


def resolve_options(
    kwargs: Dict[str, Any],
    placement: Optional[PlacementOptions],
    cache: Optional[CacheOptions],
    stacklevel: int = 4,
) -> Tuple[PlacementOptions, CacheOptions]:
    r"""The loader's :class:`PlacementOptions` and :class:`CacheOptions`
    (:obj:`placement` and :obj:`cache`, or their defaults), with the
    deprecated keywords of :obj:`RENAMED` popped from :obj:`kwargs` and
    applied (each warns once). A deprecated keyword given with the option
    object that holds its field raises a :class:`ValueError`."""
    given = {'placement': placement, 'cache': cache}
    for group, value in given.items():
        cls = _CLASSES[group]
        if value is not None and not isinstance(value, cls):
            raise TypeError(f"'{group}' must be a {cls.__name__} or None "
                            f"(got {value!r} of type "
                            f"{type(value).__name__})")
    fields: Dict[str, Dict[str, Any]] = {'placement': {}, 'cache': {}}
    for old, (group, field) in RENAMED.items():
        if old not in kwargs:
            continue
        value = kwargs.pop(old)
        if old == 'cache_policy' and value in ('static', 'lru'):
            field = 'policy'
        new = f"{group}={_CLASSES[group].__name__}({field}={_shown(value)})"
        if given[group] is not None:
            raise ValueError(f"'{old}' and '{group}' were both given; pass "
                             f"{new} only")
        warn_renamed(old, new, stacklevel=stacklevel)
        fields[group][field] = value
    placement = placement or PlacementOptions(**fields['placement'])
    cache = cache or CacheOptions(**fields['cache'])
    return placement, cache


def in_memory_cache(cache: CacheOptions) -> CacheOptions:
    r""":obj:`cache`, unless its policy is for partition folders only."""
    if cache.policy != 'static':
        raise NotImplementedError(
            f"CacheOptions(policy={cache.policy!r}) is implemented for "
            f"partition folders only; a graph held in memory caches rows "
            f"by 'ranking' (policy='static')")
    return cache
