"""The options of :class:`BottomLayerOffload`, validated in one place."""
import copy
import threading
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Dict, Optional, Sequence, Union

import numpy as np
import torch

from pyg_orch.core.checks import (
    check_callable,
    check_choice,
    check_fraction,
    check_int,
    warn_renamed,
)
from pyg_orch.offload.aggregate_split import check_split
from pyg_orch.offload.autotune import DEFAULT_HOT_RATIO
from pyg_orch.offload.bottom_layer import check_autocast_dtype
from pyg_orch.offload.workers import (
    cpu_cores_per_rank,
    default_intra_op_threads,
    default_num_threads,
    local_ranks,
)
from pyg_orch.sampling.arguments import check_bool, check_seconds

#: A hook a worker calls before every work item, with its cancel event.
WorkHook = Callable[[threading.Event], None]

#: :obj:`max_sample_age` by default: :obj:`max(max_staleness, 8)` steps.
DEFAULT_MAX_SAMPLE_AGE = 8

#: The seed :obj:`seed=None` stands for: reproducible by default.
DEFAULT_SEED = 0


def _check_ratio(name: str, value: Any) -> Union[float, str]:
    if isinstance(value, str) and value == 'auto':
        return value
    return check_fraction(name, value)


def _check_autotune(value: Any) -> Union[bool, str, tuple]:
    if isinstance(value, np.bool_):
        return bool(value)
    if value == 'auto' or isinstance(value, bool):
        return value
    bad = isinstance(value, (str, bytes)) or not isinstance(value, Sequence)
    if not bad:
        value = tuple(value)
        bad = len(value) == 0 or any(
            isinstance(r, bool) or not isinstance(r, (int, float))
            or not 0.0 <= float(r) <= 1.0 for r in value)
    if bad:
        raise ValueError(f"'autotune' must be True, False, 'auto' or a "
                         f"non-empty sequence of hot ratios in [0, 1] (got "
                         f"{value!r})")
    return tuple(float(r) for r in value)


