"""Whether and where a :class:`~pyg_orch.offload.BottomLayerOffload`
offloads: the first message-passing layer is found from the model where
its modules say enough (:func:`plan_on_construction`), else from what the
model does with the first training batch (:func:`trace_message_passing`,
:func:`first_layer_from_trace`); a model that can not be offloaded runs
unchanged behind a :class:`PassThrough`, which says why."""
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor
from torch.nn.parameter import UninitializedParameter
from torch_geometric.nn.conv import MessagePassing

from pyg_orch.offload.bottom_layer import (
    find_first_layer,
    message_passing_layers,
)
from pyg_orch.offload.hetero_layer import find_hetero_first_layer
from pyg_orch.offload.options import OffloadOptions
from pyg_orch.offload.replacement import same_tensor

#: :obj:`stats()['decision']['mode']` of a wrapper that runs the model
#: unchanged, and of one that plans at the first training forward pass.
PASS_THROUGH = 'pass_through'
PENDING = 'pending'

#: The first layer: a module name (homogeneous graphs) or the module per
#: edge type (heterogeneous graphs).
FirstLayer = Union[str, Dict[Any, MessagePassing]]


class PassThrough:
    r"""Stands in for the runtime of a wrapper that does not offload: the
    model runs unchanged, and :meth:`stats` says why (:obj:`reason`). With
    :obj:`pending`, the offload is planned at the first training forward
    pass (e.g. to materialize lazily initialized parameters)."""
    tuner = None
    guard = None
    active = False
    full_neighbors = False
    layer_name: Optional[str] = None

    def __init__(self, reason: str, pending: bool = False):
        prefix = 'BottomLayerOffload: '
        self.reason = reason[len(prefix):] if reason.startswith(prefix) \
            else reason
        self.pending = pending
        self.closed = False
        self.num_forwards = 0

    def count(self, training: bool) -> None:
        r"""A forward pass ran (counted in training mode)."""
        self.num_forwards += int(training)

    def set_training(self, mode: bool) -> None:
        pass

    def reset_stats(self) -> None:
        self.num_forwards = 0

    def close(self) -> None:
        self.closed = True
        self.pending = False

    @property
    def hot_nodes(self) -> Tensor:
        return torch.empty(0, dtype=torch.long)

    def stats(self) -> Dict[str, Any]:
        r"""What :meth:`~pyg_orch.offload.BottomLayerOffload.stats` shows:
        no hot vertex, every training forward pass exact."""
        return {
            'num_hot': 0,
            'steps': self.num_forwards,
            'training_forwards': self.num_forwards,
            'offloaded_forwards': 0,
            'exact_forwards': self.num_forwards,
            'hot_rows_replaced': 0,
            'threads_alive': 0,
            'decision': {
                'mode': PENDING if self.pending else PASS_THROUGH,
                'chosen_num_hot': 0,
                'reason': self.reason,
            },
        }


def has_lazy_parameters(model: torch.nn.Module) -> bool:
    r"""Whether :obj:`model` holds lazily initialized parameters
    (e.g. :obj:`SAGEConv((-1, -1), 64)`)."""
    return any(
        isinstance(p, UninitializedParameter) for p in model.parameters())


def _input_mismatch(layer: torch.nn.Module, x: Any) -> Optional[str]:
    # Why `layer` can not read `x` as it is (its declared `in_channels`),
    # else None.
    if not isinstance(x, Tensor) or x.dim() != 2 or \
            not x.is_floating_point():
        return (f"the node features are no float matrix ("
                f"{getattr(x, 'dtype', type(x).__name__)}, "
                f"{list(getattr(x, 'shape', []))})")
    channels = getattr(layer, 'in_channels', None)
    if isinstance(channels, (tuple, list)):
        channels = channels[0]
    if isinstance(channels, int) and channels > 0 and \
            channels != x.size(-1):
        return (f"the first registered message-passing layer takes "
                f"{channels} input channels, the features have "
                f"{x.size(-1)}")
    return None


def plan_on_construction(model: torch.nn.Module, data: Any,
                         is_hetero: bool,
                         options: OffloadOptions) -> Optional[str]:
    r"""Why the first layer of :obj:`model` can only be found from the
    first training batch (:obj:`None`: from its modules now): lazily
    initialized parameters, a heterogeneous model whose message-passing
    modules are not named after edge types (neither
    :func:`~torch_geometric.nn.to_hetero` nor
    :class:`~torch_geometric.nn.conv.HeteroConv`), or a first registered
    layer that can not read the features (work before it)."""
    if has_lazy_parameters(model):
        return 'lazily initialized parameters'
    if options.layer is not None:
        return None
    if is_hetero:
        try:
            find_hetero_first_layer(model, data.edge_types)
        except ValueError:
            return ('a heterogeneous model whose message-passing modules '
                    'are not named after edge types')
        return None
    try:
        _, first = find_first_layer(model)
    except ValueError:
        return None  # Raised (with the reason) when the runtime is built.
    return _input_mismatch(first, getattr(data, 'x', None))


