r"""The batches of the hybrid loaders over a partitioned graph."""
from __future__ import annotations

import functools
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Optional,
    Tuple,
    Union,
)

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.sampler import (
    EdgeSamplerInput,
    NegativeSampling,
    NodeSamplerInput,
)

from pyg_orch.parallel.exchange import (
    comm_device,
    gloo_twin,
    group_rank,
    group_size,
)
from pyg_orch.features.gpu_cache import out_degrees
from pyg_orch.features.partition_gather import DistributedFeatureGather
from pyg_orch.sampling.collective import DistributedNeighborSampler
from pyg_orch.features.partition_stores import (
    PartitionFeatureStore,
    PartitionGraphStore,
    split_node_type,
)
from pyg_orch.loader.assemble import link_metadata, node_metadata
from pyg_orch.loader.prefetch import PrefetchIterator
from pyg_orch.loader.seed_batches import input_seeds
from pyg_orch.loader.validation import check_pipeline_args
from pyg_orch.core.checks import (
    check_bool,
    check_callable,
    check_choice,
    check_int,
)
from pyg_orch.sampling.arguments import integers_per_seed, times_per_seed

__all__ = ['PartitionBatches']


def _all_go_on(group: Any, option: str, go_on: bool) -> bool:
    # Whether every rank's thread (of `group`) goes on to its next batch.
    if group_size(group) == 1:
        return go_on
    flag = torch.tensor([int(go_on)])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    all_go_on = bool(flag.item())
    if go_on and not all_go_on:
        raise RuntimeError(
            f"HybridNeighborLoader: another rank stopped iterating "
            f"this epoch before this one did; with '{option}', every rank "
            f"must take the same number of batches (or all break at the "
            f"same step)")
    return all_go_on


def _reduce(value: int, op, group) -> int:
    if group_size(group) == 1:
        return value
    t = torch.tensor([value], dtype=torch.int64).to(comm_device(group))
    dist.all_reduce(t, op=op, group=group)
    return int(t.item())


