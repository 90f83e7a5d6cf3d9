"""Bottom-layer offload for heterogeneous graphs: hooks on the first layer's
per-edge-type modules of a :func:`~torch_geometric.nn.to_hetero` (or
:class:`~torch_geometric.nn.conv.HeteroConv`) model."""
from typing import Any, Dict, Optional

import torch
from torch import Tensor
from torch_geometric.typing import EdgeType, NodeType

from pyg_orch.offload.aggregate_split import OUTPUT
from pyg_orch.offload.hetero_layer import HeteroBottomLayerComputer
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
    replace_output,
    same_tensor,
)
from pyg_orch.offload.runtime import OffloadRuntime
from pyg_orch.offload.super_batch import EmbeddingPipeline


class HeteroForwardContext(ForwardContext):
    __slots__ = ('edge_type', 'done', 'table')

    def __init__(self, x, edge_index, info, version: int):
        super().__init__(x, edge_index, info, version)
        self.edge_type: Optional[EdgeType] = None  # In this layer's call.
        self.done: set = set()  # Edge types whose layer ran.
        self.table = None


class HeteroOffloadRuntime(OffloadRuntime):
    r"""The state behind a :class:`~pyg_orch.offload.BottomLayerOffload` of a
    heterogeneous model. Hot vertices of all destination node types share
    one table (ids combined as in :class:`HeteroBottomLayerComputer`); every
    edge type's layer gets its columns of it for the hot rows of its
    destination type."""
    context_type = HeteroForwardContext

    def __init__(self, model: torch.nn.Module, loader: Any, layer_name: str,
                 convs: Dict[EdgeType, torch.nn.Module], selection: HotSet,
                 hot: HotSetSizer, strategy: EmbeddingPipeline,
                 x_dict: Dict[NodeType, Tensor],
                 replace_rows: str = 'pruned'):
        self._init_state(model, loader, layer_name, strategy.layer,
                         selection, hot, strategy, x_dict, replace_rows)
        self.convs = convs
        self.computer: HeteroBottomLayerComputer = strategy.computer
        self.compensate_degrees = False
        self._edge_type = {id(conv): et for et, conv in convs.items()}
        # A per-edge-type layer checks its own inputs (`_pre_hook`):
        self.order_checked = True
        self.handles = self._hook_layers(convs.values())
        remover = loader.register_batch_hook(RuntimeHook(self, '_on_batch'))
        self.remove_batch_hook = remover
        self.reset_stats()

    @property
    def hot_nodes(self) -> Dict[NodeType, Tensor]:
        r"""Hot vertices per node type, most accessed first."""
        hot = self.hot.hot_nodes
        types = self.computer.node_type_of(hot)
        return {
            t: types[t][1] if t in types else hot.new_empty(0)
            for t in self.computer.node_types
        }

    def per_type(self, values: Tensor) -> Dict[NodeType, Tensor]:
        r"""Splits a tensor over combined ids by node type."""
        return self.computer.per_type(values)

    def stats(self) -> Dict[str, Any]:
        out = super().stats()
        out['num_hot_per_type'] = {
            t: int(v.numel()) for t, v in self.hot_nodes.items()
        }
        return out

    def install_order_check(self):
        return []

    def check_eval_batch(self, x: Any) -> None:
        for value in (x.values() if isinstance(x, dict) else [x]):
            super().check_eval_batch(value)

    def _on_batch(self, batch) -> None:
        if not self.training or not self.active:
            return
        if not hasattr(batch, 'node_types'):
            return
        if not self.features_checked:
            self.features_checked = True
            for t, x in self.features.items():
                if t in batch.node_types and isinstance(
                        getattr(batch[t], 'x', None), Tensor):
                    check_batch_features(batch[t].x, batch[t].n_id, x,
                                         f'batch[{t!r}]',
                                         f'loader.data[{t!r}]')
        pruned = self.sampler.hot_nodes is not None
        for t in self.computer.node_types:
            if t not in batch.node_types:
                continue
            store = batch[t]
            n_id = getattr(store, 'n_id', None)
            num = getattr(store, 'num_sampled_nodes', None)
            x = getattr(store, 'x', None)
            if not isinstance(n_id, Tensor) or num is None or \
                    not isinstance(x, Tensor):
                continue
            lo, _, hi = self._bottom_rows(num)
            ids = n_id[lo:hi] + self.computer.offsets[t]
            slot = self.hot.positions(n_id.device).index_select(0, ids)
            self._remember(x, BatchInfo(x, lo, hi, slot, pruned,
                                        self.hot.size),
                           len(self.computer.node_types))

    def _match(self, x: Any) -> Optional[Dict[NodeType, BatchInfo]]:
        if not isinstance(x, dict):
            return None
        out = {}
        for t in self.computer.node_types:
            xt = x.get(t)
            info = self.batches.get(id(xt)) if isinstance(xt, Tensor) \
                else None
            if info is not None and info.x_ref() is xt:
                out[t] = info
        return out or None

    def _pre_hook(self, module, args, kwargs):
        ctx = self.ctx
        et = self._edge_type.get(id(module))
        if ctx is None or et is None or et in ctx.done:
            return None
        ctx.done.add(et)
        ctx.called = True
        x = args[0] if len(args) > 0 else kwargs.get('x')
        pair = x if isinstance(x, (tuple, list)) else (x, x)
        x_dict = ctx.x if isinstance(ctx.x, dict) else {}
        for t, value in ((et[0], pair[0]), (et[-1], pair[-1])):
            if not same_tensor(value, x_dict.get(t)):
                raise FirstLayerMismatch(
                    f"BottomLayerOffload: the first layer's module for "
                    f"{et} does not consume the model's input x[{t!r}] "
                    f"directly (e.g. a Linear layer or a dropout runs "
                    f"before it). Bottom-layer offload computes that layer "
                    f"on the CPU from the raw features of the loader's "
                    f"data, so the model's first operation on 'x' must be "
                    f"this layer; call model.eval() to run without offload")
        check_no_edge_tensors(f"the first layer's module for {et}", args,
                              kwargs)
        ctx.edge_type = et
        ctx.aggregated = False
        return None

    def _post_hook(self, module, args, output):
        ctx = self.ctx
        et = self._edge_type.get(id(module))
        if ctx is None or et is None or ctx.edge_type != et:
            return None
        ctx.edge_type = None
        info = (ctx.info or {}).get(et[-1])
        if info is None or info.slot.numel() == 0:
            return None
        if self.split != OUTPUT:
            check_aggregated(ctx, f"the first layer's module for {et}")
            return None
        return replace_output(
            output, lambda out: self._replace_type(module, et, out, info,
                                                   ctx))

    def _aggregate_hook(self, module, inputs, out):
        ctx = self.ctx
        et = self._edge_type.get(id(module))
        if ctx is None or et is None or ctx.edge_type != et or \
                ctx.aggregated:
            return None
        ctx.aggregated = True
        info = (ctx.info or {}).get(et[-1])
        if info is None or info.slot.numel() == 0 or not isinstance(
                out, Tensor):
            return None
        return self._replace_type(module, et, out, info, ctx)

    def _replace_type(self, module, et: EdgeType, out: Tensor,
                      info: BatchInfo, ctx: HeteroForwardContext) -> Tensor:
        # One table per forward pass, whose columns `lo:hi` are `et`'s
        # (none while no vertex is hot yet: a hot set growing from none):
        if ctx.table is None:
            ctx.table = self.strategy.rows_for(info, ctx.version, self.timer)
            if ctx.table is None:
                return out
        lo, hi = self.computer.columns[et]
        return self._replace(out, info, ctx.version, ctx.table[:, lo:hi],
                             module, self.computer.kinds[et])
