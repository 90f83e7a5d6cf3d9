"""A drop-in replacement for PyG's
:class:`~torch_geometric.loader.NeighborLoader`."""
import time
from typing import Any, Callable, Dict, Optional, Union

import torch
from torch_geometric.loader.base import DataLoaderIterator
from torch_geometric.loader.node_loader import NodeLoader
from torch_geometric.sampler import BaseSampler

from pyg_orch.loader.stats import StageTimer
from pyg_orch.loader.validation import (
    check_data,
    check_input_nodes,
    check_loader_kwargs,
    check_input_time,
    check_temporal_args,
)
from pyg_orch.sampling.sampler import (
    HybridNeighborSampler,
    SeedLike,
    resolve_device,
)
from pyg_orch.sampling.topology import GraphTopology

_IN_PROCESS_STAGES = ('sample', 'gather', 'transfer')


class _TimedIterator(DataLoaderIterator):
    r"""Charges the time the training loop blocks on the next batch, less
    what the loader itself spent in this process, to :obj:`'wait'`."""
    def __init__(self, iterator, transform_fn: Callable, timer: StageTimer,
                 hooks: Dict[int, Callable]):
        super().__init__(iterator, transform_fn)
        self.timer = timer
        self.hooks = hooks

    def __next__(self) -> Any:
        before = sum(self.timer.total.get(s, 0.0) for s in _IN_PROCESS_STAGES)
        start = time.perf_counter()
        out = super().__next__()
        if torch.utils.data.get_worker_info() is None and self._from_worker:
            for hook in list(self.hooks.values()):
                hook(out)
        spent = time.perf_counter() - start
        inside = sum(self.timer.total.get(s, 0.0)
                     for s in _IN_PROCESS_STAGES) - before
        self.timer.add('wait', max(spent - inside, 0.0))
        self.timer.num_batches += 1
        return out


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
        **kwargs (optional): Arguments of
            :class:`torch.utils.data.DataLoader`, such as :obj:`batch_size`,
            :obj:`shuffle`, :obj:`drop_last` or :obj:`num_workers`.
    """
    def __init__(
        self,
        data,
        num_neighbors,
        input_nodes=None,
        input_time: Optional[torch.Tensor] = None,
        replace: bool = False,
        subgraph_type: str = 'directional',
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
        device: Union[None, str, torch.device] = None,
        seed: SeedLike = None,
        topology: Optional[GraphTopology] = None,
        backend: str = 'auto',
        topology_placement: str = 'auto',
        **kwargs,
    ):
        check_temporal_args(input_time, time_attr, temporal_strategy,
                            weight_attr)
        check_data(data)
        self.device = resolve_device(device)
        check_loader_kwargs(kwargs, self.device)
        input_nodes = check_input_nodes(data, input_nodes)
        input_time = check_input_time(input_time, input_nodes)

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

    def register_batch_hook(self, hook: Callable) -> Callable[[], None]:
        r"""Calls :obj:`hook(batch)` on every mini-batch, in the main process,
        after it was moved to :obj:`device` and transformed. Returns a
        function that removes the hook."""
        key = id(hook)
        self._batch_hooks[key] = hook

        def remove() -> None:
            self._batch_hooks.pop(key, None)

        return remove

    @property
    def topology(self) -> Optional[GraphTopology]:
        r"""The graph topology used for sampling; pass it as
        :obj:`topology` to other loaders over the same graph."""
        return getattr(self.node_sampler, 'topology', None)

    def stats(self) -> Dict[str, Dict[str, float]]:
        r"""Time per stage (:obj:`'sample'`, :obj:`'gather'`,
        :obj:`'transfer'`, :obj:`'wait'`, and any stage timed by the caller
        through :obj:`loader.timer.stage(name)`) since the last
        :obj:`loader.timer.reset()`. With :obj:`num_workers > 0`, sampling
        and gathering happen in the workers and show up as :obj:`'wait'`."""
        return self.timer.summary()

    def _in_main_process(self) -> bool:
        return torch.utils.data.get_worker_info() is None

    def collate_fn(self, index) -> Any:
        if not self._in_main_process():
            return super().collate_fn(index)
        input_data = self.input_data[index]
        with self.timer.stage('sample'):
            out = self.node_sampler.sample_from_nodes(input_data)
        if self.filter_per_worker:
            out = self.filter_fn(out)
        return out

    def filter_fn(self, out) -> Any:
        timed = self._in_main_process()
        if timed:
            with self.timer.stage('gather'):
                data = self._gather(out)
            with self.timer.stage('transfer'):
                data = data.to(self.device)
        else:
            data = self._gather(out)
        if self.batch_transform is not None:
            data = self.batch_transform(data)
        if timed:
            for hook in list(self._batch_hooks.values()):
                hook(data)
        return data

    def _gather(self, out) -> Any:
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

    def _get_iterator(self):
        # Wrap (never unwrap) PyG's iterator: its `__del__` shuts the
        # workers down.
        out = _TimedIterator(super()._get_iterator(), _identity, self.timer,
                             self._batch_hooks)
        # Batches filtered inside workers never pass `filter_fn` here:
        out._from_worker = self.filter_per_worker and self.num_workers > 0
        return out

    def __repr__(self) -> str:
        return f'{self.__class__.__name__}(device={self.device})'


def _identity(x: Any) -> Any:
    return x


def _to_cpu(out):
    import copy

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
