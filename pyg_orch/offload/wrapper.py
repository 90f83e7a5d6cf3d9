""":class:`BottomLayerOffload`: a thin front over a model and its loader."""
import copy
import warnings
import weakref
from typing import Any, Dict, Optional, Union

import torch
import torch.distributed as dist
from torch import Tensor

from pyg_orch.features.cache_fit import GpuMemory
from pyg_orch.offload.build import build_runtime
from pyg_orch.offload.ddp import process_group_active
from pyg_orch.offload.options import (
    OffloadOptions,
    options_from_keywords,
    with_test_hooks,
)
from pyg_orch.offload.aggregate_split import AGGREGATE, OUTPUT
from pyg_orch.offload.planning import (
    COMPILED_AGGREGATE,
    COMPILED_REASON,
    PENDING,
    FirstLayer,
    OffloadPlan,
    PassThrough,
    compiled_module,
    first_layer_from_trace,
    model_inputs,
    plan_offload,
    trace_message_passing,
)
from pyg_orch.offload.replacement import (
    FirstLayerEdgeTensors,
    FirstLayerMismatch,
)
from pyg_orch.offload.protocol import OffloadableLoader
from pyg_orch.offload.runtime import OffloadRuntime
from pyg_orch.offload.testing import current_hooks


#: Training steps after the offload decision before the loader's GPU cache
#: is fitted to the memory they left free.
FIT_AFTER_STEPS = 5


