"""What both hybrid loaders share (:class:`HybridLoaderMixin`)."""
import copy
import functools
import logging
import os
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
from torch import Tensor
from torch.utils.data import DistributedSampler
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import EdgeSamplerInput

from pyg_orch.topology.sparse_adj import has_adj_t
from pyg_orch.features.cache_fit import CacheFit, GpuMemory
from pyg_orch.features.hetero_tiered import HeteroTieredFeatureStore
from pyg_orch.loader.assemble import (
    DataAssembler,
    check_edge_attrs,
    move_to_device,
)
from pyg_orch.loader.features import Counts, build_feature_store
from pyg_orch.loader.lookahead import LookaheadIterator
from pyg_orch.loader.options import CacheOptions
from pyg_orch.loader.partition_folder import partition_batches
from pyg_orch.loader.prefetch import PrefetchIterator
from pyg_orch.loader.seed_batches import input_seeds, tensor_index_batches
from pyg_orch.loader.stats import StageTimer, TimedIterator
from pyg_orch.core.checks import check_data, check_int
from pyg_orch.parallel.ddp import DistributedSeedSplit
from pyg_orch.loader.validation import (
    check_loader_kwargs,
    check_pipeline_args,
    check_temporal_args,
)
from pyg_orch.sampling.arguments import (
    check_bool,
    check_callable,
    check_choice,
    resolve_device,
)
from pyg_orch.sampling.contract import LaunchingSampler
from pyg_orch.sampling.pending import PendingSample
from pyg_orch.sampling.sampler import HybridNeighborSampler
from pyg_orch.typing import DeviceLike, GraphData

logger = logging.getLogger('pyg_orch.loader')


def check_common_args(
    data: GraphData,
    device: DeviceLike,
    kwargs: dict,
    prefetch: Any,
    lookahead: Any,
    input_time: Any = None,
    time_attr: Optional[str] = None,
    temporal_strategy: str = 'uniform',
    weight_attr: Optional[str] = None,
) -> torch.device:
    r"""Checks the arguments both loaders take; returns the device."""
    check_temporal_args(input_time, time_attr, temporal_strategy,
                        weight_attr)
    check_data(data)
    check_edge_attrs(data)
    device = resolve_device(device)
    check_loader_kwargs(kwargs, device)
    check_pipeline_args(prefetch, lookahead, kwargs.get('num_workers', 0))
    return device


#: The Args both loaders document last (appended to their docstrings, which
#: end in an indented line).
LOADER_ARGS_DOC = r'''    weight_attr (str, optional): An edge attribute of
            non-negative sampling weights.
        transform (callable, optional): Applied to every mini-batch after it
            was moved to :obj:`device`.
        transform_sampler_output (callable, optional): Applied to the
            :class:`~torch_geometric.sampler.SamplerOutput`.
        is_sorted (bool): :obj:`edge_index` is already sorted by destination
            (checked). (default: :obj:`False`)
        filter_per_worker (bool, optional): Assemble batches in the worker
            processes, as in PyG.
        neighbor_sampler (BaseSampler, optional): A sampler to use instead of
            building a :class:`~pyg_orch.HybridNeighborSampler`.
        directed (bool): Deprecated; :obj:`False` means
            :obj:`subgraph_type='induced'`.
        device (torch.device or str, optional): Where sampling (negatives
            included) runs and batches land; CUDA when available, else CPU.
        seed (int or torch.Generator, optional): Makes sampling (negatives
            included) and shuffling reproducible.
        topology (GraphTopology, optional): A topology to share with other
            loaders (see :attr:`topology`); built from :obj:`data` if not set.
        placement (PlacementOptions, optional): Where the topology lives
            (on CUDA: on the device, in pinned host memory, or sharded
            across the machine's processes, see :doc:`/multi_gpu`) and
            which kernels sample (see :class:`~pyg_orch.PlacementOptions`).
            (default: :obj:`PlacementOptions()`)
        cache (CacheOptions, optional): On CUDA with node features :obj:`x`
            in host memory, the GPU cache that serves them, rows ranked by
            their accesses in pre-sampled batches (see
            :class:`~pyg_orch.CacheOptions`); :obj:`CacheOptions(store=None)`
            gathers on the CPU and copies, as PyG does.
            (default: :obj:`CacheOptions()`)
        lookahead (bool, optional): Keep the next batch in flight on side
            CUDA streams, in the training loop's thread (see
            :class:`~pyg_orch.loader.LookaheadIterator`); batches are the
            same. :obj:`None`: on where it pays (CUDA, :obj:`num_workers=0`,
            :obj:`prefetch=0`). (default: :obj:`None`)
        prefetch (int): Batches sampled and gathered ahead by a background
            thread on its own CUDA stream. (default: :obj:`0`)
        **kwargs (optional): Arguments of
            :class:`torch.utils.data.DataLoader`, such as :obj:`batch_size`,
            :obj:`shuffle`, :obj:`drop_last` or :obj:`num_workers`; old
            keywords such as :obj:`backend` warn and fill :obj:`placement`
            and :obj:`cache`.
    '''

