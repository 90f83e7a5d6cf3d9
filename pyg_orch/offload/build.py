"""Assembling the runtime of a :class:`BottomLayerOffload` from its plan."""
import functools
import logging
import time
import warnings
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_orch.offload.aggregate_split import AGGREGATE
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
    part_hetero_runtime_inputs,
    part_runtime_inputs,
    partition_ranks,
)
from pyg_orch.offload.planning import OffloadPlan, check_hetero_options
from pyg_orch.offload.protocol import LoaderFacts, Seeds
from pyg_orch.offload.runtime import (
    DegreeCompensation,
    HeteroOffloadRuntime,
    OffloadRuntime,
)
from pyg_orch.offload.static_rows import (
    STATIC_RATIOS,
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
    build = build_hetero_runtime if plan.is_hetero else build_homo_runtime
    runtime = build(model, loader, plan, ranks=ranks)
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
            _hetero_first_layer(model, loader, options)
        else:
            layer_name, first = find_first_layer(model, options.layer)
            check_materialized(first, layer_name)
    except (ValueError, TypeError, NotImplementedError) as exc:
        return exc
    return None


def _presample_inputs(loader: Any, options: OffloadOptions
                      ) -> Tuple[Seeds, int, int]:
    # The training seeds, the batch size and the batches to pre-sample.
    seeds, batch_size = loader.offload_seeds()
    first = next(iter(seeds.values())) if isinstance(seeds, dict) else seeds
    num = options.num_presample_batches or presample_batches(
        first.numel(), batch_size)
    return seeds, batch_size, num


def aggregates_only(computer: Union[BottomLayerComputer,
                                    HeteroBottomLayerComputer]) -> bool:
    r"""Whether the CPU computes weight-free aggregations only."""
    kinds = getattr(computer, 'kinds', None)
    kinds = set(kinds.values()) if isinstance(kinds, dict) else \
        {computer.split}
    return kinds == {AGGREGATE}


def make_strategy(computer: Union[BottomLayerComputer,
                                  HeteroBottomLayerComputer],
                  layer: Any, hot: HotSetSizer, device: torch.device,
                  options: OffloadOptions,
                  full_neighbors: bool) -> EmbeddingStrategy:
    r"""The embedding strategy of :obj:`options.refresh`."""
    kwargs = dict(chunk_size=options.chunk_size,
                  idle_timeout=options.idle_timeout,
                  intra_op_threads=options.intra_op_threads,
                  work_hook=options.work_hook,
                  max_sample_age=options.max_sample_age,
                  static=full_neighbors and aggregates_only(computer),
                  scheduled=options.seed is not None and not options.auto_hot)
    if options.refresh == 'super_batch':
        return EmbeddingPipeline(computer, layer, hot, device,
                                 options.max_staleness, options.num_threads,
                                 super_batch_size=options.super_batch_size,
                                 **kwargs)
    return BatchEmbeddingCache(computer, layer, hot, device,
                               options.max_staleness, options.num_threads,
                               **kwargs)


def _trial_ratios(options: OffloadOptions,
                  static: bool = False) -> Tuple[float, ...]:
    # The hot ratios the decision by measurement tries.
    given = options.autotune
    if isinstance(given, tuple):
        return candidate_ratios(options.hot_ratio, given)
    if static and not options.hot_ratio_given:
        return candidate_ratios(options.hot_ratio, STATIC_RATIOS)
    return candidate_ratios(options.hot_ratio)


def _build_ratio(options: OffloadOptions, ratios: Tuple[float, ...]
                 ) -> float:
    # The hot ratio built with: `hot_ratio` if tried, else the smallest.
    tried = [r for r in ratios if r > 0]
    if not tried or options.hot_ratio in tried:
        return options.hot_ratio
    return min(tried)


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


def _static_sizes(sizes: List[int], kept: List[float], computer: Any,
                  device: Any) -> Tuple[List[int], List[float]]:
    # The trial's sizes, capped by the device's memory for a table.
    return cap_sizes(sizes, kept, max_table_rows(table_row_bytes(computer),
                                                 device))


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
    hot = HotSetSizer(candidates, num_nodes, min(
        int(round(_build_ratio(options, ratios) * of)), candidates.numel()))
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


def _start_measuring(runtime: OffloadRuntime, sizes: List[int],
                     ratios: List[float], plan: OffloadPlan,
                     ranks: Optional[MachineRanks]) -> None:
    # Ranks that decide alike keep a kept hot set (no guard for one rank):
    runtime.guard_kept = ranks is None
    runtime.start_tuner(functools.partial(
        make_tuner, sizes=sizes, ratios=ratios, facts=plan.facts,
        options=plan.options, lead=runtime.lead, ranks=ranks,
        static=runtime.strategy.static))


def _whole_graph_computer(loader: Any, first: torch.nn.Module,
                          options: OffloadOptions
                          ) -> Tuple[Tensor, BottomLayerComputer]:
    # The features the CPU side reads and its computer.
    sampler = loader.offload_sampler
    x = loader.offload_data.x
    if x.device.type != 'cpu':
        warnings.warn(
            "BottomLayerOffload: 'loader.data.x' is not in host memory; "
            "the CPU side works on a host copy of it", stacklevel=5)
        x = x.cpu()
    computer = BottomLayerComputer(
        first, x, sampler.topology.to('cpu').csc[None],
        -1 if options.full_neighbors is True else sampler.bottom_fanout(),
        replace=sampler.replace, seed=options.seed,
        autocast_dtype=options.cpu_autocast)
    return x, computer


def build_homo_runtime(model: torch.nn.Module, loader: Any,
                       plan: OffloadPlan,
                       ranks: Optional[MachineRanks] = None
                       ) -> OffloadRuntime:
    r"""The runtime for a homogeneous graph (agreed with :obj:`ranks`)."""
    options = plan.options
    measure = plan.measure
    compensate_degrees = plan.compensate_degrees
    partitioned = plan.partitioned
    sampler = loader.offload_sampler
    cache_ratio = plan.cache_ratio
    if partitioned:  # No GPU feature store (remote rows: its own cache).
        num_nodes = sampler.num_nodes[None]
    else:
        num_nodes = sampler.topology.num_nodes[None]
    layer_name, first = find_first_layer(
        model, options.layer if plan.first is None else plan.first)
    check_materialized(first, layer_name)
    # With hot_ratio='auto', the hot set grows along the candidates.
    ratio = HotSetSizer.AUTO_MAX_RATIO if options.auto_hot else \
        options.hot_ratio
    weighted = plan.facts.weighted
    # Rows computed once are planned from a probe of the split:
    static_why: Optional[str] = _PARTITIONED if partitioned else None
    if not partitioned:
        x, computer = _whole_graph_computer(loader, first, options)
        static_why = _static_plan(computer,
                                  degree_probe(computer.csc.colptr),
                                  options, weighted)
    ratios: Tuple[float, ...] = ()
    if measure:
        ratios = _trial_ratios(options, static=static_why is None)
        ratio = max(ratios)
    reduce = None if ranks is None or partitioned else ranks.sum
    if partitioned:
        # This part's vertices are the candidates (ratios of them):
        selection, computer, x = part_runtime_inputs(loader, first, ratio,
                                                     options)
    else:
        seeds, batch_size, num_batches = _presample_inputs(loader, options)
        selection = select_hot_nodes(
            sampler, seeds, batch_size, ratio, cache_ratio, num_batches,
            options.seed,            reduce_counts=reduce,
            num_ranks=1 if ranks is None else ranks.size)
    candidates = selection.hot_nodes
    of = None  # The vertices the ratios are of: all of them.
    if partitioned:
        of = loader.partition_batches.partition.num_nodes
        if measure and ranks is not None:
            # Hot sets of the same sizes on all ranks:
            of = ranks.min(of)
            candidates = selection.hot_nodes = candidates[:ranks.min(
                candidates.numel())]
    hot, sizes, kept = _hot_set(candidates, num_nodes, ratios, options,
                                measure, of)
    measure = len(sizes) > 1
    if computer.dedup:
        computer.in_edge_mask = hot.rank >= 0  # All candidates.
    if hot.size > 0:
        computer.choose_split(hot.hot_nodes, options.split)
        computer.calibrate(hot.hot_nodes)
    elif options.split == 'aggregate':  # Still check that the layer can.
        probe = candidates if partitioned else torch.arange(num_nodes)
        computer.choose_split(probe[:64], 'aggregate')
    full, full_why = _resolve_full_neighbors(computer, options, static_why,
                                             weighted)
    if measure and full and aggregates_only(computer):
        sizes, kept = _static_sizes(sizes, kept, computer, plan.facts.device)
        if len(sizes) < 2:  # No table fits: plain training.
            hot, measure = HotSetSizer(candidates, num_nodes, 0), False
    fixed_reason = None
    deeper = plan.off_reason
    if deeper is not None:  # Plain PyG runs it: pass it through.
        hot, measure = HotSetSizer(candidates, num_nodes, 0), False
        fixed_reason = f'{deeper}; offload off (the model trains as in PyG)'
        warnings.warn(f'BottomLayerOffload: {fixed_reason}', UserWarning,
                      stacklevel=4)
    elif computer.degree_dependent:
        why = (f"the first layer ({type(first).__name__}) normalizes by its "
               f"neighbors' degrees in each mini-batch (as GCNConv does "
               f"with normalize=True), which rows computed ahead on the CPU "
               f"cannot know; on a graph with hubs (MUSAE GitHub) this cost "
               f"about 3 points of accuracy")
        if measure:  # The default: offload off, no trial.
            hot = HotSetSizer(candidates, num_nodes, 0)
            measure = False
            fixed_reason = why + '; offload off (pass hot_ratio to force it)'
            logger.info('BottomLayerOffload: %s', fixed_reason)
        else:
            warnings.warn(f"BottomLayerOffload: {why}; offloading anyway "
                          f"because hot_ratio was given", UserWarning,
                          stacklevel=4)
    strategy = make_strategy(computer, first, hot, plan.facts.device,
                             options, full)
    degrees = None
    if partitioned and compensate_degrees:
        # The hot vertices' in-degrees are in the halo table's columns:
        degrees = DegreeCompensation(sampler, x.csc.colptr, x.ids)
    runtime = OffloadRuntime(model, loader, layer_name, first, selection,
                             hot, strategy, x, options.replace_rows,
                             bool(compensate_degrees), degrees=degrees)
    runtime.full_neighbors, runtime.full_neighbors_reason = full, full_why
    if fixed_reason is not None:
        runtime.fixed_reason = fixed_reason
    try:
        own = _loader_cache(loader)
        if hot.size > 0 and cache_ratio > 0:
            # Never fewer rows than the loader's cache holds already:
            if own is not None:
                cache_ratio = max(cache_ratio,
                                  min(own.numel() / max(num_nodes, 1), 1.0))
            # Hot vertices included: they are still sampled neighbors.
            selection.cache_nodes = select_cache_nodes(
                sampler, hot.mask, seeds, batch_size, cache_ratio,
                num_batches, options.seed, reduce_counts=reduce)
        set_cache = loader.set_gpu_cache_nodes
        if fixed_reason is None:
            if measure:
                # The loader keeps its cache unless measurement keeps offload.
                runtime.offload_cache = functools.partial(
                    set_cache, selection.cache_nodes)
                if own is not None:  # Given back if switched off.
                    runtime.restore_cache = functools.partial(set_cache,
                                                              own.clone())
            else:
                set_cache(selection.cache_nodes)
        if measure:
            _start_measuring(runtime, sizes, kept, plan, ranks)
    except BaseException:
        runtime.close()
        raise
    return runtime


def _loader_cache(loader: Any) -> Optional[Tensor]:
    # The vertices the loader's GPU cache holds (None if none).
    own = loader.get_gpu_cache_nodes()
    return own if isinstance(own, Tensor) else None


def _hetero_first_layer(
    model: torch.nn.Module, loader: Any, options: OffloadOptions,
    convs: Optional[Dict[Any, torch.nn.Module]] = None
) -> Tuple[str, Dict[Any, torch.nn.Module]]:
    # The first layer of a heterogeneous model, its node features checked.
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
        layer_name = common_prefix([names[id(m)] for m in convs.values()])
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


def build_hetero_runtime(model: torch.nn.Module, loader: Any,
                         plan: OffloadPlan,
                         ranks: Optional[MachineRanks] = None
                         ) -> HeteroOffloadRuntime:
    r"""The runtime for a heterogeneous graph (agreed with :obj:`ranks`)."""
    options = plan.options
    measure = plan.measure
    partitioned = plan.partitioned
    sampler = loader.offload_sampler
    layer_name, convs = _hetero_first_layer(model, loader, options,
                                            plan.first)
    weighted = plan.facts.weighted
    static_why: Optional[str] = _PARTITIONED
    if not partitioned:
        data = loader.offload_data
        topology = sampler.topology.to('cpu')
        x_dict = {t: data[t].x.cpu() for et in convs
                  for t in (et[0], et[-1])}
        fanouts = {
            et: -1 if options.full_neighbors is True else
            sampler.bottom_fanout(et)
            for et in convs
        }
        csc = {et: topology.csc[et] for et in convs}
        computer = HeteroBottomLayerComputer(
            convs, x_dict, csc, fanouts,
            {t: x.size(0) for t, x in x_dict.items()},
            replace=sampler.replace, seed=options.seed,
            autocast_dtype=options.cpu_autocast)
        static_why = _static_plan(computer, hetero_degree_probe(
            csc, computer.node_types), options, weighted)
    if options.auto_hot:  # Candidates up to the cap; the set grows.
        ratios = (HotSetSizer.AUTO_MAX_RATIO, )
    else:
        ratios = _trial_ratios(options, static=static_why is None) \
            if measure \
            else (options.hot_ratio, )
    of = None  # The vertices the ratios are of: all of them.
    if partitioned:
        selection, computer, x_dict = part_hetero_runtime_inputs(
            loader, convs, max(ratios), options)
        part = loader.partition_batches.partition
        of = sum(int(part.node_ids[t].numel()) for t in computer.node_types)
        if measure and ranks is not None:
            # Hot sets of the same sizes on all ranks:
            of = ranks.min(of)
            selection.hot_nodes = selection.hot_nodes[:ranks.min(
                selection.hot_nodes.numel())]
    else:
        seeds, batch_size, num_batches = _presample_inputs(loader, options)
        selection = select_hetero_hot_nodes(
            sampler, seeds, None, computer.node_types, batch_size,
            max(ratios), num_batches,
            options.seed, reduce_counts=None if ranks is None else ranks.sum,
            num_ranks=1 if ranks is None else ranks.size)
    hot, sizes, kept = _hot_set(selection.hot_nodes, selection.num_nodes,
                                ratios, options, measure, of)
    measure = len(sizes) > 1
    # Check the split on hot vertices where there are, on any otherwise:
    by_type = computer.node_type_of(hot.hot_nodes)
    probe = {}
    for t in computer.node_types:
        if t in by_type:
            probe[t] = by_type[t][1]
        elif partitioned:  # Vertices with rows in the tables.
            probe[t] = x_dict[t].ids[:64] if t in x_dict else \
                torch.empty(0, dtype=torch.int64)
        else:
            probe[t] = torch.arange(min(64, x_dict[t].size(0)))
    computer.choose_split(probe, options.split)
    full, full_why = _resolve_full_neighbors(computer, options, static_why,
                                             weighted)
    if measure and full and aggregates_only(computer):
        sizes, kept = _static_sizes(sizes, kept, computer, plan.facts.device)
        if len(sizes) < 2:  # No table fits: plain training.
            hot = HotSetSizer(selection.hot_nodes, selection.num_nodes, 0)
            measure = False
    strategy = make_strategy(computer, computer.layer_group(convs), hot,
                             plan.facts.device, options, full)
    runtime = HeteroOffloadRuntime(model, loader, layer_name, convs,
                                   selection, hot, strategy, x_dict,
                                   options.replace_rows)
    runtime.full_neighbors, runtime.full_neighbors_reason = full, full_why
    if measure:
        try:
            _start_measuring(runtime, sizes, kept, plan, ranks)
        except BaseException:
            runtime.close()
            raise
    return runtime
