"""The runtime of offload: hooks, hot set, strategy and counters."""
import collections
import functools
import logging
import warnings
import weakref
from typing import (Any, Callable, Dict, Iterable, List, Optional, Tuple,
                    Union)

import torch
from torch import Tensor
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch_geometric.typing import EdgeType, NodeType

from pyg_orch.offload.aggregate_split import OUTPUT
from pyg_orch.offload.aggregate_split import finish as finish_aggregated
from pyg_orch.offload.autotune import KeepUpGuard
from pyg_orch.offload.bottom_layer import (
    message_passing_layers,
    placeholder_in_edges,
)
from pyg_orch.offload.hot_set import HotSetSizer
from pyg_orch.offload.hotness import HotSet
from pyg_orch.offload.replacement import (
    BatchInfo,
    FirstLayerMismatch,
    ForwardContext,
    RuntimeHook,
    check_aggregated,
    check_batch_features,
    check_no_edge_tensors,
    edge_tensor_args,
    hot_rows,
    replace_from_table,
    replace_output,
    same_tensor,
)
from pyg_orch.offload.strategy import EmbeddingStrategy

logger = logging.getLogger('pyg_orch.offload')

#: Batches (per node type) whose hot rows are remembered until they train.
MAX_BATCHES = 8


class StepCounter:
    r"""Counts weight versions: optimizer steps over :obj:`params()`, else
    training forward passes."""
    def __init__(self, params: Callable[[], Iterable[torch.Tensor]]):
        self._params = params
        self.version = 0
        self.num_forwards = 0
        self.seen_optimizer = False
        self._cache: 'weakref.WeakKeyDictionary' = weakref.WeakKeyDictionary()
        self._handle = register_optimizer_step_post_hook(
            self._on_step)

    @property
    def source(self) -> str:
        r""":obj:`'optimizer'` or :obj:`'forward'`: what versions count."""
        return 'optimizer' if self.seen_optimizer else 'forward'

    def _watches(self, optimizer) -> bool:
        groups = getattr(optimizer, 'param_groups', None) or []
        key = tuple(id(p) for g in groups for p in g.get('params', []))
        try:
            cached = self._cache.get(optimizer)
        except TypeError:  # pragma: no cover (not weak-referenceable)
            cached = None
        if cached is not None and cached[0] == key:
            return cached[1]
        mine = {id(p) for p in self._params()}
        result = any(i in mine for i in key)
        try:
            self._cache[optimizer] = (key, result)
        except TypeError:  # pragma: no cover
            pass
        return result

    def _on_step(self, optimizer, args, kwargs) -> None:
        if self._handle is None:
            return
        if self._watches(optimizer):
            self.seen_optimizer = True
            self.version += 1

    def next_forward_version(self) -> int:
        r"""The version the next training forward pass will have."""
        if self.num_forwards > 0 and not self.seen_optimizer:
            return self.version + 1
        return self.version

    def on_forward(self) -> int:
        r"""Records a training forward pass; returns the current version."""
        if self.num_forwards > 0 and not self.seen_optimizer:
            self.version += 1
        self.num_forwards += 1
        return self.version

    def close(self) -> None:
        r"""Removes the optimizer hook."""
        handle: Optional[object] = self._handle
        self._handle = None
        if handle is not None:
            handle.remove()


