r"""Collective neighbor sampling over a partitioned graph (DSP-style): every
rank holds one part (:class:`~pyg_orch.distributed.GraphPartition`); each
hop, the frontier vertices are sent to the parts that own them (one
:func:`~pyg_orch.parallel.exchange.exchange`), sampled there from
their in-edges, and the sampled neighbors and edge ids are sent back (a
second exchange), then relabeled locally as
:func:`pyg_orch.sampling.multi_hop.sample_multi_hop` does, so that the hop
order, the edge order and the relabeling are those of the single-machine
sampler (with full fan-out, the very same output).

Heterogeneous partitions are sampled the same way, all edge types of a hop
in the same two exchanges: the frontier of every edge type's destination
type goes to its owners, which sample that edge type's in-edges.

Sampling runs on the CPU over the part's memory-mapped files, or on a CUDA
device (:obj:`device`), over copies of the part's topology made there once;
the exchanges then move CUDA tensors (under NCCL without a trip through host
memory)."""
from __future__ import annotations

import copy
import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import torch
from torch import Tensor
from torch_geometric.sampler import (
    BaseSampler,
    EdgeSamplerInput,
    HeteroSamplerOutput,
    NegativeSampling,
    NodeSamplerInput,
    SamplerOutput,
)
from torch_geometric.sampler.base import SubgraphType

from pyg_orch.topology.csc import CSCTopology
from pyg_orch.parallel.exchange import (
    exchange,
    group_rank,
    group_size,
    split_by_value,
)
from pyg_orch.sampling.part_modes import (
    part_node_times,
    part_weights,
    sort_by_time,
    time_per_position,
)
from pyg_orch.sampling.arguments import (
    DISJOINT_INDUCED,
    node_seed_times,
    parse_subgraph_type,
    resolve_device,
    times_per_seed,
)
from pyg_orch.sampling.edges import sample_from_edges
from pyg_orch.sampling.multi_hop import append_hop_edges
from pyg_orch.sampling.neighbors import sample_neighbors
from pyg_orch.sampling.contract import preserved_generators
from pyg_orch.core.buffers import DenseBufferPool
from pyg_orch.sampling.relabel import DenseRelabeler, Relabeler, SortRelabeler

__all__ = ['DistributedNeighborSampler', 'SamplingStats']


@dataclass
class SamplingStats:
    r"""Counts of the last :meth:`DistributedNeighborSampler.sample_from_nodes`
    call on this rank.

    Attributes:
        local_requests (int): Frontier vertices this part owns.
        remote_requests (int): Frontier vertices sent to other parts.
        served_requests (int): Vertices this part sampled for other parts.
        bytes_sent (int): Payload bytes sent to other ranks (ids and
            sampled neighbors; the size exchanges not counted).
        bytes_received (int): Payload bytes received from other ranks.
    """
    local_requests: int = 0
    remote_requests: int = 0
    served_requests: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    per_hop: List[Dict[str, int]] = field(default_factory=list)


def _check_generator(generator: Optional[torch.Generator],
                     device: torch.device) -> None:
    if generator is None:
        return
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"'generator' must be a torch.Generator (got "
                         f"{type(generator).__name__})")
    gen = generator.device
    if gen.type != device.type or (
            device.type == 'cuda' and gen.index is not None
            and gen.index != device.index):
        raise ValueError(f"'generator' is a generator on {str(gen)!r} but "
                         f"sampling runs on {str(device)!r}: pass "
                         f"torch.Generator(device={str(device)!r})")


def _nbytes(parts: Sequence[Tensor], skip: int) -> int:
    return sum(t.numel() * t.element_size()
               for r, t in enumerate(parts) if r != skip)


