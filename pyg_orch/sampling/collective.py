r"""Collective neighbor sampling over a partitioned graph: each hop, the
parts that own the frontier sample it (two exchanges per hop)."""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import (
    Any,
    Callable,
    Dict,
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
    as_subgraph_type,
    check_attr_names,
    check_choice,
    check_fanouts,
    node_seed_times,
    parse_subgraph_type,
    per_node_type,
    resolve_device,
    times_per_seed,
)
from pyg_orch.sampling.edges import sample_from_edges
from pyg_orch.sampling.multi_hop import (
    HopBatch,
    draw_edges,
    dst_type,
    prune,
    src_type,
    subgraph_times,
)
from pyg_orch.sampling.contract import HotNodes, HotNodesMixin
from pyg_orch.core.buffers import DenseBufferPool

__all__ = ['DistributedNeighborSampler', 'SamplingStats']


@dataclass
class SamplingStats:
    r"""Counts of the last :meth:`DistributedNeighborSampler.sample_from_nodes`
    call on this rank: frontier vertices this part owns
    (:obj:`local_requests`), sent to other parts (:obj:`remote_requests`)
    and sampled for other parts (:obj:`served_requests`); payload bytes
    sent and received; the same per hop (:obj:`per_hop`)."""
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
    if gen.type != device.type or gen.index not in (None, device.index):
        raise ValueError(f"'generator' is a generator on {str(gen)!r} but "
                         f"sampling runs on {str(device)!r}: pass "
                         f"torch.Generator(device={str(device)!r})")


def _nbytes(parts: Sequence[Tensor], skip: int) -> int:
    return sum(t.numel() * t.element_size()
               for r, t in enumerate(parts) if r != skip)


