"""Assembling the runtime of a :class:`BottomLayerOffload` from its plan."""
import functools
import logging
import time
import warnings
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_orch.offload.autotune import (
    HotSetTuner,
    StepTimeChooser,
    candidate_ratios,
)
from pyg_orch.offload.batch_cache import BatchEmbeddingCache
from pyg_orch.offload.bottom_layer import (
    BottomLayerComputer,
    check_materialized,
    find_first_layer,
)
from pyg_orch.offload.ddp import (
    AgreedStepTimeChooser,
    MachineRanks,
    machine_ranks,
)
from pyg_orch.offload.hetero_layer import (
    HeteroBottomLayerComputer,
    common_prefix,
    find_hetero_first_layer,
)
from pyg_orch.offload.hot_set import HotSetSizer
from pyg_orch.offload.hotness import (
    HotSet,
    select_cache_nodes,
    select_hetero_hot_nodes,
    select_hot_nodes,
)
from pyg_orch.offload.options import OffloadOptions
from pyg_orch.offload.partition import (
    agree_on_build,
    build_key,
    check_partition_loader,
    is_partition_loader,
    part_runtime_inputs,
    partition_ranks,
)
from pyg_orch.offload.planning import OffloadPlan, check_hetero_options
from pyg_orch.offload.protocol import LoaderFacts, Seeds
from pyg_orch.offload.runtime import DegreeCompensation, OffloadRuntime
from pyg_orch.offload.static_rows import (
    STATIC_RATIOS,
    aggregates_only,
    cap_sizes,
    degree_probe,
    full_neighbors_reason,
    hetero_degree_probe,
    max_table_rows,
    table_row_bytes,
    use_all_neighbors,
)
from pyg_orch.offload.strategy import EmbeddingStrategy
from pyg_orch.offload.super_batch import EmbeddingPipeline
from pyg_orch.sampling.contract import presample_batches

logger = logging.getLogger('pyg_orch.offload')


def build_runtime(model: torch.nn.Module, loader: Any,
                  plan: OffloadPlan) -> OffloadRuntime:
    r"""Builds the runtime of :obj:`model` as :obj:`plan` says (collective)."""
    if not plan.offloads:
        raise ValueError(f"'plan' must offload (got mode {plan.mode!r}: "
                         f"{plan.reason})")
    if plan.partitioned:
        ranks = partition_ranks(loader)
        agree_on_build(ranks, _partition_error(model, loader, plan),
                       build_key(plan.options))
    else:
        ranks = machine_ranks()
    runtime = _build(model, loader, plan, ranks=ranks)
    if plan.not_measured is not None:
        runtime.fixed_reason = plan.not_measured
    return runtime


def _partition_error(model: torch.nn.Module, loader: Any,
                     plan: OffloadPlan) -> Optional[Exception]:
    # What fails on this rank before a partition's first collective.
    options = plan.options
    try:
        check_partition_loader(loader)
        if plan.is_hetero:
            check_hetero_options(options, plan.compensate_degrees)
        _first_layer(model, loader, plan)
    except (ValueError, TypeError, NotImplementedError) as exc:
        return exc
    return None


def make_strategy(computer: Union[BottomLayerComputer,
                                  HeteroBottomLayerComputer],
                  layer: Any, hot: HotSetSizer, device: torch.device,
                  options: OffloadOptions,
                  full_neighbors: bool) -> EmbeddingStrategy:
    r"""The embedding strategy of :obj:`options.refresh`."""
    kwargs: Dict[str, Any] = dict(
        chunk_size=options.chunk_size, idle_timeout=options.idle_timeout,
        intra_op_threads=options.intra_op_threads,
        work_hook=options.work_hook, max_sample_age=options.max_sample_age,
        static=full_neighbors and aggregates_only(computer),
        scheduled=options.seed is not None and not options.auto_hot)
    strategy_type: Any = BatchEmbeddingCache
    if options.refresh == 'super_batch':
        strategy_type = EmbeddingPipeline
        kwargs['super_batch_size'] = options.super_batch_size
    return strategy_type(computer, layer, hot, device, options.max_staleness,
                         options.num_threads, **kwargs)