@dataclass(frozen=True)
class OffloadOptions:
    r"""The options of :class:`~pyg_orch.offload.BottomLayerOffload`,
    checked on construction (a :class:`ValueError`, or a
    :class:`NotImplementedError` for combinations not supported, names the
    first bad one). Options that depend on the model or the loader
    (:obj:`'auto'`, :obj:`chunk_size=None`) are resolved when the runtime is
    built.

    .. code-block:: python

        model = BottomLayerOffload(model, loader, options=OffloadOptions(
            hot_ratio=0.1, max_staleness=2, cache_ratio=0.2))

    Args:
        hot_ratio (float or str, optional): Fraction of all vertices whose
            bottom layer runs on the CPU, or :obj:`'auto'` to grow the hot
            set by measured throughput. If not set, :obj:`0.05`, and the size
            is decided by measurement (see :obj:`autotune`).
            (default: :obj:`None`)
        cache_ratio (float or str): Fraction of all vertices that are
            GPU-cache candidates, or :obj:`'auto'` for as many as the loader's
            feature store holds. (default: :obj:`0.1`)
        max_staleness (int): The most optimizer steps between the weights
            used for an embedding and those of the step using it.
            (default: :obj:`1`)
        max_sample_age (int, optional): The most optimizer steps a hot
            vertex's CPU-computed rows (its neighbor sample) are reused.
            (default: :obj:`max(max_staleness, 8)`)
        autotune (bool or str or Sequence[float]): Decide the hot-set size by
            timing the first training steps with no hot vertex,
            :obj:`hot_ratio` and :obj:`3 * hot_ratio` (or the ratios given);
            :obj:`'auto'` measures unless :obj:`hot_ratio` is given.
            (default: :obj:`'auto'`)
        num_threads (int, optional): CPU worker threads; see
            :func:`~pyg_orch.offload.default_num_threads`.
        intra_op_threads (int, optional): PyTorch intra-op threads of each
            worker thread; see
            :func:`~pyg_orch.offload.default_intra_op_threads`.
        full_neighbors (bool or str): Aggregate over all in-neighbors of hot
            vertices instead of the bottom-hop fan-out (with
            :obj:`split='aggregate'`, rows are then computed once);
            :obj:`'auto'` where the weight-free aggregation is a mean and the
            loader samples uniformly on an unpartitioned graph.
            (default: :obj:`'auto'`)
        layer (torch.nn.Module or str, optional): The first message-passing
            layer (a module of :obj:`model` or its name); by default the first
            one registered. For heterogeneous models, the name of the module
            holding the per-edge-type modules.
        num_presample_batches (int, optional): Mini-batches to pre-sample for
            the access counts; by default an epoch's worth, at most
            :obj:`~pyg_orch.sampling.contract.DEFAULT_PRESAMPLE_BATCHES`.
        super_batch_size (int, optional): Steps per super-batch, overriding
            the default derived from :obj:`max_staleness`.
        chunk_size (int, optional): The most hot vertices per CPU work item;
            see :func:`~pyg_orch.offload.tables.default_chunk_size`.
        cpu_autocast (torch.dtype, optional): :obj:`torch.bfloat16` runs the
            CPU copy of the layer under CPU autocast. (default: :obj:`None`)
        seed (int, optional): Seeds pre-sampling and the CPU-side neighbor
            sampling; with a fixed hot set, training is reproducible.
            :obj:`None` is :obj:`DEFAULT_SEED`. (default: :obj:`None`)
        idle_timeout (float): Seconds an idle worker thread waits before it
            exits. (default: :obj:`2.0`)
        replace_rows (str): :obj:`'pruned'` replaces the first layer's output
            of hot vertices in the last frontier only, :obj:`'all'` in all
            hops. (default: :obj:`'pruned'`)
        compensate_degrees (bool or str): Give pruned hot vertices
            placeholder in-edges; :obj:`'auto'` where a layer needs it.
            (default: :obj:`'auto'`)
        refresh (str): :obj:`'super_batch'` computes tables of all hot
            vertices a super-batch ahead, :obj:`'batch'` the rows each
            mini-batch needs. (default: :obj:`'super_batch'`)
        split (str): What the CPU computes: :obj:`'aggregate'` (the first
            layer's weight-free aggregation), :obj:`'output'` (its output from
            a weight snapshot) or :obj:`'auto'`. (default: :obj:`'auto'`)
        fit_gpu_cache (bool): Once the hot-set size is decided (or offload
            found unsound), grow the loader's GPU feature cache into the GPU
            memory the training steps leave free (see
            :meth:`~pyg_orch.HybridNeighborLoader.fit_gpu_cache`).
            (default: :obj:`True`)
    """
    hot_ratio: Union[None, float, str] = None
    cache_ratio: Union[float, str] = 0.1
    max_staleness: int = 1
    num_threads: Optional[int] = None
    full_neighbors: Union[bool, str] = 'auto'
    layer: Union[None, str, torch.nn.Module] = None
    num_presample_batches: Optional[int] = None
    super_batch_size: Optional[int] = None
    chunk_size: Optional[int] = None
    intra_op_threads: Optional[int] = None
    cpu_autocast: Optional[torch.dtype] = None
    seed: Optional[int] = None
    idle_timeout: float = 2.0
    replace_rows: str = 'pruned'
    compensate_degrees: Union[bool, str] = 'auto'
    refresh: str = 'super_batch'
    split: str = 'auto'
    autotune: Union[bool, str, Sequence[float]] = 'auto'
    max_sample_age: Optional[int] = None
    fit_gpu_cache: bool = True
    #: Instrumentation (:mod:`pyg_orch.offload.testing` only).
    work_hook: Optional[WorkHook] = field(init=False, default=None,
                                          repr=False, compare=False)
    #: Instrumentation: replaces :func:`time.perf_counter`.
    autotune_clock: Optional[Callable[[], float]] = field(
        init=False, default=None, repr=False, compare=False)
    #: Whether the hot-set size is decided by measurement (resolved).
    measure: bool = field(init=False, default=False)
    #: Whether :obj:`hot_ratio` was given.
    hot_ratio_given: bool = field(init=False, default=False)
    #: The training processes sharing this machine's cores.
    local_world_size: int = field(init=False, default=1)
    #: This process's share of the CPU cores.
    cpu_cores: int = field(init=False, default=1)

    def __post_init__(self) -> None:
        autotune = _check_autotune(self.autotune)
        given = self.hot_ratio is not None
        hot = _check_ratio('hot_ratio', self.hot_ratio if given else
                           DEFAULT_HOT_RATIO)
        measure = autotune is not False and (autotune != 'auto' or
                                             not given)
        if measure and hot == 'auto':
            raise ValueError("'autotune' measures hot-set sizes around a "
                             "number 'hot_ratio'; hot_ratio='auto' grows "
                             "the hot set instead (pass autotune=False)")
        cache = _check_ratio('cache_ratio', self.cache_ratio)
        if 'auto' not in (hot, cache) and hot + cache > 1.0 + 1e-9:
            raise ValueError(f"'hot_ratio' + 'cache_ratio' must not "
                             f"exceed 1 (got {hot} + {cache})")
        check_int('max_staleness', self.max_staleness, 0)
        age = self.max_sample_age
        if age is None:
            age = max(self.max_staleness, DEFAULT_MAX_SAMPLE_AGE)
        check_int('max_sample_age', age, 0)
        check_choice('refresh', self.refresh, ('super_batch', 'batch'))
        check_choice('replace_rows', self.replace_rows, ('pruned', 'all'))
        ranks = local_ranks()
        num_threads = check_int(
            'num_threads', default_num_threads(ranks)
            if self.num_threads is None else self.num_threads, 1)
        intra = check_int(
            'intra_op_threads', default_intra_op_threads(num_threads, ranks)
            if self.intra_op_threads is None else self.intra_op_threads, 1)
        check_autocast_dtype('cpu_autocast', self.cpu_autocast)
        for name in ('chunk_size', 'super_batch_size',
                     'num_presample_batches'):
            check_int(name, getattr(self, name), 1, optional=True)
        check_seconds('idle_timeout', self.idle_timeout)
        if self.seed is not None and (isinstance(self.seed, bool)
                                      or not isinstance(self.seed, int)):
            raise ValueError(f"'seed' must be an integer or None (got "
                             f"{self.seed!r})")
        full = check_bool('full_neighbors', self.full_neighbors,
                          also=('auto', ))
        compensate = check_bool('compensate_degrees',
                                self.compensate_degrees, also=('auto', ))
        check_split(self.split)
        check_bool('fit_gpu_cache', self.fit_gpu_cache)
        seed = DEFAULT_SEED if self.seed is None else self.seed
        for name, value in (('hot_ratio', hot), ('cache_ratio', cache),
                            ('seed', seed),
                            ('num_threads', num_threads),
                            ('intra_op_threads', intra),
                            ('autotune', autotune), ('measure', measure),
                            ('full_neighbors', full),
                            ('compensate_degrees', compensate),
                            ('hot_ratio_given', given),
                            ('max_sample_age', age),
                            ('local_world_size', ranks),
                            ('cpu_cores', cpu_cores_per_rank(ranks))):
            object.__setattr__(self, name, value)

    @property
    def auto_hot(self) -> bool:
        r"""Whether the hot set is sized by measured throughput."""
        return self.hot_ratio == 'auto'

    def __repr__(self) -> str:
        changed = [
            f'{f.name}={getattr(self, f.name)!r}' for f in fields(self)
            if f.init and getattr(self, f.name) != f.default
        ]
        return f"{self.__class__.__name__}({', '.join(changed)})"