class PartitionBatches:
    r"""The batches of the hybrid loaders over a partitioned graph: PyG
    :class:`Data` (or :class:`HeteroData`) of this rank's seeds
    (:obj:`input_nodes`: ids or a boolean node attribute's name, with their
    node type on a heterogeneous partition) or label edges
    (:obj:`input_edges`), sampled collectively over the stores of
    :func:`~pyg_orch.distributed.open_stores`. Every rank takes as many
    batches (:obj:`even='min'`: the smallest count, :obj:`'pad'`: the
    largest, empty batches at the end); the caches are filled on the first
    epoch (:obj:`cache_ranking`); :obj:`prefetch` and :obj:`num_workers`
    build batches in threads. The other arguments are the loaders'.
    """
    def __init__(self, feature_store: PartitionFeatureStore,
                 graph_store: PartitionGraphStore,
                 num_neighbors: Any, batch_size: int,
                 input_nodes: Optional[Union[Tensor, str, tuple]] = None,
                 shuffle: bool = False, even: str = 'min',
                 cache_ranking: str = 'frequency',
                 num_presample_batches: Optional[int] = None,
                 seed: Optional[int] = None,
                 device: Optional[Union[str, torch.device]] = None,
                 transform: Optional[Callable] = None,
                 replace: bool = False, disjoint: bool = False,
                 drop_last: bool = False,
                 weight_attr: Optional[str] = None,
                 time_attr: Optional[str] = None,
                 temporal_strategy: str = 'uniform',
                 input_time: Optional[Tensor] = None,
                 input_id: Optional[Tensor] = None,
                 subgraph_type: Any = 'directional',
                 transform_sampler_output: Optional[Callable] = None,
                 prefetch: int = 0, num_workers: int = 0,
                 input_edges: Optional[EdgeSamplerInput] = None,
                 neg_sampling: Optional[NegativeSampling] = None):
        seed = seed or 0
        if num_presample_batches is None:
            num_presample_batches = 8
        check_int('num_presample_batches', num_presample_batches, 1)
        check_choice('cache_ranking', cache_ranking, ('frequency', 'degree'))
        self.cache_ranking = cache_ranking
        check_int('num_workers', num_workers)
        check_pipeline_args(prefetch, None, num_workers)
        check_callable('transform', transform)
        check_callable('transform_sampler_output', transform_sampler_output)
        check_int('batch_size', batch_size, 1)
        check_choice('even', even, ('min', 'pad'))
        check_bool('drop_last', drop_last)
        self.feature_store, self.graph_store = feature_store, graph_store
        self.device = torch.device('cpu') if device is None else \
            torch.device(device)
        self.drop_last = drop_last
        self.transform = transform
        self.transform_sampler_output = transform_sampler_output
        self.partition = graph_store.partition
        self.layout = layout = graph_store.layout
        self.group = group = layout.part_group
        self.input_type: Optional[str] = None
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.rank = group_rank(group)
        self.cache_size = feature_store.cache_size
        self.edge_cache_size = feature_store.edge_cache_size
        #: The number of cached remote rows and edge attribute rows (set
        #: when the caches are filled, on the first epoch).
        self.cached_rows = 0
        self.cached_edge_rows = 0
        self.num_presample_batches = num_presample_batches
        self.sampling_device = graph_store.sampling_device or \
            torch.device('cpu')
        self.gather = feature_store.feature_gather
        self.feature_device = self.gather.feature_device
        self.sampler = graph_store.sampler(
            num_neighbors, generator=torch.Generator(
                device=self.sampling_device).manual_seed(
                    seed * 1000 + layout.seed_rank),
            replace=replace, disjoint=disjoint, weight_attr=weight_attr,
            time_attr=time_attr, temporal_strategy=temporal_strategy,
            subgraph_type=subgraph_type, device=self.sampling_device)
        self.neg_sampling = neg_sampling
        self.input_nodes = self.input_time = self.input_id = None
        self.inputs: Union[NodeSamplerInput, EdgeSamplerInput] = input_edges
        if input_edges is None:
            self._resolve_inputs(input_nodes, input_time, input_id)
        else:
            self.input_type = input_edges.input_type
        self._shuffle_gen = torch.Generator().manual_seed(seed * 1000
                                                          + layout.seed_rank)
        self._cache_built = not (self.cache_size or self.edge_cache_size)
        self.batch_stats: List[dict] = []
        #: The hooks run on every batch (see
        #: :meth:`pyg_orch.HybridNeighborLoader.register_batch_hook`).
        self.batch_hooks: Dict[int, Callable] = {}
        self.sampled_hooks: Dict[int, Callable] = {}
        op = dist.ReduceOp.MIN if even == 'min' else dist.ReduceOp.MAX
        # A collective, once here (every rank constructs the loader):
        n = self.inputs.input_id.numel()
        local = n // batch_size if drop_last else -(-n // batch_size)
        self._num_batches = _reduce(local, op, layout.batch_group)
        self.prefetch = prefetch
        self.num_workers = num_workers
        # The exchange group of every thread that builds batches (a
        # collective: every rank asks for as many): its own gloo group, so
        # that its exchanges never interleave with the training loop's
        # collectives (DDP) nor with another thread's.
        threads = num_workers if num_workers > 0 else int(prefetch > 0)
        lo = -_reduce(-threads, dist.ReduceOp.MAX, group)
        if lo != _reduce(threads, dist.ReduceOp.MAX, group):
            raise ValueError("'num_workers' (and whether 'prefetch' > 0) "
                             "must be the same on every rank")
        self._thread_groups = [gloo_twin(group) for _ in range(threads)]
        self._worker_generators: Optional[List[torch.Generator]] = None

    def _resolve_inputs(self, input_nodes, input_time, input_id) -> None:
        # This rank's seeds, their times and ids; where the ranks of a
        # machine share the part, every N-th of them.
        self.input_nodes = self._resolve(input_nodes)
        n = self.input_nodes.numel()
        if input_time is not None:
            if not self.sampler.is_temporal:
                raise ValueError("'input_time' is for temporal sampling; "
                                 "pass 'time_attr' too")
            self.input_time = times_per_seed(input_time, n, 'input_time')
        self.input_id = torch.arange(n) if input_id is None else \
            integers_per_seed(input_id, n, 'input_id', 'id').cpu()
        layout = self.layout
        if layout.shares_part:
            share = slice(layout.local_rank, None, layout.local_world_size)
            self.input_nodes = self.input_nodes[share]
            self.input_id = self.input_id[share]
            if self.input_time is not None:
                self.input_time = self.input_time[share]
        self.inputs = NodeSamplerInput(self.input_id, self.input_nodes,
                                       self.input_time, self.input_type)

    def _resolve(self, input_nodes) -> Tensor:
        # This part's seeds: the given ids, the part's vertices where a
        # boolean node attribute is set, or all of them (homogeneous: all
        # in `train_mask` where there is one).
        part = self.partition
        node_ids, attrs = part.node_ids, part.node_attrs
        if part.is_hetero:
            node_type, input_nodes = split_node_type(
                input_nodes, node_ids, True, 'partition')
            self.input_type = node_type
            node_ids, attrs = node_ids[node_type], attrs[node_type]
        elif input_nodes is None and 'train_mask' in attrs:
            input_nodes = 'train_mask'
        if input_nodes is None:
            return node_ids.clone().to(torch.int64)
        if not isinstance(input_nodes, str):
            return torch.as_tensor(input_nodes, dtype=torch.int64).view(-1)
        if input_nodes not in attrs:
            raise ValueError(f'the partition has no node attribute '
                             f'{input_nodes!r}')
        if attrs[input_nodes].dtype != torch.bool:
            raise ValueError(f'{input_nodes!r} must be a boolean mask')
        return node_ids[attrs[input_nodes]].to(torch.int64)

    # What the loader's offload protocol reads ##############################

    def offload_seeds(self) -> Tuple[Any, int]:
        r"""This rank's training seeds and how many a batch holds."""
        return input_seeds(self.inputs, self.batch_size)

    @property
    def batches_ahead(self) -> int:
        r"""How many batches the prefetch thread or the worker threads
        build ahead of the one the training loop holds, at most."""
        return self.prefetch if self.prefetch > 0 else 3 * self.num_workers

    def __len__(self) -> int:
        r"""The number of batches of an epoch, the same on every rank."""
        return self._num_batches

    def _seed_batches(self) -> List[Any]:
        # This epoch's sampler inputs, as many batches as every rank's.
        n = self.inputs.input_id.numel()
        order = torch.randperm(n, generator=self._shuffle_gen) \
            if self.shuffle else torch.arange(n)
        index = list(torch.split(order, self.batch_size))
        if self.drop_last and index and index[-1].numel() < self.batch_size:
            index.pop()
        index = index[:len(self)]
        index += [order[:0]] * (len(self) - len(index))
        return [self.inputs[i] for i in index]

    def _sample(self, sampler: DistributedNeighborSampler, inputs: Any):
        if isinstance(inputs, EdgeSamplerInput):
            return sampler.sample_from_edges(inputs, self.neg_sampling)
        return sampler.sample_from_nodes(inputs)

    def _build_cache(self, batches: List[Any]) -> None:
        r"""Fills the caches from the first pre-sampled batches (a
        collective)."""
        by_degree = self.cache_ranking == 'degree'
        # Batches pre-sampled only where their accesses are counted (the
        # same on every rank: their arguments are):
        steps = min(self.num_presample_batches, len(batches)) if (
            self.edge_cache_size or (self.cache_size and not by_degree)
        ) else 0
        num_nodes = self.sampler.num_nodes  # Per node type.
        fdev = self.feature_device
        typed = self._typed
        if by_degree and self.cache_size:
            # How many in-edges of the part's vertices a vertex is the
            # source of:
            counts = {t: c.to(fdev) for t, c in out_degrees(
                {et: torch.as_tensor(c.row)
                 for et, c in typed(self.partition.csc).items()},
                num_nodes).items()}
        else:
            counts = {t: torch.zeros(n, dtype=torch.int64, device=fdev)
                      for t, n in num_nodes.items()}
        e_ids: Dict[Any, List[Tensor]] = {}
        dsts: Dict[Any, List[Tensor]] = {}
        with self.sampler.presampling(prune_hot=True):
            for inputs in batches[:steps]:
                out = self._sample(self.sampler, inputs)
                for t, ids in typed(out.node).items():
                    if not by_degree:
                        counts[t] += torch.bincount(ids.to(fdev),
                                                    minlength=num_nodes[t])
                if not self.edge_cache_size:
                    continue
                edge = typed(out.edge)
                dst = typed(self.sampler.edge_destinations(out))
                for et, d in dst.items():
                    e_ids.setdefault(et, []).append(edge[et].to(fdev))
                    dsts.setdefault(et, []).append(d.to(fdev))
        # Each a collective, skipped alike on every rank where its size
        # is 0 (the caches start empty; without a pre-sampled batch, no
        # edges):
        empty = [torch.empty(0, dtype=torch.int64, device=fdev)]
        hetero = self.partition.is_hetero
        e_id, dst = ({et: torch.cat(v) for et, v in d.items()} if hetero
                     else torch.cat(d.get(None, empty)) for d in (e_ids, dsts))
        if self.cache_size:
            self.gather.build_cache(counts if hetero else counts[None],
                                    self.cache_size)
        if self.edge_cache_size:
            self.gather.build_edge_cache(e_id, dst, self.edge_cache_size)
        self.cached_rows = self.gather.num_cached_rows
        self.cached_edge_rows = self.gather.num_cached_edge_rows
        self._cache_built = True

    def _typed(self, value: Any) -> Any:
        # Per type; of a homogeneous part, as one type, `None`.
        return value if self.partition.is_hetero or value is None else \
            {None: value}

    def _batch(self, out, sampler: DistributedNeighborSampler,
               gather: DistributedFeatureGather):
        # A homogeneous output as one node type and one edge type (`None`).
        from torch_geometric.data import Data, HeteroData
        hetero, typed = self.partition.is_hetero, self._typed
        data = HeteroData() if hetero else Data()
        node, batch = typed(out.node), typed(out.batch)
        num_sampled_nodes = typed(out.num_sampled_nodes)
        num_sampled_edges = typed(out.num_sampled_edges)
        attrs = typed(gather.gather(out.node))
        for t, n_id in node.items():
            store = data[t] if hetero else data
            store.num_nodes = n_id.numel()
            for key, value in attrs[t].items():
                store[key] = value
            store.n_id = n_id
            if batch is not None:
                store.batch = batch[t]
            if num_sampled_nodes is not None:
                store.num_sampled_nodes = num_sampled_nodes[t]
        # Edge ids (and so attributes) where the output has them (PyG drops
        # them where 'bidirectional' merged reverse edge types):
        e_ids = {et: e for et, e in out.edge.items() if e is not None} \
            if hetero else out.edge
        edge_attrs = typed(gather.gather_edges(
            e_ids, sampler.edge_destinations(out)))
        e_ids = typed(e_ids) or {}
        for et, row in typed(out.row).items():
            store = data[et] if hetero else data
            store.edge_index = torch.stack([row, typed(out.col)[et]])
            if e_ids.get(et) is not None:
                store.e_id = e_ids[et]
                for key, value in edge_attrs.get(et, {}).items():
                    store[key] = value
            if num_sampled_edges is not None:
                store.num_sampled_edges = num_sampled_edges[et]
        return data

    def __iter__(self) -> Iterator:
        return self._epoch()

    def _epoch(self) -> Iterator:
        batches = self._seed_batches()
        if not self._cache_built:  # In the loop's thread: its collectives.
            self._build_cache(batches)
        self.batch_stats = []
        if self._thread_groups:
            yield from self._threaded(batches)
            return
        for batch in self._batches(batches, self.sampler, self.gather):
            yield self._deliver(*batch)

    def _threaded(self, batches: List[Any]) -> Iterator:
        # Batch i built by thread i % len(groups) (one with prefetch), each
        # thread with views of the sampler and gather over its own group,
        # and delivered in order.
        groups = self._thread_groups
        num = len(groups)
        depth = self.prefetch if self.prefetch > 0 else 2
        option = 'num_workers' if self.num_workers > 0 else 'prefetch'
        # Where the threads queue kernels (on streams of their own), if
        # anywhere; the batches' events are waited for there:
        device = next((d for d in (self.sampling_device,
                                   self.feature_device, self.device)
                       if d.type == 'cuda'), self.device)
        its = []
        try:
            for k, group in enumerate(groups):
                sampler = self.sampler.worker_view(
                    group, self._worker_generator(k, num))
                gather = self.gather.worker_view(group)
                its.append(PrefetchIterator(
                    self._batches(batches[k::num], sampler, gather), depth,
                    device, agree=functools.partial(_all_go_on, group,
                                                         option)))
            for i in range(len(batches)):
                yield self._deliver(*next(its[i % num]))
        finally:
            for it in its:
                it.close()

    def _worker_generator(self, k: int, num: int
                          ) -> Optional[torch.Generator]:
        # With prefetch (one thread), the sampler's own generator: batches
        # as without it. Worker k of several draws from a generator of its
        # own, seeded from the sampler's stream once (the same every run).
        if num == 1:
            return None
        if self._worker_generators is None:
            gen = self.sampler.generator
            seeds = torch.randint(2**62, (num, ), generator=gen,
                                  device=gen.device).tolist()
            self._worker_generators = [
                torch.Generator(device=self.sampling_device).manual_seed(s)
                for s in seeds]
        return self._worker_generators[k]

    def _batches(self, batches: List[Any],
                 sampler: DistributedNeighborSampler,
                 gather: DistributedFeatureGather) -> Iterator:
        # (batch, its stats) of every sampler input, with `sampler` and
        # `gather` (the loader's, or a worker thread's views).
        for inputs in batches:
            sampled = out = self._sample(sampler, inputs)
            for hook in list(self.sampled_hooks.values()):
                hook(out)
            if self.transform_sampler_output is not None:
                out = self._transform_output(out)
            data = self._batch(out, sampler, gather)
            # The metadata as the sampler made it (the seeds' times):
            if isinstance(inputs, EdgeSamplerInput):
                data = link_metadata(data, sampled, self.neg_sampling,
                                     self.input_type)
            else:
                data = node_metadata(data, sampled, self.input_type)
            yield self._finish(data, sampler, gather)

    def _transform_output(self, out):
        new = self.transform_sampler_output(out)
        if not isinstance(new, type(out)):
            raise ValueError(f"'transform_sampler_output' must return a "
                             f"{type(out).__name__} (got "
                             f"{type(new).__name__})")
        if getattr(new, 'metadata', None) is None:
            # Where reversed edges' ids point ('bidirectional'), and the
            # seeds' times: the sampler's, unless the transform set its own.
            new.metadata = out.metadata
        return new

    def _finish(self, data, sampler: DistributedNeighborSampler,
                gather: DistributedFeatureGather):
        if self.device.type != 'cpu':
            data = data.to(self.device, non_blocking=True)
        elif self.sampling_device.type != 'cpu':  # Sampled ids to the host.
            data = data.to(self.device)
        return data, {**gather.stats.as_dict(),
                      'remote_requests': sampler.stats.remote_requests}

    def _deliver(self, data, stats: dict):
        # In the training loop's thread (also with prefetch and workers):
        self.batch_stats.append(stats)
        if self.transform is not None:
            data = self.transform(data)
        for hook in list(self.batch_hooks.values()):
            hook(data)
        return data