class DistributedNeighborSampler(BaseSampler):
    r"""Samples multi-hop neighborhoods of seeds over a graph partitioned
    with :func:`~pyg_orch.distributed.partition_graph`, one part per rank
    of :obj:`group` (part :obj:`k` on rank :obj:`k`): a PyG
    :class:`~torch_geometric.sampler.BaseSampler` over global ids.

    :meth:`sample_from_nodes` and :meth:`sample_from_edges` are
    **collectives**: every rank calls them once per step, with its own
    seeds (possibly none), with the same arguments.
    :meth:`sample_from_edges` has the semantics of PyG's
    :class:`~torch_geometric.sampler.NeighborSampler` (binary and triplet
    negatives, drawn over all vertices of the graph with this rank's
    :obj:`generator`; temporal label edges). Sampling is uniform,
    without replacement unless :obj:`replace`, each part drawing from its
    own :obj:`generator` for the vertices it owns; with :obj:`disjoint`,
    every seed gets its own subgraph, as in
    :class:`~pyg_orch.HybridNeighborSampler`. Every hop takes two
    :func:`~pyg_orch.parallel.exchange.exchange` calls, for all edge
    types together. :meth:`set_hot_nodes` makes the last hop skip given
    vertices, as
    :class:`~pyg_orch.HybridNeighborSampler` prunes hot vertices for
    :class:`~pyg_orch.offload.BottomLayerOffload`.

    Args:
        partition (GraphPartition): This rank's part
            (:func:`~pyg_orch.distributed.load_partition`), homogeneous or
            heterogeneous.
        num_neighbors (List[int] or Dict[Tuple[str, str, str], List[int]]):
            The fan-out of every hop (:obj:`-1`: all in-neighbors); for a
            heterogeneous graph also per edge type (a list applies to all
            edge types; missing edge types are not sampled).
        group (ProcessGroup, optional): The process group (default: the
            default group); its size must be the number of parts and rank
            :obj:`k` must hold part :obj:`k`.
        generator (torch.Generator, optional): The random number generator
            of this part's draws, on :obj:`device` (e.g.
            :obj:`torch.Generator(device='cuda')` for a CUDA device).
        replace (bool): Sample with replacement: :obj:`k` independent
            uniform draws per vertex with in-edges (as PyG's
            :obj:`replace=True`). (default: :obj:`False`)
        weight_attr (str, optional): An edge attribute of the partition
            (stored with each part's in-edges, e.g. :obj:`'edge_weight'`)
            of non-negative sampling weights: neighbors are drawn with
            probability proportional to them and zero-weight edges never,
            as PyG's :obj:`weight_attr`; edge types without it are sampled
            uniformly. Checked on every rank together (a collective when
            the group has more than one rank). Not with :obj:`topology`.
        time_attr (str, optional): A node or edge attribute of the
            partition holding integer or floating-point timestamps, as
            PyG's :obj:`time_attr`: a vertex of seed :obj:`i`'s subgraph
            only gets neighbors (node-level: whose own time; edge-level:
            whose edge's time) not later than seed :obj:`i`'s time;
            sampling is then disjoint. Node-level times of all vertices are
            assembled on every rank once (one :obj:`all_reduce` per node
            type); node or edge types without the attribute are not
            filtered. Not with :obj:`topology`.
        temporal_strategy (str): :obj:`'uniform'` or :obj:`'last'` (the
            most recent neighbors), as in PyG.
        subgraph_type (str): :obj:`'directional'` (the sampled edges),
            :obj:`'bidirectional'` (also their reverses) or :obj:`'induced'`
            (all edges among the sampled vertices: one more exchange, in
            which the owners return all in-edges of the batch's vertices),
            as in PyG. Not :obj:`'induced'` with :obj:`disjoint` or
            :obj:`time_attr`.
        disjoint (bool): Give every seed its own subgraph: a vertex reached
            from two seeds appears twice, and the output's :obj:`batch`
            holds the seed index of every node (as PyG's
            :obj:`disjoint=True`). (default: :obj:`False`)
        device (torch.device or str, optional): Where sampling runs
            (default: the CPU, over the part's memory-mapped files). On a
            CUDA device, the part's topology that sampling reads (per edge
            type :obj:`csc.colptr`, :obj:`csc.row`, :obj:`csc.edge_id`, per
            node type :obj:`node_part` and :obj:`local_id`) is copied there
            once, at construction, and must fit in its memory; the
            exchanges move CUDA tensors, and the output is on
            :obj:`device`.
        topology (Dict[Any, CSCTopology] or callable, optional): The
            part's topology per edge type (:obj:`None` on a homogeneous
            partition) to sample instead of copying the part's to
            :obj:`device`, e.g. its neighbor lists split across the
            machine's ranks that share the part
            (:func:`~pyg_orch.parallel.machines.shard_part_topology`);
            or a function that makes it from the part's own topology per
            edge type, called once with the times and weights of
            :obj:`time_attr` and :obj:`weight_attr` attached (where the
            part lies, e.g. memory-mapped on the CPU). Only a function
            works with :obj:`time_attr` and :obj:`weight_attr`.
    """
    def __init__(self, partition, num_neighbors, group: Optional[Any] = None,
                 generator: Optional[torch.Generator] = None,
                 replace: bool = False,
                 device: Optional[Union[str, torch.device]] = None,
                 topology: Union[Dict[Any, CSCTopology], Callable[
                     [Dict[Any, CSCTopology]], Dict[Any, CSCTopology]],
                                 None] = None,
                 disjoint: bool = False,
                 weight_attr: Optional[str] = None,
                 time_attr: Optional[str] = None,
                 temporal_strategy: str = 'uniform',
                 subgraph_type: Any = 'directional'):
        for name, value in (('replace', replace), ('disjoint', disjoint)):
            if not isinstance(value, bool):
                raise ValueError(f"'{name}' must be a bool (got {value!r})")
        self.subgraph_type = parse_subgraph_type(subgraph_type, True,
                                                 disjoint)
        if time_attr is not None and \
                self.subgraph_type == SubgraphType.induced:
            raise ValueError(f"subgraph_type='induced' is not supported with "
                             f"temporal sampling ('time_attr'), which always "
                             f"samples disjoint subgraphs, as in PyG: "
                             f"{DISJOINT_INDUCED}")
        self.device = resolve_device(device, 'device', default='cpu')
        _check_generator(generator, self.device)
        self.is_hetero = bool(getattr(partition, 'is_hetero', False))
        if self.is_hetero:
            self.node_types = list(partition.node_ids)
            self.edge_types = list(partition.csc)
            node_part, local_id = partition.node_part, partition.local_id
            csc = partition.csc
        else:
            self.node_types, self.edge_types = [None], [None]
            node_part = {None: partition.node_part}
            local_id = {None: partition.local_id}
            csc = {None: partition.csc}
        self.fanouts = self._check_fanouts(num_neighbors)
        world_size, rank = group_size(group), group_rank(group)
        if world_size != partition.num_parts:
            raise ValueError(f'the process group has {world_size} ranks but '
                             f'the graph has {partition.num_parts} parts; '
                             f'run one rank per part')
        if rank != partition.part:
            raise ValueError(f'rank {rank} must hold part {rank} (got part '
                             f'{partition.part})')
        # On the CPU, the part's own (memory-mapped) tensors; on a GPU,
        # copies made once (the partition object is left as it is).
        self._node_part = {t: self._on_device(v) for t, v in node_part.items()}
        self._local_id = {t: self._on_device(v) for t, v in local_id.items()}
        # A function of the part's topology is called once times and
        # weights are attached (the part's own tensors stay where they lie
        # until then):
        place = topology if callable(topology) else None
        if topology is not None and place is None:
            csc = self._check_topology(topology, csc)
        self._csc = csc if place is not None else {
            et: self._topology_on_device(c) for et, c in csc.items()}
        self.partition = partition
        self.num_neighbors = num_neighbors if isinstance(
            num_neighbors, dict) else list(num_neighbors)
        self.group = group
        self.generator = generator
        self.rank, self.world_size = rank, world_size
        self.num_nodes = {t: int(self._node_part[t].numel())
                          for t in self.node_types}
        self.stats = SamplingStats()
        self._buffers = DenseBufferPool()
        #: Whether sampling draws with replacement (read by
        #: :class:`~pyg_orch.offload.BottomLayerOffload`, see
        #: :class:`~pyg_orch.sampling.contract.HotNodeSampler`).
        self.replace = replace
        self.disjoint = disjoint
        # One mutable holder, shared with the worker views of this sampler:
        self._hot = _HotNodes()
        self._add_modes(partition, time_attr, temporal_strategy,
                        weight_attr, topology is not None and place is None)
        if place is not None:
            self._csc = self._check_topology(place(self._csc), self._csc)

    def _check_topology(self, topology: Any, csc: Dict[Any, Any]
                        ) -> Dict[Any, CSCTopology]:
        # A topology given for the part: its edge types, on the device.
        if not isinstance(topology, dict) or set(topology) != set(csc):
            raise ValueError(f"'topology' must hold the edge types "
                             f"{list(csc)} (got {topology!r:.200})")
        for et, c in topology.items():
            if c.colptr.device != self.device:
                raise ValueError(f"'topology' lies on "
                                 f"{str(c.colptr.device)!r} but sampling "
                                 f"runs on {str(self.device)!r}")
        return topology

    def _add_modes(self, partition, time_attr: Optional[str],
                   temporal_strategy: str, weight_attr: Optional[str],
                   given_topology: bool) -> None:
        r"""Attaches timestamps (each neighborhood then sorted by time) and
        sampling weights to the part's topology (see
        :mod:`~pyg_orch.sampling.part_modes`)."""
        self.time_attr, self.weight_attr = time_attr, weight_attr
        self.temporal_strategy = temporal_strategy
        #: The time of every vertex per node type (node-level
        #: :obj:`time_attr`), else :obj:`None`.
        self.node_time: Optional[Dict[Any, Tensor]] = None
        # Whether time bounds travel as float64 (some part's times are
        # floating-point; every rank knows) rather than int64:
        self._float_times = False
        if time_attr is None and weight_attr is None:
            return
        if given_topology:
            raise NotImplementedError(
                "'time_attr' and 'weight_attr' with a given 'topology' "
                "dictionary (a part's neighbor lists split across ranks) "
                "are not supported: the times and weights are not split "
                "with them; give a function that splits the part's "
                "topology instead (it is called with the times and weights "
                "attached)")
        order: Dict[Any, Tensor] = {}
        if time_attr is not None:
            if not isinstance(time_attr, str):
                raise ValueError(f"'time_attr' must be the name of a node or "
                                 f"edge attribute (got {time_attr!r})")
            if temporal_strategy not in ('uniform', 'last'):
                raise ValueError(f"'temporal_strategy' must be 'uniform' or "
                                 f"'last' (got {temporal_strategy!r})")
            self.node_time, edge_time, self._float_times = part_node_times(
                partition, time_attr, self.is_hetero, self.num_nodes,
                self.group, self.world_size, self.device)
            for et, csc in self._csc.items():
                at = csc.colptr.device  # The device or, to be split, the CPU.
                src_time = None if self.node_time is None else \
                    self.node_time.get(self._src(et))
                e_time = edge_time.get(et)
                time = time_per_position(
                    csc, None if src_time is None else src_time.to(at),
                    None if e_time is None else e_time.to(at))
                if time is not None:
                    self._csc[et], order[et] = sort_by_time(csc, time)
            self.disjoint = True  # As PyG: temporal subgraphs are disjoint.
        if weight_attr is not None:
            for et, w in part_weights(partition, weight_attr, self.is_hetero,
                                      self.group, self.world_size).items():
                w = w.to(self._csc[et].colptr.device)
                if et in order:
                    w = w.index_select(0, order[et])
                self._csc[et] = dataclasses.replace(
                    self._csc[et], weight=w, _weight_cumsum=None)

    @property
    def topology(self) -> Dict[Any, CSCTopology]:
        r"""The part's topology that sampling reads, per edge type
        (:obj:`None` on a homogeneous partition), with times and weights
        attached (split across the machine's ranks with a sharded
        topology)."""
        return dict(self._csc)

    @property
    def is_temporal(self) -> bool:
        r"""Whether sampling filters neighbors by time."""
        return self.time_attr is not None

    # Hot-node pruning (see `pyg_orch.sampling.contract.HotNodeSampler`) ######

    @property
    def hot_nodes(self) -> Optional[Dict[Any, Tensor]]:
        r"""The masks (per node type, :obj:`None` on a homogeneous
        partition) of the vertices whose in-edges the last hop does not
        sample; :obj:`None` if pruning is off."""
        return self._hot.masks

    def set_hot_nodes(self, hot_nodes: Any) -> None:
        r"""Sets the vertices whose in-edges the last hop does not sample:
        a boolean mask over all global vertex ids, or a dictionary of such
        masks per node type (node types left out are not pruned);
        :obj:`None` clears it."""
        if hot_nodes is None:
            self._hot.masks = None
            return
        masks = {}
        for t, mask in self._by_node_type(hot_nodes, 'hot_nodes',
                                          'masks').items():
            n = self.num_nodes[t]
            if not isinstance(mask, Tensor) or mask.dtype != torch.bool \
                    or tuple(mask.shape) != (n, ):
                raise ValueError(f"'hot_nodes' must be boolean masks over "
                                 f"the graph's vertices ({n} of node type "
                                 f"{t!r}; got {type(mask).__name__})")
            masks[t] = mask.to(self.device)
        self._hot.masks = masks

    def _by_node_type(self, value: Any, name: str, what: str
                      ) -> Dict[Any, Any]:
        # `value` per node type ({None: value} on a homogeneous partition),
        # every key a node type of the partition.
        if not isinstance(value, dict):
            if self.is_hetero:
                raise ValueError(f"'{name}' must be a dictionary of {what} "
                                 f"per node type on a heterogeneous "
                                 f"partition")
            value = {None: value}
        for t in value:
            if t not in self.num_nodes:
                raise ValueError(f"'{name}' names the node type {t!r}, not "
                                 f"one of {self.node_types}")
        return value

    def bottom_fanout(self, edge_type: Any = None) -> int:
        r"""The fan-out of the last hop (of :obj:`edge_type` on a
        heterogeneous partition)."""
        fanout = self.fanouts[tuple(edge_type) if self.is_hetero else None]
        return int(fanout[-1]) if fanout else 0

    def topology_reads(self) -> Optional[Dict[str, int]]:
        r"""Neighbors read so far from this rank's own shard, from copies
        and from peers' shards, over all edge types, where the topology is
        sharded (:obj:`None` otherwise)."""
        from pyg_orch.topology.sharded import READ_TIERS
        counted = [c.reads for c in self._csc.values()
                   if c.is_sharded and c.reads is not None]
        if not counted:
            return None
        total = torch.stack(counted).sum(0).tolist()
        return dict(zip(READ_TIERS, total))

    @contextmanager
    def presampling(self, prune_hot: bool = False) -> Iterator[None]:
        r"""A context for drawing batches that do not change later ones:
        this rank's generator and hot nodes are restored on exit, and
        pruning is off inside unless :obj:`prune_hot`. Sampling is still a
        collective: every rank draws as many batches inside."""
        saved = self._hot.masks
        if not prune_hot:
            self._hot.masks = None
        try:
            with preserved_generators(self.generator):
                yield
        finally:
            self._hot.masks = saved

    def worker_view(self, group: Optional[Any],
                    generator: Optional[torch.Generator] = None
                    ) -> 'DistributedNeighborSampler':
        r"""A sampler of the same part for another thread: it shares the
        topology and the hot nodes (:meth:`set_hot_nodes` on either applies
        to both) and exchanges over :obj:`group` (the same ranks, e.g. a
        :func:`~pyg_orch.parallel.exchange.gloo_twin`), with its own
        :obj:`generator` (default: this sampler's) and :attr:`stats`."""
        if group_size(group) != self.world_size:
            raise ValueError(f"'group' must have the sampler's "
                             f"{self.world_size} ranks (got "
                             f"{group_size(group)})")
        _check_generator(generator, self.device)
        view = copy.copy(self)
        view.group = group
        if generator is not None:
            view.generator = generator
        view.stats = SamplingStats()
        return view

    def _on_device(self, t: Tensor) -> Tensor:
        return t if t.device == self.device else t.to(self.device)

    def _topology_on_device(self, csc: CSCTopology) -> CSCTopology:
        if csc.is_sharded or (self.device.type == 'cpu'
                              and csc.colptr.device == self.device):
            return csc
        return CSCTopology(self._on_device(csc.colptr),
                           self._on_device(csc.row),
                           None if csc.edge_id is None else
                           self._on_device(csc.edge_id), csc.num_src_nodes)

    def _check_fanouts(self, num_neighbors) -> Dict[Any, List[int]]:
        def check(values) -> List[int]:
            values = list(values)
            for k in values:
                if isinstance(k, bool) or not isinstance(k, int) or k < -1:
                    raise ValueError(f"'num_neighbors' must be integers >= "
                                     f"-1 (got {num_neighbors!r})")
            return values

        if isinstance(num_neighbors, dict):
            if not self.is_hetero:
                raise ValueError("'num_neighbors' per edge type is only for "
                                 "heterogeneous partitions")
            unknown = [et for et in num_neighbors
                       if tuple(et) not in self.edge_types]
            if unknown:
                raise ValueError(f"'num_neighbors' names edge types the "
                                 f"partition does not have: {unknown} (it "
                                 f"has {self.edge_types})")
            fanouts = {tuple(et): check(v) for et, v in num_neighbors.items()}
            hops = max((len(v) for v in fanouts.values()), default=0)
            for et in self.edge_types:
                # As PyG: an edge type not named is not sampled.
                v = fanouts.get(et, [])
                fanouts[et] = v + [0] * (hops - len(v))
            return {et: fanouts[et] for et in self.edge_types}
        values = check(num_neighbors)
        return {et: values for et in self.edge_types}

    @property
    def num_hops(self) -> int:
        return max((len(v) for v in self.fanouts.values()), default=0)

    @staticmethod
    def _src(et):
        return None if et is None else et[0]

    @staticmethod
    def _dst(et):
        return None if et is None else et[-1]

    def _check_seeds(self, seeds) -> Dict[Any, Tensor]:
        if self.is_hetero:
            if isinstance(seeds, (tuple, list)) and len(seeds) == 2 \
                    and isinstance(seeds[0], str):
                seeds = {seeds[0]: seeds[1]}
        else:
            seeds = {None: seeds}
        out = {}
        for t, ids in self._by_node_type(
                seeds, 'seeds', 'node ids (or a (node type, ids) tuple)'
        ).items():
            ids = torch.as_tensor(ids)
            if ids.dim() != 1 or (ids.numel() and (
                    ids.is_floating_point() or ids.dtype == torch.bool)):
                raise ValueError(f"'seeds' must be a 1-D tensor of node ids "
                                 f"(got shape {tuple(ids.shape)}, "
                                 f"{ids.dtype})")
            ids = ids.to(self.device, torch.int64)
            n = self.num_nodes[t]
            if ids.numel():
                lo, hi = torch.stack([ids.min(), ids.max()]).tolist()
                if lo < 0 or hi >= n:
                    raise ValueError(f"'seeds' must be in [0, {n})")
            out[t] = ids
        return out

    def _serve(self, requests: List[Tensor], hop: int,
               all_edges: bool = False) -> List[Tensor]:
        r"""Samples the in-edges of the vertices other ranks asked for,
        edge type after edge type. The reply to every rank starts with the
        number of edges drawn per edge type, then, for each edge type it
        asked about, its counts per vertex, the sources and the edge ids."""
        num_types = len(self.edge_types)
        # The requests' headers (vertices asked per edge type), read from
        # the device at once:
        headers = torch.stack([r[:num_types] for r in requests]).tolist()
        pieces: List[Dict[int, Tensor]] = [{} for _ in requests]
        totals = [[0] * num_types for _ in requests]
        offsets = [num_types] * len(requests)
        # With time, each request's time bounds follow all of its ids:
        bound_offsets = [num_types + sum(h) for h in headers]
        for e, et in enumerate(self.edge_types):
            sizes = [h[e] for h in headers]
            if sum(sizes) == 0:
                continue
            ids, bounds = [], []
            for r, n in enumerate(sizes):
                ids.append(requests[r][offsets[r]:offsets[r] + n])
                offsets[r] += n
                if self.is_temporal:
                    b = bound_offsets[r]
                    bound = requests[r][b:b + n]
                    bounds.append(bound.view(torch.float64)
                                  if self._float_times else bound)
                    bound_offsets[r] += n
            req = torch.cat(ids)
            csc = self._csc[et]
            local = self._local_id[self._dst(et)][req]
            if all_edges:  # Every in-edge, for an induced subgraph.
                pos, dst_index = sample_neighbors(csc.colptr, local, -1)
            else:
                pos, dst_index = sample_neighbors(
                    csc.colptr, local, self.fanouts[et][hop], self.replace,
                    self.generator, time=csc.time,
                    time_bound=torch.cat(bounds) if bounds else None,
                    temporal_strategy=self.temporal_strategy,
                    weight=csc.weight, weight_cumsum=csc.weight_cumsum
                    if csc.weight is not None and self.replace else None)
            # Each position's destination, where a sharded topology needs it
            # to find copied lists:
            dst = local.index_select(0, dst_index) if csc.needs_dst else None
            src = csc.neighbors(pos, dst).to(torch.int64)
            eid = csc.edge_ids(pos, dst).to(torch.int64)
            counts = torch.bincount(dst_index, minlength=req.numel())
            chunks, start = [], 0
            for n in sizes:
                chunks.append(counts[start:start + n])
                start += n
            # Edges drawn for every rank, read from the device at once:
            drawn = torch.stack([c.sum() for c in chunks]).tolist()
            edge_start = 0
            for r, (c, m) in enumerate(zip(chunks, drawn)):
                pieces[r][e] = torch.cat([c, src[edge_start:edge_start + m],
                                          eid[edge_start:edge_start + m]])
                totals[r][e] = m
                edge_start += m
            self.stats.served_requests += sum(
                n for r, n in enumerate(sizes) if r != self.rank)
        header = torch.tensor(totals, dtype=torch.int64, device=self.device)
        return [torch.cat([header[r]] + [p[e] for e in sorted(p)])
                for r, p in enumerate(pieces)]

    def _hop(self, frontier: Dict[Any, tuple], hop: int,
             batch_time: Optional[Tensor] = None, all_edges: bool = False):
        r"""One collective hop: for every edge type sampled, the sampled
        (source, edge id, index into the destination type's frontier) of
        every in-edge drawn, grouped by destination in frontier order. With
        :obj:`batch_time` (the time of every seed), every request carries
        its subgraph's time bound; with :obj:`all_edges`, every in-edge of
        the frontier, of every edge type (for an induced subgraph)."""
        num_types = len(self.edge_types)
        counts = [[0] * num_types for _ in range(self.world_size)]
        ids: List[List[Tensor]] = [[] for _ in range(self.world_size)]
        bounds: List[List[Tensor]] = [[] for _ in range(self.world_size)]
        index: Dict[Any, List[Tensor]] = {}
        for e, et in enumerate(self.edge_types):
            dst_t = self._dst(et)
            if dst_t not in frontier or (
                    not all_edges and self.fanouts[et][hop] == 0):
                continue
            _, f_global, f_batch = frontier[dst_t]
            keep = None
            masks = self._hot.masks
            hot = None if masks is None or all_edges else masks.get(dst_t)
            if hot is not None and hop == self.num_hops - 1:
                # Hot vertices are not expanded by the last hop:
                keep = (~hot[f_global]).nonzero().view(-1)
                f_global = f_global[keep]
                f_batch = None if f_batch is None else f_batch[keep]
            if f_global.numel() == 0:
                continue
            f_bound = None if batch_time is None else \
                batch_time.index_select(0, f_batch)
            if f_bound is not None and self._float_times:
                # Sent with the int64 ids: as float64's bits.
                f_bound = f_bound.view(torch.int64)
            owner = self._node_part[dst_t][f_global].to(torch.int64)
            positions, per_rank, _ = split_by_value(owner, self.world_size)
            for r, idx in enumerate(positions):
                counts[r][e] = per_rank[r]
                ids[r].append(f_global[idx])
                if f_bound is not None:
                    bounds[r].append(f_bound[idx])
            # Positions in the whole frontier:
            index[et] = positions if keep is None else [
                keep[idx] for idx in positions]
            self.stats.local_requests += per_rank[self.rank]
            self.stats.remote_requests += f_global.numel() - \
                per_rank[self.rank]
        header = torch.tensor(counts, dtype=torch.int64, device=self.device)
        send = [torch.cat([header[r]] + ids[r] + bounds[r])
                for r in range(self.world_size)]
        self.stats.bytes_sent += _nbytes(send, self.rank)
        requests = exchange(send, self.group)
        self.stats.bytes_received += _nbytes(requests, self.rank)
        replies = self._serve(requests, hop, all_edges)
        self.stats.bytes_sent += _nbytes(replies, self.rank)
        answers = exchange(replies, self.group)
        self.stats.bytes_received += _nbytes(answers, self.rank)

        # The edges drawn per rank and edge type, read from the device at
        # once:
        drawn = torch.stack([a[:num_types] for a in answers]).tolist()
        parts: Dict[Any, Tuple[list, list, list]] = {
            et: ([], [], []) for et in index}
        for r, ans in enumerate(answers):
            offset = num_types
            for e, et in enumerate(self.edge_types):
                idx = index.get(et)
                n = 0 if idx is None else idx[r].numel()
                if n == 0:
                    continue
                c = ans[offset:offset + n]
                m = drawn[r][e]
                srcs, eids, dsts = parts[et]
                srcs.append(ans[offset + n:offset + n + m])
                eids.append(ans[offset + n + m:offset + n + 2 * m])
                dsts.append(idx[r].repeat_interleave(c, output_size=m))
                offset += n + 2 * m
        out = {}
        for et, (srcs, eids, dsts) in parts.items():
            src, eid, dst = torch.cat(srcs), torch.cat(eids), torch.cat(dsts)
            # Grouped by destination in frontier order, as sample_neighbors:
            perm = torch.sort(dst, stable=True).indices
            out[et] = (src[perm], eid[perm], dst[perm])
        return out

    def sample_from_nodes(self, seeds, seed_time=None):
        r"""Samples the neighborhoods of :obj:`seeds` with the help of every
        other rank: a collective, every rank calls it once per step.
        :obj:`seeds` is PyG's
        :class:`~torch_geometric.sampler.NodeSamplerInput` (global ids in
        :obj:`node`, times in :obj:`time`; the output's :obj:`metadata`
        starts with its :obj:`input_id`), or global ids (may be empty; for
        a heterogeneous partition a dictionary of ids per node type or a
        (node type, ids) tuple). With :obj:`time_attr`, :obj:`seed_time`
        holds every seed's time (one number per seed; by default a
        node-level time's own value; a floating-point time bounds integer
        times by its floor).

        Returns:
            torch_geometric.sampler.SamplerOutput: :obj:`node` (global ids,
            seeds first, duplicates kept as in PyG), :obj:`row`,
            :obj:`col` (indices into :obj:`node`), :obj:`edge` (global edge
            ids), :obj:`num_sampled_nodes` and :obj:`num_sampled_edges`
            per hop, and with :obj:`disjoint` the seed index :obj:`batch`
            of every node; for a heterogeneous partition a
            :class:`~torch_geometric.sampler.HeteroSamplerOutput`, with
            dictionaries per node and edge type, as the single-machine
            sampler's. Its :obj:`metadata` is :obj:`(input_id, seed_time,
            edge_dst)`: as in PyG's node samplers, the seeds' ids in the
            input (:obj:`None` for plain ids) and times (temporal sampling,
            else :obj:`None`); third, with
            :obj:`subgraph_type='bidirectional'`, the edge ids and
            destinations before the conversion, per edge type (read by
            :meth:`edge_destinations`).
        """
        input_id = None
        if isinstance(seeds, NodeSamplerInput):
            if seed_time is not None:
                raise ValueError("'seed_time' must be None when 'seeds' is a "
                                 "NodeSamplerInput (pass its 'time')")
            input_id, seed_time = seeds.input_id, seeds.time
            if seeds.input_type is not None:
                seed_time = None if seed_time is None else {
                    seeds.input_type: seed_time}
                seeds = {seeds.input_type: seeds.node}
            else:
                seeds = seeds.node
        out = self.sample_seeds(seeds, seed_time)
        out.metadata = (input_id, ) + tuple(out.metadata[1:])
        return self._to_subgraph_type(out)

    def sample_from_edges(
        self,
        inputs: EdgeSamplerInput,
        neg_sampling: Optional[NegativeSampling] = None,
    ) -> Union[SamplerOutput, HeteroSamplerOutput]:
        r"""Samples the subgraph around a batch of label edges (global ids)
        as PyG's :class:`~torch_geometric.sampler.NeighborSampler` does
        (:func:`~pyg_orch.sampling.edges.sample_from_edges`): the endpoints,
        with negatives drawn over all vertices of the graph, are the seeds
        of one collective :meth:`sample_seeds` call; the label bookkeeping
        is in :obj:`metadata`, in PyG's layout. A collective."""
        if not isinstance(inputs, EdgeSamplerInput):
            raise TypeError(f"'inputs' must be an EdgeSamplerInput (got "
                            f"{type(inputs).__name__})")
        out = sample_from_edges(self, inputs, neg_sampling)
        # Where the edge ids point, last (see `edge_destinations`):
        out.metadata = (*out.metadata, self._directional(out))
        return self._to_subgraph_type(out)

    def _to_subgraph_type(self, out: Any) -> Any:
        if self.subgraph_type == SubgraphType.bidirectional:
            out = out.to_bidirectional()  # Keeps the metadata.
        return out

    def _directional(self, out: Any) -> Optional[Dict[Any, Tuple[Tensor,
                                                                 Tensor]]]:
        # Before a bidirectional conversion: every edge id and its
        # destination, per edge type.
        if self.subgraph_type != SubgraphType.bidirectional:
            return None
        if not self.is_hetero:
            return {None: (out.edge, out.node.index_select(0, out.col))}
        return {et: (out.edge[et],
                     out.node[self._dst(et)].index_select(0, out.col[et]))
                for et in self.edge_types}

    # `pyg_orch.sampling.edges.SeedSampler`:

    @property
    def global_num_nodes(self) -> Dict[Any, int]:
        return dict(self.num_nodes)

    @property
    def global_node_time(self) -> Optional[Dict[Any, Tensor]]:
        return self.node_time

    def sample_seeds(self, seed, seed_time=None):
        r"""Samples the neighborhoods of :obj:`seed` (global ids, or a
        dictionary per node type) at :obj:`seed_time`, as
        :meth:`sample_from_nodes` but without the
        :obj:`'bidirectional'` conversion and with :obj:`None` for
        :obj:`input_id` in :obj:`metadata`. A collective."""
        seeds = self._check_seeds(seed)
        seed_time = self._seed_times(seeds, seed_time)
        batch_time = None if seed_time is None else self._bounds(seed_time)
        self.stats = SamplingStats()
        num_hops = self.num_hops
        device = self.device
        relabel = self._relabelers()
        nodes = {t: [] for t in self.node_types}
        batches = {t: [] for t in self.node_types}
        rows = {et: [] for et in self.edge_types}
        cols = {et: [] for et in self.edge_types}
        edges = {et: [] for et in self.edge_types}
        num_sampled_nodes = {t: [0] * (num_hops + 1) for t in self.node_types}
        num_sampled_edges = {et: [0] * num_hops for et in self.edge_types}
        # Per node type: (local ids, global ids, seed index or None).
        frontier: Dict[Any, Tuple[Tensor, Tensor, Optional[Tensor]]] = {}
        try:
            for t, ids in seeds.items():
                batch = None
                if self.disjoint:  # Seed i roots subgraph i.
                    batch = torch.arange(ids.numel(), device=device)
                    batches[t].append(batch)
                relabel[t].init(self._keys(t, ids, batch))
                nodes[t].append(ids)
                num_sampled_nodes[t][0] = ids.numel()
                frontier[t] = (torch.arange(ids.numel(), device=device), ids,
                               batch)
            for hop in range(num_hops):
                before = dict(vars(self.stats))
                # Every rank, every hop:
                sampled = self._hop(frontier, hop, batch_time)
                self.stats.per_hop.append({
                    k: getattr(self.stats, k) - before[k]
                    for k in before if k != 'per_hop'})
                cand: Dict[Any, list] = {}
                for et, (src, eid, dst) in sampled.items():
                    f_local, _, f_batch = frontier[self._dst(et)]
                    batch = None if f_batch is None else \
                        f_batch.index_select(0, dst)
                    cand.setdefault(self._src(et), []).append(
                        (et, src, f_local.index_select(0, dst), eid, batch))
                next_frontier = {}
                for t, parts in cand.items():
                    src = torch.cat([p[1] for p in parts])
                    batch = torch.cat([p[4] for p in parts]) \
                        if self.disjoint else None
                    start = relabel[t].num_nodes
                    local, new = relabel[t].add(self._keys(t, src, batch))
                    append_hop_edges(
                        ((et, col, eid) for et, _, col, eid, _ in parts),
                        local, hop, rows, cols, edges, num_sampled_edges)
                    new_batch = None
                    if self.disjoint:  # Keys back to (seed index, id):
                        n = self.num_nodes[t]
                        new, new_batch = new % n, new // n
                        batches[t].append(new_batch)
                    nodes[t].append(new)
                    num_sampled_nodes[t][hop + 1] = new.numel()
                    next_frontier[t] = (torch.arange(
                        start, start + new.numel(), device=device), new,
                        new_batch)
                frontier = next_frontier
            if self.subgraph_type == SubgraphType.induced:
                rows, cols, edges = self._induced_edges(nodes, relabel)
                num_sampled_edges = None
        finally:
            for r in relabel.values():
                r.close()

        def _cat(parts):
            return torch.cat(parts) if parts else torch.empty(
                0, dtype=torch.int64, device=device)

        node = {t: _cat(v) for t, v in nodes.items()}
        row = {et: _cat(v) for et, v in rows.items()}
        col = {et: _cat(v) for et, v in cols.items()}
        edge = {et: _cat(v) for et, v in edges.items()}
        batch = {t: _cat(v) for t, v in batches.items()} \
            if self.disjoint else None
        if not self.is_hetero:
            out = SamplerOutput(
                node=node[None], row=row[None], col=col[None],
                edge=edge[None], batch=None if batch is None else batch[None],
                num_sampled_nodes=num_sampled_nodes[None],
                num_sampled_edges=None if num_sampled_edges is None else
                num_sampled_edges[None])
        else:
            out = HeteroSamplerOutput(node=node, row=row, col=col, edge=edge,
                                      batch=batch,
                                      num_sampled_nodes=num_sampled_nodes,
                                      num_sampled_edges=num_sampled_edges)
        out.metadata = (None, seed_time, self._directional(out))
        return out

    def edge_destinations(self, out) -> Any:
        r"""The global id of the destination of every edge of :obj:`out`,
        an output of :meth:`sample_from_nodes` (per edge type for a
        heterogeneous partition), as
        :meth:`~pyg_orch.features.partition_gather.DistributedFeatureGather.gather_edges`
        takes it: with :obj:`subgraph_type='bidirectional'` the edge's own
        destination, also where the batch holds it reversed."""
        directional = out.metadata[-1] if out.metadata else None
        if not self.is_hetero:
            return _edge_destinations(directional, None, out.node, out.col,
                                      out.edge)
        return {et: _edge_destinations(directional, et,
                                       out.node[self._dst(et)], out.col[et],
                                       out.edge[et])
                for et in out.edge if out.edge[et] is not None}

    def _induced_edges(self, nodes: Dict[Any, List[Tensor]],
                       relabel: Dict[Any, Relabeler]):
        r"""All edges among the sampled vertices (a collective, like a
        hop): every in-edge of every vertex of the batch, from its owner,
        kept where its source was sampled too; grouped by destination in
        batch order, then in CSC order, as the single-machine sampler's."""
        frontier = {}
        for t, parts in nodes.items():
            ids = torch.cat(parts) if parts else torch.empty(
                0, dtype=torch.int64, device=self.device)
            frontier[t] = (torch.arange(ids.numel(), device=self.device),
                           ids, None)
        sampled = self._hop(frontier, 0, all_edges=True)
        empty = torch.empty(0, dtype=torch.int64, device=self.device)
        rows = {et: [empty] for et in self.edge_types}
        cols = {et: [empty] for et in self.edge_types}
        edges = {et: [empty] for et in self.edge_types}
        for et, (src, eid, dst) in sampled.items():
            local = relabel[self._src(et)].lookup(src)
            keep = local >= 0
            rows[et], cols[et], edges[et] = [local[keep]], [dst[keep]], \
                [eid[keep]]
        return rows, cols, edges

    def _relabelers(self) -> Dict[Any, Relabeler]:
        # Global ids -> batch positions through a dense array per node type
        # (4 bytes per vertex, one per thread, as the part's maps of every
        # vertex); (seed index, id) keys of disjoint subgraphs are sorted.
        if self.disjoint:
            return {t: SortRelabeler(self.device) for t in self.node_types}
        return {t: DenseRelabeler(self._buffers.get(t, self.num_nodes[t],
                                                    self.device))
                for t in self.node_types}

    def _seed_times(self, seeds: Dict[Any, Tensor],
                    seed_time: Any) -> Optional[Tensor]:
        r"""The time of every seed (temporal sampling), else :obj:`None`."""
        if not self.is_temporal:
            if seed_time is not None:
                raise ValueError("'seed_time' is for temporal sampling; "
                                 "pass 'time_attr' to the sampler")
            return None
        if seed_time is None:
            times = node_seed_times(
                self.node_time, self.time_attr, seeds,
                "'seed_time' ('input_time' to the loader)")
        else:
            if not isinstance(seed_time, dict):
                if len(seeds) != 1:
                    raise ValueError(f"'seed_time' must be a dictionary of "
                                     f"times per node type for seeds of "
                                     f"several node types (got "
                                     f"{list(seeds)})")
                seed_time = {next(iter(seeds)): seed_time}
            times = {t: times_per_seed(seed_time.get(t), ids.numel(),
                                       'seed_time').to(self.device)
                     for t, ids in seeds.items()}
        if len(times) == 1:
            return next(iter(times.values())).to(self.device)
        # Seeds of several node types (link endpoints): subgraph i is
        # bounded by the time of seed i, as in the single-machine sampler.
        size = max(v.numel() for v in times.values())
        out = None
        for v in times.values():
            if out is None:
                out = v.new_zeros(size, device=self.device)
            out[:v.numel()] = v.to(self.device)
        return out

    def _bounds(self, seed_time: Tensor) -> Tensor:
        r"""The time bound of every seed's subgraph as the ranks exchange
        it: :obj:`float64` where the part's times are floating-point, else
        :obj:`int64` (a floating-point seed time rounded down: an integer
        time :obj:`t` is at most :obj:`b` exactly when it is at most
        :obj:`floor(b)`)."""
        if self._float_times:
            return seed_time.to(torch.float64)
        if seed_time.is_floating_point():
            seed_time = torch.floor(seed_time.to(torch.float64)).clamp(
                -2.0**62, 2.0**62)
        return seed_time.to(torch.int64)

    def _keys(self, node_type: Any, ids: Tensor,
              batch: Optional[Tensor]) -> Tensor:
        r"""What relabeling tells apart: the global ids, or with
        :obj:`disjoint` (seed index, id) pairs as one integer."""
        if batch is None:
            return ids
        return batch * self.num_nodes[node_type] + ids


class _HotNodes:
    # The hot-node masks of a sampler and its worker views.
    masks: Optional[Dict[Any, Tensor]] = None


def _edge_destinations(directional: Optional[Dict[Any, Tuple[Tensor,
                                                              Tensor]]],
                       et: Any, node: Tensor, col: Tensor,
                       edge: Tensor) -> Tensor:
    # The destinations of the edges (`edge`, `col` into `node`): where they
    # point, or, after a bidirectional conversion, where their ids pointed.
    if directional is None:
        return node.index_select(0, col)
    eids, dst = directional[et]
    if eids.numel() == 0:
        return dst[:0]
    order = torch.argsort(eids)
    pos = torch.searchsorted(eids[order], edge).clamp_(
        max=eids.numel() - 1)
    return dst[order[pos]]