class DegreeCompensation:
    r"""Gives a pruned hot vertex as many placeholder in-edges as the last
    hop would have sampled (changing only its own, replaced, outputs)."""
    def __init__(self, sampler: Any, colptr: Optional[Tensor] = None,
                 column_ids: Optional[Tensor] = None):
        self.sampler = sampler
        self.fanout = sampler.bottom_fanout()
        self.colptr = colptr
        self.column_ids = column_ids
        self._on: Dict[torch.device, Tuple[Tensor, Optional[Tensor]]] = {}

    def placeholder_edges(self, n_id: Tensor, rows: Tensor) -> Tensor:
        r"""Placeholder in-edges of the hot rows :obj:`rows`."""
        device = n_id.device
        if device not in self._on:  # The columns, once per device:
            colptr = self.colptr
            if colptr is None:
                colptr = self.sampler.topology.csc[None].colptr
            ids = self.column_ids
            self._on[device] = (colptr.to(device, torch.int64), None if ids
                                is None else ids.to(device, torch.int64))
        colptr, ids = self._on[device]
        nodes = n_id.index_select(0, rows).to(torch.int64)
        if ids is not None:  # Hot vertices are columns (no host sync).
            nodes = torch.searchsorted(ids, nodes)
        return placeholder_in_edges(colptr, nodes, rows, self.fanout,
                                    self.sampler.replace)

    @staticmethod
    def add_placeholders(extra: Optional[Tensor], batch_edge_index: Any,
                         args: tuple, kwargs: dict
                         ) -> Optional[Tuple[tuple, dict]]:
        r"""A layer's inputs with :obj:`extra` appended to its
        :obj:`edge_index` (:obj:`None`: left as they are)."""
        if extra is None or extra.numel() == 0:
            return None
        in_args = len(args) > 1
        edge_index = args[1] if in_args else kwargs.get('edge_index')
        if not isinstance(edge_index, Tensor) or not same_tensor(
                edge_index, batch_edge_index):
            return None  # E.g. trimmed by trim_to_layer: nothing to do.
        if edge_tensor_args(args, kwargs):
            return None  # Edge-level tensors would need placeholders too.
        extra = extra.to(edge_index.device, edge_index.dtype)
        edge_index = torch.cat([edge_index, extra], dim=1)
        if in_args:
            args = (args[0], edge_index) + tuple(args[2:])
        else:
            kwargs = dict(kwargs, edge_index=edge_index)
        return args, kwargs


