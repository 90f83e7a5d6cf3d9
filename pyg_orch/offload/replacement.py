"""Replacing hot rows of a layer's output on the device."""
import weakref
from typing import Any, Callable, List, Optional, Tuple

import torch
from torch import Tensor


class BatchInfo:
    __slots__ = ('x_ref', 'lo', 'hi', 'slot', 'num_rows', 'rows', 'pos',
                 'pos_cpu', 'num_nodes', 'pruned', 'extra_edges')

    def __init__(self, x: Tensor, lo: int, hi: int, slot: Tensor,
                 pruned: bool, num_rows: Optional[int] = None):
        self.x_ref = weakref.ref(x)
        # `slot[i]`: the table row of local row `lo + i`, `-1` if not hot:
        self.lo, self.hi, self.slot = lo, hi, slot
        # A table replacing the hot rows must hold `num_rows` rows:
        self.num_rows = num_rows
        # The hot rows alone, made on demand (synchronizes with the device).
        self.rows: Optional[Tensor] = None
        self.pos: Optional[Tensor] = None
        self.pos_cpu: Optional[Tensor] = None
        self.num_nodes = x.size(0)
        self.pruned = pruned
        # Placeholder in-edges of pruned hot vertices (degree compensation):
        self.extra_edges: Optional[Tensor] = None

    def hot_rows(self) -> None:
        if self.rows is None:
            self.rows, self.pos = hot_rows(self.slot, self.lo)


def hot_rows(slot: Tensor, lo: int) -> Tuple[Tensor, Tensor]:
    # The hot rows among rows `lo:` and their table rows (synchronizes).
    rows = (slot >= 0).nonzero().view(-1)
    return rows + lo, slot.index_select(0, rows).to(torch.int64)


class ReplaceRows(torch.autograd.Function):
    r"""Replaces the hot rows of :obj:`out` by :obj:`emb`, out of place."""
    @staticmethod
    def forward(ctx, out: Tensor, lo: int, hot: Tensor,
                emb: Tensor) -> Tensor:
        new = out.clone()
        part = new[lo:lo + hot.numel()]
        mask = hot.view(-1, *([1] * (out.dim() - 1)))
        part.copy_(torch.where(mask, emb, part))
        ctx.lo = lo
        ctx.save_for_backward(hot)
        return new

    @staticmethod
    def backward(ctx, grad: Tensor):
        hot, = ctx.saved_tensors
        lo = ctx.lo
        mask = hot.view(-1, *([1] * (grad.dim() - 1)))
        grad_emb = None
        if ctx.needs_input_grad[3]:  # Rows computed from current weights.
            part = grad[lo:lo + hot.numel()]
            grad_emb = torch.where(mask, part, part.new_zeros(()))
        grad = grad.clone()
        grad[lo:lo + hot.numel()].masked_fill_(mask, 0)
        return grad, None, None, grad_emb


def replace_from_table(out: Tensor, info: BatchInfo, table: Tensor,
                       finish: Callable[[Tensor], Tensor]
                       ) -> Tuple[Tensor, Any]:
    r"""Replaces the hot rows of :obj:`out` from :obj:`table`."""
    lo, hi = info.lo, min(info.hi, out.size(0))  # Bipartite: fewer.
    if hi <= lo:
        return out, 0
    slot = info.slot[:hi - lo]
    hot = slot >= 0
    emb = table.index_select(0, slot.clamp(min=0).to(torch.int64))
    return ReplaceRows.apply(out, lo, hot, finish(emb)), hot.sum()