class LayerCall(NamedTuple):
    r"""A call of a message-passing module in a traced forward pass."""
    name: str
    module: MessagePassing
    x: Any
    edge_index: Any
    extra: List[str]


def model_inputs(args: tuple, kwargs: dict) -> Tuple[Any, Any]:
    r"""The node features and the edges a model is called with
    (:obj:`x` and :obj:`edge_index`, or their dictionaries, copied: a model
    may replace their values)."""
    values = list(args[:2])
    if len(values) < 1:
        values.append(kwargs.get('x', kwargs.get('x_dict')))
    if len(values) < 2:
        values.append(kwargs.get('edge_index',
                                 kwargs.get('edge_index_dict')))
    return tuple(dict(v) if isinstance(v, dict) else v for v in values)


def trace_message_passing(model: torch.nn.Module, args: tuple,
                          kwargs: dict) -> Tuple[Any, List[LayerCall]]:
    r"""Runs :obj:`model(*args, **kwargs)` and returns its output and the
    calls of its (outermost) message-passing modules, in order, with the
    inputs they got (take :func:`model_inputs` before)."""
    calls: List[LayerCall] = []

    def make_hook(name: str):
        def hook(module, a, kw):
            extra = [
                str(key) for key, v in list(enumerate(a[2:], 2)) +
                [(k, v) for k, v in kw.items()
                 if k not in ('x', 'edge_index')] if isinstance(v, Tensor)
            ]
            calls.append(LayerCall(
                name, module, a[0] if len(a) > 0 else kw.get('x'),
                a[1] if len(a) > 1 else kw.get('edge_index'), extra))
        return hook

    handles = [
        module.register_forward_pre_hook(make_hook(name), with_kwargs=True)
        for name, module in message_passing_layers(model).items()
    ]
    try:
        out = model(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return out, calls


_NOT_X = ("(e.g. a Linear layer, an embedding, an input encoder or a "
          "dropout runs before it); the CPU side computes the first layer "
          "from the raw features of the loader's data")


def _homo_first_layer(calls: List[LayerCall],
                      x: Any) -> Tuple[Optional[str], Optional[str]]:
    first = calls[0]
    pair = first.x if isinstance(first.x, (tuple, list)) else (first.x, )
    if not all(same_tensor(v, x) for v in pair):
        return None, (f"the first message-passing layer {first.name!r} "
                      f"({type(first.module).__name__}) does not read the "
                      f"batch's 'x' itself {_NOT_X}")
    if first.extra:
        return None, (f"the first message-passing layer {first.name!r} "
                      f"receives edge-level tensors besides 'x' and "
                      f"'edge_index' ({first.extra}), which the CPU side "
                      f"can not reproduce yet")
    return first.name, None


def _hetero_first_layer(calls: List[LayerCall], x_dict: Any,
                        edge_index_dict: Any
                        ) -> Tuple[Optional[Dict], Optional[str]]:
    if not isinstance(x_dict, dict) or not isinstance(edge_index_dict,
                                                      dict):
        return None, ("the model is not called with the batch's 'x_dict' "
                      "and 'edge_index_dict'")
    convs: Dict[Any, MessagePassing] = {}
    seen: Dict[int, Any] = {}
    for call in calls:
        et = next((k for k, v in edge_index_dict.items()
                   if call.edge_index is v), None)
        if et is None or et in convs:
            continue
        pair = call.x if isinstance(call.x, (tuple, list)) else \
            (call.x, call.x)
        if not (same_tensor(pair[0], x_dict.get(et[0]))
                and same_tensor(pair[-1], x_dict.get(et[-1]))):
            continue
        if call.extra:
            return None, (f"the message-passing module {call.name!r} of "
                          f"{et} receives edge-level tensors besides 'x' "
                          f"and 'edge_index' ({call.extra})")
        if id(call.module) in seen:
            return None, (f"the message-passing module {call.name!r} "
                          f"reads the raw features of two edge types "
                          f"({seen[id(call.module)]} and {et})")
        seen[id(call.module)] = et
        convs[et] = call.module
    if not convs:
        return None, (f"no message-passing module reads the batch's raw "
                      f"'x_dict' of an edge type's node types {_NOT_X}")
    return convs, None


def first_layer_from_trace(
    calls: List[LayerCall], inputs: Tuple[Any, Any], is_hetero: bool
) -> Tuple[Optional[FirstLayer], Optional[str]]:
    r"""The first layer of a traced forward pass (see
    :func:`trace_message_passing`) of a model called on :obj:`inputs`
    (see :func:`model_inputs`): the first message-passing module called,
    if it reads the
    batch's :obj:`x` itself; for heterogeneous graphs, per edge type the
    module that reads the raw :obj:`x_dict` of its node types on
    :obj:`edge_index_dict[edge_type]`. Returns :obj:`(None, why)` where it
    can not be offloaded."""
    if not calls:
        return None, ("no message-passing layer ran in the first training "
                      "forward pass")
    x, edge_index = inputs
    if is_hetero:
        return _hetero_first_layer(calls, x, edge_index)
    return _homo_first_layer(calls, x)