def _ratios(options: OffloadOptions, measure: bool,
            static: bool) -> Tuple[float, ...]:
    # The hot ratios the decision by measurement tries (else the one built).
    if options.auto_hot:  # Candidates up to the cap; the set grows.
        return (HotSetSizer.AUTO_MAX_RATIO, )
    if not measure:
        return (options.hot_ratio, )
    if isinstance(options.autotune, tuple):
        return candidate_ratios(options.hot_ratio, options.autotune)
    if static and not options.hot_ratio_given:
        return candidate_ratios(options.hot_ratio, STATIC_RATIOS)
    return candidate_ratios(options.hot_ratio)


#: Why :obj:`full_neighbors='auto'` keeps the fan-out on a partition.
_PARTITIONED = ("the loader samples a partitioned graph (full_neighbors="
                "'auto' keeps the fan-out there)")


def _static_plan(computer: Union[BottomLayerComputer,
                                 HeteroBottomLayerComputer],
                 probe: Any, options: OffloadOptions,
                 weighted: bool) -> Optional[str]:
    # Why hot rows will not be computed once (None: they will), probed early.
    if options.full_neighbors is False:
        return 'full_neighbors=False'
    computer.choose_split(probe, options.split)
    if options.full_neighbors is True:
        return None if aggregates_only(computer) else \
            "the CPU computes the first layer with its weights"
    return full_neighbors_reason(computer, weighted)


def _resolve_full_neighbors(computer: Union[BottomLayerComputer,
                                            HeteroBottomLayerComputer],
                            options: OffloadOptions, plan: Optional[str],
                            weighted: bool) -> Tuple[bool, str]:
    # Whether hot rows aggregate all in-neighbors, and why.
    if options.full_neighbors != 'auto':
        return bool(options.full_neighbors), \
            f'full_neighbors={options.full_neighbors} was given'
    why = plan if plan is not None else full_neighbors_reason(
        computer, weighted)
    if why is not None:
        return False, why
    use_all_neighbors(computer)
    return True, ("the first layer's weight-free aggregation is a mean: "
                  "the mean of all in-neighbors is the expectation of the "
                  "sampled one, and its rows are computed once")


def _hot_set(candidates: Tensor, num_nodes: int, ratios: Tuple[float, ...],
             options: OffloadOptions, measure: bool, of: Optional[int] = None
             ) -> Tuple[HotSetSizer, List[int], List[float]]:
    # The hot set to build with and, if measured, the trial's sizes and ratios.
    if options.auto_hot:
        return HotSetSizer.auto_start(candidates, num_nodes), [], []
    if not measure:
        return HotSetSizer(candidates, num_nodes), [], []
    of = num_nodes if of is None else of
    sizes: List[int] = []
    kept: List[float] = []
    for r in ratios:
        n = min(int(round(r * of)), candidates.numel())
        if n not in sizes:
            sizes.append(n)
            kept.append(round(r, 6))
    # Built with `hot_ratio` if tried, else with the smallest tried:
    tried = [r for r in ratios if r > 0]
    ratio = options.hot_ratio if not tried or options.hot_ratio in tried \
        else min(tried)
    hot = HotSetSizer(candidates, num_nodes, min(int(round(ratio * of)),
                                                 candidates.numel()))
    return hot, sizes, kept


def make_tuner(hot: HotSetSizer, on_resize: Any, on_done: Any,
               cannot_keep_up: Any, sizes: List[int], ratios: List[float],
               facts: LoaderFacts, options: OffloadOptions, lead: int,
               ranks: Optional[MachineRanks] = None,
               static: bool = False) -> HotSetTuner:
    r"""The decision by measurement over the hot-set :obj:`sizes`."""
    device = facts.device
    sync = None
    if device.type == 'cuda' and torch.cuda.is_available():
        sync = functools.partial(torch.cuda.synchronize, device)
    # Batches sampled before a change may reach the model this much later:
    drain = 2 + lead + facts.batches_ahead
    kwargs: Dict[str, Any] = {}
    chooser_type = StepTimeChooser
    if ranks is not None:
        chooser_type, kwargs['ranks'] = AgreedStepTimeChooser, ranks
    chooser = chooser_type(
        sizes, warmup=max(StepTimeChooser.WARMUP, drain),
        steps=StepTimeChooser.STEPS, margin=StepTimeChooser.MARGIN,
        clock=options.autotune_clock or time.perf_counter, sync=sync,
        give_up=None if static else StepTimeChooser.GIVE_UP, **kwargs)
    return HotSetTuner(hot, chooser, ratios, on_resize, on_done,
                       drain=drain, cannot_keep_up=cannot_keep_up,
                       max_hold=None if static else HotSetTuner.MAX_HOLD)


