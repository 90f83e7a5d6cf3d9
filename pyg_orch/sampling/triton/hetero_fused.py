r"""The fused Triton sampling path for heterogeneous graphs: node types get
global ids and all edge types' CSC layouts lie back to back, so one launch
per hop samples every edge type."""
from itertools import accumulate
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from pyg_orch.core.buffers import DenseBufferPool
from pyg_orch.topology.csc import smallest_index_dtype
from pyg_orch.sampling.output import MultiHopOutput
from pyg_orch.topology.graph import GraphTopology
from pyg_orch.core.triton_util import kernel_view
from pyg_orch.sampling.triton.fused_sampler import (
    FusedPlan,
    FusedSampler,
    PendingFused,
    aligned_slots,
    on_device_or_host,
    triton_cdiv,
)

_INT32_MAX = 2**31 - 1
_FLAT_BLOCK = 1024
_BUFFER_KEY = '__hetero_fused__'


def hetero_supports(topology: GraphTopology, num_neighbors: dict,
                    disjoint: bool, induced: bool,
                    max_fanout: int = 64, replace: bool = False) -> bool:
    r"""Whether the fused path handles this heterogeneous configuration."""
    if (not topology.is_hetero or topology.is_temporal or topology.is_weighted
            or topology.is_sharded or disjoint or induced
            or len(topology.edge_types) == 0):
        return False
    flat = [k for v in num_neighbors.values() for k in v]
    if any(k < -1 for k in flat) or (replace and -1 in flat):
        return False
    resolved = resolve_full_fanouts(
        num_neighbors, lambda et: max_in_degree(topology.csc[et]))
    if any(k > max_fanout for v in resolved.values() for k in v):
        return False
    return (sum(topology.num_nodes.values()) < _INT32_MAX
            and topology.num_edges < 2**40)


def max_in_degree(csc) -> int:
    r"""The largest in-degree of a CSC layout (:obj:`0` if empty)."""
    colptr = csc.colptr
    if colptr.numel() < 2:
        return 0
    return int((colptr[1:] - colptr[:-1]).max())


def resolve_full_fanouts(num_neighbors: Dict, degree) -> Dict:
    r""":obj:`num_neighbors` with :obj:`-1` replaced by the degree."""
    out = {}
    for et, fanouts in num_neighbors.items():
        d = int(degree(et)) if any(k < 0 for k in fanouts) else 0
        out[et] = [d if k < 0 else k for k in fanouts]
    return out


class HeteroCSC:
    r"""All edge types as one CSC layout over global node ids."""
    def __init__(self, topology: GraphTopology):
        self.node_types = topology.node_types
        self.edge_types = topology.edge_types
        self.num_nodes = [topology.num_nodes[t] for t in self.node_types]
        starts = [0] + list(accumulate(self.num_nodes))
        self.offset: Dict = dict(zip(self.node_types, starts))
        self.total_nodes = total = starts[-1]
        device = topology.device
        colptrs, rows, eids = [], [], []
        self.colbase: Dict = {}
        self._topology_csc = topology.csc
        self._max_degree: Dict = {}
        cbase = ebase = 0
        for et in self.edge_types:
            csc = topology.csc[et]
            colptr = csc.colptr.to(device, torch.int64)
            colptrs.append(colptr + ebase)
            rows.append(csc.row.to(torch.int64) + self.offset[et[0]])
            if csc.edge_id is not None:
                eids.append(csc.edge_id.to(torch.int64))
            else:
                eids.append(torch.arange(csc.num_edges, device=device))
            self.colbase[et] = cbase
            cbase += colptr.numel()
            ebase += csc.num_edges
        num_edges = ebase
        max_eid = max((csc.num_edges for csc in topology.csc.values()),
                      default=0)
        self.colptr = torch.cat(colptrs).to(
            smallest_index_dtype(num_edges))
        self.row = torch.cat(rows).to(smallest_index_dtype(total))
        self.edge_id = torch.cat(eids).to(smallest_index_dtype(max_eid))
        if topology.is_pinned:
            self.colptr, self.row, self.edge_id = (
                x.pin_memory() for x in (self.colptr, self.row,
                                         self.edge_id))

    def max_in_degree(self, edge_type) -> int:
        r"""The largest in-degree of :obj:`edge_type` (computed once)."""
        if edge_type not in self._max_degree:
            self._max_degree[edge_type] = max_in_degree(
                self._topology_csc[edge_type])
        return self._max_degree[edge_type]

    def shift(self, edge_type) -> int:
        r"""The :obj:`colptr` offset of :obj:`edge_type`'s global ids."""
        return self.colbase[edge_type] - self.offset[edge_type[-1]]


