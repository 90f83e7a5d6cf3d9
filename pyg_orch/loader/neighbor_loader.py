"""A drop-in replacement for PyG's
:class:`~torch_geometric.loader.NeighborLoader`."""
import copy
from typing import Any, Callable, Dict, Iterator, Optional, Union

import torch
from torch_geometric.data import Data
from torch_geometric.loader.node_loader import NodeLoader
from torch_geometric.sampler import BaseSampler
from torch_geometric.sampler.base import SubgraphType

from pyg_orch.core.topology import GraphTopology
from pyg_orch.gpu.feature_store import TieredFeatureStore
from pyg_orch.loader.assemble import DataAssembler
from pyg_orch.loader.features import build_feature_store
from pyg_orch.loader.lookahead import LookaheadIterator
from pyg_orch.loader.prefetch import PrefetchIterator
from pyg_orch.loader.stats import StageTimer, TimedIterator
from pyg_orch.loader.validation import (
    check_data,
    check_input_nodes,
    check_input_time,
    check_loader_kwargs,
    check_pipeline_args,
    check_temporal_args,
)
from pyg_orch.sampling.arguments import check_choice, resolve_device
from pyg_orch.sampling.contract import LaunchingSampler
from pyg_orch.sampling.pending import PendingSample
from pyg_orch.sampling.sampler import HybridNeighborSampler
from pyg_orch.typing import (
    DeviceLike,
    GraphData,
    InputNodes,
    NumNeighborsType,
    OptTensor,
    SeedLike,
)