def _whole_graph_inputs(loader: Any, first: Any, options: OffloadOptions
                        ) -> Tuple[Any, Any, Any]:
    # The features the CPU side reads, its computer and a degree probe.
    sampler = loader.offload_sampler
    topology = sampler.topology.to('cpu')
    if isinstance(first, dict):  # Heterogeneous: a layer per edge type.
        data = loader.offload_data
        csc = {et: topology.csc[et] for et in first}
        x_dict = {t: data[t].x.cpu() for et in first for t in (et[0], et[-1])}
        fanouts = {et: -1 if options.full_neighbors is True else
                   sampler.bottom_fanout(et) for et in first}
        computer = HeteroBottomLayerComputer(
            first, x_dict, csc, fanouts,
            {t: x.size(0) for t, x in x_dict.items()},
            replace=sampler.replace, seed=options.seed,
            autocast_dtype=options.cpu_autocast)
        return x_dict, computer, hetero_degree_probe(csc,
                                                     computer.node_types)
    x = loader.offload_data.x
    if x.device.type != 'cpu':
        warnings.warn(
            "BottomLayerOffload: 'loader.data.x' is not in host memory; "
            "the CPU side works on a host copy of it", stacklevel=5)
        x = x.cpu()
    computer = BottomLayerComputer(
        first, x, topology.csc[None],
        -1 if options.full_neighbors is True else sampler.bottom_fanout(),
        replace=sampler.replace, seed=options.seed,
        autocast_dtype=options.cpu_autocast)
    return x, computer, degree_probe(computer.csc.colptr)


def _select(loader: Any, computer: Any, ratio: float, cache_ratio: float,
            presample: Tuple[Seeds, int, int], options: OffloadOptions,
            ranks: Optional[MachineRanks]) -> HotSet:
    # The hot-set candidates by pre-sampling.
    sampler = loader.offload_sampler
    seeds, batch_size, num_batches = presample
    kwargs = dict(reduce_counts=None if ranks is None else ranks.sum,
                  num_ranks=1 if ranks is None else ranks.size)
    if isinstance(computer, HeteroBottomLayerComputer):
        return select_hetero_hot_nodes(
            sampler, seeds, None, computer.node_types, batch_size, ratio,
            num_batches, options.seed, **kwargs)
    return select_hot_nodes(sampler, seeds, batch_size, ratio, cache_ratio,
                            num_batches, options.seed, **kwargs)


def _choose_split(computer: Any, hot: HotSetSizer, candidates: Tensor,
                  x: Any, num_nodes: int, partitioned: bool,
                  options: OffloadOptions) -> None:
    # Checks the split on hot vertices where there are, on any otherwise.
    if isinstance(computer, HeteroBottomLayerComputer):
        by_type = computer.node_type_of(hot.hot_nodes)
        probe = {}
        for t in computer.node_types:
            if t in by_type:
                probe[t] = by_type[t][1]
            elif partitioned:  # Vertices with rows in the tables.
                probe[t] = x[t].ids[:64] if t in x else \
                    torch.empty(0, dtype=torch.int64)
            else:
                probe[t] = torch.arange(min(64, x[t].size(0)))
        computer.choose_split(probe, options.split)
        return
    if computer.dedup:
        computer.in_edge_mask = hot.rank >= 0  # All candidates.
    if hot.size > 0:
        computer.choose_split(hot.hot_nodes, options.split)
        computer.calibrate(hot.hot_nodes)
    elif options.split == 'aggregate':  # Still check that the layer can.
        probe = candidates if partitioned else torch.arange(num_nodes)
        computer.choose_split(probe[:64], 'aggregate')