def check_batch_features(x: Tensor, n_id: Tensor, features: Tensor,
                         batch_name: str, data_name: str) -> None:
    r"""Raises unless a batch's :obj:`x` starts with :obj:`features[n_id]`."""
    k = min(8, x.size(0))
    ids, got = n_id[:k].to('cpu'), x[:k].detach().to('cpu')
    if not isinstance(features, Tensor):
        # A table of some vertices' rows (partitions), see `HaloTable`:
        have = features.known(ids)
        ids, got = ids[have], got[have]
    expected = features.index_select(0, ids)
    if got.shape != expected.shape or not torch.allclose(
            got.to(expected.dtype), expected, rtol=1e-4, atol=1e-5):
        raise ValueError(
            f"BottomLayerOffload: '{batch_name}.x' differs from "
            f"'{data_name}.x[{batch_name}.n_id]' (does a transform change "
            f"the features?). Hot-vertex embeddings are computed on the CPU "
            f"from '{data_name}.x', so the batch's features must be those "
            f"rows unchanged; transform the data before building the loader "
            f"instead")


def replace_output(output: Any, replace: Callable[[Tensor], Tensor]) -> Any:
    r"""A layer's output, its first tensor through :obj:`replace`."""
    if isinstance(output, (tuple, list)):
        return type(output)([replace(output[0])] + list(output[1:]))
    return replace(output)


class FirstLayerEdgeTensors(NotImplementedError):
    r"""The first layer gets edge-level tensors."""


def edge_tensor_args(args: tuple, kwargs: dict) -> List[Any]:
    r"""The positions or names of a layer's tensor arguments besides
    :obj:`x` and :obj:`edge_index` (edge-level tensors)."""
    return [
        name for name, v in list(enumerate(args[2:], 2)) +
        [(k, v) for k, v in kwargs.items() if k not in ('x', 'edge_index')]
        if isinstance(v, Tensor)
    ]


def check_no_edge_tensors(what: str, args: tuple, kwargs: dict) -> None:
    r"""Raises if the first layer gets edge-level tensors."""
    extra = edge_tensor_args(args, kwargs)
    if extra:
        raise FirstLayerEdgeTensors(
            f"BottomLayerOffload: {what} receives edge-level tensors besides "
            f"'x' and 'edge_index' (arguments {extra}, e.g. edge weights or "
            f"edge features), which the CPU side can not reproduce yet")


def check_aggregated(ctx: 'ForwardContext', what: str) -> None:
    r"""Raises if the layer ran without PyG's aggregation hooks."""
    if not ctx.aggregated:
        raise RuntimeError(
            f"BottomLayerOffload: the aggregation of {what} ran without "
            f"PyG's aggregation hooks (under torch.compile or TorchScript), "
            f"so its hot rows could not be replaced; pass split='output'")


class ForwardContext:
    __slots__ = ('x', 'edge_index', 'info', 'version', 'called', 'in_call',
                 'aggregated', 'done', 'table')

    def __init__(self, x, edge_index, info: Optional[BatchInfo],
                 version: int):
        self.x = x
        self.edge_index = edge_index
        self.info = info
        self.version = version
        self.called = False
        self.in_call = False
        self.aggregated = False
        self.done: set = set()  # Keys of the hooked modules that ran.
        self.table: Optional[Tensor] = None  # The rows of this pass.


class RuntimeHook:
    r"""A hook calling a runtime method through a weak reference."""
    def __init__(self, runtime: Any, name: str):
        self.ref = None if runtime is None else weakref.ref(runtime)
        self.name = name

    def __call__(self, *args):
        runtime = None if self.ref is None else self.ref()
        if runtime is None:
            return None
        return getattr(runtime, self.name)(*args)

    def __deepcopy__(self, memo) -> 'RuntimeHook':
        return RuntimeHook(None, self.name)

    def __reduce__(self):
        return (RuntimeHook, (None, self.name))


class FirstLayerMismatch(ValueError):
    r"""The model does not call the first layer on raw features."""
    def __init__(self, message: str, layer: Optional[str] = None):
        super().__init__(message)
        self.layer = layer


def same_tensor(a: Any, b: Any) -> bool:
    if a is b:
        return True
    return (isinstance(a, Tensor) and isinstance(b, Tensor)
            and a.device == b.device and a.dtype == b.dtype
            and a.shape == b.shape and a.stride() == b.stride()
            and a.data_ptr() == b.data_ptr())
