"""Bottom-layer offload in one call: :class:`BottomLayerOffload` wraps a
model and a :class:`~pyg_orch.HybridNeighborLoader`."""
import collections
import copy
import os
import warnings
import weakref
from typing import Any, Dict, Optional, Union

import torch
from torch import Tensor

from pyg_orch.offload.aggregate_split import OUTPUT, check_split
from pyg_orch.offload.aggregate_split import finish as finish_aggregated
from pyg_orch.offload.bottom_layer import (
    BottomLayerComputer,
    check_materialized,
    find_first_layer,
    message_passing_layers,
    needs_degree_compensation,
    placeholder_in_edges,
)
from pyg_orch.offload.embedding_pipeline import (
    BatchEmbeddingCache,
    EmbeddingPipeline,
)
from pyg_orch.offload.hotness import (
    HotSet,
    select_cache_nodes,
    select_hot_nodes,
)
from pyg_orch.offload.replacement import (
    BatchInfo,
    ForwardContext,
    RuntimeHook,
    check_aggregated,
    check_batch_features,
    check_no_edge_tensors,
    hot_rows,
    replace_from_table,
    replace_output,
    same_tensor,
)
from pyg_orch.offload.step_counter import StepCounter

_MAX_BATCHES = 8
_DEFAULT_PRESAMPLE_BATCHES = 200
# hot_ratio='auto': the hot set starts at 1% of the vertices and may grow up
# to half of them.
_AUTO_START_HOT_RATIO = 0.01
_AUTO_MAX_HOT_RATIO = 0.5