class HybridNeighborLoader(NodeLoader):
    r"""A drop-in replacement for PyG's
    :class:`~torch_geometric.loader.NeighborLoader`: same arguments, same
    mini-batches, with neighbor sampling by vectorized PyTorch ops on the CPU
    or the GPU (no :obj:`pyg-lib` or :obj:`torch-sparse` needed).

    .. code-block:: python

        from pyg_orch import HybridNeighborLoader

        loader = HybridNeighborLoader(data, num_neighbors=[15, 10, 5],
                                      batch_size=1024, shuffle=True,
                                      input_nodes=data.train_mask)
        for batch in loader:
            out = model(batch.x, batch.edge_index)[:batch.batch_size]

    Every batch carries :obj:`n_id`, :obj:`e_id`, :obj:`input_id`,
    :obj:`batch_size`, :obj:`num_sampled_nodes` and :obj:`num_sampled_edges`
    (and :obj:`batch` if :obj:`disjoint=True`), with nodes in PyG's hop order,
    so :func:`~torch_geometric.utils.trim_to_layer` works. As in PyG,
    :obj:`subgraph_type='bidirectional'` drops both counts and
    :obj:`'induced'` drops :obj:`num_sampled_edges`, since edges are then no
    longer grouped by hop.

    Args:
        data (Data or HeteroData or Tuple[FeatureStore, GraphStore]): The
            graph.
        num_neighbors (List[int] or Dict[Tuple[str, str, str], List[int]]):
            The number of neighbors to sample per hop (:obj:`-1` for all), or
            per edge type.
        input_nodes (torch.Tensor or str or Tuple[str, torch.Tensor]): Seed
            nodes as indices or a boolean mask; :obj:`None` for all nodes; for
            heterogeneous graphs a node type or a (node type, indices) tuple.
        input_time (torch.Tensor, optional): Time of every seed for temporal
            sampling; defaults to the seeds' own node times.
        replace (bool): Sample with replacement. (default: :obj:`False`)
        subgraph_type (str): :obj:`'directional'`, :obj:`'bidirectional'` or
            :obj:`'induced'`. (default: :obj:`'directional'`)
        disjoint (bool): Give every seed its own subgraph.
            (default: :obj:`False`)
        temporal_strategy (str): :obj:`'uniform'` or :obj:`'last'` (the most
            recent neighbors). (default: :obj:`'uniform'`)
        time_attr (str, optional): A node-level or edge-level time attribute:
            neighbors are never later than their seed (temporal sampling,
            which implies :obj:`disjoint=True`, as in PyG).
        weight_attr (str, optional): An edge attribute of non-negative
            sampling weights.
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
        device (torch.device or str, optional): Where sampling runs and
            batches land; CUDA when available, else CPU.
        seed (int or torch.Generator, optional): Makes sampling and
            shuffling reproducible.
        topology (GraphTopology, optional): A topology to share with other
            loaders (see :attr:`topology`); built from :obj:`data` if not set.
        backend (str): Sampling kernels: :obj:`'triton'`, :obj:`'torch'` or
            :obj:`'auto'` (see :class:`~pyg_orch.HybridNeighborSampler`).
        topology_placement (str): On CUDA, :obj:`'device'`, :obj:`'host'`
            (pinned, read zero-copy) or :obj:`'auto'`.
        feature_store (str or TieredFeatureStore, optional): On CUDA with
            node features :obj:`x` in host memory, :obj:`'auto'` serves them
            from a :class:`~pyg_orch.gpu.TieredFeatureStore` (hot rows cached
            on the GPU, the rest read from pinned memory, rows of the previous
            batch reused); pass one to share it between loaders, or
            :obj:`None` to gather on the CPU and copy, as PyG does.
        gpu_memory_budget (int or float or str): GPU memory for the feature
            cache: bytes, a fraction of free memory, or :obj:`'auto'` (a
            quarter of free memory). Features that fit are cached whole.
        gpu_cache_ratio (float, optional): Cache at most this fraction of the
            rows.
        cache_policy (str): Rank rows to cache by :obj:`'frequency'` (node
            appearances in pre-sampled batches) or :obj:`'degree'` (the
            out-degree: how often a node can be drawn as a neighbor).
        lookahead (bool, optional): Keep the next batch in flight on a side
            CUDA stream, in the training loop's thread: the host queues the
            next training step without waiting for sampling, and feature
            gathering overlaps the running step (see
            :class:`~pyg_orch.loader.LookaheadIterator`). Batches are the
            same; one extra batch is sampled when the loop stops early.
            :obj:`None` turns it on where it pays: CUDA, the fused Triton
            sampler, :obj:`num_workers=0` and :obj:`prefetch=0`.
            (default: :obj:`None`)
        prefetch (int): Batches sampled and gathered ahead by a background
            thread on its own CUDA stream. Off by default: both threads share
            Python's interpreter lock, so with a typical GNN training step it
            is slower than :obj:`lookahead` (see :obj:`benchmarks/README.md`);
            it pays when sampling and gathering take long next to a training
            step that leaves the interpreter free. (default: :obj:`0`)
        **kwargs (optional): Arguments of
            :class:`torch.utils.data.DataLoader`, such as :obj:`batch_size`,
            :obj:`shuffle`, :obj:`drop_last` or :obj:`num_workers`.
    """
    def __init__(
        self,
        data: GraphData,
        num_neighbors: NumNeighborsType,
        input_nodes: InputNodes = None,
        input_time: OptTensor = None,
        replace: bool = False,
        subgraph_type: Union[SubgraphType, str] = 'directional',
        disjoint: bool = False,
        temporal_strategy: str = 'uniform',
        time_attr: Optional[str] = None,
        weight_attr: Optional[str] = None,
        transform: Optional[Callable] = None,
        transform_sampler_output: Optional[Callable] = None,
        is_sorted: bool = False,
        filter_per_worker: Optional[bool] = None,
        neighbor_sampler: Optional[BaseSampler] = None,
        directed: bool = True,
        device: DeviceLike = None,
        seed: SeedLike = None,
        topology: Optional[GraphTopology] = None,
        backend: str = 'auto',
        topology_placement: str = 'auto',
        feature_store: Union[None, str, TieredFeatureStore] = 'auto',
        gpu_memory_budget: Union[None, int, float, str] = 'auto',
        gpu_cache_ratio: Optional[float] = None,
        cache_policy: str = 'frequency',
        lookahead: Optional[bool] = None,
        prefetch: int = 0,
        **kwargs,
    ):
        check_temporal_args(input_time, time_attr, temporal_strategy,
                            weight_attr)
        check_data(data)
        self.device = resolve_device(device)
        check_loader_kwargs(kwargs, self.device)
        check_pipeline_args(prefetch, lookahead, kwargs.get('num_workers', 0))
        input_nodes = check_input_nodes(data, input_nodes)
        input_time = check_input_time(input_time, input_nodes, data)

        if neighbor_sampler is None:
            neighbor_sampler = HybridNeighborSampler(
                data,
                num_neighbors=num_neighbors,
                subgraph_type=subgraph_type,
                replace=replace,
                disjoint=disjoint,
                temporal_strategy=temporal_strategy,
                time_attr=time_attr,
                weight_attr=weight_attr,
                is_sorted=is_sorted,
                share_memory=kwargs.get('num_workers', 0) > 0,
                directed=directed,
                device=self.device,
                seed=seed,
                topology=topology,
                backend=backend,
                topology_placement=topology_placement,
            )
        if (seed is not None and 'generator' not in kwargs
                and kwargs.get('shuffle', False)
                and kwargs.get('sampler') is None):
            gen = torch.Generator()
            gen.manual_seed(seed if isinstance(seed, int) else
                            seed.initial_seed())
            kwargs['generator'] = gen

        self.timer = StageTimer(self.device)
        self.prefetch = prefetch
        super().__init__(
            data=data,
            node_sampler=neighbor_sampler,
            input_nodes=input_nodes,
            input_time=input_time,
            transform=None,  # Applied after the move to `device`.
            transform_sampler_output=transform_sampler_output,
            filter_per_worker=filter_per_worker,
            **kwargs,
        )
        self.batch_transform = transform
        self._batch_hooks: Dict[int, Callable] = {}
        self._sampled_hooks: Dict[int, Callable] = {}
        self.feature_store = build_feature_store(
            feature_store, self.data, self.node_sampler, self.device,
            self.input_data, self.batch_size, self.timer, gpu_memory_budget,
            gpu_cache_ratio, cache_policy)
        self._assembler: Optional[DataAssembler] = None
        launching = isinstance(self.node_sampler, LaunchingSampler)
        if lookahead is None:
            lookahead = (self.device.type == 'cuda' and prefetch == 0
                         and self.num_workers == 0 and launching
                         and self.node_sampler.launches_async)
        elif lookahead and not launching:
            raise ValueError("'lookahead=True' needs a sampler with "
                             "'launch_from_nodes', such as a "
                             "HybridNeighborSampler (see "
                             "pyg_orch.sampling.LaunchingSampler)")
        self.lookahead = bool(lookahead)
        # Synchronizing around every stage would undo the look-ahead.
        self.timer.sync = not self.lookahead

    def register_batch_hook(self, hook: Callable,
                            when: str = 'received') -> Callable[[], None]:
        r"""Calls :obj:`hook(batch)` on every mini-batch when the training
        loop receives it (after it was moved to :obj:`device` and
        transformed), or, with :obj:`when='sampled'`, calls
        :obj:`hook(sampler_output)` as soon as a batch's
        :class:`~torch_geometric.sampler.SamplerOutput` is known, before its
        features are gathered: with look-ahead that is one batch before the
        loop receives it. Sampled hooks run in the thread that samples
        (the loop's own, unless :obj:`prefetch > 0`), in the main process
        only, with the sampling stream current. Returns a function that
        removes the hook."""
        check_choice('when', when, ('received', 'sampled'))
        hooks = self._batch_hooks if when == 'received' else \
            self._sampled_hooks
        key = id(hook)
        hooks[key] = hook

        def remove() -> None:
            hooks.pop(key, None)

        return remove

    def _run_sampled_hooks(self, out: Any) -> None:
        for hook in list(self._sampled_hooks.values()):
            hook(out)

    @property
    def topology(self) -> Optional[GraphTopology]:
        r"""The graph topology used for sampling; pass it as
        :obj:`topology` to other loaders over the same graph."""
        if isinstance(self.node_sampler, LaunchingSampler):
            return self.node_sampler.topology
        return None

    def stats(self) -> Dict[str, Any]:
        r"""What the loader did since the last :meth:`reset_stats`:

        * :obj:`'stages'`: time per stage (:obj:`'sample'`, :obj:`'gather'`,
          :obj:`'transfer'`, :obj:`'wait'`, and any stage timed by the
          caller through :obj:`loader.timer.stage(name)`). With
          :obj:`num_workers > 0` or :obj:`prefetch > 0`, sampling and
          gathering overlap training; :obj:`'wait'` is what the training
          loop still waited. With :obj:`lookahead`, the timer does not
          synchronize the device (see :class:`~pyg_orch.StageTimer`): each
          stage is charged the host time spent in it, while device work
          overlaps; set :obj:`loader.timer.sync = True` to charge device
          time instead, at the cost of the overlap.
        * :obj:`'features'`: rows served per tier, cache hit rate and bytes
          moved from host to device per batch (with a feature store).
        * :obj:`'memory'`: GPU bytes held by the topology and the cache.
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
        return out

    def set_gpu_cache_nodes(self, nodes: torch.Tensor) -> bool:
        r"""Caches the features of :obj:`nodes` on the GPU (within the feature
        store's budget), e.g. the candidates chosen by
        :class:`pyg_orch.BottomLayerOffload`. Returns :obj:`False` when the
        loader uses no feature store (features already on the device, or a
        CPU device)."""
        if self.feature_store is None:
            return False
        self.feature_store.set_cached_nodes(nodes)
        return True

    def reset_stats(self) -> None:
        r"""Clears the stage times and the feature store counters."""
        self.timer.reset()
        if self.feature_store is not None:
            self.feature_store.reset_stats()

    def _in_main_process(self) -> bool:
        return torch.utils.data.get_worker_info() is None

    def collate_fn(self, index) -> Any:
        if not self._in_main_process():
            return super().collate_fn(index)
        input_data = self.input_data[index]
        with self.timer.stage('sample'):
            out = self.node_sampler.sample_from_nodes(input_data)
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
                data = data.to(self.device, non_blocking=True)
        else:
            data = self._gather(out)
        if self.batch_transform is not None:
            data = self.batch_transform(data)
        return data

    def _gather(self, out) -> Any:
        if self._in_main_process() and isinstance(self.data, Data) and (
                self.feature_store is not None or self._data_on_device()):
            if self._assembler is None:
                self._assembler = DataAssembler(
                    self.data, self.device, None if self.feature_store is None
                    else self.feature_store.gather)
            if self.transform_sampler_output is not None:
                out = self.transform_sampler_output(out)
            return self._assembler(out)
        # PyG slices features where they live; indices follow them there.
        if not self._data_on_device():
            out = _to_cpu(out)
        return super().filter_fn(out)

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

    def _launch_batches(self) -> Iterator[PendingSample]:
        indices = iter(self._index_sampler)
        # Draw what DataLoader's own iterator draws, so that shuffling gives
        # the same batches with and without look-ahead:
        torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        dataset = self.dataset
        plain = isinstance(dataset, range) and dataset.start == 0 and \
            dataset.step == 1
        for index in indices:
            if not plain:
                index = [dataset[i] for i in index]
            input_data = self.input_data[torch.tensor(index)]
            with self.timer.stage('sample'):
                pending = self.node_sampler.launch_from_nodes(input_data)
            yield pending

    def _finish_batch(self, pending: PendingSample) -> Any:
        with self.timer.stage('sample'):
            out = pending.result()
        self._run_sampled_hooks(out)
        return self.filter_fn(out)

    def _get_iterator(self):
        if self.lookahead and self._auto_collation:
            it = LookaheadIterator(self._launch_batches(), self._finish_batch,
                                   self.device)
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