#: The loaders' arguments that go to `HybridNeighborSampler` as they are.
_SAMPLER_ARGS = ('num_neighbors', 'subgraph_type', 'replace', 'disjoint',
                 'temporal_strategy', 'time_attr', 'weight_attr', 'is_sorted',
                 'directed', 'topology')


class HybridLoaderMixin:
    r"""The behavior both hybrid loaders share, mixed in front of PyG's
    :class:`NodeLoader` or :class:`LinkLoader`."""
    device: torch.device
    timer: StageTimer
    #: Whether batches are prepared by a :class:`LookaheadIterator`.
    lookahead = False
    #: Over a partition folder: the
    #: :class:`~pyg_orch.loader.partition_pipeline.PartitionBatches` that build
    #: the batches (else :obj:`None`).
    partition_batches: Optional[Any] = None

    # To implement ############################################################

    @property
    def _sampler(self) -> Any:
        r"""The loader's sampler."""
        raise NotImplementedError

    def _sample_batch(self, input_data: Any) -> Any:
        r"""Samples the batch of :obj:`input_data`."""
        raise NotImplementedError

    def _count_access(self) -> Counts:
        r"""Access counts per node (per node type) in pre-sampled batches, the
        sampler's random state left as it was."""
        raise NotImplementedError

    def _add_metadata(self, data: Any, out: Any) -> Any:
        r"""Adds the loader's bookkeeping from :obj:`out.metadata` to an
        assembled batch."""
        raise NotImplementedError

    def _partition_inputs(self, batches: Any) -> Dict[str, Any]:
        r"""The PyG base class's seed and sampler arguments for
        :obj:`batches` (a :class:`PartitionBatches`)."""
        raise NotImplementedError

    # Set-up ##################################################################

    def _partitioned(self, data: Any, arguments: Dict[str, Any]) -> bool:
        # Whether `data` is partitioned (a folder or its stores); then the
        # loader delivers the batches of `PartitionBatches` built from its
        # `arguments` (its `locals()`, `kwargs` merged in).
        if not isinstance(data, (str, os.PathLike, tuple, list)):
            return False
        args = {k: v for k, v in arguments.items()
                if k not in ('self', 'data', 'kwargs', '__class__')}
        batches = partition_batches(data, {**args, **arguments['kwargs']})
        if batches is not None:
            self._init_partitioned(batches)
        return batches is not None

    def _init_partitioned(self, batches: Any) -> None:
        # PyG's base class over the partition's stores; batches built by
        # `batches`, in threads (`num_workers`) rather than processes.
        self.partition_batches = batches
        self._init_pipeline(batches.device, batches.prefetch)
        super().__init__(data=(batches.feature_store, batches.graph_store),
                         batch_size=batches.batch_size,
                         **self._partition_inputs(batches))
        self.num_workers = batches.num_workers
        self._init_batches(None, CacheOptions(store=None))
        self._init_lookahead(False)
        self._batch_hooks = batches.batch_hooks  # Run by `batches`.
        self._sampled_hooks = batches.sampled_hooks

    def _in_memory_sampler(self, args: Dict[str, Any],
                           device: torch.device) -> Any:
        # The loader's `neighbor_sampler`, or a `HybridNeighborSampler` from
        # its `args` (its `locals()`; the topology in shared memory for
        # worker processes); with a seed, a seeded shuffling generator for
        # the DataLoader (unless it has one or a sampler of its own).
        sampler, kwargs, seed = (args['neighbor_sampler'], args['kwargs'],
                                 args['seed'])
        if sampler is None:
            sampler = HybridNeighborSampler(
                args['data'], share_memory=kwargs.get('num_workers', 0) > 0,
                device=device, seed=seed, backend=args['placement'].backend,
                topology_placement=args['placement'].topology,
                **{k: args[k] for k in _SAMPLER_ARGS})
        if (seed is not None and 'generator' not in kwargs
                and kwargs.get('shuffle', False)
                and kwargs.get('sampler') is None):
            kwargs['generator'] = torch.Generator().manual_seed(
                seed if isinstance(seed, int) else seed.initial_seed())
        self._init_pipeline(device, args['prefetch'])
        return sampler

    def _init_pipeline(self, device: torch.device, prefetch: int) -> None:
        self.device = device
        self.timer = StageTimer(device)
        self.prefetch = prefetch

    def _init_lookahead(self, lookahead: Optional[bool],
                        pays: bool = True) -> None:
        # `lookahead=None` turns it on where it pays: CUDA, no worker
        # processes, no prefetch thread, and whatever the loader adds
        # (`pays`). Synchronizing around every stage would undo it.
        if lookahead is None:
            lookahead = (self.device.type == 'cuda' and self.prefetch == 0
                         and self.num_workers == 0 and pays)
        self.lookahead = bool(lookahead)
        self.timer.sync = not self.lookahead

    def _init_batches(self, transform: Optional[Callable],
                      cache: CacheOptions) -> None:
        check_callable('transform', transform)
        check_callable('transform_sampler_output',
                       self.transform_sampler_output)
        check_bool('filter_per_worker', self.filter_per_worker)
        self.batch_transform = transform
        self._batch_hooks: Dict[int, Callable] = {}
        self._sampled_hooks: Dict[int, Callable] = {}
        #: The loader's :class:`~pyg_orch.CacheOptions`.
        self.cache_options = cache
        self.feature_store = build_feature_store(
            cache, self.data, self._sampler, self.device,
            self._count_access, self.timer)
        self._assembler: Optional[DataAssembler] = None
        self._assembler_key: Optional[tuple] = None

    # Public API ##############################################################

    def register_batch_hook(self, hook: Callable,
                            when: str = 'received') -> Callable[[], None]:
        r"""Calls :obj:`hook(batch)` on every mini-batch when the training
        loop receives it (after the move to :obj:`device` and the
        transform), or, with :obj:`when='sampled'`,
        :obj:`hook(sampler_output)` as soon as a batch is sampled, before
        its features are gathered (in the thread that samples, in the main
        process only). Returns a function that removes the hook."""
        check_choice('when', when, ('received', 'sampled'))
        hooks = self._batch_hooks if when == 'received' else \
            self._sampled_hooks
        hooks[id(hook)] = hook
        return lambda: hooks.pop(id(hook), None)

    def _run_sampled_hooks(self, out: Any) -> None:
        for hook in list(self._sampled_hooks.values()):
            hook(out)

    @property
    def topology(self) -> Any:
        r"""The :class:`~pyg_orch.GraphTopology` sampled, to pass to other
        loaders over the same graph."""
        if isinstance(self._sampler, LaunchingSampler):
            return self._sampler.topology
        return None

    def stats(self) -> Dict[str, Any]:
        r"""What the loader did since the last :meth:`reset_stats`:

        * :obj:`'stages'`: time per stage (:obj:`'sample'`, :obj:`'gather'`,
          :obj:`'transfer'`, :obj:`'wait'`, and any stage timed through
          :obj:`loader.timer.stage(name)`; see :class:`~pyg_orch.StageTimer`).
        * :obj:`'features'`: rows served per tier, cache hit rate and bytes
          moved from host to device (per type under :obj:`'per_type'`).
        * :obj:`'memory'`: GPU bytes held by the topology and the cache.
        * :obj:`'topology_reads'` (sharded topology only): neighbors read
          from this rank's shard, from copies, and from peers' shards.
        * :obj:`'batches'` (partitioned graph only): :attr:`batch_stats`.
        """
        out: Dict[str, Any] = {'stages': self.timer.summary()}
        fs = self.feature_store
        out['features'] = None if fs is None else fs.stats.as_dict()
        topo = self.topology
        out['memory'] = {
            'topology_bytes': topo.nbytes() if topo is not None else 0,
            'topology_on_gpu': topo is not None
            and topo.device.type == 'cuda',
            'feature_cache_bytes': fs.gpu_bytes() if fs is not None else 0,
            'feature_cache_rows': fs.num_cached if fs is not None else 0,
        }
        if isinstance(fs, HeteroTieredFeatureStore):
            out['memory']['feature_cache_rows_per_type'] = \
                fs.num_cached_per_type
        if topo is not None and topo.is_sharded:
            out['topology_reads'] = topo.read_counts()
        if self.partition_batches is not None:
            out['batches'] = list(self.batch_stats)
        return out

    @property
    def batch_stats(self) -> List[Dict[str, int]]:
        r"""Over a partitioned graph, per batch of the epoch: rows read from
        the part, the cache and other parts, and remote requests."""
        if self.partition_batches is None:
            return []
        return self.partition_batches.batch_stats

    def set_gpu_cache_nodes(self, nodes: Tensor) -> bool:
        r"""Caches the features of :obj:`nodes` on the GPU (within the feature
        store's budget; a dictionary per node type for heterogeneous
        graphs); a collective with a
        :class:`~pyg_orch.features.sharded.ShardedFeatureStore`. Returns
        :obj:`False` when the loader uses no feature store or one whose
        rows are fixed."""
        if self.feature_store is None or not getattr(
                self.feature_store, 'can_set_cached_nodes', True):
            return False
        self.feature_store.set_cached_nodes(nodes)
        return True

    def get_gpu_cache_nodes(self) -> Optional[Any]:
        r"""The nodes whose features are cached on the GPU, as
        :meth:`set_gpu_cache_nodes` takes them (:obj:`None` without a
        feature store)."""
        return getattr(self.feature_store, 'cached_nodes', None)

    def fit_gpu_cache(self, reserve: Optional[int] = None,
                      working_set: Optional[int] = None) -> CacheFit:
        r"""Grows the GPU feature cache into the GPU memory training has
        left free, hottest rows first: call it after a few training steps.
        It keeps free the most memory ever held above what is held now (the
        working set of a step, from :func:`torch.cuda.max_memory_allocated`)
        plus :obj:`reserve` bytes (default: the larger of 2 GiB and 5% of
        the GPU); :obj:`working_set` replaces the measured one where the
        caller knows it better (a step's own, without an earlier peak).
        With every row cached, no feature crosses the host link. Returns a
        :class:`~pyg_orch.gpu.CacheFit` (with the reason where the cache did
        not grow: no GPU, no feature store, no room).
        A cache split over GPUs (:obj:`PlacementOptions(topology='sharded')`)
        keeps its shards and copies further rows to this GPU (rows of
        peers' shards first): on each rank, no collective.
        :class:`~pyg_orch.offload.BottomLayerOffload` calls it once its
        decision is made (:obj:`OffloadOptions(fit_gpu_cache=False)` to
        not).
        """
        check_int('reserve', reserve, 0, optional=True)
        check_int('working_set', working_set, 0, optional=True)
        fs = self.feature_store
        if fs is None:
            return CacheFit(0, 0, 0, 0, None,
                            'the loader has no GPU feature store')
        before, total = fs.num_local, fs.num_rows
        if fs.device.type != 'cuda':
            return CacheFit(before, before, total, 0, None,
                            f'the cache is on {fs.device}, not a GPU')
        if before >= total:
            return CacheFit(before, before, total, 0, None,
                            'every row is cached already')
        memory = GpuMemory.of(fs.device)
        if working_set is None:
            working_set = memory.working_set
        room = memory.growth(reserve, working_set)
        start = fs.cached_bytes
        reason = None
        try:
            added = fs.grow_cache(room)
        except torch.OutOfMemoryError as exc:
            added, reason = 0, (f'the new rows could not be allocated; the '
                                f'cache is as it was ({exc})')
        if added == 0 and reason is None:
            reason = (f'no room: {room / 2**30:.2f} GiB may be added beside '
                      f'a working set of {working_set / 2**30:.2f} GiB')
        elif added > 0:
            logger.info('GPU feature cache grown from %d to %d of %d rows',
                        before, fs.num_local, total)
        return CacheFit(before, fs.num_local, total,
                        fs.cached_bytes - start, memory, reason, working_set)

    # Offload protocol (see pyg_orch.offload.protocol) ######################

    @property
    def offload_sampler(self) -> Any:
        r"""The sampler, for :class:`~pyg_orch.offload.BottomLayerOffload`
        (see :class:`~pyg_orch.offload.protocol.OffloadableLoader`)."""
        return self._sampler

    @property
    def offload_data(self) -> Optional[GraphData]:
        r"""The :class:`~torch_geometric.data.Data` or
        :class:`~torch_geometric.data.HeteroData` sampled from, else
        :obj:`None`."""
        return self.data if isinstance(self.data, (Data, HeteroData)) \
            else None

    @property
    def batches_ahead(self) -> int:
        r"""How many batches threads build ahead, at most."""
        if self.partition_batches is not None:
            return self.partition_batches.batches_ahead
        return int(self.prefetch)

    @property
    def gpu_cache_capacity(self) -> int:
        r"""How many feature rows the GPU cache can hold (summed over node
        types; :obj:`0` without a feature store)."""
        capacity = 0 if self.feature_store is None else \
            self.feature_store.capacity
        if isinstance(capacity, dict):
            return int(sum(capacity.values()))
        return int(capacity or 0)

    def offload_seeds(self) -> Tuple[Any, int]:
        r"""This process's training seeds (label edges' endpoints for link
        loaders; per node type) and how many a mini-batch holds."""
        if self.partition_batches is not None:
            return self.partition_batches.offload_seeds()
        inputs = self.input_data
        if isinstance(inputs, EdgeSamplerInput):
            return input_seeds(inputs, self.batch_size)
        seeds = inputs.node
        if seeds is None:  # All nodes:
            seeds = torch.arange(
                self._sampler.topology.num_nodes[inputs.input_type])
        if isinstance(self.sampler, (DistributedSeedSplit,
                                     DistributedSampler)):
            # This rank's share of the seeds (this epoch's):
            positions = torch.as_tensor(list(self.sampler), dtype=torch.long)
            if positions.numel() > 0:
                seeds = seeds[positions]
        return input_seeds(inputs, self.batch_size, seeds)

    def reset_stats(self) -> None:
        r"""Clears the stage times and the feature store counters."""
        self.timer.reset()
        if self.feature_store is not None:
            self.feature_store.reset_stats()
        topo = self.topology
        if topo is not None and topo.is_sharded:
            topo.reset_read_counts()

    # Batches #################################################################

    def _in_main_process(self) -> bool:
        return torch.utils.data.get_worker_info() is None

    def collate_fn(self, index) -> Any:
        if not self._in_main_process():
            return super().collate_fn(index)
        input_data = self.input_data[index]
        with self.timer.stage('sample'):
            out = self._sample_batch(input_data)
        self._run_sampled_hooks(out)
        if self.filter_per_worker:
            out = self.filter_fn(out)
        return out

    def filter_fn(self, out) -> Any:
        timed = self._in_main_process()
        if timed:
            with self.timer.stage('gather'):
                data = self._gather(out)
            with self.timer.stage('transfer'):
                # Non-blocking: a plain copy of e.g. `input_id` would wait
                # for everything queued on the stream.
                data = move_to_device(data, self.device)
        else:
            data = self._gather(out)
        if self.batch_transform is not None:
            data = self.batch_transform(data)
        return data

    def _gather(self, out) -> Any:
        main = self._in_main_process()
        fs = self.feature_store if main else None
        # Graphs with `adj_t` are always assembled here (PyG's `filter_fn`
        # handles SparseTensor only), where the data lives unless the
        # batch is built on `device`.
        adj_t = has_adj_t(self.data)
        hetero = isinstance(self.data, HeteroData)
        if hetero:
            on_device = isinstance(fs, HeteroTieredFeatureStore)
            features = {t: functools.partial(fs.gather, t)
                        for t in fs.node_types} if on_device else None
        else:
            on_device = isinstance(self.data, Data) and main and (
                fs is not None or self._data_on_device())
            features = None if fs is None else fs.gather
        if isinstance(self.data, (Data, HeteroData)) and (on_device or adj_t):
            assembler = self._assembler_for(on_device, lambda device: (
                DataAssembler(self.data, device, features,
                              self._sampler.edge_permutation if hetero
                              else None)))
        else:
            # PyG slices features where they live; indices follow them.
            if not self._data_on_device():
                out = _to_cpu(out)
            return super().filter_fn(out)
        if not on_device:
            out = _to_cpu(out)
        if self.transform_sampler_output is not None:
            out = self.transform_sampler_output(out)
        return self._add_metadata(assembler.subgraph(out), out)

    def _assembler_for(self, on_device: bool, build: Callable) -> Any:
        # One assembler per process and place: batches built on `device`
        # (main process), or on the CPU where the data lives.
        key = (on_device, self._in_main_process())
        if self._assembler is None or self._assembler_key != key:
            self._assembler = build(self.device if on_device else
                                    torch.device('cpu'))
            self._assembler_key = key
        return self._assembler

    def _data_on_device(self) -> bool:
        if not hasattr(self, '_data_device_cache'):
            devices = set()
            if isinstance(self.data, (tuple, list)):
                devices.add(torch.device('cpu'))
            else:
                for store in self.data.stores:
                    for value in store.values():
                        if isinstance(value, torch.Tensor):
                            devices.add(value.device)
            self._data_device_cache = devices == {self.device}
        return self._data_device_cache

    # Look-ahead ##############################################################

    def _slice_input(self, index: Tensor) -> Any:
        r"""The sampler input of the seeds at :obj:`index` (a slice of
        :obj:`self.input_data`)."""
        return self.input_data[index]

    def _launch_sample(self, input_data: Any) -> PendingSample:
        r"""Starts sampling the batch of :obj:`input_data` on the current
        stream (by default: samples it now)."""
        return PendingSample.ready(self._sample_batch(input_data))

    def _launch_batches(self) -> Iterator[PendingSample]:
        # Draw what DataLoader's own iterator draws, so that shuffling gives
        # the same batches with and without look-ahead:
        torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        dataset = self.dataset
        plain = isinstance(dataset, range) and dataset.start == 0 and \
            dataset.step == 1
        indices = tensor_index_batches(self._index_sampler) if plain else None
        if indices is None:
            indices = iter(self._index_sampler)
        for index in indices:
            if not plain:
                index = [dataset[i] for i in index]
            if not isinstance(index, torch.Tensor):
                index = torch.tensor(index)
            input_data = self._slice_input(index)
            with self.timer.stage('sample'):
                pending = self._launch_sample(input_data)
            yield pending

    def _resolve_batch(self, pending: PendingSample) -> PendingSample:
        # The sampled counts and the 'sampled' hooks, before the next batch
        # is launched (see LookaheadIterator).
        with self.timer.stage('sample'):
            out = pending.result()
        self._run_sampled_hooks(out)
        return PendingSample.ready(out)

    def _finish_batch(self, pending: PendingSample) -> Any:
        return self.filter_fn(pending.result())

    def __len__(self) -> int:
        if self.partition_batches is not None:  # The same on every rank.
            return len(self.partition_batches)
        return super().__len__()

    def _get_iterator(self):
        if self.partition_batches is not None:
            return iter(self.partition_batches)
        if self.lookahead and self._auto_collation:
            it = LookaheadIterator(self._launch_batches(), self._finish_batch,
                                   self.device, resolve=self._resolve_batch)
            return TimedIterator(it, self.timer, self._batch_hooks,
                                  in_thread=True)
        # Wrap (never unwrap) PyG's iterator: its `__del__` shuts the
        # workers down.
        it = super()._get_iterator()
        if self.prefetch > 0:
            it = PrefetchIterator(it, self.prefetch, self.device)
        return TimedIterator(it, self.timer, self._batch_hooks,
                              in_thread=self.prefetch == 0)

    def __repr__(self) -> str:
        return f'{self.__class__.__name__}(device={self.device})'


def _to_cpu(out):
    out = copy.copy(out)
    for name in ('node', 'row', 'col', 'edge', 'batch', 'orig_row',
                 'orig_col'):
        value = getattr(out, name, None)
        if isinstance(value, torch.Tensor):
            setattr(out, name, value.cpu())
        elif isinstance(value, dict):
            setattr(out, name, {
                k: v.cpu() if isinstance(v, torch.Tensor) else v
                for k, v in value.items()
            })
    return out