def _offload_cores() -> int:
    # Half the cores; the other half is left to the training loop, the
    # loader and the operating system.
    return max(1, (os.cpu_count() or 1) // 2)


def default_num_threads() -> int:
    r"""Worker threads by default: two (one on a machine with fewer than
    four cores), each running its tensor operations on
    :func:`default_intra_op_threads` threads. Few Python threads with
    multi-threaded operations rather than one Python thread per core: the
    workers then take Python's interpreter lock less often, which the
    training loop needs to launch its kernels. Measured on an H100 machine
    with 16 cores (:obj:`benchmarks/bench_offload_workers.py`, work items
    of about 8 MB, see :func:`default_chunk_size`): next to training with
    :func:`~torch_geometric.utils.trim_to_layer`, 8 single-threaded
    workers made its steps 2.7x longer, 2 workers of 4 threads 1.04x, at
    about 1.0M hot rows per second alone for both."""
    return min(2, _offload_cores())


def default_intra_op_threads(num_threads: int) -> int:
    r"""PyTorch intra-op threads per worker thread by default: half the
    CPU cores shared among the :obj:`num_threads` workers (at least
    one each)."""
    return max(1, _offload_cores() // max(int(num_threads), 1))


class OffloadRuntime:
    r"""The state behind a :class:`BottomLayerOffload`: hooks, hot set,
    embedding pipeline and counters. It holds no reference to the wrapper,
    so the wrapper can be garbage-collected (which closes the runtime)."""
    context_type = ForwardContext

    def __init__(self, model: torch.nn.Module, loader, layer_name: str,
                 layer: torch.nn.Module, hot_set: HotSet,
                 pipeline: Union[EmbeddingPipeline, BatchEmbeddingCache],
                 num_hops: int,
                 features: Tensor, replace_rows: str = 'pruned',
                 compensate_degrees: bool = True,
                 candidates: Optional[Tensor] = None,
                 split: str = OUTPUT):
        self._init_state(model, loader, layer_name, layer, hot_set, pipeline,
                         num_hops, features, replace_rows, split)
        self.compensate_degrees = compensate_degrees
        self.fanout = int(self.sampler.num_neighbors[None][-1])
        self._colptr: Dict[torch.device, Tensor] = {}
        self._init_hot(candidates)
        self.handles = self._hook_layers([layer])
        if compensate_degrees:
            for module in message_passing_layers(model).values():
                self.handles.append(module.register_forward_pre_hook(
                    RuntimeHook(self, '_edge_hook'), with_kwargs=True))
        removers = [loader.register_batch_hook(RuntimeHook(self,
                                                            '_on_batch'))]
        # Per-batch rows are requested as soon as a batch is sampled (with
        # look-ahead, a step before it trains), where sampling runs in the
        # training loop's thread (`self.sampled`):
        self.lead = 1 if getattr(loader, 'lookahead', False) else 0
        if isinstance(pipeline, BatchEmbeddingCache) and getattr(
                loader, 'prefetch', 0) == 0:
            try:
                removers.append(loader.register_batch_hook(
                    RuntimeHook(self, '_on_sampled'), when='sampled'))
            except TypeError:  # A loader without sampled hooks.
                pass
        self.remove_batch_hook = lambda: [r() for r in removers]
        self.reset_stats()

    def _init_state(self, model, loader, layer_name: str, layer, hot_set,
                    pipeline, num_hops: int, features, replace_rows: str,
                    split: str) -> None:
        self.model = model
        self.loader = loader
        self.sampler = loader.node_sampler
        self.timer = getattr(loader, 'timer', None)
        self.layer_name = layer_name
        self.layer = layer
        self.hot_set = hot_set
        self.pipeline = pipeline
        self.num_hops = num_hops
        self.features = features
        self.replace_rows = replace_rows
        self.split = split
        self.batches: 'collections.OrderedDict[int, BatchInfo]' = \
            collections.OrderedDict()
        self.sampled: 'collections.deque' = collections.deque(
            maxlen=_MAX_BATCHES)
        self.ctx: Optional[ForwardContext] = None
        self.training = False
        self.closed = False
        self.order_checked = False
        self.features_checked = False
        self.warned_size_match = False
        self.warned_eval_pruned = False
        # Weight versions count the steps that update the layer(s):
        self.counter = StepCounter(layer.parameters)

    def _init_hot(self, candidates: Optional[Tensor]) -> None:
        hot_set = self.hot_set
        # Ranks of the vertices that are or may become hot (-1 for others):
        # the hot set is always a prefix of `candidates` (see `_grow`).
        self.candidates = hot_set.hot_nodes if candidates is None \
            else candidates
        self._rank = torch.full((hot_set.num_nodes, ), -1, dtype=torch.int32)
        self._rank[self.candidates] = torch.arange(self.candidates.numel(),
                                                   dtype=torch.int32)
        self._set_num_hot(hot_set.hot_nodes.numel())

    def _hook_layers(self, layers) -> list:
        # Hooks on the first layer (one module per edge type for
        # heterogeneous models); with a weight-free split, on its
        # aggregation as well.
        handles = []
        for layer in layers:
            handles += [
                layer.register_forward_pre_hook(
                    RuntimeHook(self, '_pre_hook'), with_kwargs=True),
                layer.register_forward_hook(RuntimeHook(self, '_post_hook')),
            ]
            if self.split != OUTPUT:
                handles += [
                    layer.register_aggregate_forward_hook(
                        RuntimeHook(self, '_aggregate_hook')),
                    layer.register_message_and_aggregate_forward_hook(
                        RuntimeHook(self, '_aggregate_hook')),
                ]
        return handles

    def _set_num_hot(self, n: int) -> None:
        self.hot_set.hot_nodes = self.candidates[:n]
        self.hot_mask = (self._rank >= 0) & (self._rank < n)
        # Row of every vertex in the embedding tables, -1 if not hot:
        self._hot_pos = {
            torch.device('cpu'): torch.where(self.hot_mask, self._rank, -1)
        }

    def _grow(self, n: int) -> None:
        # A table of `n` rows is in use: from now on, batches may be pruned
        # with (and find replacements for) the first `n` candidates.
        self._set_num_hot(n)
        if self.training and self.active:
            self.sampler.set_hot_nodes(self.prune_masks())

    def prune_masks(self) -> Any:
        r"""What the sampler prunes in training mode (see
        :meth:`~pyg_orch.HybridNeighborSampler.set_hot_nodes`)."""
        return self.hot_mask

    # Modes ###################################################################

    @property
    def active(self) -> bool:
        return not self.closed and self.hot_set.hot_nodes.numel() > 0

    def set_training(self, mode: bool) -> None:
        self.training = bool(mode)
        if not self.active:
            return
        if self.training:
            self.sampler.set_hot_nodes(self.prune_masks())
        else:
            self.sampler.set_hot_nodes(None)
            self.pipeline.pause()

    def pause(self) -> None:
        r"""Stops the worker threads; they restart at the next training
        step."""
        self.pipeline.pause()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for handle in self.handles:
            handle.remove()
        self.handles = []
        self.remove_batch_hook()
        self.counter.close()
        try:
            self.sampler.set_hot_nodes(None)
        finally:
            self.pipeline.close()
            self.batches.clear()
            self.sampled.clear()
            self.ctx = None

    # Statistics ##############################################################

    def reset_stats(self) -> None:
        self.pipeline.reset_stats()
        self.num_offloaded = 0
        self.num_exact = 0
        self._rows_replaced: Union[int, Tensor] = 0

    def stats(self) -> Dict[str, Any]:
        hot = self.hot_set
        out = {
            'num_hot': int(hot.hot_nodes.numel()),
            'num_gpu_cache': int(hot.cache_nodes.numel()),
            'hot_coverage': hot.coverage(),
            'presample_batches': hot.num_batches,
            'steps': self.counter.version,
            'step_source': self.counter.source,
            'training_forwards': self.counter.num_forwards,
            'offloaded_forwards': self.num_offloaded,
            'exact_forwards': self.num_exact,
            'hot_rows_replaced': self.rows_replaced,
            'hot_rows_per_batch': self.rows_replaced / max(
                self.num_offloaded, 1),
            'split': self.split,
        }
        out.update(self.pipeline.stats())
        out['threads_alive'] = len(self.pipeline.threads)
        return out

    # Batches #################################################################

    def _hot_pos_on(self, device: torch.device) -> Tensor:
        out = self._hot_pos.get(device)
        if out is None:
            out = self._hot_pos[torch.device('cpu')].to(device)
            self._hot_pos[device] = out
        return out

    def _colptr_on(self, device: torch.device) -> Tensor:
        out = self._colptr.get(device)
        if out is None:
            out = self.sampler.topology.csc[None].colptr.to(device,
                                                            torch.int64)
            self._colptr[device] = out
        return out

    def _bottom_rows(self, num) -> tuple:
        num = [int(v) for v in list(num)]
        n_last = sum(num[:self.num_hops - 1])  # First row of hop L - 1.
        n_bottom = sum(num[:self.num_hops])
        lo = n_last if self.replace_rows == 'pruned' else 0
        return lo, n_last, n_bottom

    def _on_sampled(self, out) -> None:
        # Finds the hot rows of a batch just sampled and queues their CPU
        # computation. Reading them back waits for the sampling stream,
        # which a running training step can hold up (measured: ~6 ms per
        # batch on an H100).
        if not self.training or not self.active or getattr(
                self.sampler, 'hot_nodes', None) is None:
            return
        node, num = getattr(out, 'node', None), getattr(
            out, 'num_sampled_nodes', None)
        if not isinstance(node, Tensor) or num is None:
            return
        lo, _, hi = self._bottom_rows(num)
        slot = self._hot_pos_on(node.device).index_select(0, node[lo:hi])
        rows, pos = hot_rows(slot, lo)
        pos_cpu = pos.cpu()
        version = self.counter.next_forward_version()
        self.pipeline.request(pos_cpu, version + self.lead, version)
        self.sampled.append((node, slot, rows, pos, pos_cpu))

    def _take_sampled(self, n_id: Tensor, info: 'BatchInfo') -> bool:
        match = next((i for i, entry in enumerate(self.sampled)
                      if same_tensor(entry[0], n_id)), None)
        if match is None:
            return False
        for _ in range(match):  # Sampled, never received.
            self.sampled.popleft()
        _, slot, rows, pos, pos_cpu = self.sampled.popleft()
        if n_id.is_cuda:  # Made on the sampling stream.
            stream = torch.cuda.current_stream(n_id.device)
            for t in (slot, rows, pos):
                t.record_stream(stream)
        info.slot, info.rows, info.pos = slot, rows, pos
        info.pos_cpu = pos_cpu
        return True

    def _on_batch(self, batch) -> None:
        if not self.training or not self.active:
            return
        n_id = getattr(batch, 'n_id', None)
        num = getattr(batch, 'num_sampled_nodes', None)
        x = getattr(batch, 'x', None)
        if not isinstance(n_id, Tensor) or num is None or \
                not isinstance(x, Tensor):
            return
        if not self.features_checked:
            self.features_checked = True
            check_batch_features(x, n_id, self.features, 'batch',
                                 'loader.data')
        lo, n_last, n_bottom = self._bottom_rows(num)
        # No synchronization with the device from here on, unless degrees
        # are compensated or rows are computed per batch (which need the hot
        # rows on the host):
        slot = self._hot_pos_on(n_id.device).index_select(
            0, n_id[lo:n_bottom])
        pruned = getattr(self.sampler, 'hot_nodes', None) is not None
        info = BatchInfo(x, lo, n_bottom, slot, pruned)
        requested = isinstance(self.pipeline, BatchEmbeddingCache) and \
            self._take_sampled(n_id, info)
        if pruned and self.compensate_degrees:
            info.hot_rows()
            rows = info.rows
            info.extra_edges = self._placeholder_edges(
                n_id, rows if lo == n_last else rows[rows >= n_last])
        if isinstance(self.pipeline, BatchEmbeddingCache) and not requested:
            # Start computing this batch's hot rows right away, with the
            # weights its forward pass will have:
            info.hot_rows()
            info.pos_cpu = info.pos.cpu()
            self.pipeline.request(info.pos_cpu,
                                  self.counter.next_forward_version())
        self.batches[id(x)] = info
        self.batches.move_to_end(id(x))
        while len(self.batches) > _MAX_BATCHES:
            self.batches.popitem(last=False)

    def _placeholder_edges(self, n_id: Tensor, rows: Tensor) -> Tensor:
        # A pruned hot vertex lost the in-edges that the last hop would have
        # sampled for it. Degree-normalized layers (GCNConv) see in-degrees
        # in the batch, so it gets as many placeholder in-edges (from row 0):
        # they change only its own outputs, which no seed needs (the first
        # layer's output of it is replaced, and the layers above use nothing
        # of a last-frontier vertex but that output).
        return placeholder_in_edges(
            self._colptr_on(n_id.device), n_id.index_select(0, rows), rows,
            self.fanout, bool(getattr(self.sampler, 'replace', False)))

    def _match(self, x: Any) -> Optional[BatchInfo]:
        if not isinstance(x, Tensor) or not self.batches:
            return None
        info = self.batches.get(id(x))
        if info is not None and info.x_ref() is x:
            return info
        newest = next(reversed(self.batches.values()))
        if newest.num_nodes == x.size(0) and x.dim() == 2:
            if not self.warned_size_match:
                self.warned_size_match = True
                warnings.warn(
                    "BottomLayerOffload: the model's input 'x' is not the "
                    "'batch.x' tensor of a mini-batch of the loader; assuming "
                    "it holds the features of the newest mini-batch (same "
                    "number of rows). Pass 'batch.x' itself to avoid the "
                    "guess", stacklevel=6)
            return newest
        return None

    # Forward #################################################################

    def begin(self, x: Any, edge_index: Any) -> ForwardContext:
        version = self.counter.on_forward()
        if isinstance(self.pipeline, EmbeddingPipeline):
            self.pipeline.maybe_submit(version)
        info = self._match(x)
        if isinstance(info, BatchInfo) and info.slot.device != getattr(
                x, 'device', info.slot.device):
            info.slot = info.slot.to(x.device)
            info.rows = info.pos = None
        if info is None:
            self.num_exact += 1
        else:
            self.num_offloaded += 1
        ctx = self.context_type(x, edge_index, info, version)
        self.ctx = ctx
        return ctx

    def end(self, ctx: ForwardContext, failed: bool) -> None:
        self.ctx = None
        if failed:
            return
        if not ctx.called:
            raise RuntimeError(
                f"BottomLayerOffload: the first message-passing layer "
                f"{self.layer_name!r} was not called during the forward pass; "
                f"pass the layer the model calls first as 'layer='")

    def check_eval_batch(self, x: Any) -> None:
        if self.warned_eval_pruned or not isinstance(x, Tensor):
            return
        info = self.batches.get(id(x))
        if info is not None and info.x_ref() is x and info.pruned:
            self.warned_eval_pruned = True
            warnings.warn(
                "BottomLayerOffload: evaluating a mini-batch that was sampled "
                "in training mode, with the bottom-hop neighbors of hot "
                "vertices pruned; call eval() before drawing evaluation "
                "batches", stacklevel=5)

    def install_order_check(self):
        r"""Until the first offloaded forward pass completes, raises if
        another message-passing layer runs before the chosen one."""
        handles = []
        ctx_ref = self

        def make_hook(name):
            def hook(module, args):
                ctx = ctx_ref.ctx
                if ctx is not None and not ctx.called:
                    raise ValueError(
                        f"BottomLayerOffload: the message-passing layer "
                        f"{name!r} runs before {ctx_ref.layer_name!r}, the "
                        f"layer chosen as the first one; pass "
                        f"layer={name!r}")
            return hook

        for name, module in message_passing_layers(self.model).items():
            if module is not self.layer:
                handles.append(module.register_forward_pre_hook(
                    make_hook(name)))
        return handles

    def _pre_hook(self, module, args, kwargs):
        ctx = self.ctx
        if ctx is None or ctx.called:
            return None
        ctx.called = True
        x = args[0] if len(args) > 0 else kwargs.get('x')
        if isinstance(x, (tuple, list)) and len(x) > 0:
            x = x[0]
        if not same_tensor(x, ctx.x):
            raise ValueError(
                f"BottomLayerOffload: the first message-passing layer "
                f"{self.layer_name!r} does not consume the model's input 'x' "
                f"directly (it gets a {type(x).__name__}"
                f"{list(x.shape) if isinstance(x, Tensor) else ''} computed "
                f"from it, e.g. by a Linear layer, an input dropout or a "
                f"normalization before the first convolution). Bottom-layer "
                f"offload computes that layer on the CPU from the raw "
                f"features 'loader.data.x', so the model's first operation on "
                f"'x' must be this layer; move such preprocessing into the "
                f"data, or call model.eval() to run without offload")
        check_no_edge_tensors(
            f'the first message-passing layer {self.layer_name!r}', args,
            kwargs)
        ctx.in_call = True
        return None

    def _edge_hook(self, module, args, kwargs):
        ctx = self.ctx
        if ctx is None or ctx.info is None or ctx.info.extra_edges is None \
                or ctx.info.extra_edges.numel() == 0:
            return None
        in_args = len(args) > 1
        edge_index = args[1] if in_args else kwargs.get('edge_index')
        if not isinstance(edge_index, Tensor) or not same_tensor(
                edge_index, ctx.edge_index):
            return None  # E.g. trimmed by trim_to_layer: nothing to do.
        if any(isinstance(v, Tensor) for v in args[2:]) or any(
                isinstance(v, Tensor) for k, v in kwargs.items()
                if k not in ('x', 'edge_index')):
            return None  # Edge-level tensors would need placeholders too.
        extra = ctx.info.extra_edges.to(edge_index.device, edge_index.dtype)
        edge_index = torch.cat([edge_index, extra], dim=1)
        if in_args:
            args = (args[0], edge_index) + tuple(args[2:])
        else:
            kwargs = dict(kwargs, edge_index=edge_index)
        return args, kwargs

    def _post_hook(self, module, args, output):
        ctx = self.ctx
        if ctx is None or not ctx.in_call:
            return None
        ctx.in_call = False
        info = ctx.info
        if info is None or info.slot.numel() == 0:
            return None
        if self.split != OUTPUT:
            check_aggregated(ctx, repr(self.layer_name))
            return None
        return replace_output(
            output, lambda out: self._replace_hot(out, info, ctx.version))

    def _aggregate_hook(self, module, inputs, out):
        # split='aggregate': the hot rows of the layer's aggregation become
        # the CPU-computed ones, finished with the current weights.
        ctx = self.ctx
        if ctx is None or not ctx.in_call or ctx.aggregated:
            return None
        ctx.aggregated = True
        info = ctx.info
        if info is None or info.slot.numel() == 0 or not isinstance(
                out, Tensor):
            return None
        return self._replace_hot(out, info, ctx.version)

    def _replace_hot(self, out: Tensor, info: BatchInfo,
                     version: int) -> Tensor:
        pipeline = self.pipeline
        if isinstance(pipeline, EmbeddingPipeline):
            return self._replace_from_table(
                out, info, pipeline.acquire(version, self.timer))
        info.hot_rows()
        pos_cpu = info.pos_cpu
        if pos_cpu is None:  # Drawn before training mode.
            pos_cpu = info.pos_cpu = info.pos.cpu()
        emb = pipeline.gather(info.pos, pos_cpu, version, self.timer)
        return self._replace_rows(out, info, emb)

    def _finish(self, emb: Tensor, out: Tensor,
                layer: Optional[torch.nn.Module] = None,
                kind: Optional[str] = None) -> Tensor:
        # Table rows as rows of `out`: on its device, in its dtype, and for
        # split='aggregate' finished with the layer's current weights.
        layer = self.layer if layer is None else layer
        kind = self.split if kind is None else kind
        emb = emb.to(out.device)
        if kind != OUTPUT:
            emb = finish_aggregated(layer, kind, emb)
        return emb.to(out.dtype)

    def _replace_from_table(self, out: Tensor, info: BatchInfo,
                            table) -> Tensor:
        out, count = replace_from_table(
            out, info, table.emb, lambda emb: self._finish(emb, out))
        self._add_replaced(count)
        return out

    def _replace_rows(self, out: Tensor, info: BatchInfo,
                      emb: Tensor) -> Tensor:
        emb = self._finish(emb, out)
        rows = info.rows
        if out.size(0) < info.num_nodes:  # Bipartite call (x_src, x_dst).
            keep = rows < out.size(0)
            rows, emb = rows[keep], emb[keep]
        self._add_replaced(rows.numel())
        # Out of place, not accumulating: the gradient of replaced rows goes
        # to `emb` only.
        return out.index_put((rows, ), emb)

    def _add_replaced(self, count: Union[int, Tensor]) -> None:
        # A device-side counter when `count` is a tensor, read only by
        # `stats()` (no synchronization per batch):
        self._rows_replaced = self._rows_replaced + count

    @property
    def rows_replaced(self) -> int:
        return int(self._rows_replaced)


class BottomLayerOffload(torch.nn.Module):
    r"""Computes the bottom (first) message-passing layer of *hot* vertices on
    CPU threads, as in NeutronOrch (Ai et al., VLDB 2024), so that the
    sampler skips their bottom-hop neighbors and the device receives their
    finished embeddings.

    .. code-block:: python

        from pyg_orch import HybridNeighborLoader
        from pyg_orch.offload import BottomLayerOffload

        loader = HybridNeighborLoader(data, num_neighbors=[15, 10, 5],
                                      batch_size=1024, shuffle=True,
                                      input_nodes=data.train_mask)
        model = BottomLayerOffload(GraphSAGE(...).to(device), loader)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

        model.train()
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
        print(model.stats())
        model.close()  # Or `del model`, or `with BottomLayerOffload(...)`.

    **How it works.** Hot vertices are those most often needed by the bottom
    layer: pre-sampling mini-batches with the loader's sampler from its input
    nodes, a vertex counts each time it lands in hops :obj:`0, ..., L - 1`
    (:obj:`L` hops); the top :obj:`hot_ratio` fraction of all vertices are
    hot. In training mode, the loader's sampler does not expand hot vertices
    in the last frontier (hop :obj:`L - 1`, see
    :meth:`~pyg_orch.HybridNeighborSampler.set_hot_nodes`), which saves
    sampling, gathering and moving their bottom-hop neighbors. After the
    first message-passing layer has run on the device, the rows of those
    hot vertices are replaced by their CPU-computed embeddings (a forward
    hook; the model's code is not modified). With
    :obj:`replace_rows='all'`, the rows of hot vertices in all hops
    :obj:`0, ..., L - 1` are replaced; by default (:obj:`'pruned'`) only
    those in hop :obj:`L - 1`, the ones whose neighbors were pruned: in the
    other hops the device has the neighbors anyway (the layers above need
    them), so replacing them saves nothing and costs their gradient (on
    CiteSeer with GraphSAGE, 6 to 7 points of test accuracy).

    **Degrees.** A pruned hot vertex has no in-edges in the batch, which
    would change the normalization of degree-normalized layers such as
    :class:`~torch_geometric.nn.conv.GCNConv` for the messages it sends.
    With :obj:`compensate_degrees=True` (by default, :obj:`'auto'`: unless
    every layer is of a class known not to weigh messages by the sender's
    in-degree, see
    :func:`~pyg_orch.offload.bottom_layer.needs_degree_compensation`),
    every message-passing layer that gets the model's :obj:`edge_index`
    (and no edge-level tensors) sees as many placeholder in-edges of it
    (from row :obj:`0`) as the last hop would have sampled. They change
    only that vertex's own outputs, which no seed needs beyond the first
    layer's, and that one is replaced.
    Finding the hot rows for them reads the batch back to the host (one
    synchronization with the device per batch). Under
    :func:`~torch_geometric.utils.trim_to_layer`, the layers above the first
    get a trimmed :obj:`edge_index` in which no last-frontier vertex has
    in-edges anyway. On the CPU side, hot vertices that are sampled as
    neighbors of other hot vertices get placeholder in-edges as well (see
    :meth:`BottomLayerComputer.subgraph
    <pyg_orch.offload.BottomLayerComputer.subgraph>`), since in a mini-batch
    they usually sit in an upper hop.

    CPU worker threads compute those embeddings with a CPU copy of the layer
    (same class, weights loaded from snapshots, evaluation mode) from
    :obj:`loader.data.x`, sampling the hot vertices' in-neighbors with the
    bottom-hop fan-out (the last entry of :obj:`num_neighbors`), or all of
    them with :obj:`full_neighbors=True`. On CUDA, results land in pinned
    memory and are copied to the device on a side stream.

    **Bounded staleness.** Weight versions count the optimizer steps that
    update the first layer (a global optimizer step hook; without any, every
    training forward pass counts as a step). Training runs in super-batches
    of :math:`S = \max(1, \lfloor (s + 1) / 2 \rfloor)` steps for
    :obj:`max_staleness` :math:`s`: at the start of super-batch :math:`i`,
    a weight snapshot is taken and the CPU computes the embeddings that
    super-batch :math:`i + 1` uses, while the device trains super-batch
    :math:`i`. Every table carries the version it was computed with, and at
    version :math:`t` only tables with :math:`t - v \le s` are used; if none
    is ready, the forward pass waits (timed; see :meth:`stats`).
    :obj:`max_staleness=0` is synchronous: each step waits for the
    embeddings of its own weights. The default bound (1) recomputes every
    hot vertex at every step, which is exact enough for accuracy but slow on
    large graphs: a table must take less CPU time than :math:`S` training
    steps, or the loop waits. On an H100 with 120,000 hot vertices, only
    :obj:`max_staleness=32` removed the waits (see
    :obj:`benchmarks/bench_offload.py`). All this concerns
    :obj:`split='output'`; with :obj:`split='aggregate'` (below), hot rows
    always get the current weights, so the staleness of weights is 0 and
    :math:`S` only paces how often neighbor samples are redrawn.

    **Sizing the hot set.** The more vertices are hot, the less the device
    samples, fetches and aggregates, but a table must be computed within
    :math:`S` training steps, or the loop waits. With
    :obj:`hot_ratio='auto'` (:obj:`refresh='super_batch'` only), the hot
    set starts with the 1% most accessed vertices and, at the start of a
    super-batch, grows along the access ranking (up to half the vertices)
    while the newest table took less than :math:`1 / 1.6` of the time
    of :math:`S` steps and the loop did not wait, aiming at 70% of it
    (see :meth:`EmbeddingPipeline.maybe_grow
    <pyg_orch.offload.EmbeddingPipeline.maybe_grow>`). It never shrinks.
    The sampler prunes the larger set only once a table that holds it is
    in use, so every pruned vertex finds its embedding; a batch sampled
    before may then get CPU embeddings for hot rows it did not prune (as
    with :obj:`replace_rows='all'`). :meth:`stats` lists the sizes taken
    (:obj:`'hot_sizes'`). On an H100 the sustainable hot set, and so the
    speed-up, grew with :obj:`max_staleness` (see
    :obj:`benchmarks/bench_offload.py`).

    **Refresh modes.** With :obj:`refresh='super_batch'` (the default, as
    described above), every table holds *all* hot vertices: the CPU cost
    per super-batch grows with the hot set, whatever the batches need.
    With :obj:`refresh='batch'`, the device keeps one embedding per hot
    vertex with its own version, and when a mini-batch is drawn the CPU
    computes only its hot rows that will not be fresh enough (version
    older than :math:`t - s`), with the current weights, while the batch
    goes through the forward pass up to the first layer; a hot vertex
    needed again within :math:`s` steps is not recomputed. The same bound
    holds row by row. The rows are requested as soon as the loader has
    sampled the batch (its :obj:`'sampled'` batch hook: with look-ahead, one
    step before the batch trains). It computes far fewer rows, but on an
    H100 it was slower than :obj:`'super_batch'`: finding a batch's hot rows
    on the host synchronizes with the sampling stream, and the worker
    threads, busy at every step, contend with the training loop for
    Python's interpreter lock (see :obj:`benchmarks/bench_offload.py`).
    With :obj:`'super_batch'`, replacing rows needs no synchronization.
    Either way, weights must change only through optimizer steps (or,
    without an optimizer, between forward passes).

    **Split at the aggregation** (:obj:`split='aggregate'`, chosen by
    :obj:`'auto'` where the layer allows it). Many first layers aggregate
    neighbor features without any weight and apply their weights after
    (:class:`~torch_geometric.nn.conv.SAGEConv`,
    :class:`~torch_geometric.nn.conv.GINConv`,
    :class:`~torch_geometric.nn.conv.GraphConv`), or apply a bias-free
    linear map :obj:`lin` before a weight-free aggregation, which commutes
    with it (:class:`~torch_geometric.nn.conv.GCNConv`). For those, the
    CPU computes only the aggregation of hot vertices (from raw features,
    no weights), and on the device the hot rows of the layer's aggregation
    are replaced (PyG's aggregation hook), so that the layer applies its
    *current* weights to them (for :obj:`lin`-first layers the device
    applies :obj:`lin` to the CPU's rows). The hot rows then carry no stale
    weights and pass gradients to the first layer like any other row.
    Since a table of aggregations serves any step, the loop never waits for
    a newer one (only for the first): the CPU redraws the hot vertices'
    neighbor samples one table after another, at most every :math:`S`
    steps, and :obj:`stats()['max_table_age']` reports how many steps a
    sample was reused at most (weights' staleness stays 0). Which split a
    layer allows is checked on a few hot vertices when wrapping: the
    aggregation must not change when all parameters change (attention, as
    in :class:`~torch_geometric.nn.conv.GATConv`, or a projection before
    aggregating fail this, and fall back to :obj:`'output'`). On an H100
    (2.4M nodes, 100-dim features, 30% hot) this was 1.43x faster than
    plain training, where the output split needed :obj:`max_staleness=128`
    for 1.40x (see :obj:`benchmarks/bench_offload.py`).

    **Gradients.** With :obj:`split='output'`, replaced rows are new values
    (written into a copy of the layer's output, whose backward pass zeroes
    their gradient), so no gradient flows through them:
    the first layer's weights receive gradient only from the rows that were
    not replaced (everything above the first layer trains as usual). With
    :obj:`split='aggregate'`, gradients flow through hot rows into the
    first layer's weights (not into the aggregated features, which are
    data). The CPU copy of the layer runs in evaluation mode (no dropout
    inside it).

    **Exactness.** :meth:`eval` switches everything off: no pruning, no
    replacement, no stale embeddings. With :obj:`max_staleness=0`,
    :obj:`full_neighbors=True` and all-neighbor fan-outs (:obj:`-1`), the
    wrapped model's outputs for the seeds equal the plain model's on the
    unpruned batch for layers whose output depends only on the
    neighborhood (e.g. :class:`~torch_geometric.nn.conv.SAGEConv`,
    :class:`~torch_geometric.nn.conv.GINConv`,
    :class:`~torch_geometric.nn.conv.GATConv`); for
    :class:`~torch_geometric.nn.conv.GCNConv`, whose normalization also
    depends on the neighbors' in-degrees within the batch, they are close.

    **Module behaviour.** The wrapper is used exactly like the model:
    :obj:`model(batch.x, batch.edge_index, ...)` with any further arguments
    (such as :obj:`num_sampled_nodes_per_hop` for
    :func:`~torch_geometric.utils.trim_to_layer`); :meth:`parameters`,
    :meth:`state_dict` and :meth:`load_state_dict` are those of the model
    with identical keys (the wrapper shares the model's parameters, buffers
    and submodules), and other attributes are looked up on the model.

    **GPU cache.** The :obj:`gpu_cache_ratio` fraction of vertices whose
    features pre-sampled batches fetch most often with pruning on (all
    hops; hot vertices included, since the first layer still reads their
    features where they are another vertex's neighbor) are exposed as
    :attr:`gpu_cache_nodes`; if the loader has a
    :obj:`set_gpu_cache_nodes(nodes)` method, it is called with them.

    **Copies.** :func:`copy.deepcopy` and pickling (e.g.
    :func:`torch.save`) of the wrapper give the plain model (offload hooks
    disabled), e.g. to keep the best model during training.

    **Lifetime.** Worker threads (named :obj:`'pyg_orch-offload-*'`) start
    on demand and exit when idle for :obj:`idle_timeout` seconds, on
    :meth:`eval`, on :meth:`close`, on :obj:`KeyboardInterrupt` during a
    forward pass, and when the wrapper is garbage-collected. An exception
    in a worker is raised (as
    :class:`~pyg_orch.offload.OffloadWorkerError`, chained to the
    original) at the next training forward pass.

    **Heterogeneous graphs.** For a loader over a
    :class:`~torch_geometric.data.HeteroData`, the model must be made by
    :func:`~torch_geometric.nn.to_hetero` or built from
    :class:`~torch_geometric.nn.conv.HeteroConv`: its first layer is one
    message-passing module per edge type (e.g. :obj:`conv1.a__to__b`, found
    by :func:`~pyg_orch.offload.hetero_layer.find_hetero_first_layer`; pass
    :obj:`layer='conv1'` to choose another). It is called as
    :obj:`model(batch.x_dict, batch.edge_index_dict)`:

    .. code-block:: python

        loader = HybridNeighborLoader(data, [10, 5], batch_size=512,
                                      input_nodes=('paper', train_mask))
        model = to_hetero(GraphSAGE((-1, -1), 64, 2, 8), data.metadata())
        with torch.no_grad():  # Materializes lazy parameters.
            model(data.x_dict, data.edge_index_dict)
        model = BottomLayerOffload(model, loader, hot_ratio=0.3)
        ...
        out = model(batch.x_dict, batch.edge_index_dict)['paper']

    Hot vertices are
    the top :obj:`hot_ratio` fraction of the vertices of all destination
    node types together, by pre-sampled access count; the sampler prunes the
    bottom hop of each type's hot vertices for every edge type into it. The
    CPU computes, for every edge type, its module's output (or, with the
    aggregate split, its aggregation) for the hot vertices of its
    destination type (see
    :class:`~pyg_orch.offload.hetero_layer.HeteroBottomLayerComputer`), and
    the hot rows of each module's output (or aggregation) are replaced
    before the model groups the edge types, so any grouping (:obj:`aggr` of
    :func:`~torch_geometric.nn.to_hetero`) works. :attr:`hot_nodes`,
    :attr:`hot_mask` and :attr:`access_counts` are then dictionaries per
    node type, and :meth:`stats` adds :obj:`num_hot_per_type`
    (:obj:`hot_rows_replaced` counts a row once per edge type). Not
    supported there (:class:`NotImplementedError`): :obj:`hot_ratio='auto'`,
    :obj:`refresh='batch'`, and layers that need degree compensation (such
    as :class:`~torch_geometric.nn.conv.GCNConv`); no GPU-cache candidates
    are chosen (the loader has no GPU feature store for heterogeneous
    graphs). On an H100, with a heterogeneous version of the 2.4M-node graph
    (:obj:`--hetero` of :obj:`benchmarks/bench_offload.py`), offload was
    1.49x faster than plain training at :obj:`max_staleness=256` (30% hot)
    but only 1.08x at :obj:`max_staleness=64`: the loader samples
    heterogeneous graphs with many small kernels launched from Python, which
    CPU workers that recompute tables more often slow down.

    Limitations: no temporal sampling; the first message-passing layer must
    consume :obj:`x` directly and get no edge weights or features; with
    :obj:`num_workers > 0`, call :meth:`train` / :meth:`eval` before
    iterating (the workers copy the sampler when the iterator is created).

    Args:
        model (torch.nn.Module): The GNN, with at least one
            :class:`~torch_geometric.nn.conv.MessagePassing` layer.
        loader (HybridNeighborLoader): The training loader.
        hot_ratio (float or str): Fraction of all vertices whose bottom
            layer runs on the CPU, or :obj:`'auto'` to size the hot set by
            measured throughput (see above). (default: :obj:`0.05`)
        gpu_cache_ratio (float or str): Fraction of all vertices that are
            GPU-cache candidates, or :obj:`'auto'` for as many as the
            loader's GPU feature store holds (its :obj:`gpu_memory_budget`;
            none without a feature store). (default: :obj:`0.1`)
        max_staleness (int): The most optimizer steps between the weights
            used for an embedding and the weights of the step using it.
            (default: :obj:`1`)
        num_threads (int, optional): CPU worker threads; see
            :func:`~pyg_orch.offload.wrapper.default_num_threads`.
        intra_op_threads (int, optional): PyTorch intra-op threads of each
            worker thread; see
            :func:`~pyg_orch.offload.wrapper.default_intra_op_threads`.
        full_neighbors (bool): Aggregate over all in-neighbors of hot
            vertices instead of the bottom-hop fan-out.
            (default: :obj:`False`)
        layer (torch.nn.Module or str, optional): The first message-passing
            layer (a module of :obj:`model` or its name); by default the first
            one registered. For heterogeneous models, the name of the module
            holding the first layer's per-edge-type modules.
        num_presample_batches (int, optional): Mini-batches to pre-sample for
            the access counts; an epoch's worth, at most 200, by default.
        super_batch_size (int, optional): Steps per super-batch, overriding
            the default derived from :obj:`max_staleness` (the bound is
            enforced either way).
        chunk_size (int, optional): The most hot vertices per CPU work
            item; see
            :func:`~pyg_orch.offload.embedding_pipeline.default_chunk_size`.
        cpu_autocast (torch.dtype, optional): :obj:`torch.bfloat16` runs the
            CPU copy of the layer under CPU autocast: its matrix products
            take bfloat16 inputs (faster on CPUs with AMX or AVX512-BF16),
            so hot embeddings carry about three significant digits, on top
            of their staleness. (default: :obj:`None`, full precision)
        seed (int, optional): Seeds pre-sampling and the CPU-side neighbor
            sampling. (default: :obj:`0`)
        idle_timeout (float): Seconds an idle worker thread waits before it
            exits. (default: :obj:`2.0`)
        replace_rows (str): :obj:`'pruned'` replaces the first layer's output
            of hot vertices in the last frontier only, :obj:`'all'` in all
            hops :obj:`0, ..., L - 1`. (default: :obj:`'pruned'`)
        compensate_degrees (bool or str): Give pruned hot vertices
            placeholder in-edges in the layers' :obj:`edge_index` (see
            above); :obj:`'auto'` where a layer needs it.
            (default: :obj:`'auto'`)
        refresh (str): :obj:`'super_batch'` computes tables of all hot
            vertices a super-batch ahead, :obj:`'batch'` the rows each
            mini-batch needs (see above). (default: :obj:`'super_batch'`)
        split (str): What the CPU computes for hot vertices:
            :obj:`'aggregate'`, the first layer's weight-free neighbor
            aggregation (a :class:`ValueError` if the layer has none),
            :obj:`'output'`, the layer's output from a weight snapshot, or
            :obj:`'auto'`, :obj:`'aggregate'` where the layer allows it
            (see above). (default: :obj:`'auto'`)
    """
    def __init__(
        self,
        model: torch.nn.Module,
        loader,
        hot_ratio: Union[float, str] = 0.05,
        gpu_cache_ratio: float = 0.1,
        max_staleness: int = 1,
        num_threads: Optional[int] = None,
        full_neighbors: bool = False,
        layer: Union[None, str, torch.nn.Module] = None,
        num_presample_batches: Optional[int] = None,
        super_batch_size: Optional[int] = None,
        chunk_size: Optional[int] = None,
        intra_op_threads: Optional[int] = None,
        cpu_autocast: Optional[torch.dtype] = None,
        seed: Optional[int] = 0,
        idle_timeout: float = 2.0,
        replace_rows: str = 'pruned',
        compensate_degrees: Union[bool, str] = 'auto',
        refresh: str = 'super_batch',
        split: str = 'auto',
    ):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"'model' must be a torch.nn.Module (got "
                            f"{type(model).__name__})")
        if isinstance(model, BottomLayerOffload):
            raise ValueError("'model' is already wrapped in "
                             "BottomLayerOffload")
        sampler, data, num_hops, fanout = _check_loader(loader)
        hot_ratio, gpu_cache_ratio = _check_ratios(hot_ratio,
                                                   gpu_cache_ratio)
        auto = hot_ratio == 'auto'
        if auto and refresh != 'super_batch':
            raise NotImplementedError(
                "hot_ratio='auto' sizes the hot set by the time tables of "
                "all hot vertices take, so it needs refresh='super_batch'")
        _check_int('max_staleness', max_staleness, 0)
        if refresh not in ('super_batch', 'batch'):
            raise ValueError(f"'refresh' must be 'super_batch' or 'batch' "
                             f"(got {refresh!r})")
        if replace_rows not in ('pruned', 'all'):
            raise ValueError(f"'replace_rows' must be 'pruned' or 'all' (got "
                             f"{replace_rows!r})")
        if compensate_degrees == 'auto':
            compensate_degrees = needs_degree_compensation(model)
        elif not isinstance(compensate_degrees, bool):
            raise ValueError(f"'compensate_degrees' must be True, False or "
                             f"'auto' (got {compensate_degrees!r})")
        if num_threads is None:
            num_threads = default_num_threads()
        _check_int('num_threads', num_threads, 1)
        if intra_op_threads is None:
            intra_op_threads = default_intra_op_threads(num_threads)
        _check_int('intra_op_threads', intra_op_threads, 1)
        if cpu_autocast not in (None, torch.bfloat16):
            raise ValueError(f"'cpu_autocast' must be None or torch.bfloat16 "
                             f"(got {cpu_autocast!r})")
        if chunk_size is not None:
            _check_int('chunk_size', chunk_size, 1)
        check_split(split)

        super().__init__()
        # Share the model's state, so that parameters(), state_dict() etc.
        # are the model's own, with identical keys:
        object.__setattr__(self, '_parameters', model._parameters)
        object.__setattr__(self, '_buffers', model._buffers)
        object.__setattr__(self, '_modules', model._modules)
        object.__setattr__(self, '_non_persistent_buffers_set',
                           model._non_persistent_buffers_set)
        object.__setattr__(self, '_offload_model', model)
        object.__setattr__(self, 'training', model.training)
        object.__setattr__(self, 'full_neighbors', bool(full_neighbors))

        if sampler.is_hetero:
            from pyg_orch.offload.hetero_runtime import build_hetero_runtime
            if auto or refresh != 'super_batch' or compensate_degrees:
                raise NotImplementedError(
                    "BottomLayerOffload on heterogeneous graphs supports "
                    "hot_ratio as a number and refresh='super_batch' only, "
                    "with models that need no degree compensation (no "
                    "GCNConv-like layer that weighs messages by the "
                    "sender's in-degree)")
            runtime = build_hetero_runtime(
                model, loader, layer, hot_ratio, max_staleness, num_threads,
                full_neighbors, num_presample_batches, super_batch_size,
                chunk_size, intra_op_threads, cpu_autocast, seed,
                idle_timeout, replace_rows, split)
            self._start(runtime)
            return

        num_nodes = sampler.topology.num_nodes[None]
        if gpu_cache_ratio == 'auto':
            # As many candidates as the loader's feature store can hold:
            store = getattr(loader, 'feature_store', None)
            capacity = int(getattr(store, 'capacity', 0) or 0)
            gpu_cache_ratio = min(capacity / max(num_nodes, 1), 1.0)
        layer_name, first = find_first_layer(model, layer)
        check_materialized(first, layer_name)
        x = data.x
        if x.device.type != 'cpu':
            warnings.warn(
                "BottomLayerOffload: 'loader.data.x' is not in host memory; "
                "the CPU side works on a host copy of it", stacklevel=2)
            x = x.cpu()
        csc = sampler.topology.to('cpu').csc[None]
        computer = BottomLayerComputer(first, x, csc,
                                       -1 if full_neighbors else fanout,
                                       replace=sampler.replace, seed=seed,
                                       autocast_dtype=cpu_autocast)

        batch_size = getattr(loader, 'batch_size', None) or 1
        if num_presample_batches is None:
            num_presample_batches = _DEFAULT_PRESAMPLE_BATCHES
        seeds = loader.input_data.node
        if seeds is None:  # All nodes:
            seeds = torch.arange(sampler.topology.num_nodes[None])
        candidates = None
        if auto:
            # Candidates: the most accessed vertices, up to the cap; the
            # hot set starts with the first of them and grows while the
            # CPU keeps up.
            cap = _AUTO_MAX_HOT_RATIO
            hot_set = select_hot_nodes(sampler, seeds, batch_size, cap,
                                       gpu_cache_ratio,
                                       num_presample_batches, seed)
            candidates = hot_set.hot_nodes
            start = max(1, int(round(_AUTO_START_HOT_RATIO *
                                     hot_set.num_nodes)))
            hot_set.hot_nodes = candidates[:start]
        else:
            hot_set = select_hot_nodes(sampler, seeds, batch_size,
                                       hot_ratio, gpu_cache_ratio,
                                       num_presample_batches, seed)
        if computer.dedup:
            mask = torch.zeros(num_nodes, dtype=torch.bool)
            mask[hot_set.hot_nodes if candidates is None else candidates] = \
                True
            computer.in_edge_mask = mask
        if hot_set.hot_nodes.numel() > 0:
            computer.choose_split(hot_set.hot_nodes, split)
            computer.calibrate(hot_set.hot_nodes)
        elif split == 'aggregate':  # Still check that the layer allows it.
            computer.choose_split(torch.arange(min(64, num_nodes)), split)
        if refresh == 'super_batch':
            pipeline = EmbeddingPipeline(
                computer, first, hot_set.hot_nodes, loader.device,
                max_staleness, num_threads, super_batch_size=super_batch_size,
                chunk_size=chunk_size, idle_timeout=idle_timeout,
                intra_op_threads=intra_op_threads, candidates=candidates)
        else:
            pipeline = BatchEmbeddingCache(
                computer, first, hot_set.hot_nodes, loader.device,
                max_staleness, num_threads, chunk_size=chunk_size,
                idle_timeout=idle_timeout, intra_op_threads=intra_op_threads)
        runtime = OffloadRuntime(model, loader, layer_name, first, hot_set,
                                 pipeline, num_hops, x, replace_rows,
                                 bool(compensate_degrees), candidates,
                                 computer.split)
        if auto:
            pipeline.on_grow = RuntimeHook(runtime, '_grow')
        self._start(runtime)
        set_cache = getattr(loader, 'set_gpu_cache_nodes', None)
        if hot_set.hot_nodes.numel() > 0 and gpu_cache_ratio > 0:
            # Rank by the feature fetches of pruned batches, hot vertices
            # included: they are still other vertices' sampled neighbors.
            hot_set.cache_nodes = select_cache_nodes(
                sampler, hot_set.hot_mask(), seeds, batch_size,
                gpu_cache_ratio, num_presample_batches, seed)
        if callable(set_cache):
            set_cache(hot_set.cache_nodes)

    def _start(self, runtime: OffloadRuntime) -> None:
        object.__setattr__(self, '_offload', runtime)
        object.__setattr__(self, '_finalizer',
                           weakref.finalize(self, runtime.close))
        runtime.set_training(self.training)

    # Module behaviour ########################################################

    @property
    def module(self) -> torch.nn.Module:
        r"""The wrapped model."""
        return self.__dict__['_offload_model']

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            model = self.__dict__.get('_offload_model')
            if model is None:
                raise
            return getattr(model, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, torch.nn.Module) and name not in self._modules:
            raise AttributeError(
                f"BottomLayerOffload shares the submodules of the wrapped "
                f"model; assign {name!r} on the model ('.module') instead")
        super().__setattr__(name, value)

    def train(self, mode: bool = True) -> 'BottomLayerOffload':
        r"""Sets training mode (offload on: pruning and replacement) or
        evaluation mode (exact computation, worker threads stopped)."""
        if not isinstance(mode, bool):
            raise ValueError('training mode is expected to be boolean')
        super().train(mode)
        self.module.training = mode
        self._offload.set_training(mode)
        return self

    def forward(self, *args, **kwargs) -> Any:
        r"""Calls the wrapped model with the same arguments."""
        model = self.module
        runtime = self._offload
        x = args[0] if len(args) > 0 else kwargs.get('x')
        if not self.training or not runtime.active:
            if runtime.active:
                runtime.check_eval_batch(x)
            return model(*args, **kwargs)
        ctx = runtime.begin(
            x, args[1] if len(args) > 1 else kwargs.get('edge_index'))
        order_hooks = []
        if ctx.info is not None and not runtime.order_checked:
            order_hooks = runtime.install_order_check()
        failed = True
        try:
            out = model(*args, **kwargs)
            failed = False
        except KeyboardInterrupt:
            runtime.pause()
            raise
        finally:
            for handle in order_hooks:
                handle.remove()
            runtime.end(ctx, failed)
        if ctx.info is not None:
            runtime.order_checked = True
        return out

    # Offload API #############################################################

    @property
    def hot_nodes(self) -> Union[Tensor, Dict[str, Tensor]]:
        r"""Global ids of the hot vertices, most frequently accessed first
        (for heterogeneous graphs, a dictionary of ids within each node
        type)."""
        runtime = self._offload
        if hasattr(runtime, 'hot_nodes_dict'):
            return runtime.hot_nodes_dict()
        return runtime.hot_set.hot_nodes

    @property
    def hot_mask(self) -> Union[Tensor, Dict[str, Tensor]]:
        r"""Boolean mask over all vertices, :obj:`True` for hot ones (per
        node type for heterogeneous graphs)."""
        return self._per_type(self._offload.hot_mask)

    @property
    def gpu_cache_nodes(self) -> Tensor:
        r"""The GPU-cache candidates (:obj:`gpu_cache_ratio` of all
        vertices): those whose features pre-sampled batches fetch most often
        with hot-vertex pruning on (see
        :func:`~pyg_orch.offload.hotness.select_cache_nodes`); none for
        heterogeneous graphs."""
        return self._offload.hot_set.cache_nodes

    @property
    def access_counts(self) -> Union[Tensor, Dict[str, Tensor]]:
        r"""How often every vertex was needed by the bottom layer during
        pre-sampling (per node type for heterogeneous graphs)."""
        return self._per_type(self._offload.hot_set.counts)

    def _per_type(self, values: Tensor) -> Union[Tensor, Dict[str, Tensor]]:
        runtime = self._offload
        if hasattr(runtime, 'per_type'):
            return runtime.per_type(values)
        return values

    @property
    def max_staleness(self) -> int:
        return self._offload.pipeline.max_staleness

    @property
    def super_batch_size(self) -> int:
        return self._offload.pipeline.stats()['super_batch_size']

    @property
    def steps(self) -> int:
        r"""The weight version: optimizer steps (or training forward passes)
        counted so far."""
        return self._offload.counter.version

    @property
    def _cpu_delay(self) -> float:
        return self._offload.pipeline.cpu_delay

    @_cpu_delay.setter
    def _cpu_delay(self, seconds: float) -> None:
        # Test knob: every CPU work item sleeps this long first.
        self._offload.pipeline.cpu_delay = float(seconds)

    def stats(self) -> Dict[str, Any]:
        r"""Counters since construction (or :meth:`reset_stats`):

        * :obj:`num_hot`, :obj:`num_gpu_cache`: sizes of the hot set and of
          the GPU-cache candidates; :obj:`hot_coverage`: the share of
          pre-sampled bottom-layer accesses that hit a hot vertex;
        * :obj:`steps` and :obj:`step_source` (:obj:`'optimizer'` or
          :obj:`'forward'`): the weight version and what it counts;
        * :obj:`offloaded_forwards`, :obj:`exact_forwards`: training forward
          passes with and without replacement (the latter for inputs that
          are no batch of the loader); :obj:`hot_rows_replaced`,
          :obj:`hot_rows_per_batch`;
        * :obj:`split` (:obj:`'output'`, :obj:`'aggregate'` or
          :obj:`'pre_linear'`, the latter an aggregation finished with
          :obj:`lin`);
        * :obj:`staleness_hist` (staleness of the weights in steps to
          number of uses), :obj:`max_staleness_seen`, :obj:`max_staleness`,
          :obj:`super_batch_size`; :obj:`max_table_age`: the most steps
          since a table used was queued (its neighbor samples drawn);
        * :obj:`wait_s`, :obj:`num_waits`: time the training loop waited for
          embeddings; :obj:`cpu_compute_s`: CPU time of the workers;
          :obj:`tables_submitted`, :obj:`tables_computed`,
          :obj:`tables_discarded`; :obj:`threads_alive`.
        """
        return self._offload.stats()

    def reset_stats(self) -> None:
        r"""Resets the counters of :meth:`stats` (not the step count)."""
        self._offload.reset_stats()

    def close(self) -> None:
        r"""Stops offloading for good: removes all hooks, stops the worker
        threads and clears the sampler's hot nodes. The wrapper then behaves
        like the plain model."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._offload.closed

    def __deepcopy__(self, memo) -> torch.nn.Module:
        # A copy is a copy of the plain model (offload hooks disabled):
        return copy.deepcopy(self.module, memo)

    def __reduce_ex__(self, protocol):
        # Pickling (e.g. `torch.save(model)`) stores the plain model:
        return (_identity, (self.module, ))

    def __enter__(self) -> 'BottomLayerOffload':
        return self

    def __exit__(self, *args) -> None:
        self.close()

    def __repr__(self) -> str:
        rt = self._offload
        return (f'{self.__class__.__name__}({self.module!r}, '
                f'layer={rt.layer_name!r}, '
                f'num_hot={rt.hot_set.hot_nodes.numel()}, '
                f'max_staleness={self.max_staleness})')


def _identity(obj: Any) -> Any:
    return obj


def _check_loader(loader):
    sampler = getattr(loader, 'node_sampler', None)
    topology = getattr(sampler, 'topology', None)
    if sampler is None or topology is None or not hasattr(
            sampler, 'set_hot_nodes'):
        raise TypeError(
            f"'loader' must be a pyg_orch.HybridNeighborLoader (or a loader "
            f"whose 'node_sampler' has 'topology' and 'set_hot_nodes'); got "
            f"{type(loader).__name__}")
    from torch_geometric.data import Data, HeteroData
    data = getattr(loader, 'data', None)
    hetero = bool(getattr(sampler, 'is_hetero', False))
    if not isinstance(data, HeteroData if hetero else Data):
        raise NotImplementedError(
            "BottomLayerOffload supports Data and HeteroData objects; "
            "(FeatureStore, GraphStore) inputs are not supported")
    if topology.is_temporal:
        raise NotImplementedError(
            "BottomLayerOffload does not support temporal sampling: hot "
            "embeddings are shared by all seeds, whatever their time")
    if not hetero and not isinstance(getattr(data, 'x', None), Tensor):
        raise ValueError("BottomLayerOffload needs node features 'data.x'")
    hops = max(len(v) for v in sampler.num_neighbors.values())
    if hops == 0:
        raise ValueError("BottomLayerOffload needs at least one hop")
    if not hasattr(loader, 'register_batch_hook'):
        raise TypeError("'loader' must have 'register_batch_hook' (a "
                        "pyg_orch.HybridNeighborLoader)")
    fanout = -1 if hetero else int(sampler.num_neighbors[None][-1])
    return sampler, data, hops, fanout


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or \
            value < minimum:
        raise ValueError(f"'{name}' must be an integer >= {minimum} (got "
                         f"{value!r})")


def _check_ratios(hot_ratio, cache_ratio):
    if isinstance(cache_ratio, str) and cache_ratio != 'auto':
        raise ValueError(f"'gpu_cache_ratio' must be a float in [0, 1] or "
                         f"'auto' (got {cache_ratio!r})")
    if isinstance(hot_ratio, str) and hot_ratio != 'auto':
        raise ValueError(f"'hot_ratio' must be a float in [0, 1] or 'auto' "
                         f"(got {hot_ratio!r})")
    checks = [(name, v) for name, v in (('hot_ratio', hot_ratio),
                                        ('gpu_cache_ratio', cache_ratio))
              if v != 'auto']
    for name, v in checks:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or \
                not 0.0 <= float(v) <= 1.0:
            raise ValueError(f"'{name}' must be a float in [0, 1] (got "
                             f"{v!r})")
    if 'auto' in (hot_ratio, cache_ratio):
        return tuple(v if v == 'auto' else float(v)
                     for v in (hot_ratio, cache_ratio))
    if float(hot_ratio) + float(cache_ratio) > 1.0 + 1e-9:
        raise ValueError(f"'hot_ratio' + 'gpu_cache_ratio' must not exceed "
                         f"1 (got {hot_ratio} + {cache_ratio})")
    return float(hot_ratio), float(cache_ratio)
