r"""Multi-hop sampling on the GPU with fused Triton kernels, without host
synchronization until a batch's counts are read."""
import gc
import threading
import weakref
from collections import OrderedDict
from typing import List, Optional

import torch
from torch import Tensor

from pyg_orch.core.buffers import DenseBufferPool
from pyg_orch.topology.csc import CSCTopology, ShardLayout
from pyg_orch.core.devices import current_stream, with_index
from pyg_orch.sampling.output import MultiHopOutput
from pyg_orch.core.triton_util import kernel_view
# Re-exported: tests and notebooks ask this module whether Triton is there.
from pyg_orch.core.triton_util import triton_available  # noqa: F401

_INT32_MAX = 2**31 - 1
_FLAT_BLOCK = 1024
#: Hops' slots start at multiples of this (16-byte aligned int8 buffers).
_ALIGN_SLOTS = 16


def aligned_slots(num_slots: int) -> int:
    r""":obj:`num_slots` rounded up to where the next hop's slots may start:
    buffers sliced there keep the same 16-byte alignment for every batch
    size, so Triton, which specializes kernels on their pointers' alignment,
    compiles no new variant for a shorter batch (an epoch's last)."""
    return -(-num_slots // _ALIGN_SLOTS) * _ALIGN_SLOTS


def supports(topology, num_neighbors: dict, disjoint: bool, induced: bool,
             max_fanout: int = 64) -> bool:
    r"""Whether the fused path handles this configuration."""
    if (topology.is_hetero or topology.is_temporal or topology.is_weighted
            or disjoint or induced
            or any(k < 0 or k > max_fanout for k in num_neighbors[None])):
        return False
    n = topology.num_nodes[None]
    return n < _INT32_MAX and topology.num_edges < 2**40


class FusedPlan:
    r"""The buffers and kernel launches of one batch shape, sized by upper
    bounds to be replayed as a CUDA graph."""
    def __init__(self, topo: CSCTopology, num_nodes: int, fanouts: List[int],
                 batch_size: int, replace: bool, hot_nodes: Optional[Tensor],
                 map_buf: Tensor, claim_buf: Tensor, device: torch.device):
        self._setup(map_buf, claim_buf, device, None if hot_nodes is None
                    else torch.zeros(num_nodes, dtype=torch.bool,
                                     device=device))
        self.topo, self.num_nodes = topo, num_nodes
        self.fanouts, self.replace = list(fanouts), bool(replace)
        B = self.batch_size = batch_size
        self.caps = [B]
        for k in fanouts:
            self.caps.append(min(self.caps[-1] * max(k, 0), num_nodes))
        kw = dict(dtype=torch.int64, device=device)
        self.seeds = torch.zeros(B, **kw)
        self.hop_seeds = torch.zeros(max(len(fanouts), 1), **kw)
        self.node_buf = torch.zeros(B + sum(self.caps[1:]), **kw)
        # [num_nodes so far, frontier start, frontier count]:
        self.state = torch.zeros(3, **kw)
        self.init_state = torch.tensor([B, 0, B], **kw)
        # All hops' slots back to back (one scan and kernel compact them),
        # in int32 where ids fit: half the memory traffic of int64.
        sizes = [self.caps[h] * max(k, 0) for h, k in enumerate(fanouts)]
        # Each hop's slots start aligned; padding slots stay empty (-1).
        padded = [aligned_slots(M) for M in sizes]
        total = sum(padded)
        i32 = dict(dtype=torch.int32, device=device)
        flat = {'src': torch.full((total, ), -1, **i32),
                'dst': torch.zeros(total, **i32)}
        flat['is_new'] = torch.zeros(total, dtype=torch.int8, device=device)
        # New nodes per block of slots, for the ranks of new nodes:
        self.block_counts = torch.zeros(
            max(triton_cdiv(total, _FLAT_BLOCK), 1), **i32)
        flat['eid'] = torch.zeros(
            total, dtype=torch.int32 if topo.num_edges < _INT32_MAX else
            torch.int64, device=device)
        self.flat = flat
        self.out, offset, offsets = [], 0, [0]
        for M, P in zip(sizes, padded):
            self.out.append({k: v[offset:offset + M] for k, v in flat.items()})
            offset += P
            offsets.append(offset)
        # An exclusive scan of the sampled slots (edges per hop: differences):
        self.edge_rank = torch.zeros(total + 1, **i32)
        self.news = torch.zeros(max(len(fanouts), 1), **kw)
        self.hop_offsets = torch.tensor(offsets, **kw)
        # row, col and edge ids in one tensor: one copy per batch.
        self.edge_buf = torch.zeros(3, total, **kw)
        self.edges = dict(zip(('row', 'col', 'eid'), self.edge_buf))
        self._set_counts(torch.zeros(1 + 2 * len(fanouts), **kw))

    def _setup(self, map_buf: Tensor, claim_buf: Tensor,
               device: torch.device, hot_nodes: Optional[Tensor]) -> None:
        if map_buf.dtype != torch.int32 or claim_buf.dtype != torch.int32:
            raise RuntimeError('the fused sampler needs int32 relabel buffers')
        self.map_buf, self.claim_buf = map_buf, claim_buf
        self.device = with_index(device)  # Fast stream lookups.
        # The plan's copy of the pruning mask, refreshed every batch: a new
        # hot set reuses the plan and its CUDA graph.
        self.hot_nodes = hot_nodes
        # Host seeds go through a pinned buffer, made at the first batch.
        self.seeds_host: Optional[Tensor] = None
        self._staged: Optional['torch.cuda.Event'] = None

    def _set_counts(self, counts: Tensor) -> None:
        # The batch's counts on the device and their pinned host copy.
        self.counts = counts
        self.counts_host = torch.zeros(counts.shape, dtype=torch.int64,
                                       pin_memory=self.device.type == 'cuda')
        self.graph = None
        self._inflight: Optional[weakref.ref] = None
        self._stream = None

    def enqueue(self) -> None:
        r"""Launches the whole batch on the current stream."""
        from pyg_orch.sampling.triton import kernels as tk

        topo, state, B = self.topo, self.state, self.batch_size
        colptr, row = kernel_view(topo.colptr), kernel_view(topo.row)
        eid = kernel_view(topo.edge_id) if topo.edge_id is not None else row
        shard_args, shard_flags = _shard_arguments(topo.kernel_shards(),
                                                   state)
        if B > 0:  # The seeds come first, in order.
            grid = (triton_cdiv(B, _FLAT_BLOCK), )
            tk.claim_kernel[grid](self.seeds, self.map_buf, self.claim_buf,
                                  B, BLOCK=_FLAT_BLOCK)  # Map: all unseen.
            tk.seed_assign_kernel[grid](self.seeds, self.node_buf,
                                        self.map_buf, self.claim_buf, B,
                                        BLOCK=_FLAT_BLOCK)
        state.copy_(self.init_state)
        for h, k in enumerate(self.fanouts):
            F, buf = self.caps[h], self.out[h]
            if k == 0 or F == 0:
                state[1:2].copy_(state[0:1])
                state[2:3].zero_()
                self.news[h:h + 1].zero_()
                continue
            M = F * k
            kpad = max(tk.next_power_of_2(k), 2)
            block = max(2048 // kpad, 16)
            prune = self.hot_nodes is not None and h == len(self.fanouts) - 1
            tk.sample_hop_kernel[(triton_cdiv(F, block), )](
                colptr, row, eid, self.node_buf, state,
                self.hop_seeds[h:h + 1], buf['src'], buf['eid'], buf['dst'],
                self.hot_nodes if prune else buf['src'], *shard_args, F,
                K=k, KPAD=kpad, REPLACE=self.replace,
                HAS_EID=topo.edge_id is not None, PRUNE=prune, BLOCK=block,
                **shard_flags)
            grid = (triton_cdiv(M, _FLAT_BLOCK), )
            tk.claim_kernel[grid](buf['src'], self.map_buf, self.claim_buf, M,
                                  BLOCK=_FLAT_BLOCK)
            tk.mark_kernel[grid](buf['src'], self.map_buf, self.claim_buf,
                                 buf['is_new'], self.block_counts, M,
                                 COUNT=True, BLOCK=_FLAT_BLOCK)
            tk.assign_block_kernel[grid](buf['src'], buf['is_new'],
                                         self.block_counts, self.map_buf,
                                         self.claim_buf, self.node_buf, state,
                                         M, BLOCK=_FLAT_BLOCK)
            tk.advance_blocks_kernel[(1, )](state, self.block_counts, grid[0],
                                            self.news[h:h + 1],
                                            BLOCK=_FLAT_BLOCK)
        total = self.flat['src'].numel()
        if total > 0:
            torch.cumsum(self.flat['src'] >= 0, 0, out=self.edge_rank[1:])
        H = len(self.fanouts)
        tk.finish_counts_kernel[(1, )](
            state, self.news, self.edge_rank, self.hop_offsets, self.counts,
            H=H, HPAD=max(tk.next_power_of_2(H), 2))
        if total > 0:
            # Sources are relabeled here: every hop has assigned its nodes.
            tk.compact_kernel[(triton_cdiv(total, _FLAT_BLOCK), )](
                self.flat['src'], self.edge_rank[1:], self.map_buf,
                self.flat['dst'], self.flat['eid'], self.edges['row'],
                self.edges['col'], self.edges['eid'], total,
                BLOCK=_FLAT_BLOCK)
        cap = self.node_buf.numel()
        tk.reset_kernel[(triton_cdiv(cap, _FLAT_BLOCK), )](
            self.node_buf, self.map_buf, state, cap, BLOCK=_FLAT_BLOCK)

    def launch(self, seeds: Tensor, generator: Optional[torch.Generator],
               use_graph: bool, hot_nodes: Optional[Tensor] = None
               ) -> 'PendingFused':
        r"""Queues a batch on the current stream without waiting for the
        device; :meth:`PendingFused.result` waits for its counts only. A
        plan made with a pruning mask needs :obj:`hot_nodes` (the boolean
        mask of this batch, on the device)."""
        if (self.hot_nodes is None) != (hot_nodes is None):
            raise ValueError(
                "'hot_nodes' must be given exactly when the plan prunes "
                "(it was made with a pruning mask)" if hot_nodes is None else
                "'hot_nodes' given to a plan made without a pruning mask")
        self._queue(seeds, generator, use_graph, hot_nodes)
        pending = PendingFused(self)
        # Weak: no cycle, so the event is freed with the batch.
        self._inflight = weakref.ref(pending)
        return pending

    def _queue(self, seeds: Tensor, generator: Optional[torch.Generator],
               use_graph: bool, hot_nodes: Optional[Tensor] = None) -> None:
        inflight = self._inflight() if self._inflight is not None else None
        if inflight is not None:  # Its outputs live in our buffers.
            inflight.result()
        stream = current_stream(self.device)
        if self._stream is not None and stream != self._stream:
            stream.wait_stream(self._stream)
        self._stream = stream
        self._copy_seeds(seeds, stream)
        if hot_nodes is not None:  # Stream-ordered: after earlier batches.
            self.hot_nodes.copy_(hot_nodes, non_blocking=True)
        # Drawn in place: one kernel, no temporary and no copy.
        torch.randint(_INT32_MAX, self.hop_seeds.shape, generator=generator,
                      out=self.hop_seeds)
        if use_graph:
            if self.graph is None:
                self._capture()
            self.graph.replay()
        else:
            self.enqueue()

    def _copy_seeds(self, seeds: Tensor,
                    stream: Optional['torch.cuda.Stream']) -> None:
        # Through the plan's pinned buffer: a copy from pageable memory
        # would wait for the whole stream.
        if self.device.type != 'cuda' or seeds.is_cuda:
            self.seeds.copy_(seeds, non_blocking=True)
            return
        if self._staged is None:  # The first time.
            self.seeds_host = torch.zeros(self.seeds.shape, dtype=torch.int64,
                                          pin_memory=True)
        else:  # The previous copy has left the buffer.
            self._staged.synchronize()
        self.seeds_host.copy_(seeds)
        self.seeds.copy_(self.seeds_host, non_blocking=True)
        self._staged = torch.cuda.Event()
        self._staged.record(stream)

    def _capture(self) -> None:
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            self.enqueue()  # Compiles the kernels; leaves buffers clean.
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        # Not `torch.cuda.graph(...)`, which synchronizes the device and
        # empties the caches; other threads may synchronize meanwhile. The
        # garbage collector waits: a CUDA graph it frees in this thread (an
        # old loader's) would invalidate the capture.
        collecting = gc.isenabled()
        gc.disable()
        try:
            with torch.cuda.stream(stream):
                graph.capture_begin(capture_error_mode='thread_local')
                try:
                    self.enqueue()
                finally:
                    graph.capture_end()
        finally:
            if collecting:
                gc.enable()
        self.graph = graph

    def _collect(self, counts: List[int]) -> MultiHopOutput:
        # Copies out of the plan's buffers, which the next batch reuses.
        H = len(self.fanouts)
        node = self.node_buf[:counts[0]].clone()
        num_edges = sum(counts[1 + H:])
        row, col, edge = self.edge_buf[:, :num_edges].clone()
        return MultiHopOutput({None: node}, {None: row}, {None: col},
                              {None: edge}, None,
                              {None: [self.batch_size] + counts[1:1 + H]},
                              {None: counts[1 + H:]})


class PendingFused:
    r"""A batch queued by :meth:`FusedPlan.launch`."""
    def __init__(self, plan: FusedPlan):
        self.plan = plan
        self._out: Optional[MultiHopOutput] = None
        plan.counts_host.copy_(plan.counts, non_blocking=True)
        self.event = None
        if plan.device.type == 'cuda':
            self.event = torch.cuda.Event()
            self.event.record(plan._stream)  # The stream it was queued on.

    def result(self) -> MultiHopOutput:
        if self._out is None:
            plan = self.plan
            if self.event is not None:
                self.event.synchronize()
            self._out = plan._collect(plan.counts_host.tolist())
            plan._inflight = None
            # The next batch overwrites the buffers copied from just now.
            plan._stream = current_stream(plan.device)
            self.plan = None
        return self._out


class FusedSampler:
    r"""Runs :class:`FusedPlan` objects, one per batch shape and thread,
    replayed as CUDA graphs on GPUs."""
    def __init__(self, use_graphs: Optional[bool] = None,
                 max_plans: int = 4):
        self.use_graphs = use_graphs
        self.max_plans = max_plans
        self._local = threading.local()

    def __getstate__(self):
        return {'use_graphs': self.use_graphs, 'max_plans': self.max_plans}

    def __setstate__(self, state):
        self.__init__(**state)

    def __call__(self, *args, **kwargs) -> MultiHopOutput:
        r"""Samples a batch: :meth:`launch`, then waits for it."""
        return self.launch(*args, **kwargs).result()

    def launch(self, topo: CSCTopology, num_nodes: int, fanouts: List[int],
               seeds: Tensor, replace: bool,
               generator: Optional[torch.Generator],
               buffers: DenseBufferPool, device: torch.device,
               hot_nodes: Optional[Tensor] = None) -> PendingFused:
        r"""Queues a batch; :meth:`PendingFused.result` waits for it."""
        # Whether it prunes, not which mask: the plan copies the mask in.
        key = (id(topo), topo.colptr.data_ptr(), num_nodes, tuple(fanouts),
               seeds.numel(), bool(replace), hot_nodes is not None)
        plan, use_graphs = self._cached_plan(key, device, lambda: FusedPlan(
            topo, num_nodes, fanouts, seeds.numel(), replace, hot_nodes,
            buffers.get(None, num_nodes, device, fill=-1),
            buffers.get(None, num_nodes, device, fill=_INT32_MAX), device))
        return plan.launch(on_device_or_host(seeds, device), generator,
                           use_graphs, hot_nodes)

    def _cached_plan(self, key, device: torch.device, make):
        # This thread's plan for `key` (least recently used ones dropped),
        # and whether to replay it as a CUDA graph.
        plans = getattr(self._local, 'plans', None)
        if plans is None:
            plans = self._local.plans = OrderedDict()
        plan = plans.get(key)
        if plan is None:
            plan = plans[key] = make()
            while len(plans) > self.max_plans:
                plans.popitem(last=False)
        plans.move_to_end(key)
        use_graphs = self.use_graphs
        if use_graphs is None:
            use_graphs = device.type == 'cuda'
        return plan, use_graphs


def fused_sample_multi_hop(
    topo: CSCTopology,
    num_nodes: int,
    fanouts: List[int],
    seeds: Tensor,
    replace: bool,
    generator: Optional[torch.Generator],
    buffers: DenseBufferPool,
    device: torch.device,
    hot_nodes: Optional[Tensor] = None,
) -> MultiHopOutput:
    r"""Samples :obj:`len(fanouts)` hops with the Triton kernels, eagerly."""
    sampler = FusedSampler(use_graphs=False, max_plans=1)
    return sampler(topo, num_nodes, fanouts, seeds, replace, generator,
                   buffers, device, hot_nodes)


def _shard_arguments(layout: Optional[ShardLayout], dummy: Tensor):
    # The kernel's arguments for lists split across GPUs (else placeholders).
    if layout is None:
        return (dummy, ) * 6, {}
    return ((layout.table, ) + tuple(
        x if x is not None else dummy
        for x in (layout.rep_start, layout.rep_row, layout.rep_eid,
                  layout.reads, layout.placed_start)), dict(
                      SHARDS=layout.num_shards,
                      REPLICA=layout.rep_start is not None,
                      COUNT=layout.reads is not None,
                      PLACED=layout.placed_start is not None))


def on_device_or_host(seeds: Tensor, device: torch.device) -> Tensor:
    # Seeds on `device`, or in host memory for `FusedPlan._copy_seeds`.
    if seeds.device == device or (device.type == 'cuda' and not seeds.is_cuda):
        return seeds
    return seeds.to(device)


def triton_cdiv(a: int, b: int) -> int:
    return max((a + b - 1) // b, 1)
