"""Whether and where offload runs: :func:`plan_offload`."""
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor
from torch.nn.parameter import UninitializedParameter
from torch.utils.data import DataLoader
from torch_geometric.nn.conv import MessagePassing

from pyg_orch.offload.bottom_layer import (
    deeper_than_loader,
    find_first_layer,
    message_passing_layers,
    needs_degree_compensation,
)
from pyg_orch.offload.hetero_layer import (
    common_prefix,
    find_hetero_first_layer,
)
from pyg_orch.offload.aggregate_split import AGGREGATE
from pyg_orch.offload.options import OffloadOptions
from pyg_orch.offload.partition import is_partition_loader
from pyg_orch.offload.protocol import (
    LoaderFacts,
    OffloadableLoader,
    loader_facts,
    not_offloadable_reason,
)
from pyg_orch.offload.replacement import edge_tensor_args, same_tensor

#: Decision modes: model unchanged, or planned at the first batch.
PASS_THROUGH = 'pass_through'
PENDING = 'pending'
#: :obj:`OffloadPlan.mode` of a plan that builds the offload now.
OFFLOAD = 'offload'

#: A module name, or the module per edge type.
FirstLayer = Union[str, Dict[Any, MessagePassing]]


class PassThrough:
    r"""The runtime of a wrapper that does not offload (or not yet)."""
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
        r"""No hot vertex, every training forward pass exact."""
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


def _input_mismatch(layer: torch.nn.Module, x: Any) -> Optional[str]:
    # Why `layer` can not read `x` as it is, else None.
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
    r"""Why the first layer can only be found from a batch, or :obj:`None`."""
    if any(isinstance(p, UninitializedParameter)
           for p in model.parameters()):
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
    return _input_mismatch(first, data.x)


class LayerCall(NamedTuple):
    r"""A call of a message-passing module in a traced forward pass."""
    name: str
    module: MessagePassing
    x: Any
    edge_index: Any
    extra: List[str]


def model_inputs(args: tuple, kwargs: dict) -> Tuple[Any, Any]:
    r"""Copies of the node features and edges a model is called with."""
    values = list(args[:2])
    if len(values) < 1:
        values.append(kwargs.get('x', kwargs.get('x_dict')))
    if len(values) < 2:
        values.append(kwargs.get('edge_index',
                                 kwargs.get('edge_index_dict')))
    return tuple(dict(v) if isinstance(v, dict) else v for v in values)


def trace_message_passing(model: torch.nn.Module, args: tuple,
                          kwargs: dict) -> Tuple[Any, List[LayerCall]]:
    r"""Runs :obj:`model`; its output and message-passing calls."""
    calls: List[LayerCall] = []

    def make_hook(name: str):
        def hook(module, a, kw):
            extra = [str(key) for key in edge_tensor_args(a, kw)]
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
    r"""The first layer of a traced forward pass, or :obj:`(None, why)`."""
    if not calls:
        return None, ("no message-passing layer ran in the first training "
                      "forward pass")
    x, edge_index = inputs
    if is_hetero:
        return _hetero_first_layer(calls, x, edge_index)
    return _homo_first_layer(calls, x)


#: Why a model under :func:`torch.compile` runs unchanged.
COMPILED_REASON = ("runs under torch.compile, and PyG's compiled "
                   "message passing calls none of the aggregation hooks "
                   "that offload replaces the hot rows in; it trains as "
                   "compiled (the loader's GPU cache is still fitted); "
                   "split='output' offloads compiled models")

#: Why :obj:`split='aggregate'` can not work under :func:`torch.compile`.
COMPILED_AGGREGATE = ("split='aggregate' replaces hot rows in PyG's "
                      "aggregation hooks, which compiled code does not "
                      "call; pass split='output' (or 'auto': the model "
                      "then runs unchanged)")


def compiled_module(model: torch.nn.Module) -> Optional[str]:
    r"""The name of a module of :obj:`model` compiled by
    :func:`torch.compile` (or :meth:`torch.nn.Module.compile`), else
    :obj:`None`."""
    if 'torch._dynamo' not in sys.modules:  # Nothing was compiled.
        return None
    from torch._dynamo.eval_frame import OptimizedModule
    for name, module in model.named_modules():
        if isinstance(module, OptimizedModule) or \
                module.__dict__.get('_compiled_call_impl') is not None:
            return f'module {name!r}' if name else 'the model'
    return None