class HeteroFusedPlan(FusedPlan):
    r"""The buffers and launches of one heterogeneous batch shape."""
    def __init__(self, csc: HeteroCSC, num_neighbors: Dict,
                 seed_counts: Dict, replace: bool, hot_nodes: Optional[Tensor],
                 map_buf: Tensor, claim_buf: Tensor, device: torch.device):
        self._setup(map_buf, claim_buf, device, None if hot_nodes is None
                    else torch.zeros_like(hot_nodes))
        self.csc, self.replace = csc, bool(replace)
        ntypes, etypes = csc.node_types, csc.edge_types
        T = self.num_types = len(ntypes)
        tid = {t: i for i, t in enumerate(ntypes)}
        # All neighbors (-1): the largest in-degree, without replacement.
        if replace and any(k < 0 for v in num_neighbors.values()
                           for k in v):
            raise ValueError("'num_neighbors': the fused path samples all "
                             "neighbors (-1) only without replacement")
        num_neighbors = resolve_full_fanouts(num_neighbors,
                                             csc.max_in_degree)
        H = self.num_hops = max((len(v) for v in num_neighbors.values()),
                                default=0)
        self.fanouts = {et: num_neighbors[et] + [0] * (
            H - len(num_neighbors[et])) for et in etypes}
        self.seed_counts = [int(seed_counts.get(t, 0)) for t in ntypes]
        kw = dict(dtype=torch.int64, device=device)

        # Upper bounds of the frontier per hop and node type:
        caps = [list(self.seed_counts)]
        for h in range(H):
            nxt = [0] * T
            for et in etypes:
                k = self.fanouts[et][h]
                nxt[tid[et[0]]] += caps[h][tid[et[-1]]] * k
            caps.append([min(c, n) for c, n in zip(nxt, csc.num_nodes)])
        self.caps = caps
        region_size = [sum(caps[h][t] for h in range(H + 1))
                       for t in range(T)]
        regions = [sum(region_size[:t]) for t in range(T)]
        self.regions = regions
        self.types = torch.tensor(
            [[csc.offset[t] for t in ntypes], regions], **kw)
        self.node_buf = torch.zeros(max(sum(region_size), 1), **kw)
        # The batch's nodes, local ids type by type (see _collect):
        self.packed = torch.zeros(self.node_buf.shape, **kw)

        # Seeds: local ids in node type order -> global ids at region starts.
        B = self.batch_size = sum(self.seed_counts)
        self.seeds = torch.zeros(B, **kw)
        # (One piece per node type: never an empty list.)
        self.seed_offset = torch.cat([
            torch.full((n, ), csc.offset[t], **kw)
            for t, n in zip(ntypes, self.seed_counts)])
        self.seed_dest = torch.cat([
            torch.arange(regions[i], regions[i] + n, **kw)
            for i, n in enumerate(self.seed_counts)])
        self.positions = torch.cat([
            torch.arange(n, dtype=torch.int32, device=device)
            for n in self.seed_counts])
        self.global_seeds = torch.zeros(B, **kw)
        self.hop_seeds = torch.zeros(max(H, 1), **kw)
        # [nodes so far, frontier start, frontier count] per node type:
        self.state = torch.zeros(3, T, **kw)
        sc = torch.tensor(self.seed_counts, **kw)
        self.init_state = torch.stack([sc, torch.zeros_like(sc), sc])

        # Slots grouped by source type; a segment per (hop, edge type):
        self.hops: List[dict] = []
        self.segments: List[Tuple[int, object, int, int]] = []
        offset = 0
        for h in range(H):
            order = sorted(
                (et for et in etypes
                 if self.fanouts[et][h] > 0 and caps[h][tid[et[-1]]] > 0),
                key=lambda et: tid[et[0]])  # Stable: edge type order kept.
            table, hop_start = [], offset
            group = [None] * T  # [start, end) of each source type's slots.
            for et in order:
                k, d = self.fanouts[et][h], tid[et[-1]]
                size = caps[h][d] * k
                s = tid[et[0]]
                if group[s] is None:
                    group[s] = [offset - hop_start, 0]
                group[s][1] = offset + size - hop_start
                table.append([offset - hop_start, k, d, regions[d],
                              csc.shift(et), caps[h][d]])
                self.segments.append((h, et, offset, offset + size))
                offset += size
            M = offset - hop_start
            # The next hop starts aligned; the slots between stay empty (-1).
            offset = aligned_slots(offset)
            group = [g if g is not None else [0, 0] for g in group]
            self.hops.append(dict(
                start=hop_start, size=M,
                table=torch.tensor(table, **kw).view(-1, 6),
                kmax=max((self.fanouts[et][h] for et in order), default=0),
                fmax=max((caps[h][tid[et[-1]]] for et in order), default=0),
                bounds=torch.tensor([g[0] for g in group] +
                                    [g[1] for g in group], **kw),
                rank=torch.zeros(M + 1, **kw),
                lohi=torch.zeros(2, T, **kw)))
        total = offset
        flat = {
            name: torch.zeros(max(total, 1), **kw)
            for name in ('src', 'eid', 'dst', 'row')
        }
        flat['src'].fill_(-1)
        flat['is_new'] = torch.zeros(max(total, 1), dtype=torch.int32,
                                     device=device)
        self.flat, self.total_slots = flat, total
        for hop in self.hops:
            a, b = hop['start'], hop['start'] + hop['size']
            hop['buf'] = {k: v[a:b] for k, v in flat.items()}
        self.news = torch.zeros(max(H, 1), T, **kw)

        # Compaction: segments in hop order, outputs by edge type then hop.
        S = len(self.segments)
        seg_id = torch.zeros(max(total, 1), dtype=torch.int32)
        for s, (_, _, a, b) in enumerate(self.segments):
            seg_id[a:b] = s
        self.seg_id = seg_id.to(device)
        self.seg_start = torch.tensor([a for _, _, a, _ in self.segments],
                                      **kw)
        self.seg_end = torch.tensor([b for _, _, _, b in self.segments], **kw)
        eorder = sorted(range(S), key=lambda s: (etypes.index(
            self.segments[s][1]), self.segments[s][0]))
        self.edge_rank = torch.zeros(max(total, 1) + 1, **kw)
        self.seg_shift = torch.zeros(max(S, 1), **kw)
        # before[0, s, u]: u's edges come before s's; before[1, s, u]: u's
        # edge type comes before s's; before[2, s, u]: it is the same.
        SP = self.seg_pad = max(1 << max(S - 1, 0).bit_length(), 2)
        before = torch.zeros(3, SP, SP, dtype=torch.int64)
        # Each segment's place in that order:
        place = torch.tensor(eorder, dtype=torch.int64).argsort()
        etype = torch.tensor([etypes.index(et) for _, et, _, _ in
                              self.segments], dtype=torch.int64)
        before[0, :S, :S] = place[None, :] < place[:, None]
        before[1, :S, :S] = etype[None, :] < etype[:, None]
        before[2, :S, :S] = etype[None, :] == etype[:, None]
        self.seg_before = before.to(device)
        # The offset and count of each segment's edge type, and the edges:
        self.seg_type = torch.zeros(max(S, 1), 2, **kw)
        self.num_edges = torch.zeros(1, **kw)
        # Rows and columns per edge type, then all edge ids: one copy.
        self.edge_buf = torch.zeros(3 * max(total, 1), **kw)
        self._set_counts(torch.zeros(T + H * T + S, **kw))

    def enqueue(self) -> None:
        r"""Launches the whole batch on the current stream."""
        from pyg_orch.sampling.triton import hetero_kernels as hk
        from pyg_orch.sampling.triton import kernels as tk

        csc, state, T = self.csc, self.state, self.num_types
        tpad = max(tk.next_power_of_2(T), 2)
        colptr, row = kernel_view(csc.colptr), kernel_view(csc.row)
        eid = kernel_view(csc.edge_id)
        if self.batch_size > 0:
            torch.add(self.seeds, self.seed_offset, out=self.global_seeds)
            self.node_buf.index_copy_(0, self.seed_dest, self.global_seeds)
            self.map_buf.scatter_reduce_(0, self.global_seeds,
                                         self.positions, 'amin',
                                         include_self=False)
        state.copy_(self.init_state)
        for h, hop in enumerate(self.hops):
            M, buf = hop['size'], hop['buf']
            if M == 0:
                state[1].copy_(state[0])
                state[2].zero_()
                self.news[h].zero_()
                continue
            kmax = hop['kmax']
            kpad = max(tk.next_power_of_2(kmax), 2)
            block = max(2048 // kpad, 16)
            prune = self.hot_nodes is not None and h == self.num_hops - 1
            grid = (triton_cdiv(hop['fmax'], block), hop['table'].size(0))
            hk.hetero_sample_kernel[grid](
                colptr, row, eid, self.node_buf, state,
                self.hop_seeds[h:h + 1], hop['table'], buf['src'],
                buf['eid'], buf['dst'],
                self.hot_nodes if prune else buf['src'], T, KMAX=kmax,
                KPAD=kpad, REPLACE=self.replace, PRUNE=prune, BLOCK=block)
            grid = (triton_cdiv(M, _FLAT_BLOCK), )
            tk.claim_kernel[grid](buf['src'], self.map_buf, self.claim_buf, M,
                                  BLOCK=_FLAT_BLOCK)
            tk.mark_kernel[grid](buf['src'], self.map_buf, self.claim_buf,
                                 buf['is_new'], buf['is_new'], M,
                                 COUNT=False, BLOCK=_FLAT_BLOCK)
            rank, lohi = hop['rank'], hop['lohi']
            torch.cumsum(buf['is_new'], 0, out=rank[1:])
            torch.index_select(rank, 0, hop['bounds'], out=lohi.view(-1))
            hk.hetero_assign_kernel[grid](
                buf['src'], buf['is_new'], rank, lohi[0], self.map_buf,
                self.claim_buf, self.node_buf, state, self.types, M, T=T,
                BLOCK=_FLAT_BLOCK)
            tk.resolve_kernel[grid](buf['src'], self.map_buf, buf['row'], M,
                                    BLOCK=_FLAT_BLOCK)
            hk.hetero_advance_kernel[(1, )](lohi, state, self.news[h], T=T,
                                            TP=tpad)
        total = self.total_slots
        src, rank = self.flat['src'], self.edge_rank
        if total > 0:
            torch.cumsum(src >= 0, 0, out=rank[1:])
        H, S = self.num_hops, len(self.segments)
        hk.hetero_counts_kernel[(1, )](
            rank, self.seg_start, self.seg_end, self.seg_before,
            self.seg_shift, self.seg_type, self.num_edges, state, self.news,
            self.counts, S, T=T, HT=H * T,
            SP=self.seg_pad, TP=tpad,
            HTP=max(tk.next_power_of_2(max(H * T, 1)), 2))
        if total > 0:
            hk.hetero_compact_kernel[(triton_cdiv(total, _FLAT_BLOCK), )](
                src, rank, self.seg_id, self.seg_shift, self.seg_type,
                self.flat['row'], self.flat['dst'], self.flat['eid'],
                self.edge_buf, self.num_edges, total, BLOCK=_FLAT_BLOCK)
        cap = self.node_buf.numel()
        hk.hetero_reset_kernel[(triton_cdiv(cap, _FLAT_BLOCK), )](
            self.node_buf, self.map_buf, state, self.types, self.packed, cap,
            T=T, BLOCK=_FLAT_BLOCK)

    def _collect(self, counts: List[int]) -> MultiHopOutput:
        # Copies out of the plan's buffers, which the next batch reuses.
        csc, T, H = self.csc, self.num_types, self.num_hops
        ntypes, etypes = csc.node_types, csc.edge_types
        # One copy of the nodes and one of the edges, split into views.
        sizes = counts[:T]
        node = dict(zip(ntypes, self.packed[:sum(sizes)].clone()
                        .split_with_sizes(sizes)))
        num_nodes = {
            t: [self.seed_counts[i]] + counts[T + i:T + H * T:T]
            for i, t in enumerate(ntypes)
        }
        num_edges = {et: [0] * H for et in etypes}
        for (h, et, _, _), n in zip(self.segments, counts[T + H * T:]):
            num_edges[et][h] = n
        sizes = [sum(num_edges[et]) for et in etypes]
        E = sum(sizes)
        edges = self.edge_buf[:3 * E].clone()
        row, col = {}, {}
        # Rows and columns back to back: edge_index is a view.
        for et, n, block in zip(etypes, sizes, edges[:2 * E].split_with_sizes(
                [2 * n for n in sizes])):
            row[et], col[et] = block.view(2, n)
        eid = dict(zip(etypes, edges[2 * E:].split_with_sizes(sizes)))
        return MultiHopOutput(node, row, col, eid, None, num_nodes, num_edges)


class HeteroFusedSampler(FusedSampler):
    r"""Runs :class:`HeteroFusedPlan` objects, one per batch shape and
    thread."""
    def __init__(self, use_graphs: Optional[bool] = None,
                 max_plans: int = 4):
        super().__init__(use_graphs, max_plans)
        self._csc: Optional[Tuple[int, HeteroCSC]] = None
        self._hot: Optional[Tuple[tuple, Tensor]] = None

    def launch(self, topology: GraphTopology, num_neighbors: Dict,
               seeds: Dict, replace: bool,
               generator: Optional[torch.Generator],
               buffers: DenseBufferPool, device: torch.device,
               hot_nodes: Optional[Dict] = None) -> PendingFused:
        r"""Queues the batch; :meth:`PendingFused.result` waits for it."""
        csc = self.hetero_csc(topology)
        unknown = [t for t in seeds if t not in csc.offset]
        if unknown:
            raise ValueError(f"'seeds' has node types {unknown} that the "
                             f"graph does not have")
        flat = [seeds[t].reshape(-1) for t in csc.node_types if t in seeds]
        seed = torch.cat(flat) if flat else torch.zeros(0, dtype=torch.int64)
        counts = {t: seeds[t].numel() for t in seeds}
        hot = self._hot_mask(csc, hot_nodes, device)
        key = (id(csc), tuple(counts.get(t, 0) for t in csc.node_types),
               tuple((et, tuple(v)) for et, v in num_neighbors.items()),
               bool(replace), hot is not None)  # The plan copies the mask.
        n = csc.total_nodes
        plan, use_graphs = self._cached_plan(key, device, lambda: (
            HeteroFusedPlan(
                csc, num_neighbors, counts, replace, hot,
                buffers.get(_BUFFER_KEY, n, device, fill=-1),
                buffers.get(_BUFFER_KEY, n, device, fill=_INT32_MAX),
                device)))
        return plan.launch(on_device_or_host(seed, device), generator,
                           use_graphs, hot)

    def hetero_csc(self, topology: GraphTopology) -> HeteroCSC:
        r"""The global CSC layout of :obj:`topology`, built once."""
        if self._csc is None or self._csc[0] is not topology:
            self._csc = (topology, HeteroCSC(topology))
        return self._csc[1]

    def _hot_mask(self, csc: HeteroCSC, hot_nodes: Optional[Dict],
                  device: torch.device) -> Optional[Tensor]:
        # One mask over global ids, rebuilt only when the masks change.
        if hot_nodes is None or all(v is None for v in hot_nodes.values()):
            return None
        key = tuple((t, None if m is None else (m.data_ptr(), m.numel()))
                    for t, m in hot_nodes.items())
        if self._hot is None or self._hot[0] != key:
            parts = []
            for t, n in zip(csc.node_types, csc.num_nodes):
                m = hot_nodes.get(t)
                parts.append(torch.zeros(n, dtype=torch.bool, device=device)
                             if m is None else m.to(device, torch.bool))
            self._hot = (key, torch.cat(parts).to(torch.uint8))
        return self._hot[1]


def fused_sample_hetero(
    topology: GraphTopology,
    num_neighbors: Dict,
    seeds: Dict,
    replace: bool = False,
    generator: Optional[torch.Generator] = None,
    buffers: Optional[DenseBufferPool] = None,
    device: Optional[torch.device] = None,
    hot_nodes: Optional[Dict] = None,
) -> MultiHopOutput:
    r"""Samples a heterogeneous graph with the Triton kernels, eagerly."""
    device = torch.device(device) if device is not None else topology.device
    sampler = HeteroFusedSampler(use_graphs=False, max_plans=1)
    return sampler(topology, num_neighbors, seeds, replace, generator,
                   buffers if buffers is not None else DenseBufferPool(),
                   device, hot_nodes)