class OffloadRuntime:
    r"""The state behind a :class:`~pyg_orch.offload.BottomLayerOffload`; it
    holds no reference to the wrapper.

    Args:
        layer (torch.nn.Module or Dict[EdgeType, torch.nn.Module]): The first
            layer, or its module per edge type (heterogeneous: every edge
            type's module gets its columns of one table, see
            :class:`~pyg_orch.offload.hetero_layer.HeteroBottomLayerComputer`).
        features (torch.Tensor or Dict[NodeType, torch.Tensor]): The features
            the CPU side reads.
        degrees (DegreeCompensation, optional): Makes placeholder in-edges
            where the sampler's topology lacks the hot vertices' in-degrees.
    """
    def __init__(self, model: torch.nn.Module, loader: Any, layer_name: str,
                 layer: Union[torch.nn.Module, Dict[EdgeType,
                                                    torch.nn.Module]],
                 selection: HotSet, hot: HotSetSizer,
                 strategy: EmbeddingStrategy,
                 features: Union[Tensor, Dict[NodeType, Tensor]],
                 replace_rows: str = 'pruned',
                 compensate_degrees: bool = True,
                 degrees: Optional[DegreeCompensation] = None):
        self.model = model
        self.sampler = loader.offload_sampler
        self.timer = loader.timer
        # Batches reach the model this many steps after they are sampled:
        self.lead = 1 if loader.lookahead else 0
        self.layer_name = layer_name
        self.hetero = isinstance(layer, dict)
        #: The first layer's module per edge type (heterogeneous only).
        self.convs: Dict[EdgeType, torch.nn.Module] = \
            layer if self.hetero else {}
        self.layer = strategy.layer if self.hetero else layer
        self.computer = strategy.computer
        # What `ctx.in_call` holds while a hooked module runs:
        self._key_of = {id(conv): et for et, conv in self.convs.items()} \
            if self.hetero else {id(layer): True}
        self.selection = selection
        self.hot = hot
        hot.bind(self.sampler, self.per_type)
        if loader.persistent_workers and loader.num_workers > 0:
            # Persistent worker processes must see eval() stop the pruning.
            hot.share_masks()
        self.strategy = strategy
        self.num_hops = self.sampler.num_hops
        self.features = features
        self.replace_rows = replace_rows
        self.split = strategy.computer.split
        self.batches: 'collections.OrderedDict[int, BatchInfo]' = \
            collections.OrderedDict()
        #: Batches sampled, not received yet (refresh='batch').
        self.sampled: 'collections.deque' = collections.deque(
            maxlen=MAX_BATCHES)
        #: The forward pass in progress.
        self.ctx: Optional[ForwardContext] = None
        self.training = False
        self.closed = False
        #: The decision by measurement while it runs.
        self.tuner: Any = None
        #: The decision once made (see :meth:`stats`).
        self.decision: Optional[Dict[str, Any]] = None
        #: Gives the loader's cache the offload's candidates (builder).
        self.offload_cache: Optional[Callable[[], Any]] = None
        #: Gives the loader's cache its rows back (set by the builder).
        self.restore_cache: Optional[Callable[[], Any]] = None
        #: Whether a kept hot set is watched by a :class:`KeepUpGuard`.
        self.guard_kept = False
        #: The guard of a kept hot set, else :obj:`None`.
        self.guard: Any = None
        #: Why no decision is measured (:obj:`'decision'` in :meth:`stats`).
        self.fixed_reason = 'hot-set size given (autotune off)'
        #: Whether hot rows aggregate all in-neighbors, and why (builder).
        self.full_neighbors = False
        self.full_neighbors_reason = ''
        # A per-edge-type module checks its own inputs (`_pre_hook`):
        self.order_checked = self.hetero
        self.features_checked = False
        self.warned_size_match = False
        self.warned_eval_pruned = False
        # Weight versions count the steps that update the layer(s):
        self.counter = StepCounter(self.layer.parameters)
        self.compensate_degrees = compensate_degrees
        self.handles = self._hook_layers(
            self.convs.values() if self.hetero else [layer])
        self.degrees: Optional[DegreeCompensation] = None
        if compensate_degrees:
            self.degrees = degrees or DegreeCompensation(self.sampler)
            for module in message_passing_layers(model).values():
                self.handles.append(module.register_forward_pre_hook(
                    RuntimeHook(self, '_edge_hook'), with_kwargs=True))
        removers = [loader.register_batch_hook(RuntimeHook(self,
                                                            '_on_batch'))]
        # Whether batches are sampled in the loop's thread right before:
        in_loop_thread = loader.batches_ahead == 0 and \
            loader.num_workers == 0
        # (Heterogeneous batches use the whole hot set's slot map.)
        self.sampled_in_hook = self.lead == 0 and in_loop_thread and \
            not self.hetero
        if strategy.per_batch and in_loop_thread:
            try:
                removers.append(loader.register_batch_hook(
                    RuntimeHook(self, '_on_sampled'), when='sampled'))
            except TypeError:  # A loader without sampled hooks.
                pass
        self.remove_batch_hook = lambda: [r() for r in removers]
        self.reset_stats()

    def _hook_layers(self, layers) -> list:
        # Hooks on the first layer, and on its aggregation if weight-free.
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

    @property
    def hot_nodes(self) -> Union[Tensor, Dict[NodeType, Tensor]]:
        r"""The hot vertices in use (per node type for heterogeneous
        graphs), most accessed first."""
        hot = self.hot.hot_nodes
        if not self.hetero:
            return hot
        types = self.computer.node_type_of(hot)
        return {
            t: types[t][1] if t in types else hot.new_empty(0)
            for t in self.computer.node_types
        }

    def per_type(self, values: Tensor) -> Union[Tensor, Dict[str, Tensor]]:
        r""":obj:`values` (split by node type for heterogeneous graphs)."""
        return self.computer.per_type(values) if self.hetero else values

    def batch_info(self, x: Any) -> Optional[BatchInfo]:
        r"""What the runtime knows of the batch of :obj:`x`."""
        info = self.batches.get(id(x)) if isinstance(x, Tensor) else None
        return info if info is not None and info.x_ref() is x else None

    def prunes(self) -> bool:
        r"""Whether the sampler prunes hot vertices now, or a batch it
        pruned may still reach the model."""
        return self.sampler.hot_nodes is not None or any(
            info.pruned for info in self.batches.values())

    @property
    def active(self) -> bool:
        r"""Whether it offloads in training mode."""
        return not self.closed and (self.hot.size > 0
                                    or self.hot.planned > 0)

    def set_training(self, mode: bool) -> None:
        r"""Training mode (pruning) or evaluation mode."""
        self.training = bool(mode)
        if self.closed:
            return
        if self.tuner is not None and not self.training:
            self.tuner.pause()
        self.hot.prune(self.training)
        if not self.training:
            self.strategy.pause()

    def start_tuner(self, tuner_factory: Any) -> None:
        r"""Starts the decision by measurement."""
        self.tuner = tuner_factory(self.hot, self.strategy.replan,
                                   self._tuned,
                                   self.strategy.cannot_keep_up)

    def _tuned(self, size: int) -> None:
        # The decision is final; offload off closes the runtime.
        tuner, self.tuner = self.tuner, None
        self.decision = tuner.summary()
        if size == 0:
            self.close()
        else:
            if self.offload_cache is not None:
                self.offload_cache()
            else:
                self.restore_cache = None  # The loader's cache is unchanged.
            if self.guard_kept:
                self.guard = KeepUpGuard(
                    self.hot, self.strategy.cannot_keep_up,
                    self.strategy.replan, self._fell_behind,
                    drain=tuner.drain, first_step=tuner.num_steps,
                    waited=lambda: self.strategy.wait_seconds)
        self.offload_cache = None

    def _fell_behind(self, step: int, why: str) -> None:
        # The kept hot set's rows stopped coming in time: offload off for good.
        self.guard = None
        decision = self.decision
        chosen = decision.get('chosen_num_hot')
        decision['state'] = 'off'
        decision['events'] = list(decision.get('events', [])) + [
            {'step': step, 'event': 'off', 'num_hot': 0}]
        decision['reason'] = (
            f"{decision.get('reason')}; switched off at step {step} "
            f"({chosen} hot vertices): {why}")
        logger.info('BottomLayerOffload: %s', decision['reason'])
        if self.restore_cache is not None:
            self.restore_cache()
        self.restore_cache = None
        self.close()

    def pause(self) -> None:
        r"""Stops the worker threads until the next training step."""
        self.strategy.pause()

    def close(self) -> None:
        r"""Removes every hook, stops the workers, releases the rest."""
        if self.closed:
            return
        self.closed = True
        self.guard = None
        for handle in self.handles:
            handle.remove()
        self.handles = []
        self.remove_batch_hook()
        self.counter.close()
        try:
            self.hot.prune(False)
        finally:
            self.strategy.close()
            self.strategy.computer.release()
            self.hot.drop_device_copies()
            self.degrees = None
            self.batches.clear()
            self.sampled.clear()
            self.ctx = None

    def reset_stats(self) -> None:
        r"""Resets the counters of :meth:`stats`."""
        self.strategy.reset_stats()
        self.num_offloaded = 0
        self.num_exact = 0
        self._rows_replaced: Union[int, Tensor] = 0

    def stats(self) -> Dict[str, Any]:
        r"""The counters of :meth:`BottomLayerOffload.stats`."""
        selection = self.selection
        out = {
            'num_hot': self.hot.size,
            'num_gpu_cache': int(selection.cache_nodes.numel()),
            'hot_coverage': selection.coverage(self.hot.hot_nodes),
            'presample_batches': selection.num_batches,
            'steps': self.counter.version,
            'step_source': self.counter.source,
            'training_forwards': self.counter.num_forwards,
            'offloaded_forwards': self.num_offloaded,
            'exact_forwards': self.num_exact,
            'hot_rows_replaced': self.rows_replaced,
            'hot_rows_per_batch': self.rows_replaced / max(
                self.num_offloaded, 1),
            'split': self.split,
            'cpu_aggregation': self.strategy.computer.cpu_aggregation,
            'full_neighbors': self.full_neighbors,
            'full_neighbors_reason': self.full_neighbors_reason,
            'decision': self._decision_stats(),
        }
        out.update(self.strategy.stats())
        out['threads_alive'] = len(self.strategy.threads)
        if self.hetero:
            out['num_hot_per_type'] = {
                t: int(v.numel()) for t, v in self.hot_nodes.items()
            }
        return out

    def _decision_stats(self) -> Dict[str, Any]:
        if self.tuner is not None:
            return self.tuner.summary()
        if self.decision is not None:
            return dict(self.decision)
        return {'mode': 'fixed', 'chosen_num_hot': self.hot.size,
                'reason': self.fixed_reason}

    def _bottom_rows(self, num) -> tuple:
        num = [int(v) for v in list(num)]
        n_last = sum(num[:self.num_hops - 1])  # First row of hop L - 1.
        n_bottom = sum(num[:self.num_hops])
        lo = n_last if self.replace_rows == 'pruned' else 0
        return lo, n_last, n_bottom

    def _slot_map(self, ids: Tensor) -> Tuple[int, Tensor]:
        # The hot-set prefix a batch drawn now may have been pruned with, and
        # the table rows of `ids` in it (-1: not hot; no host sync).
        num_rows = self.hot.size
        if self.sampled_in_hook:
            num_rows = 0 if self.sampler.hot_nodes is None else \
                self.hot.prune_size
        positions = self.hot.positions(ids.device, num_rows)
        return num_rows, positions.index_select(0, ids)

    def _on_sampled(self, out) -> None:
        # Queues the CPU computation of the hot rows of a batch just sampled.
        if not self.training or not self.active or \
                self.sampler.hot_nodes is None:
            return
        node, num = getattr(out, 'node', None), getattr(
            out, 'num_sampled_nodes', None)
        if not isinstance(node, Tensor) or num is None:
            return
        lo, _, hi = self._bottom_rows(num)
        num_rows, slot = self._slot_map(node[lo:hi])
        rows, pos = hot_rows(slot, lo)
        pos_cpu = pos.cpu()
        version = self.counter.next_forward_version()
        self.strategy.on_batch_sampled(pos_cpu, version + self.lead, version)
        self.sampled.append((node, slot, num_rows, rows, pos, pos_cpu))

    def _take_sampled(self, n_id: Tensor, info: BatchInfo) -> bool:
        match = next((i for i, entry in enumerate(self.sampled)
                      if same_tensor(entry[0], n_id)), None)
        if match is None:
            return False
        for _ in range(match):  # Sampled, never received.
            self.sampled.popleft()
        _, slot, num_rows, rows, pos, pos_cpu = self.sampled.popleft()
        if n_id.is_cuda:  # Made on the sampling stream.
            stream = torch.cuda.current_stream(n_id.device)
            for t in (slot, rows, pos):
                t.record_stream(stream)
        info.slot, info.num_rows, info.rows, info.pos = \
            slot, num_rows, rows, pos
        info.pos_cpu = pos_cpu
        return True

    def _stores(self, batch: Any) -> List[Tuple[Optional[NodeType], Any]]:
        # The batch's stores of the layer's destination types (homogeneous:
        # the batch itself, node type None).
        if not self.hetero:
            return [(None, batch)]
        types = getattr(batch, 'node_types', [])
        return [(t, batch[t]) for t in self.computer.node_types
                if t in types]

    def _check_features(self, batch: Any) -> None:
        self.features_checked = True
        if not self.hetero:
            check_batch_features(batch.x, batch.n_id, self.features, 'batch',
                                 'loader.data')
            return
        for t, x in self.features.items():
            if t in batch.node_types and isinstance(
                    getattr(batch[t], 'x', None), Tensor):
                check_batch_features(batch[t].x, batch[t].n_id, x,
                                     f'batch[{t!r}]', f'loader.data[{t!r}]')

    def _on_batch(self, batch) -> None:
        if not self.training or not self.active:
            return
        stores = self._stores(batch)
        for t, store in stores:
            n_id = getattr(store, 'n_id', None)
            num = getattr(store, 'num_sampled_nodes', None)
            x = getattr(store, 'x', None)
            if not isinstance(n_id, Tensor) or num is None or \
                    not isinstance(x, Tensor):
                continue
            if not self.features_checked:
                self._check_features(batch)
            self._remember(x, self._batch_info(t, n_id, num, x), len(stores))

    def _batch_info(self, node_type: Optional[NodeType], n_id: Tensor, num,
                    x: Tensor) -> BatchInfo:
        lo, n_last, n_bottom = self._bottom_rows(num)
        ids = n_id[lo:n_bottom]
        if node_type is not None:  # Combined ids over the node types.
            ids = ids + self.computer.offsets[node_type]
        num_rows, slot = self._slot_map(ids)
        pruned = self.sampler.hot_nodes is not None
        info = BatchInfo(x, lo, n_bottom, slot, pruned, num_rows)
        per_batch = self.strategy.per_batch
        requested = per_batch and self._take_sampled(n_id, info)
        if pruned and self.degrees is not None:
            info.hot_rows()
            rows = info.rows
            info.extra_edges = self.degrees.placeholder_edges(
                n_id, rows if lo == n_last else rows[rows >= n_last])
        if per_batch and not requested:
            # Compute this batch's hot rows now, with its forward's weights:
            info.hot_rows()
            info.pos_cpu = info.pos.cpu()
            self.strategy.on_batch_sampled(
                info.pos_cpu, self.counter.next_forward_version())
        return info

    def _remember(self, x: Tensor, info: BatchInfo, per_batch: int = 1
                  ) -> None:
        self.batches[id(x)] = info
        self.batches.move_to_end(id(x))
        while len(self.batches) > MAX_BATCHES * per_batch:
            self.batches.popitem(last=False)

    def _match(self, x: Any) -> Union[None, BatchInfo,
                                      Dict[NodeType, BatchInfo]]:
        if self.hetero:
            if not isinstance(x, dict):
                return None
            out = {t: self.batch_info(x.get(t))
                   for t in self.computer.node_types}
            return {t: v for t, v in out.items() if v is not None} or None
        if not isinstance(x, Tensor) or not self.batches:
            return None
        info = self.batch_info(x)
        if info is not None:
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

    def begin(self, x: Any, edge_index: Any) -> ForwardContext:
        r"""A training forward pass on :obj:`x` starts."""
        version = self.counter.on_forward()
        self.strategy.on_forward(version)
        info = self._match(x)
        if isinstance(info, BatchInfo) and info.slot.device != getattr(
                x, 'device', info.slot.device):
            info.slot = info.slot.to(x.device)
            info.rows = info.pos = None
        if info is None:
            self.num_exact += 1
        else:
            self.num_offloaded += 1
        ctx = ForwardContext(x, edge_index, info, version)
        self.ctx = ctx
        return ctx

    def end(self, ctx: ForwardContext, failed: bool) -> None:
        r"""The forward pass :obj:`ctx` ended."""
        self.ctx = None
        if failed:
            return
        if not ctx.called:
            raise RuntimeError(
                f"BottomLayerOffload: the first message-passing layer "
                f"{self.layer_name!r} was not called during the forward pass; "
                f"pass the layer the model calls first as 'layer='")

    def check_eval_batch(self, x: Any) -> None:
        r"""Warns once if :obj:`x` is (or holds) a pruned batch's features."""
        for value in (x.values() if isinstance(x, dict) else [x]):
            info = self.batch_info(value)
            if not self.warned_eval_pruned and info is not None and \
                    info.pruned:
                self.warned_eval_pruned = True
                warnings.warn(
                    "BottomLayerOffload: evaluating a mini-batch that was "
                    "sampled in training mode, with the bottom-hop neighbors "
                    "of hot vertices pruned; call eval() before drawing "
                    "evaluation batches", stacklevel=5)

    def install_order_check(self) -> List[Any]:
        r"""Checks that no other layer runs first."""
        return [
            module.register_forward_pre_hook(
                functools.partial(self._order_hook, name))
            for name, module in message_passing_layers(self.model).items()
            if module is not self.layer
        ]

    def _order_hook(self, name: str, module, args) -> None:
        ctx = self.ctx
        if ctx is not None and not ctx.called:
            raise FirstLayerMismatch(
                f"BottomLayerOffload: the message-passing layer {name!r} "
                f"runs before {self.layer_name!r}, the layer chosen as the "
                f"first one; pass layer={name!r}", layer=name)

    def _pre_hook(self, module, args, kwargs):
        ctx, key = self.ctx, self._key_of.get(id(module))
        if ctx is None or key is None or key in ctx.done:
            return None
        ctx.done.add(key)
        ctx.called = True
        x = args[0] if len(args) > 0 else kwargs.get('x')
        pair = x if isinstance(x, (tuple, list)) and len(x) > 0 else (x, x)
        if self.hetero:
            x_dict = ctx.x if isinstance(ctx.x, dict) else {}
            inputs = [(f'x[{t!r}]', got, x_dict.get(t))
                      for t, got in ((key[0], pair[0]), (key[-1], pair[-1]))]
        else:
            inputs = [("'x'", pair[0], ctx.x)]
        for name, got, given in inputs:
            if not same_tensor(got, given):
                shape = list(got.shape) if isinstance(got, Tensor) else ''
                raise FirstLayerMismatch(
                    f"BottomLayerOffload: {self._layer_label(key)} does not "
                    f"consume the model's input {name} directly (it gets a "
                    f"{type(got).__name__}{shape}, e.g. computed by a Linear "
                    f"layer, an input dropout or a normalization before it). "
                    f"Bottom-layer offload computes that layer on the CPU "
                    f"from the raw features of the loader's data, so the "
                    f"model's first operation on 'x' must be this layer; "
                    f"move such preprocessing into the data, or call "
                    f"model.eval() to run without offload")
        check_no_edge_tensors(self._layer_label(key), args, kwargs)
        ctx.in_call = key
        ctx.aggregated = False
        return None

    def _edge_hook(self, module, args, kwargs):
        ctx = self.ctx
        if ctx is None or ctx.info is None:
            return None
        return self.degrees.add_placeholders(ctx.info.extra_edges,
                                             ctx.edge_index, args, kwargs)

    def _post_hook(self, module, args, output):
        ctx, key = self.ctx, self._key_of.get(id(module))
        if ctx is None or key is None or ctx.in_call != key:
            return None
        ctx.in_call = False
        info = self._info_of(ctx, key)
        if info is None or info.slot.numel() == 0:
            return None
        if self.split != OUTPUT:
            check_aggregated(ctx, self._layer_label(key))
            return None
        return replace_output(
            output, lambda out: self._replace_in(module, key, out, info, ctx))

    def _aggregate_hook(self, module, inputs, out):
        # split='aggregate': the hot rows of the aggregation are replaced.
        ctx, key = self.ctx, self._key_of.get(id(module))
        if ctx is None or key is None or ctx.in_call != key or \
                ctx.aggregated:
            return None
        ctx.aggregated = True
        info = self._info_of(ctx, key)
        if info is None or info.slot.numel() == 0 or not isinstance(
                out, Tensor):
            return None
        return self._replace_in(module, key, out, info, ctx)

    @staticmethod
    def _info_of(ctx: ForwardContext, key: Any) -> Optional[BatchInfo]:
        # The batch of the destination type of edge type `key`.
        if isinstance(ctx.info, dict):
            return ctx.info.get(key[-1])
        return ctx.info

    def _layer_label(self, key: Any) -> str:
        if self.hetero:
            return f"the first layer's module for {key}"
        return f'the first message-passing layer {self.layer_name!r}'

    def _replace_in(self, module: torch.nn.Module, key: Any, out: Tensor,
                    info: BatchInfo, ctx: ForwardContext) -> Tensor:
        # One table per forward pass (none while no vertex is hot yet):
        if ctx.table is None:
            ctx.table = self.strategy.rows_for(info, ctx.version, self.timer)
            if ctx.table is None:
                return out
        if not self.hetero:
            return self._replace(out, info, ctx.table, self.layer, self.split)
        lo, hi = self.computer.columns[key]
        return self._replace(out, info, ctx.table[:, lo:hi], module,
                             self.computer.kinds[key])

    def _replace(self, out: Tensor, info: BatchInfo, table: Tensor,
                 layer: torch.nn.Module, kind: str) -> Tensor:
        # `out` with its hot rows replaced from `table`.
        def finish(emb: Tensor) -> Tensor:
            emb = emb.to(out.device)
            if kind != OUTPUT:
                emb = finish_aggregated(layer, kind, emb)
            return emb.to(out.dtype)

        new, count = replace_from_table(out, info, table, finish)
        # A device-side counter: no host sync per batch.
        self._rows_replaced = self._rows_replaced + count
        return new

    @property
    def rows_replaced(self) -> int:
        r"""Hot rows replaced (synchronizes)."""
        return int(self._rows_replaced)