#: Why the decision by measurement is off with loader worker processes.
WORKERS_REASON = ('loader worker processes (they copy the sampler when an '
                  'epoch starts)')


@dataclass(frozen=True)
class OffloadPlan:
    r"""What a :class:`~pyg_orch.offload.BottomLayerOffload` does: :obj:`mode`
    is :obj:`'offload'`, :obj:`'pending'` or :obj:`'pass_through'` (with
    :obj:`reason`). :meth:`describe` prints it."""
    mode: str
    reason: Optional[str] = None
    #: The first layer's module name (or prefix); :obj:`None` until known.
    layer: Optional[str] = None
    is_hetero: bool = False
    partitioned: bool = False
    #: The hot ratio built with, and whether measured, else why not.
    hot_ratio: Union[float, str] = 0.0
    measure: bool = False
    not_measured: Optional[str] = None
    #: The GPU-cache candidates' ratio (:obj:`'auto'` resolved).
    cache_ratio: float = 0.0
    split: str = 'auto'
    refresh: str = 'super_batch'
    max_staleness: int = 0
    max_sample_age: int = 0
    super_batch_size: Optional[int] = None
    replace_rows: str = 'pruned'
    compensate_degrees: bool = False
    full_neighbors: Union[bool, str] = 'auto'
    seed: int = 0
    #: Whether the table a step uses depends on the step only.
    scheduled: bool = False
    #: Why the offload is built with no hot vertex.
    off_reason: Optional[str] = None
    options: Optional[OffloadOptions] = field(default=None, repr=False,
                                              compare=False)
    facts: Optional[LoaderFacts] = field(default=None, repr=False,
                                         compare=False)
    #: The first layer where a traced forward pass found it.
    first: Optional[FirstLayer] = field(default=None, repr=False,
                                        compare=False)

    @property
    def offloads(self) -> bool:
        r"""Whether the offload is built now."""
        return self.mode == OFFLOAD

    def describe(self) -> str:
        r"""The plan, one line per decision."""
        if self.mode != OFFLOAD:
            return f'{self.mode}: {self.reason}'
        graph = 'heterogeneous' if self.is_hetero else 'homogeneous'
        where = ', a partition folder' if self.partitioned else ''
        size = (f'decided by measurement around {self.hot_ratio}'
                if self.measure else f'{self.hot_ratio}' + (
                    f' ({self.not_measured})' if self.not_measured else ''))
        lines = [
            f'offload the first layer {self.layer!r} ({graph} graph'
            f'{where})',
            f'hot ratio: {size}',
            f'GPU-cache candidates: {self.cache_ratio}',
            f'split: {self.split}, refresh: {self.refresh}, replace_rows: '
            f'{self.replace_rows}',
            f'staleness: at most {self.max_staleness} steps, samples at '
            f'most {self.max_sample_age} steps old' + (
                f', super-batches of {self.super_batch_size}'
                if self.super_batch_size else ''),
            f'full_neighbors: {self.full_neighbors}, compensate_degrees: '
            f'{self.compensate_degrees}',
            f'seed: {self.seed}, tables used by '
            f"{'step' if self.scheduled else 'arrival'}",
        ]
        if self.off_reason is not None:
            lines.append(f'no hot vertex: {self.off_reason}')
        return '\n'.join(lines)

    def __str__(self) -> str:
        return self.describe()


def pass_through_plan(reason: str, options: Optional[OffloadOptions] = None,
                      pending: bool = False) -> OffloadPlan:
    r"""A plan that runs the model unchanged (or later, pending)."""
    return OffloadPlan(PENDING if pending else PASS_THROUGH, reason,
                       options=options)


def _layer_name(model: torch.nn.Module, loader: Any, facts: LoaderFacts,
                options: OffloadOptions,
                first: Optional[FirstLayer]) -> Optional[str]:
    # None where the first layer is found when building.
    if isinstance(first, dict):
        return common_prefix(model, first)
    if not facts.is_hetero:
        return find_first_layer(model, first or options.layer)[0]
    if facts.partitioned:
        return None
    return find_hetero_first_layer(model, loader.offload_data.edge_types,
                                   options.layer)[0]