class BottomLayerOffload(torch.nn.Module):
    r"""Computes the bottom (first) message-passing layer of *hot* vertices on
    CPU threads, as in NeutronOrch (Ai et al., VLDB 2024), so that the
    sampler skips their bottom-hop neighbors and the device receives their
    finished embeddings.

    .. code-block:: python

        from pyg_orch import HybridNeighborLoader
        from pyg_orch.offload import BottomLayerOffload, OffloadOptions

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

    Hot vertices are the :obj:`hot_ratio` fraction of all vertices that
    pre-sampled mini-batches need most often in their bottom layer. In
    training mode the sampler does not expand them in the last hop, and their
    first-layer rows are replaced by embeddings computed on CPU threads, at
    most :obj:`max_staleness` optimizer steps old. :meth:`eval` switches
    everything off. The wrapper is used exactly like the model, and copies
    or pickles of it are plain models. For a
    :class:`~torch_geometric.data.HeteroData` loader, the model is called as
    :obj:`model(batch.x_dict, batch.edge_index_dict)` and its first layer is
    one module per edge type. Where the model can not be offloaded, it runs
    unchanged with one :class:`UserWarning`; :obj:`stats()['decision']` says
    why. Under :class:`~torch.nn.parallel.DistributedDataParallel`, build one
    wrapper per rank after the process group is initialized (building is a
    collective), then wrap it. See :doc:`/offload` and :doc:`/multi_gpu`.

    Args:
        model (torch.nn.Module): The GNN, with at least one
            :class:`~torch_geometric.nn.conv.MessagePassing` layer.
        loader (HybridNeighborLoader or HybridLinkNeighborLoader): The
            training loader (link-level loaders: homogeneous graphs only). On
            a partition folder (homogeneous), each rank offloads vertices of
            its own part; ratios are of the part's vertices.
        options (OffloadOptions, optional): The tuning options; the defaults
            if not given.
        **kwargs: The options as keywords (deprecated; pass :obj:`options`).
    """
    def __init__(
        self,
        model: torch.nn.Module,
        loader: Any,
        options: Optional[OffloadOptions] = None,
        **kwargs: Any,
    ):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"'model' must be a torch.nn.Module (got "
                            f"{type(model).__name__})")
        inner = getattr(model, 'module', None) if isinstance(
            model, _PARALLEL) else None
        if isinstance(model, BottomLayerOffload) or isinstance(
                inner, BottomLayerOffload):
            raise ValueError("'model' is already wrapped in "
                             "BottomLayerOffload")
        if isinstance(model, torch.nn.DataParallel):
            raise ValueError(
                "'model' must not be a torch.nn.DataParallel: its replicas "
                "run in threads that bottom-layer offload can not follow; "
                "use DistributedDataParallel (one process per device) over "
                "BottomLayerOffload instead")
        options = options_from_keywords(options, kwargs)
        work_hook, clock = current_hooks()
        if work_hook is not None or clock is not None:
            options = with_test_hooks(options, work_hook, clock)
        plan = plan_offload(model, loader, options)
        runtime = _runtime_of(model, loader, plan)
        super().__init__()
        # Share the model's state (parameters(), state_dict() etc.):
        for name in ('_parameters', '_buffers', '_modules',
                     '_non_persistent_buffers_set'):
            object.__setattr__(self, name, getattr(model, name))
        object.__setattr__(self, '_offload_model', model)
        object.__setattr__(self, 'training', model.training)
        # Resolved (see the argument):
        object.__setattr__(self, 'full_neighbors', runtime.full_neighbors)
        object.__setattr__(self, '_options', options)
        object.__setattr__(self, '_plan', plan)
        object.__setattr__(self, '_loader', loader)
        object.__setattr__(self, '_finalizer', None)
        # The loader's cache is fitted once, FIT_AFTER_STEPS training steps
        # after the decision (see OffloadOptions.fit_gpu_cache):
        object.__setattr__(self, '_fit_steps', 0)
        # The GPU's memory after the last plain step before the trial's
        # first hot set (its peak free of the trial's tables):
        object.__setattr__(self, '_plain_memory', None)
        object.__setattr__(self, '_cache_fit', None if options.fit_gpu_cache
                           else {'grew': False, 'reason': 'fit_gpu_cache='
                                 'False'})
        # Whether to check (once) that no process group came up later:
        object.__setattr__(self, '_check_group', not process_group_active())
        self._install(runtime)

    def _install(self, runtime: Union[OffloadRuntime, PassThrough]) -> None:
        # Puts `runtime` behind the wrapper; warns where the model runs as is.
        old = self.__dict__['_finalizer']
        if old is not None:
            old.detach()
        object.__setattr__(self, 'full_neighbors', runtime.full_neighbors)
        object.__setattr__(self, '_offload', runtime)
        object.__setattr__(self, '_finalizer',
                           weakref.finalize(self, runtime.close))
        runtime.set_training(self.training)
        if isinstance(runtime, PassThrough) and not runtime.pending:
            warnings.warn(
                f"BottomLayerOffload does not offload; the model runs "
                f"unchanged: {runtime.reason}", UserWarning, stacklevel=4)

    def _build(self, first: Optional[FirstLayer]
               ) -> Union[OffloadRuntime, PassThrough]:
        # Plans again with the first layer found by a forward pass.
        plan = plan_offload(self.module, self._loader, self.options, first)
        object.__setattr__(self, '_plan', plan)
        return _runtime_of(self.module, self._loader, plan)

    def _plan_on_first_batch(self, args: tuple, kwargs: dict) -> Any:
        # Runs the model as is, finds its first layer, then builds offload.
        model = self.module
        inputs = model_inputs(args, kwargs)
        out, calls = trace_message_passing(model, args, kwargs)
        is_hetero = self._loader.offload_sampler.is_hetero
        first, why = first_layer_from_trace(calls, inputs, is_hetero)
        if self.options.layer is not None:
            first, why = None, None
        if why is None:
            try:
                runtime = self._build(first)
            except NotImplementedError as exc:
                why = str(exc)
            except (RuntimeError, IndexError) as exc:
                # E.g. a shape error on the CPU: never a failure of the loop.
                why = (f"the first layer could not be computed on the CPU "
                       f"from the raw features ({type(exc).__name__}: "
                       f"{exc})")
        if why is not None:
            runtime = PassThrough(why)
        self._offload.close()
        self._install(runtime)
        return out

    def _mismatch(self, exc: Union[FirstLayerMismatch,
                                   FirstLayerEdgeTensors],
                  args: tuple, kwargs: dict) -> Any:
        # The chosen layer is not what the model calls first on the raw
        # features: rebuild with the one it does, else run unchanged.
        self._offload.close()
        runtime = PassThrough(str(exc))
        if isinstance(exc, FirstLayerMismatch) and exc.layer is not None \
                and self.options.layer is None:
            try:
                runtime = self._build(exc.layer)
            except NotImplementedError as error:
                runtime = PassThrough(str(error))
        self._install(runtime)
        return self.module(*args, **kwargs)

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
        r"""Sets training mode (offload on) or evaluation mode."""
        if not isinstance(mode, bool):
            raise ValueError('training mode is expected to be boolean')
        super().train(mode)
        self.module.training = mode
        self._offload.set_training(mode)
        return self

    def forward(self, *args, **kwargs) -> Any:
        r"""Calls the wrapped model with the same arguments."""
        if torch.compiler.is_compiling() and not self._offloads_compiled():
            # torch.compile(wrapper): only split='output' offloads there.
            self._compiled_forward(self.training)
            return self.module(*args, **kwargs)
        if self.__dict__.get('_is_replica', False):
            raise RuntimeError(
                "BottomLayerOffload does not work under "
                "torch.nn.DataParallel (its replicas run in threads that "
                "offload can not follow); use DistributedDataParallel, one "
                "process per device, over BottomLayerOffload")
        if self.__dict__['_check_group'] and self.training:
            self._warn_late_group()
        model = self.module
        runtime = self._offload
        if self.training and self.__dict__['_cache_fit'] is None:
            self._maybe_fit_cache(runtime)
        if isinstance(runtime, PassThrough):
            if runtime.pending and self.training:
                return self._plan_on_first_batch(args, kwargs)
            runtime.count(self.training)
            return model(*args, **kwargs)
        if runtime.tuner is not None and self.training:
            if not runtime.tuner.trying:
                object.__setattr__(self, '_plain_memory',
                                   device_memory(self._loader))
            runtime.tuner.step()  # The decision by measurement.
        elif runtime.guard is not None and self.training:
            runtime.guard.step()  # A kept hot set the CPU must keep up with.
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
        except (FirstLayerMismatch, FirstLayerEdgeTensors) as exc:
            mismatch = exc
        except KeyboardInterrupt:
            runtime.pause()
            raise
        finally:
            for handle in order_hooks:
                handle.remove()
            runtime.end(ctx, failed)
        if failed:  # A first layer that does not read the raw features:
            return self._mismatch(mismatch, args, kwargs)
        if ctx.info is not None:
            runtime.order_checked = True
        return out

    def _offloads_compiled(self) -> bool:
        # Whether offload works under torch.compile: with split='output'
        # (compiled code calls none of PyG's aggregation hooks).
        runtime = self.__dict__['_offload']
        if isinstance(runtime, OffloadRuntime):
            return runtime.split == OUTPUT
        return self.__dict__['_options'].split == OUTPUT

    @torch.compiler.disable
    def _compiled_forward(self, training: bool) -> None:
        # The wrapper runs under torch.compile, where PyG calls no
        # aggregation hook: it passes through from now on (the cache is
        # still fitted), unless batches were pruned already. Runs outside
        # the compiled graph.
        runtime = self._offload
        if not isinstance(runtime, PassThrough) or runtime.pending:
            if self.options.split == AGGREGATE:
                raise RuntimeError(f"BottomLayerOffload: the model runs "
                                   f"under torch.compile; {COMPILED_AGGREGATE}")
            if isinstance(runtime, OffloadRuntime) and runtime.prunes():
                raise RuntimeError(
                    "BottomLayerOffload: the wrapper runs under "
                    "torch.compile after its loader started pruning the "
                    "bottom-hop neighbors of hot vertices, whose rows "
                    "compiled code can not replace; compile it before its "
                    "first training step, or pass split='output'")
            runtime.close()
            runtime = PassThrough(f'the model {COMPILED_REASON}')
            self._install(runtime)
        if training and self.__dict__['_cache_fit'] is None:
            self._maybe_fit_cache(runtime)
        runtime.count(training)

    def _maybe_fit_cache(self, runtime: Union[OffloadRuntime, PassThrough]
                         ) -> None:
        # Counts training steps once the decision is made; then fits the
        # loader's GPU cache into the memory they left free, once.
        if runtime.tuner is not None or (isinstance(runtime, PassThrough)
                                         and runtime.pending):
            return
        steps = self.__dict__['_fit_steps'] + 1
        object.__setattr__(self, '_fit_steps', steps)
        if steps <= FIT_AFTER_STEPS:
            return
        loader = self._loader
        if not isinstance(loader, OffloadableLoader):
            fit = {'grew': False, 'reason': f'{type(loader).__name__} has '
                   f'no GPU cache to fit'}
        else:
            # Training plainly after a trial: the steps' working set is the
            # one measured before it (the trial's tables are gone).
            plain = self.__dict__['_plain_memory']
            working_set = None if plain is None or runtime.active else \
                plain.working_set
            try:
                fit = loader.fit_gpu_cache(working_set=working_set).as_dict()
            except NotImplementedError as exc:
                fit = {'grew': False, 'reason': str(exc)}
        object.__setattr__(self, '_cache_fit', fit)

    def _warn_late_group(self) -> None:
        object.__setattr__(self, '_check_group', False)
        if process_group_active() and dist.get_world_size() > 1:
            warnings.warn(
                "BottomLayerOffload was built before the torch.distributed "
                "process group was initialized: its hot set is this rank's "
                "own (not the machine's) and its default threads use all "
                "CPU cores of the machine. Build it after "
                "init_process_group() (e.g. pyg_orch.parallel.ddp."
                "init_distributed()) on every rank", stacklevel=3)

    @property
    def options(self) -> OffloadOptions:
        r"""The options, validated."""
        return self.__dict__['_options']

    @property
    def plan(self) -> OffloadPlan:
        r"""What the wrapper decided to do, and why."""
        return self.__dict__['_plan']

    @property
    def runtime(self) -> OffloadRuntime:
        r"""The runtime behind the wrapper, for inspection."""
        return self.__dict__['_offload']

    @property
    def hot_nodes(self) -> Union[Tensor, Dict[str, Tensor]]:
        r"""Global ids of the hot vertices, most accessed first."""
        return self._offload.hot_nodes

    @property
    def hot_mask(self) -> Union[Tensor, Dict[str, Tensor]]:
        r"""Boolean mask over all vertices, :obj:`True` if hot."""
        rt = self._offload
        if isinstance(rt, PassThrough):
            return torch.empty(0, dtype=torch.bool)
        return rt.per_type(rt.hot.mask)

    @property
    def gpu_cache_nodes(self) -> Tensor:
        r"""The GPU-cache candidates."""
        rt = self._offload
        return rt.hot_nodes if isinstance(rt, PassThrough) else \
            rt.selection.cache_nodes

    @property
    def access_counts(self) -> Union[Tensor, Dict[str, Tensor]]:
        r"""Bottom-layer accesses per vertex in pre-sampling."""
        rt = self._offload
        return rt.hot_nodes if isinstance(rt, PassThrough) else \
            rt.per_type(rt.selection.counts)

    @property
    def max_staleness(self) -> int:
        r"""The staleness bound, in optimizer steps."""
        return self.options.max_staleness

    @property
    def super_batch_size(self) -> int:
        r"""Steps per super-batch (:obj:`1` with :obj:`refresh='batch'`)."""
        rt = self._offload
        return 0 if isinstance(rt, PassThrough) else \
            rt.strategy.super_batch_size

    @property
    def steps(self) -> int:
        r"""The weight version: optimizer steps so far."""
        rt = self._offload
        return rt.num_forwards if isinstance(rt, PassThrough) else \
            rt.counter.version

    def stats(self) -> Dict[str, Any]:
        r"""Counters since construction (or :meth:`reset_stats`):

        * :obj:`num_hot`, :obj:`num_gpu_cache`, :obj:`hot_coverage`,
          :obj:`presample_batches`: the hot set and GPU-cache candidates;
        * :obj:`steps`, :obj:`step_source`: the weight version and what it
          counts (:obj:`'optimizer'` or :obj:`'forward'`);
        * :obj:`offloaded_forwards`, :obj:`exact_forwards`,
          :obj:`hot_rows_replaced`, :obj:`hot_rows_per_batch`;
        * :obj:`split`, :obj:`cpu_aggregation`: how the CPU computes the layer;
        * :obj:`staleness_hist`, :obj:`max_staleness_seen`,
          :obj:`max_staleness`, :obj:`super_batch_size`, :obj:`refresh`,
          :obj:`max_table_age`, :obj:`hot_sizes`, :obj:`max_sample_age`,
          :obj:`sample_age_max`, :obj:`sample_age_mean`: staleness and ages in
          steps;
        * :obj:`decision`: how the hot-set size was chosen (:obj:`mode`,
          :obj:`chosen_num_hot`, :obj:`reason`; when measured :obj:`state`,
          :obj:`candidates`, :obj:`chosen_hot_ratio`, :obj:`speedup`,
          :obj:`plain_again_median_step_s`, :obj:`margin`, :obj:`events`);
        * :obj:`wait_s`, :obj:`num_waits`, :obj:`cpu_compute_s`,
          :obj:`tables_submitted`, :obj:`tables_computed`,
          :obj:`tables_discarded`, :obj:`tables_expired`, :obj:`rows_computed`,
          :obj:`static_tables`, :obj:`full_neighbors`,
          :obj:`full_neighbors_reason`, :obj:`threads_alive`,
          :obj:`num_threads`, :obj:`intra_op_threads`, :obj:`chunk_size`,
          :obj:`cpu_autocast`;
        * :obj:`local_world_size`, :obj:`cpu_cores_per_rank`,
          :obj:`hot_set_ranks`: the ranks sharing cores and hot set;
        * :obj:`num_hot_per_type` for heterogeneous graphs;
        * :obj:`gpu_cache_fit`: what fitting the loader's GPU cache did
          (:obj:`None` before it ran; see
          :meth:`~pyg_orch.HybridNeighborLoader.fit_gpu_cache`).
        """
        out = self._offload.stats()
        out['gpu_cache_fit'] = self.__dict__['_cache_fit']
        options = self.options
        out['local_world_size'] = options.local_world_size
        out['cpu_cores_per_rank'] = options.cpu_cores
        if not isinstance(self._offload, PassThrough):
            out['hot_set_ranks'] = self._offload.selection.num_ranks
        return out

    def reset_stats(self) -> None:
        r"""Resets the counters of :meth:`stats` (not the step count)."""
        self._offload.reset_stats()

    def close(self) -> None:
        r"""Stops offloading for good."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        r"""Whether :meth:`close` was called."""
        return self._offload.closed

    def __deepcopy__(self, memo) -> torch.nn.Module:
        # A copy is a copy of the plain model (offload hooks disabled):
        return copy.deepcopy(self.module, memo)

    def __reduce_ex__(self, protocol) -> tuple:
        # Pickling (e.g. `torch.save(model)`) stores the plain model:
        return (_identity, (self.module, ))

    def __enter__(self) -> 'BottomLayerOffload':
        return self

    def __exit__(self, *args) -> None:
        self.close()

    def __repr__(self) -> str:
        rt = self._offload
        num_hot = 0 if isinstance(rt, PassThrough) else rt.hot.size
        return (f'{self.__class__.__name__}({self.module!r}, '
                f'layer={rt.layer_name!r}, '
                f'num_hot={num_hot}, '
                f'max_staleness={self.max_staleness})')


def device_memory(loader: Any) -> Optional[GpuMemory]:
    r"""The memory of the GPU :obj:`loader` delivers batches on now
    (:obj:`None` off a GPU)."""
    if not isinstance(loader, OffloadableLoader) or \
            loader.device.type != 'cuda':
        return None
    return GpuMemory.of(loader.device)


def _runtime_of(model: torch.nn.Module, loader: Any, plan: OffloadPlan
                ) -> Union[OffloadRuntime, PassThrough]:
    # The runtime as planned: built, pending or a pass-through.
    if not plan.offloads:
        return PassThrough(plan.reason, pending=plan.mode == PENDING)
    runtime = build_runtime(model, loader, plan)
    compiled = compiled_module(model)
    if compiled is not None and runtime.split != OUTPUT:
        runtime.close()  # Its split needs hooks compiled code does not call.
        return PassThrough(f'{compiled} {COMPILED_REASON}')
    return runtime


def _identity(obj: Any) -> Any:
    return obj


_PARALLEL = (torch.nn.DataParallel,
             torch.nn.parallel.DistributedDataParallel)