def _fixed_reason(plan: OffloadPlan, computer: BottomLayerComputer,
                  first: torch.nn.Module, measure: bool) -> Optional[str]:
    # Why offload is off with no trial (None: it is not), warned of.
    if plan.off_reason is not None:  # Plain PyG runs it: pass it through.
        fixed = f'{plan.off_reason}; offload off (the model trains as in PyG)'
        warnings.warn(f'BottomLayerOffload: {fixed}', UserWarning,
                      stacklevel=5)
        return fixed
    if not computer.degree_dependent:
        return None
    why = (f"the first layer ({type(first).__name__}) normalizes by its "
           f"neighbors' degrees in each mini-batch (as GCNConv does "
           f"with normalize=True), which rows computed ahead on the CPU "
           f"cannot know; on a graph with hubs (MUSAE GitHub) this cost "
           f"about 3 points of accuracy")
    if measure:  # The default: offload off, no trial.
        fixed = why + '; offload off (pass hot_ratio to force it)'
        logger.info('BottomLayerOffload: %s', fixed)
        return fixed
    warnings.warn(f"BottomLayerOffload: {why}; offloading anyway "
                  f"because hot_ratio was given", UserWarning, stacklevel=5)
    return None


def _make_runtime(model: torch.nn.Module, loader: Any, plan: OffloadPlan,
                  layer_name: str, first: Any, selection: HotSet,
                  hot: HotSetSizer, strategy: EmbeddingStrategy,
                  x: Any) -> OffloadRuntime:
    # The runtime of the first layer `first` (per edge type if a dict).
    degrees = None
    if plan.partitioned and plan.compensate_degrees:
        # The hot vertices' in-degrees are in the halo table's columns:
        degrees = DegreeCompensation(loader.offload_sampler, x.csc.colptr,
                                     x.ids)
    return OffloadRuntime(model, loader, layer_name, first, selection, hot,
                          strategy, x, plan.options.replace_rows,
                          bool(plan.compensate_degrees), degrees=degrees)


def _build(model: torch.nn.Module, loader: Any, plan: OffloadPlan,
           ranks: Optional[MachineRanks] = None) -> OffloadRuntime:
    # The runtime of either kind of graph (agreed with `ranks`).
    options, measure = plan.options, plan.measure
    partitioned, hetero = plan.partitioned, plan.is_hetero
    sampler = loader.offload_sampler
    layer_name, first = _first_layer(model, loader, plan)
    weighted = plan.facts.weighted
    # Rows computed once are planned from a probe of the split:
    static_why: Optional[str] = _PARTITIONED
    if not partitioned:
        x, computer, probe = _whole_graph_inputs(loader, first, options)
        static_why = _static_plan(computer, probe, options, weighted)
    ratios = _ratios(options, measure, static_why is None)
    of = None  # The vertices the ratios are of: all of them.
    presample = None
    if partitioned:
        # This part's vertices are the candidates (ratios of them):
        selection, computer, x, of = part_runtime_inputs(
            loader, first, max(ratios), options)
        if measure and ranks is not None:
            # Hot sets of the same sizes on all ranks:
            of = ranks.min(of)
            selection.hot_nodes = selection.hot_nodes[:ranks.min(
                selection.hot_nodes.numel())]
    else:
        seeds, batch_size = loader.offload_seeds()
        num = next(iter(seeds.values())) if isinstance(seeds, dict) \
            else seeds
        presample = (seeds, batch_size, options.num_presample_batches
                     or presample_batches(num.numel(), batch_size))
        selection = _select(loader, computer, max(ratios), plan.cache_ratio,
                            presample, options, ranks)
    if hetero:
        num_nodes = selection.num_nodes
    elif partitioned:  # No GPU feature store (remote rows: its own cache).
        num_nodes = sampler.num_nodes[None]
    else:
        num_nodes = sampler.topology.num_nodes[None]
    candidates = selection.hot_nodes
    hot, sizes, kept = _hot_set(candidates, num_nodes, ratios, options,
                                measure, of)
    measure = len(sizes) > 1
    _choose_split(computer, hot, candidates, x, num_nodes, partitioned,
                  options)
    full, full_why = _resolve_full_neighbors(computer, options, static_why,
                                             weighted)
    if measure and full and aggregates_only(computer):
        sizes, kept = cap_sizes(sizes, kept, max_table_rows(
            table_row_bytes(computer), plan.facts.device))
        if len(sizes) < 2:  # No table fits: plain training.
            hot, measure = HotSetSizer(candidates, num_nodes, 0), False
    fixed_reason = None if hetero else _fixed_reason(plan, computer, first,
                                                     measure)
    if fixed_reason is not None:
        hot, measure = HotSetSizer(candidates, num_nodes, 0), False
    layer = computer.layer_group(first) if hetero else first
    strategy = make_strategy(computer, layer, hot, plan.facts.device,
                             options, full)
    runtime = _make_runtime(model, loader, plan, layer_name, first,
                            selection, hot, strategy, x)
    runtime.full_neighbors, runtime.full_neighbors_reason = full, full_why
    if fixed_reason is not None:
        runtime.fixed_reason = fixed_reason
    try:
        if not hetero:
            reduce = None if ranks is None or partitioned else ranks.sum
            _share_cache(runtime, loader, plan, presample, num_nodes,
                         measure, reduce, fixed_reason is not None)
        if measure:
            # Ranks that decide alike keep a kept hot set (no guard for one):
            runtime.guard_kept = ranks is None
            runtime.start_tuner(functools.partial(
                make_tuner, sizes=sizes, ratios=kept, facts=plan.facts,
                options=options, lead=runtime.lead, ranks=ranks,
                static=runtime.strategy.static))
    except BaseException:
        runtime.close()
        raise
    return runtime


