r"""A thin loader over
:class:`~pyg_orch.distributed.DistributedNeighborSampler` and
:class:`~pyg_orch.distributed.DistributedFeatureGather`: one part per
rank (or per machine, shared by its ranks), mini-batches of this part's
seeds as PyG :class:`Data`, the same number of batches on every rank so
that the collectives never wait for a rank that has run out of seeds."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Optional,
    NamedTuple,
    Sequence,
    Tuple,
    Union,
)

import torch
import torch.distributed as dist
from torch import Tensor

from pyg_orch.distributed.collective import (
    comm_device,
    gloo_twin,
    group_rank,
    group_size,
)
from pyg_orch.distributed.features import (
    DistributedFeatureGather,
    check_size,
)
from pyg_orch.distributed.machines import RankLayout
from pyg_orch.distributed.sampler import DistributedNeighborSampler
from pyg_orch.distributed.storage import GraphPartition
from pyg_orch.distributed.stores import open_partition, open_stores
from pyg_orch.core.prefetch import PrefetchIterator
from pyg_orch.core.checks import warn_renamed
from pyg_orch.sampling.arguments import (
    check_int,
    integers_per_seed,
    resolve_device,
    times_per_seed,
)

__all__ = ['DistributedNeighborLoader', 'open_partition']


def _all_go_on(group: Any, option: str, go_on: bool) -> bool:
    # Whether every rank's thread (of `group`) goes on to its next batch.
    if group_size(group) == 1:
        return go_on
    flag = torch.tensor([int(go_on)])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    all_go_on = bool(flag.item())
    if go_on and not all_go_on:
        raise RuntimeError(
            f"DistributedNeighborLoader: another rank stopped iterating "
            f"this epoch before this one did; with '{option}', every rank "
            f"must take the same number of batches (or all break at the "
            f"same step)")
    return all_go_on


def _check_same(value: int, what: str, group: Any) -> None:
    # The same on every rank (else the ranks would make different numbers
    # of groups and wait for each other for ever): raises on all of them.
    if group_size(group) == 1:
        return
    t = torch.tensor([value, -value], dtype=torch.int64).to(
        comm_device(group))
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    hi, lo = t[0].item(), -t[1].item()
    if lo != hi:
        raise ValueError(f"{what} must be the same on every rank (got "
                         f"{lo} threads on one rank, {hi} on another)")


def _reduce(value: int, op, group) -> int:
    if group_size(group) == 1:
        return value
    t = torch.tensor([value], dtype=torch.int64).to(comm_device(group))
    dist.all_reduce(t, op=op, group=group)
    return int(t.item())


class SeedBatch(NamedTuple):
    r"""The seeds of one batch of a
    :class:`DistributedNeighborLoader`."""
    seeds: Tensor
    time: Optional[Tensor]
    input_id: Tensor


class DistributedNeighborLoader:
    r"""Mini-batches of this rank's seeds, sampled collectively over a
    partitioned graph (rank :obj:`k` loads part :obj:`k`).

    Every batch holds :obj:`x`, :obj:`y` and the part's other gathered node
    attributes, the edge attributes of the sampled edges (e.g.
    :obj:`edge_attr`), :obj:`edge_index`, :obj:`n_id`, :obj:`e_id`,
    :obj:`batch_size`, :obj:`num_sampled_nodes` and
    :obj:`num_sampled_edges`, :obj:`input_id` (and with
    :obj:`disjoint=True` the seed index :obj:`batch` of every node, with
    :obj:`time_attr` the :obj:`seed_time`), as PyG's loaders.

    Every rank must iterate the loader in step (each batch is a collective).
    The number of batches is the same on every rank: with
    :obj:`even='min'` (default), the smallest count over the ranks (the
    seeds of a rank's extra batches are skipped this epoch, as
    :func:`~pyg_orch.multigpu.equal_batch_count`); with :obj:`even='pad'`,
    the largest, ranks with fewer seeds yielding empty batches
    (:obj:`batch_size == 0`) at the end.

    Args:
        partition (str or GraphPartition): The folder written by
            :func:`~pyg_orch.distributed.partition_graph` (this rank's
            part is loaded) or this rank's loaded part.
        num_neighbors (List[int]): The fan-out per hop (:obj:`-1`: all).
        batch_size (int): Seeds per batch.
        input_nodes (Tensor or str, optional): This rank's seeds (global
            ids, owned by any part) or the name of a boolean node attribute
            of the part (its set vertices). Default: :obj:`'train_mask'`
            where the part has it, else all vertices of the part. For a
            heterogeneous partition, a node type (all of the part's
            vertices of that type) or a (node type, seeds or attribute
            name) tuple; batches are then
            :class:`~torch_geometric.data.HeteroData` (:obj:`batch_size`
            on the seeds' node type).
        shuffle (bool): Shuffle the seeds every epoch.
        even (str): :obj:`'min'` or :obj:`'pad'` (see above).
        replace (bool): Sample with replacement (as in PyG).
        disjoint (bool): Give every seed its own subgraph (as in PyG).
        weight_attr (str, optional): An edge attribute of the partition of
            non-negative sampling weights (as in PyG; see
            :class:`~pyg_orch.distributed.DistributedNeighborSampler`).
        time_attr (str, optional): A node or edge attribute of the
            partition holding integer or floating-point timestamps:
            temporal sampling, as in PyG (disjoint subgraphs; batches carry
            :obj:`seed_time`).
        temporal_strategy (str): :obj:`'uniform'` or :obj:`'last'`.
        input_time (Tensor, optional): The time of every seed of
            :obj:`input_nodes` (this rank's seeds, in their order); by
            default a node-level time's own value.
        subgraph_type (str): :obj:`'directional'`, :obj:`'bidirectional'`
            or :obj:`'induced'` (as in PyG; see
            :class:`~pyg_orch.distributed.DistributedNeighborSampler`).
        input_id (Tensor, optional): What batches report as
            :obj:`input_id` for every seed of :obj:`input_nodes` (default:
            its position among them, as in PyG).
        drop_last (bool): Leave out this rank's last batch if it is smaller
            than :obj:`batch_size` (before the counts of the ranks are
            evened out).
        cache_size (int): Remote rows to cache per rank (:obj:`0`: none);
            the cache is filled on the first epoch from
            :obj:`num_presample_batches` pre-sampled batches (drawn without
            changing the batches that follow: the sampler's generator is
            restored).
        edge_cache_size (int): Edge attribute rows of remote edges (whose
            destination another part owns) to cache per rank (:obj:`0`:
            none; over all edge types for a heterogeneous partition): the
            edges sampled most often in the same pre-sampled batches. A
            static cache under either :obj:`cache_policy` (see
            :class:`~pyg_orch.distributed.DistributedFeatureGather`).
        cache_policy (str): :obj:`'static'` (the hot rows only) or
            :obj:`'lru'` (the hot rows, then every fetched row, least
            recently read evicted); see
            :class:`~pyg_orch.distributed.DistributedFeatureGather`.
        cache_ranking (str): Which remote rows are hot:
            :obj:`'frequency'` (read most often in the pre-sampled
            batches) or :obj:`'degree'` (the sources of the most in-edges
            of the part's vertices, the vertices this part's sampling
            draws most often as neighbors; nothing pre-sampled for it).
        num_presample_batches (int, optional): Batches pre-sampled to count
            accesses; :obj:`None` is :obj:`8`. (default: :obj:`None`)
        seed (int, optional): Seed of the shuffling and of this rank's
            sampling (offset by the rank); :obj:`None` is :obj:`0`, so that
            batches are reproducible and every rank agrees without an
            exchange. (default: :obj:`None`)
        transform (callable, optional): Applied to every batch (after it
            was moved to :obj:`device`).
        prefetch (int): Batches built ahead by a background thread while
            the training loop works (:obj:`0`: none, batches are built when
            the loop asks). The thread's exchanges go over a gloo group of
            their own (created here, a collective), so they never interleave
            with the loop's collectives (e.g. DDP's all-reduce); every
            batch starts with an agreement of all ranks' threads, so a loop
            that stops early (on every rank) leaves no rank inside an
            exchange. Batches, their order and :obj:`batch_stats` are as
            without prefetch (where a loop stopped early, the thread had
            sampled up to :obj:`prefetch + 1` batches more, so later
            draws differ); :obj:`transform` and batch hooks run in the
            loop's thread, hooks with :obj:`when='sampled'` in the prefetch
            thread. With :obj:`sampling_device` or :obj:`feature_device` on
            a GPU, the thread queues its kernels on a CUDA stream of its
            own and the loop's stream waits for a batch's event before it
            reads the batch; its exchanges still go over gloo, through host
            memory, also where :obj:`group` is NCCL. (default: :obj:`0`)
        num_workers (int): Threads that build batches in parallel, batch
            :obj:`i` by thread :obj:`i % num_workers`, each up to two
            batches ahead, delivered in order (:obj:`0`: none). Threads,
            not processes: sampling and gathering spend their time in
            PyTorch operations and exchanges, which release Python's
            interpreter lock. Each thread exchanges over a gloo group of
            its own (created here, a collective) and agrees with the
            other ranks' threads before every batch, as with
            :obj:`prefetch`, and draws from a random generator of its
            own, seeded from :obj:`seed` and the rank: batches are
            reproducible for a given :obj:`num_workers`, and differ from
            those of another :obj:`num_workers` as PyG's worker processes'
            do. Hooks with :obj:`when='sampled'` run in the worker
            threads. Keep ranks x workers x
            :func:`torch.get_num_threads` within the machine's cores.
            Every rank must pass the same value. Needs
            :obj:`prefetch=0`. With :obj:`cache_policy='lru'` the threads
            share one cache, changed in the order their gathers reach it:
            rows stay right, but which are cached (and the batches'
            :obj:`cached_rows`) depends on the threads' timing. On a GPU
            (:obj:`sampling_device` or :obj:`feature_device`), every thread
            has a CUDA stream of its own, as with :obj:`prefetch`, and
            sampling on the GPU keeps a relabeling array of 4 bytes per
            vertex of the graph per thread in GPU memory. (default:
            :obj:`0`)
        transform_sampler_output (callable, optional): Applied to every
            sampler output (a :class:`~torch_geometric.sampler.SamplerOutput`
            or :class:`~torch_geometric.sampler.HeteroSamplerOutput` of
            global ids, see
            :meth:`DistributedNeighborSampler.sample_from_nodes`) before
            features are gathered, as in PyG's
            :class:`~torch_geometric.loader.NodeLoader`; hooks registered
            with :obj:`when='sampled'` see the output before it.
        expected_fingerprint (str, optional): Reject a partition of
            another graph (see :func:`open_partition`, which checks that
            all ranks hold parts of one partitioning).
        group (ProcessGroup, optional): The process group (gloo, or NCCL
            with this process's CUDA device set by
            :func:`torch.cuda.set_device`).
        device (torch.device or str, optional): Where batches are
            delivered (default: the CPU). Gathered rows (and the cache of
            remote rows) live on :obj:`device`.
        sampling_device (torch.device or str, optional): Where sampling
            runs (default: the CPU, over the part's memory-mapped files).
            On a CUDA device (e.g. :obj:`device`), the part's topology is
            copied there once, when the loader is built, and must fit in
            its memory beside the cache and the model; the sampler's
            exchanges then move CUDA tensors, and the sampled ids are
            copied to the host once per batch to index the part's
            features (unless :obj:`feature_device` is a GPU).
        feature_device (torch.device or str, optional): Where the part's
            feature rows are read and other ranks' requests for them
            served (default: the CPU, over the part's memory-mapped
            files). On a CUDA device (e.g. :obj:`device`), the gathered
            node attributes (:obj:`x`, :obj:`y`) and edge attributes of
            the part, and the maps over all vertices that index them, are
            copied there once, when the loader is built, and must fit in
            its memory beside the topology, the cache and the model (see
            :class:`~pyg_orch.distributed.DistributedFeatureGather`); ids
            then stay on the GPU. For a batch that never leaves the GPU,
            pass the same device as :obj:`device`,
            :obj:`sampling_device` and :obj:`feature_device`.
        topology_placement (str or TopologySharding): :obj:`'auto'`: every
            rank holds its part's topology (memory-mapped on the CPU, or
            copied to :obj:`sampling_device`). :obj:`'sharded'` (or a
            :class:`~pyg_orch.multigpu.TopologySharding`): where the ranks
            of a machine share one part (see
            :mod:`~pyg_orch.distributed.machines`), the part's neighbor
            lists are split across them, with copies of the most read ones
            on every rank; sampling reads the same lists, so batches do not
            change.
        feature_placement (str): :obj:`'auto'`: every rank holds its
            part's feature rows (memory-mapped on the CPU, or copied to
            :obj:`feature_device`). :obj:`'sharded'`: where the ranks of a
            machine share one part, the part's rows of :obj:`x` and
            :obj:`y` are split across them on :obj:`feature_device` (row
            :obj:`i` of the part on local rank :obj:`i % N`), so a machine
            of :obj:`N` GPUs holds its part's rows once, not :obj:`N`
            times; a rank reads the others from its peers' shards
            (symmetric memory over NVLink on GPUs, :obj:`/dev/shm` on
            CPUs). Batches do not change.
        layout (RankLayout, optional): This rank's layout, where it was
            already agreed (:func:`~pyg_orch.distributed.machines.rank_layout`
            with the same :obj:`group`); agreed here by default.

    With one part per machine and :obj:`LOCAL_WORLD_SIZE` ranks on each
    (:obj:`torchrun --nnodes M --nproc-per-node N` over :obj:`M` parts),
    the ranks of a machine share its part: each takes every
    :obj:`N`-th of the part's seeds and exchanges with the ranks of its
    local rank on the other machines
    (:func:`~pyg_orch.distributed.machines.rank_layout`).
    """
    def __init__(self, partition: Union[str, Path, GraphPartition],
                 num_neighbors: Sequence[int], batch_size: int,
                 input_nodes: Optional[Union[Tensor, str]] = None,
                 shuffle: bool = False, even: str = 'min',
                 cache_size: int = 0, cache_policy: str = 'static',
                 num_presample_batches: Optional[int] = None,
                 seed: Optional[int] = None, group: Optional[Any] = None,
                 device: Optional[Union[str, torch.device]] = None,
                 transform: Optional[Callable] = None,
                 expected_fingerprint: Optional[str] = None,
                 sampling_device: Optional[Union[str, torch.device]] = None,
                 feature_device: Optional[Union[str, torch.device]] = None,
                 topology_placement: Any = 'auto',
                 layout: Optional[RankLayout] = None,
                 feature_placement: str = 'auto',
                 replace: bool = False, disjoint: bool = False,
                 drop_last: bool = False,
                 weight_attr: Optional[str] = None,
                 time_attr: Optional[str] = None,
                 temporal_strategy: str = 'uniform',
                 input_time: Optional[Tensor] = None,
                 input_id: Optional[Tensor] = None,
                 subgraph_type: Any = 'directional',
                 edge_cache_size: int = 0,
                 transform_sampler_output: Optional[Callable] = None,
                 prefetch: int = 0, num_workers: int = 0,
                 cache_ranking: str = 'frequency', **kwargs: Any):
        num_presample_batches = _renamed(kwargs, num_presample_batches)
        if seed is None:
            seed = 0
        # Checked before the collectives below, the same on every rank:
        if cache_ranking not in ('frequency', 'degree'):
            raise ValueError(f"'cache_ranking' must be 'frequency' or "
                             f"'degree' (got {cache_ranking!r})")
        self.cache_ranking = cache_ranking
        check_size(edge_cache_size, 'edge_cache_size')
        check_size(prefetch, 'prefetch')
        check_size(num_workers, 'num_workers')
        if prefetch > 0 and num_workers > 0:
            raise ValueError("'prefetch' > 0 needs num_workers=0 (each "
                             "worker thread builds two batches ahead)")
        for name, fn in (('transform', transform),
                         ('transform_sampler_output',
                          transform_sampler_output)):
            if fn is not None and not callable(fn):
                raise ValueError(f"'{name}' must be callable (got {fn!r})")
        sampling_device = resolve_device(sampling_device, 'sampling_device',
                                         default='cpu')
        feature_device = resolve_device(feature_device, 'feature_device',
                                        default='cpu')
        self.device = torch.device('cpu') if device is None else \
            torch.device(device)
        # Collectives: every rank learns which part it holds and with whom
        # it samples, and if one cannot load its part.
        self.feature_store, self.graph_store = open_stores(
            partition, group, expected_fingerprint, device=self.device,
            sampling_device=sampling_device, feature_device=feature_device,
            topology_placement=topology_placement,
            feature_placement=feature_placement, cache_size=cache_size,
            edge_cache_size=edge_cache_size, policy=cache_policy,
            layout=layout)
        partition = self.graph_store.partition
        layout = self.graph_store.layout
        group = layout.part_group
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) \
                or batch_size < 1:
            raise ValueError(f"'batch_size' must be a positive integer "
                             f"(got {batch_size!r})")
        if even not in ('min', 'pad'):
            raise ValueError(f"'even' must be 'min' or 'pad' (got {even!r})")
        if not isinstance(drop_last, bool):
            raise ValueError(f"'drop_last' must be a bool (got "
                             f"{drop_last!r})")
        self.drop_last = drop_last
        self.transform = transform
        self.transform_sampler_output = transform_sampler_output
        self.partition = partition
        self.input_type: Optional[str] = None
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.even = even
        self.group = group
        self.layout = layout
        self.rank = group_rank(group)
        self.cache_size = cache_size
        self.edge_cache_size = edge_cache_size
        #: The number of cached remote rows and edge attribute rows (set
        #: when the caches are filled, on the first epoch).
        self.cached_rows = 0
        self.cached_edge_rows = 0
        self.num_presample_batches = num_presample_batches
        self.sampling_device = sampling_device
        self.feature_device = feature_device
        self.sampler = self.graph_store.sampler(
            num_neighbors,
            generator=torch.Generator(device=sampling_device).manual_seed(
                seed * 1000 + layout.seed_rank), device=sampling_device,
            replace=replace, disjoint=disjoint, weight_attr=weight_attr,
            time_attr=time_attr, temporal_strategy=temporal_strategy,
            subgraph_type=subgraph_type)
        self.feature_placement = feature_placement
        self.gather = self.feature_store.feature_gather
        self.input_nodes = self._resolve(input_nodes)
        self.input_time = self._resolve_time(input_time)
        self.input_id = self._resolve_id(input_id)
        if layout.shares_part:  # Every N-th seed of the part.
            share = slice(layout.local_rank, None, layout.local_world_size)
            self.input_nodes = self.input_nodes[share]
            self.input_id = self.input_id[share]
            if self.input_time is not None:
                self.input_time = self.input_time[share]
        self._shuffle_gen = torch.Generator().manual_seed(seed * 1000
                                                          + layout.seed_rank)
        self._cache_built = cache_size == 0 and edge_cache_size == 0
        self.batch_stats: List[dict] = []
        self._batch_hooks: Dict[int, Callable] = {}
        self._sampled_hooks: Dict[int, Callable] = {}
        op = dist.ReduceOp.MIN if even == 'min' else dist.ReduceOp.MAX
        # A collective, once here (every rank constructs the loader):
        self._num_batches = _reduce(self._local_batches(), op,
                                    layout.batch_group)
        self.prefetch = prefetch
        self.num_workers = num_workers
        # The exchange group of every thread that builds batches (a
        # collective: every rank asks for as many): its own gloo group, so
        # that its exchanges never interleave with the training loop's
        # collectives (DDP) nor with another thread's.
        threads = num_workers if num_workers > 0 else int(prefetch > 0)
        _check_same(threads, "'num_workers' (and whether 'prefetch' > 0)",
                    group)
        self._thread_groups = [gloo_twin(group) for _ in range(threads)]
        self._worker_generators: Optional[List[torch.Generator]] = None

    def _resolve(self, input_nodes) -> Tensor:
        part = self.partition
        if part.is_hetero:
            return self._resolve_hetero(input_nodes)
        if input_nodes is None:
            input_nodes = 'train_mask' if 'train_mask' in part.node_attrs \
                else None
            if input_nodes is None:
                return part.node_ids.clone().to(torch.int64)
        return self._owned_or_given(part.node_ids, part.node_attrs,
                                    input_nodes)

    def _resolve_time(self, input_time) -> Optional[Tensor]:
        if input_time is None:
            return None
        if not self.sampler.is_temporal:
            raise ValueError("'input_time' is for temporal sampling; pass "
                             "'time_attr' too")
        return times_per_seed(input_time, self.input_nodes.numel(),
                              'input_time')

    def _resolve_id(self, input_id) -> Tensor:
        n = self.input_nodes.numel()
        if input_id is None:
            return torch.arange(n)
        return integers_per_seed(input_id, n, 'input_id', 'id').cpu()

    @staticmethod
    def _owned_or_given(node_ids, attrs, input_nodes) -> Tensor:
        if isinstance(input_nodes, str):
            if input_nodes not in attrs:
                raise ValueError(f'the partition has no node attribute '
                                 f'{input_nodes!r}')
            mask = attrs[input_nodes]
            if mask.dtype != torch.bool:
                raise ValueError(f'{input_nodes!r} must be a boolean mask')
            return node_ids[mask].to(torch.int64)
        return torch.as_tensor(input_nodes, dtype=torch.int64).view(-1)

    def _resolve_hetero(self, input_nodes) -> Tensor:
        part = self.partition
        types = list(part.node_ids)
        if isinstance(input_nodes, str):
            input_nodes = (input_nodes, None)
        if not (isinstance(input_nodes, (tuple, list))
                and len(input_nodes) == 2
                and isinstance(input_nodes[0], str)):
            raise ValueError(
                f"'input_nodes' must name the seeds' node type for a "
                f"heterogeneous partition: a node type (all of this part's "
                f"vertices of it), or a (node type, ids or boolean "
                f"attribute name) tuple (got {input_nodes!r})")
        node_type, nodes = input_nodes
        if node_type not in types:
            raise ValueError(f"'input_nodes' names the node type "
                             f"{node_type!r}, not one of {types}")
        self.input_type = node_type
        if nodes is None:
            return part.node_ids[node_type].clone().to(torch.int64)
        return self._owned_or_given(part.node_ids[node_type],
                                    part.node_attrs[node_type], nodes)

    @property
    def node_sampler(self) -> DistributedNeighborSampler:
        r"""The sampler (the name PyG's
        :class:`~torch_geometric.loader.NodeLoader` gives it)."""
        return self.sampler

    def register_batch_hook(self, hook: Callable,
                            when: str = 'received') -> Callable[[], None]:
        r"""Calls :obj:`hook(batch)` on every mini-batch when the training
        loop receives it (after it was moved to :obj:`device` and
        transformed), or, with :obj:`when='sampled'`, calls
        :obj:`hook(sampler_output)` right after a batch was sampled, before
        its features are gathered, as
        :meth:`pyg_orch.HybridNeighborLoader.register_batch_hook` does.
        Returns a function that removes the hook."""
        if when not in ('received', 'sampled'):
            raise ValueError(f"'when' must be 'received' or 'sampled' (got "
                             f"{when!r})")
        hooks = self._batch_hooks if when == 'received' else \
            self._sampled_hooks
        key = id(hook)
        hooks[key] = hook
        return lambda: hooks.pop(key, None)

    # Offload protocol (see pyg_orch.offload.protocol) ######################

    #: No look-ahead, no worker processes that outlive an epoch, no stage
    #: timer.
    lookahead = False
    persistent_workers = False
    timer = None

    @property
    def offload_sampler(self) -> DistributedNeighborSampler:
        r"""The sampler, for :class:`~pyg_orch.offload.BottomLayerOffload`
        (see :class:`~pyg_orch.offload.protocol.OffloadableLoader`)."""
        return self.sampler

    @property
    def offload_data(self) -> None:
        r"""No graph in host memory: the CPU side of offload reads the
        part (:attr:`partition`) and fetches remote rows (:attr:`gather`)."""
        return None

    @property
    def gpu_cache_capacity(self) -> int:
        r"""No GPU feature cache to set (remote rows have their own)."""
        return 0

    def offload_seeds(self) -> Tuple[Any, int]:
        r"""This rank's training seeds (per node type for a heterogeneous
        partition) and the batch size."""
        if self.partition.is_hetero:
            return {self.input_type: self.input_nodes}, self.batch_size
        return self.input_nodes, self.batch_size

    def set_gpu_cache_nodes(self, nodes: Any) -> bool:
        r"""Returns :obj:`False`: no GPU feature cache to set."""
        return False

    def get_gpu_cache_nodes(self) -> None:
        r"""Returns :obj:`None`: no GPU feature cache."""
        return None

    @property
    def batches_ahead(self) -> int:
        r"""How many batches the prefetch thread or the worker threads
        build ahead of the one the training loop holds, at most."""
        return self.prefetch if self.prefetch > 0 else 3 * self.num_workers

    def _local_batches(self) -> int:
        n = self.input_nodes.numel()
        if self.drop_last:
            return n // self.batch_size
        return (n + self.batch_size - 1) // self.batch_size

    def __len__(self) -> int:
        r"""The number of batches of an epoch, the same on every rank."""
        return self._num_batches

    def _seed_batches(self) -> List[SeedBatch]:
        r"""This epoch's seeds, their times (:obj:`None` unless given) and
        their :obj:`input_id` per batch, as many batches as every rank."""
        nodes, times, ids = self.input_nodes, self.input_time, self.input_id
        if self.shuffle:
            perm = torch.randperm(nodes.numel(), generator=self._shuffle_gen)
            nodes, ids = nodes[perm], ids[perm]
            times = None if times is None else times[perm]
        batches = list(torch.split(nodes, self.batch_size))
        time_batches = [None] * len(batches) if times is None else \
            list(torch.split(times, self.batch_size))
        id_batches = list(torch.split(ids, self.batch_size))
        if self.drop_last and batches and \
                batches[-1].numel() < self.batch_size:
            batches.pop()
        steps = len(self)
        out = [SeedBatch(*b) for b in zip(batches, time_batches,
                                          id_batches)][:steps]
        out += [SeedBatch(nodes[:0], None if times is None else times[:0],
                          ids[:0])] * (steps - len(out))
        return out

    def _seeds(self, seeds: Tensor):
        if self.partition.is_hetero:
            return {self.input_type: seeds}
        return seeds

    def _build_cache(self, batches: List[SeedBatch]) -> None:
        r"""Fills the caches of remote rows and of remote edges' attribute
        rows from the accesses of the first pre-sampled batches: a
        collective. The sampler's generator is restored after, so that the
        batches of the epoch do not change."""
        by_degree = self.cache_ranking == 'degree'
        # Batches pre-sampled only where their accesses are counted (the
        # same on every rank: their arguments are):
        steps = min(self.num_presample_batches, len(batches)) if (
            self.edge_cache_size or (self.cache_size and not by_degree)
        ) else 0
        num_nodes = self.sampler.num_nodes  # Per node type.
        fdev = self.feature_device
        # Counted where the gather ranks them (by degree: counted once,
        # not in the pre-sampled batches):
        counts = self._source_degrees(fdev) if (
            by_degree and self.cache_size) else {
            t: torch.zeros(n, dtype=torch.int64, device=fdev)
            for t, n in num_nodes.items()}
        e_ids: Dict[Any, List[Tensor]] = {}
        dsts: Dict[Any, List[Tensor]] = {}
        with self.sampler.presampling(prune_hot=True):
            for seeds, times, _ in batches[:steps]:
                out = self.sampler.sample_from_nodes(self._seeds(seeds),
                                                     times)
                node = out.node
                if not isinstance(node, dict):
                    node = {None: node}
                for t, ids in node.items():
                    if not by_degree:
                        counts[t] += torch.bincount(ids.to(fdev),
                                                    minlength=num_nodes[t])
                if not self.edge_cache_size:
                    continue
                dst = self.sampler.edge_destinations(out)
                edge = out.edge
                if not self.partition.is_hetero:
                    edge, dst = {None: edge}, {None: dst}
                for et, d in dst.items():
                    e_ids.setdefault(et, []).append(edge[et].to(fdev))
                    dsts.setdefault(et, []).append(d.to(fdev))
        e_id = {et: torch.cat(v) for et, v in e_ids.items()}
        dst = {et: torch.cat(v) for et, v in dsts.items()}
        # Each a collective, skipped alike on every rank where its size
        # is 0 (the caches start empty):
        if self.cache_size:
            self.gather.build_cache(counts if self.partition.is_hetero
                                    else counts[None], self.cache_size)
        if self.edge_cache_size:
            if self.partition.is_hetero:
                self.gather.build_edge_cache(e_id, dst, self.edge_cache_size)
            else:  # No pre-sampled batch: no edges.
                empty = torch.empty(0, dtype=torch.int64, device=fdev)
                self.gather.build_edge_cache(e_id.get(None, empty),
                                             dst.get(None, empty),
                                             self.edge_cache_size)
        self.cached_rows = self.gather.num_cached_rows
        self.cached_edge_rows = self.gather.num_cached_edge_rows
        self._cache_built = True

    def _source_degrees(self, device: torch.device) -> Dict[Any, Tensor]:
        r"""Per node type, how many in-edges of the part's vertices every
        global vertex is the source of."""
        num_nodes = self.sampler.num_nodes
        counts = {t: torch.zeros(n, dtype=torch.int64, device=device)
                  for t, n in num_nodes.items()}
        csc = self.partition.csc
        for et, c in (csc.items() if self.partition.is_hetero else
                      ((None, csc), )):
            src = et[0] if et is not None else None
            counts[src] += torch.bincount(
                torch.as_tensor(c.row).to(device, torch.int64),
                minlength=num_nodes[src])
        return counts

    def _hetero_batch(self, out, seeds: Tensor,
                      sampler: DistributedNeighborSampler,
                      gather: DistributedFeatureGather):
        from torch_geometric.data import HeteroData
        data = HeteroData()
        attrs = gather.gather(out.node)
        for t, n_id in out.node.items():
            store = data[t]
            store.num_nodes = n_id.numel()
            for key, value in attrs[t].items():
                store[key] = value
            store.n_id = n_id
            if out.batch is not None:
                store.batch = out.batch[t]
            if out.num_sampled_nodes is not None:
                store.num_sampled_nodes = out.num_sampled_nodes[t]
        # Edge ids (and so attributes) where the output has them (PyG drops
        # them where 'bidirectional' merged reverse edge types):
        e_ids = {et: e for et, e in out.edge.items() if e is not None}
        edge_attrs = gather.gather_edges(
            e_ids, sampler.edge_destinations(out))
        for et in out.row:
            store = data[et]
            store.edge_index = torch.stack([out.row[et], out.col[et]])
            if et in e_ids:
                store.e_id = e_ids[et]
                for key, value in edge_attrs.get(et, {}).items():
                    store[key] = value
            if out.num_sampled_edges is not None:
                store.num_sampled_edges = out.num_sampled_edges[et]
        data[self.input_type].batch_size = seeds.numel()
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

    def _threaded(self, batches: List[SeedBatch]) -> Iterator:
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

    def _batches(self, batches: List[SeedBatch],
                 sampler: DistributedNeighborSampler,
                 gather: DistributedFeatureGather) -> Iterator:
        # (batch, its stats) of every seed batch, with `sampler` and
        # `gather` (the loader's, or a worker thread's views).
        from torch_geometric.data import Data
        for seeds, times, input_id in batches:
            out = sampler.sample_from_nodes(self._seeds(seeds), times)
            for hook in list(self._sampled_hooks.values()):
                hook(out)
            seed_time = out.metadata[1]  # As the sampler took them.
            if self.transform_sampler_output is not None:
                out = self._transform_output(out)
            if self.partition.is_hetero:
                data = self._hetero_batch(out, seeds, sampler, gather)
                data[self.input_type].input_id = input_id
                if seed_time is not None:
                    data[self.input_type].seed_time = seed_time
                yield self._finish(data, sampler, gather)
                continue
            attrs = gather.gather(out.node)
            data = Data(edge_index=torch.stack([out.row, out.col]),
                        num_nodes=out.node.numel(), **attrs)
            data.n_id, data.e_id = out.node, out.edge
            if out.batch is not None:
                data.batch = out.batch
            for key, value in gather.gather_edges(
                    out.edge, sampler.edge_destinations(out)).items():
                data[key] = value
            data.batch_size = seeds.numel()
            data.input_id = input_id
            if seed_time is not None:
                data.seed_time = seed_time
            data.num_sampled_nodes = out.num_sampled_nodes
            data.num_sampled_edges = out.num_sampled_edges
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
        for hook in list(self._batch_hooks.values()):
            hook(data)
        return data


def _renamed(kwargs: Dict[str, Any],
             num_presample_batches: Optional[int]) -> int:
    # The deprecated spelling of `num_presample_batches`; any other keyword
    # is unexpected, as without `**kwargs`.
    if 'presample_batches' in kwargs:
        value = kwargs.pop('presample_batches')
        if num_presample_batches is not None:
            raise ValueError("'presample_batches' and "
                             "'num_presample_batches' were both given; pass "
                             f"num_presample_batches={value!r} only")
        warn_renamed('presample_batches',
                     f'num_presample_batches={value!r}', stacklevel=4)
        num_presample_batches = value
    if num_presample_batches is None:
        num_presample_batches = 8
    check_int('num_presample_batches', num_presample_batches, 1)
    if kwargs:
        raise TypeError(f"DistributedNeighborLoader got unexpected keyword "
                        f"arguments {sorted(kwargs)}")
    return num_presample_batches