def with_test_hooks(options: OffloadOptions,
                    work_hook: Optional[WorkHook] = None,
                    autotune_clock: Optional[Callable[[], float]] = None
                    ) -> OffloadOptions:
    r"""A copy of :obj:`options` with instrumentation hooks, checked."""
    check_callable('work_hook', work_hook)
    check_callable('autotune_clock', autotune_clock)
    out = copy.copy(options)
    object.__setattr__(out, 'work_hook', work_hook)
    object.__setattr__(out, 'autotune_clock', autotune_clock)
    return out


#: Deprecated keywords, to the option each one sets.
RENAMED = {'gpu_cache_ratio': 'cache_ratio'}
#: Deprecated keywords that are no options.
TEST_HOOKS = ('work_hook', 'autotune_clock')


def options_from_keywords(options: Optional[OffloadOptions],
                          kwargs: Dict[str, Any]) -> OffloadOptions:
    r"""The options from :obj:`options` or deprecated keywords."""
    if options is not None and not isinstance(options, OffloadOptions):
        raise TypeError(f"'options' must be a pyg_orch.offload."
                        f"OffloadOptions (got {type(options).__name__})")
    names = {f.name for f in fields(OffloadOptions) if f.init}
    given: Dict[str, Any] = {}
    hooks: Dict[str, Any] = {}
    for key, value in kwargs.items():
        name = RENAMED.get(key, key)
        if key in TEST_HOOKS:
            new = (f'pyg_orch.offload.testing.offload_hooks({key}=...) '
                   f'around the construction')
        elif name in names:
            new = f'options=OffloadOptions({name}={value!r})'
        else:
            raise TypeError(f"BottomLayerOffload() got an unexpected "
                            f"keyword argument {key!r}")
        if options is not None:
            raise ValueError(f"'{key}' and 'options' were both given; "
                             f"pass {new} only")
        warn_renamed(key, new, stacklevel=4)
        (hooks if key in TEST_HOOKS else given)[name] = value
    if options is None:
        options = OffloadOptions(**given)
    if hooks:
        options = with_test_hooks(options, **hooks)
    return options