def _check_features(loader: Any, facts: LoaderFacts) -> None:
    # Raises where offload can not work with the loader's graph.
    data = loader.offload_data
    if not facts.is_hetero and not isinstance(data.x, Tensor):
        raise ValueError("BottomLayerOffload needs node features 'data.x'")
    if facts.num_hops == 0:
        raise ValueError("BottomLayerOffload needs at least one hop")


def _cache_ratio(loader: Any, facts: LoaderFacts,
                 options: OffloadOptions) -> float:
    # The GPU-cache candidates' ratio (none on a partition).
    if facts.partitioned or facts.is_hetero:
        return 0.0
    if options.cache_ratio != 'auto':
        return float(options.cache_ratio)
    num_nodes = loader.offload_sampler.topology.num_nodes[None]
    return min(facts.gpu_cache_capacity / max(num_nodes, 1), 1.0)


def check_hetero_options(options: OffloadOptions,
                         compensate: bool = False) -> None:
    r"""Raises for options not supported on heterogeneous graphs."""
    if options.refresh != 'super_batch' or compensate:
        raise NotImplementedError(
            "BottomLayerOffload on heterogeneous graphs supports "
            "refresh='super_batch' only, with models that need no degree "
            "compensation (no GCNConv-like layer that weighs messages by "
            "the sender's in-degree)")


def plan_offload(model: torch.nn.Module, loader: Any,
                 options: OffloadOptions,
                 first: Optional[FirstLayer] = None) -> OffloadPlan:
    r"""Plans the offload of :obj:`model` with :obj:`loader` without side
    effects (:obj:`first`: the first layer a traced forward pass found)."""
    if not isinstance(loader, (OffloadableLoader, DataLoader)):
        raise TypeError(
            f"'loader' must be a pyg_orch.HybridNeighborLoader or "
            f"HybridLinkNeighborLoader (a loader implementing "
            f"pyg_orch.offload.protocol.OffloadableLoader); got "
            f"{type(loader).__name__}")
    why = not_offloadable_reason(loader)
    if why is not None:
        return pass_through_plan(f'the loader is {why}', options)
    compiled = compiled_module(model)
    if compiled is not None and options.split == AGGREGATE:
        raise ValueError(f"BottomLayerOffload: {compiled} runs under "
                         f"torch.compile; {COMPILED_AGGREGATE}")
    partitioned = is_partition_loader(loader)
    facts = loader_facts(loader, partitioned)
    if facts.unsupported is not None:
        return pass_through_plan(f'the loader uses {facts.unsupported}',
                                 options)
    if not partitioned:
        _check_features(loader, facts)
        if first is None:
            wait_for = plan_on_construction(model, loader.offload_data,
                                            facts.is_hetero, options)
            if wait_for is not None:
                return pass_through_plan(
                    f'planned at the first training forward pass '
                    f'({wait_for})', options, pending=True)
    compensate = options.compensate_degrees
    if compensate == 'auto':
        compensate = needs_degree_compensation(model)
    if facts.is_hetero and not partitioned:
        check_hetero_options(options, bool(compensate))
    measure, not_measured = options.measure, None
    if measure and facts.num_workers > 0 and not partitioned:
        if options.autotune != 'auto':
            raise NotImplementedError(
                f"'autotune' (the decision by measurement) is not "
                f"supported with {WORKERS_REASON}; pass a number "
                f"'hot_ratio' instead")
        measure, not_measured = False, f'not measured: {WORKERS_REASON}'
    try:
        layer = _layer_name(model, loader, facts, options, first)
    except (ValueError, TypeError):
        if not partitioned:
            raise
        layer = None  # Raised when building, on every rank alike.
    return OffloadPlan(
        OFFLOAD, layer=layer, is_hetero=facts.is_hetero,
        partitioned=partitioned, hot_ratio=options.hot_ratio,
        measure=measure, not_measured=not_measured,
        cache_ratio=_cache_ratio(loader, facts, options),
        split=options.split, refresh=options.refresh,
        max_staleness=options.max_staleness,
        max_sample_age=options.max_sample_age,
        super_batch_size=options.super_batch_size,
        replace_rows=options.replace_rows,
        compensate_degrees=bool(compensate),
        full_neighbors=options.full_neighbors, seed=options.seed,
        scheduled=not options.auto_hot,
        off_reason=None if facts.is_hetero else deeper_than_loader(
            model, facts.num_hops),
        options=options, facts=facts, first=first)