def _share_cache(runtime: OffloadRuntime, loader: Any, plan: OffloadPlan,
                 presample: Optional[Tuple[Seeds, int, int]], num_nodes: int,
                 measure: bool, reduce: Any, fixed: bool) -> None:
    # The loader's GPU cache under offload (kept until measurement keeps it).
    selection, cache_ratio = runtime.selection, plan.cache_ratio
    own = loader.get_gpu_cache_nodes()
    own = own if isinstance(own, Tensor) else None
    if runtime.hot.size > 0 and cache_ratio > 0:
        # Never fewer rows than the loader's cache holds already:
        if own is not None:
            cache_ratio = max(cache_ratio,
                              min(own.numel() / max(num_nodes, 1), 1.0))
        seeds, batch_size, num_batches = presample
        # Hot vertices included: they are still sampled neighbors.
        selection.cache_nodes = select_cache_nodes(
            loader.offload_sampler, runtime.hot.mask, seeds, batch_size,
            cache_ratio, num_batches, plan.options.seed, reduce_counts=reduce)
    if fixed:
        return
    set_cache = loader.set_gpu_cache_nodes
    if not measure:
        set_cache(selection.cache_nodes)
        return
    # The loader keeps its cache unless measurement keeps offload.
    runtime.offload_cache = functools.partial(set_cache,
                                              selection.cache_nodes)
    if own is not None:  # Given back if switched off.
        runtime.restore_cache = functools.partial(set_cache, own.clone())


def _first_layer(model: torch.nn.Module, loader: Any, plan: OffloadPlan
                 ) -> Tuple[str, Any]:
    # The first layer's name and module (per edge type if heterogeneous).
    options, convs = plan.options, plan.first
    if not plan.is_hetero:
        name, layer = find_first_layer(
            model, options.layer if convs is None else convs)
        check_materialized(layer, name)
        return name, layer
    if is_partition_loader(loader):
        part = loader.partition_batches.partition
        edge_types = list(part.csc)
        has_x = {t: 'x' in attrs for t, attrs in part.node_attrs.items()}
        where = "the partition's node attribute 'x' of {t!r}"
    else:
        data = loader.offload_data
        edge_types = data.edge_types
        has_x = {t: isinstance(data[t].get('x'), Tensor)
                 for t in data.node_types}
        where = "'data[{t!r}].x'"
    names = {id(m): name for name, m in model.named_modules()}
    if convs is None:
        layer_name, convs = find_hetero_first_layer(model, edge_types,
                                                    options.layer)
    else:
        layer_name = common_prefix(model, convs)
    for et in convs:
        for t in (et[0], et[-1]):
            if not has_x.get(t, False):
                raise ValueError(
                    f"BottomLayerOffload needs node features "
                    f"{where.format(t=t)} (the first layer reads them for "
                    f"{et})")
    for conv in convs.values():
        check_materialized(conv, names[id(conv)])
    return layer_name, convs