class DistributedNeighborSampler(HotNodesMixin, BaseSampler):
    r"""Samples multi-hop neighborhoods over a partitioned graph, one part
    per rank of :obj:`group` (part :obj:`k` on rank :obj:`k`): a PyG
    :class:`~torch_geometric.sampler.BaseSampler` over global ids whose
    :meth:`sample_from_nodes` and :meth:`sample_from_edges` are
    **collectives** (every rank calls them once per step, with its own
    seeds, possibly none). :meth:`set_hot_nodes` makes the last hop skip
    given vertices (see :class:`~pyg_orch.offload.BottomLayerOffload`).

    Args:
        partition (GraphPartition): This rank's part
            (:func:`~pyg_orch.distributed.load_partition`).
        num_neighbors (List[int] or Dict[Tuple[str, str, str], List[int]]):
            The fan-out of every hop (:obj:`-1`: all), or per edge type
            (edge types left out are not sampled).
        group (ProcessGroup, optional): The process group (default: the
            default group).
        generator (torch.Generator, optional): The generator of this part's
            draws, on :obj:`device`.
        replace (bool): Sample with replacement. (default: :obj:`False`)
        device (torch.device or str, optional): Where sampling runs
            (default: the CPU, over the part's memory-mapped files; on CUDA
            the part's topology is copied there once).
        topology (Dict[Any, CSCTopology] or callable, optional): The part's
            topology per edge type to sample instead (e.g. split across the
            machine's ranks,
            :func:`~pyg_orch.parallel.machines.shard_part_topology`), or a
            function making it from the part's own, times and weights
            attached (needed with :obj:`time_attr` or :obj:`weight_attr`).
        disjoint (bool): Give every seed its own subgraph.
            (default: :obj:`False`)
        weight_attr (str, optional): An edge attribute of sampling weights.
        time_attr (str, optional): A node or edge attribute of timestamps
            (temporal sampling, which is disjoint).
        temporal_strategy (str): :obj:`'uniform'` or :obj:`'last'`.
        subgraph_type (str): :obj:`'directional'`, :obj:`'bidirectional'` or
            :obj:`'induced'` (not with :obj:`disjoint` or :obj:`time_attr`).
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
        self.subgraph_type = parse_subgraph_type(
            subgraph_type, True, disjoint, temporal=time_attr is not None)
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
        self._node_part = {t: self._on_device(v) for t, v in node_part.items()}
        self._local_id = {t: self._on_device(v) for t, v in local_id.items()}
        # A function gets the part's topology with times and weights:
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
        self.replace = replace
        self.disjoint = disjoint
        # One mutable holder, shared with the worker views of this sampler:
        self._hot = HotNodes()
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
        # Attaches timestamps (sorting neighborhoods by time) and weights.
        self.time_attr, self.weight_attr = time_attr, weight_attr
        self.temporal_strategy = temporal_strategy
        self.node_time: Optional[Dict[Any, Tensor]] = None
        self._float_times = False  # Time bounds travel as float64.
        if time_attr is None and weight_attr is None:
            return
        if given_topology:
            raise NotImplementedError(
                "'time_attr' and 'weight_attr' are not supported with a "
                "'topology' dictionary (times and weights are not split with "
                "it); pass a function that splits the part's topology")
        order: Dict[Any, Tensor] = {}
        if time_attr is not None:
            check_attr_names(time_attr=time_attr)
            check_choice('temporal_strategy', temporal_strategy,
                         ('uniform', 'last'))
            self.node_time, edge_time, self._float_times = part_node_times(
                partition, time_attr, self.is_hetero, self.num_nodes,
                self.group, self.world_size, self.device)
            for et, csc in self._csc.items():
                at = csc.colptr.device  # The device or, to be split, the CPU.
                src_time = None if self.node_time is None else \
                    self.node_time.get(src_type(et))
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
        r"""The part's topology that sampling reads, per edge type."""
        return dict(self._csc)

    @property
    def is_temporal(self) -> bool:
        r"""Whether sampling filters neighbors by time."""
        return self.time_attr is not None

    def bottom_fanout(self, edge_type: Any = None) -> int:
        r"""The fan-out of the last hop (of :obj:`edge_type`)."""
        fanout = self.fanouts[tuple(edge_type) if self.is_hetero else None]
        return int(fanout[-1]) if fanout else 0

    def topology_reads(self) -> Optional[Dict[str, int]]:
        r"""Neighbors read per tier (sharded topology), else :obj:`None`."""
        from pyg_orch.topology.sharded import READ_TIERS
        counted = [c.reads for c in self._csc.values()
                   if c.is_sharded and c.reads is not None]
        if not counted:
            return None
        total = torch.stack(counted).sum(0).tolist()
        return dict(zip(READ_TIERS, total))

    def _generators(self) -> List[Optional[torch.Generator]]:
        return [self.generator]

    def worker_view(self, group: Optional[Any],
                    generator: Optional[torch.Generator] = None
                    ) -> 'DistributedNeighborSampler':
        r"""A sampler of the same part for another thread, over :obj:`group`
        and drawing from :obj:`generator` (default: this sampler's)."""
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
            fanouts = {tuple(et): check_fanouts(v, f'[{et!r}]')
                       for et, v in num_neighbors.items()}
            hops = max((len(v) for v in fanouts.values()), default=0)
            for et in self.edge_types:
                # As PyG: an edge type not named is not sampled.
                v = fanouts.get(et, [])
                fanouts[et] = v + [0] * (hops - len(v))
            return {et: fanouts[et] for et in self.edge_types}
        values = check_fanouts(num_neighbors)
        return {et: values for et in self.edge_types}

    @property
    def num_hops(self) -> int:
        return max((len(v) for v in self.fanouts.values()), default=0)

    def _check_seeds(self, seeds) -> Dict[Any, Tensor]:
        if self.is_hetero and isinstance(seeds, (tuple, list)) and \
                len(seeds) == 2 and isinstance(seeds[0], str):
            seeds = {seeds[0]: seeds[1]}
        out = {}
        for t, ids in per_node_type(
                seeds, self.num_nodes, 'seeds',
                'node ids (or a (node type, ids) tuple)').items():
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
        # Samples the in-edges other ranks asked for; a reply: edges per
        # edge type, then per edge type the counts, sources and edge ids.
        num_types = len(self.edge_types)
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
            local = self._local_id[dst_type(et)][req]
            # `all_edges`: every in-edge, for an induced subgraph.
            src, eid, dst_index = draw_edges(
                csc, local, -1 if all_edges else self.fanouts[et][hop],
                self.replace, self.generator,
                torch.cat(bounds) if bounds else None,
                self.temporal_strategy, all_edges=all_edges)
            chunks = torch.bincount(dst_index,
                                    minlength=req.numel()).split(sizes)
            drawn = torch.stack([c.sum() for c in chunks]).tolist()
            for r, (c, s, i) in enumerate(zip(chunks, src.split(drawn),
                                              eid.split(drawn))):
                pieces[r][e] = torch.cat([c, s, i])
                totals[r][e] = drawn[r]
            self.stats.served_requests += sum(
                n for r, n in enumerate(sizes) if r != self.rank)
        header = torch.tensor(totals, dtype=torch.int64, device=self.device)
        return [torch.cat([header[r]] + [p[e] for e in sorted(p)])
                for r, p in enumerate(pieces)]

    def _hop(self, frontier: Dict[Any, tuple], hop: int,
             batch_time: Optional[Tensor] = None, all_edges: bool = False):
        # One collective hop: per edge type, (sources, edge ids, indices
        # into the frontier) grouped by destination, as `HopBatch.add_hop`.
        num_types = len(self.edge_types)
        counts = [[0] * num_types for _ in range(self.world_size)]
        ids: List[List[Tensor]] = [[] for _ in range(self.world_size)]
        bounds: List[List[Tensor]] = [[] for _ in range(self.world_size)]
        index: Dict[Any, List[Tensor]] = {}
        for e, et in enumerate(self.edge_types):
            dst_t = dst_type(et)
            if dst_t not in frontier or (
                    not all_edges and self.fanouts[et][hop] == 0):
                continue
            masks = self._hot.masks  # Not expanded by the last hop:
            last = not all_edges and hop == self.num_hops - 1
            keep, f_global, f_batch = prune(
                frontier[dst_t],
                masks.get(dst_t) if last and masks is not None else None)
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
        r"""Samples the neighborhoods of :obj:`seeds` (collective)."""
        input_id = None
        if isinstance(seeds, NodeSamplerInput):
            if seed_time is not None:
                raise ValueError("'seed_time' must be None when 'seeds' is a "
                                 "NodeSamplerInput (pass its 'time')")
            input_id, seed_time, t = seeds.input_id, seeds.time, \
                seeds.input_type
            seeds = seeds.node if t is None else {t: seeds.node}
        out = self.sample_seeds(seeds, seed_time)
        out.metadata = (input_id, ) + tuple(out.metadata[1:])
        return as_subgraph_type(out, self.subgraph_type)

    def sample_from_edges(
        self,
        inputs: EdgeSamplerInput,
        neg_sampling: Optional[NegativeSampling] = None,
    ) -> Union[SamplerOutput, HeteroSamplerOutput]:
        r"""Samples the subgraph around a batch of label edges (global ids),
        as PyG's :class:`~torch_geometric.sampler.NeighborSampler`. A
        collective."""
        if not isinstance(inputs, EdgeSamplerInput):
            raise TypeError(f"'inputs' must be an EdgeSamplerInput (got "
                            f"{type(inputs).__name__})")
        out = sample_from_edges(self, inputs, neg_sampling)
        # Where the edge ids point, last (see `edge_destinations`):
        out.metadata = (*out.metadata, self._directional(out))
        return as_subgraph_type(out, self.subgraph_type)

    def _directional(self, out: Any) -> Optional[Dict[Any, Tuple[Tensor,
                                                                 Tensor]]]:
        # Every edge id and its destination, before 'bidirectional'.
        if self.subgraph_type != SubgraphType.bidirectional:
            return None
        if not self.is_hetero:
            return {None: (out.edge, out.node.index_select(0, out.col))}
        return {et: (out.edge[et],
                     out.node[dst_type(et)].index_select(0, out.col[et]))
                for et in self.edge_types}

    @property
    def global_num_nodes(self) -> Dict[Any, int]:
        return dict(self.num_nodes)

    @property
    def global_node_time(self) -> Optional[Dict[Any, Tensor]]:
        return self.node_time

    def sample_seeds(self, seed, seed_time=None):
        r"""Samples without the :obj:`'bidirectional'` conversion."""
        seeds = self._check_seeds(seed)
        seed_time = self._seed_times(seeds, seed_time)
        batch_time = None if seed_time is None else self._bounds(seed_time)
        self.stats = SamplingStats()
        batch = HopBatch(self.node_types, self.edge_types, self.num_hops,
                         self.num_nodes, self.disjoint, self.device,
                         self._buffers)
        try:
            frontier = batch.add_seeds(seeds)
            for hop in range(self.num_hops):
                before = dict(vars(self.stats))
                # Every rank, every hop:
                sampled = self._hop(frontier, hop, batch_time)
                self.stats.per_hop.append({
                    k: getattr(self.stats, k) - before[k]
                    for k in before if k != 'per_hop'})
                frontier = batch.add_hop(hop, frontier, sampled)
            out = batch.output(self._induced_edges(batch) if
                               self.subgraph_type == SubgraphType.induced
                               else None).to_pyg(self.is_hetero)
        finally:
            batch.close()
        out.metadata = (None, seed_time, self._directional(out))
        return out

    def edge_destinations(self, out) -> Any:
        r"""The global destination id of every edge of :obj:`out` (per edge
        type on a heterogeneous partition), as :obj:`gather_edges` takes it."""
        directional = out.metadata[-1] if out.metadata else None
        if not self.is_hetero:
            return _edge_destinations(directional, None, out.node, out.col,
                                      out.edge)
        return {et: _edge_destinations(directional, et,
                                       out.node[dst_type(et)], out.col[et],
                                       out.edge[et])
                for et in out.edge if out.edge[et] is not None}

    def _induced_edges(self, batch: HopBatch):
        # All edges among the sampled vertices (a collective hop).
        frontier = {t: (torch.arange(ids.numel(), device=self.device), ids,
                        None) for t, ids in batch.node().items()}
        return batch.induced_edges(self._hop(frontier, 0, all_edges=True))

    def _seed_times(self, seeds: Dict[Any, Tensor],
                    seed_time: Any) -> Optional[Tensor]:
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
        return subgraph_times(times, self.device)

    def _bounds(self, seed_time: Tensor) -> Tensor:
        # The seeds' time bounds as exchanged: float64 or int64 (a float
        # time rounded down bounds integer times alike).
        if self._float_times:
            return seed_time.to(torch.float64)
        if seed_time.is_floating_point():
            seed_time = torch.floor(seed_time.to(torch.float64)).clamp(
                -2.0**62, 2.0**62)
        return seed_time.to(torch.int64)


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
