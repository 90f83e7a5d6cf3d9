"""The offload plan alone (plan_offload, OffloadPlan), the loader protocol
(OffloadableLoader), the options object and its deprecated keywords, and
the test hooks (pyg_orch.offload.testing)."""
import threading
import warnings

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GCN, GraphSAGE

from pyg_orch import HybridLinkNeighborLoader, HybridNeighborLoader
from pyg_orch.offload import (
    BottomLayerOffload,
    OffloadableLoader,
    OffloadOptions,
    OffloadPlan,
    plan_offload,
)
from pyg_orch.offload.protocol import TEMPORAL_REASON, loader_facts
from pyg_orch.offload.testing import offload_hooks
from conftest import node_step, tiny_graph, tiny_loader, train_steps
from test_offload_hetero import hetero_graph, make_loader, make_model


def test_plan_of_a_homogeneous_model():
    loader = tiny_loader(tiny_graph())
    model = GraphSAGE(8, 16, 2, 3)
    plan = plan_offload(model, loader, OffloadOptions(
        hot_ratio=0.2, max_staleness=3, refresh='batch', cache_ratio=0.3))
    assert isinstance(plan, OffloadPlan) and plan.offloads
    assert plan.mode == 'offload' and plan.reason is None
    assert plan.layer == 'convs.0' and not plan.is_hetero
    assert not plan.partitioned and not plan.measure
    assert plan.hot_ratio == 0.2 and plan.cache_ratio == 0.3
    assert plan.refresh == 'batch' and plan.max_staleness == 3
    assert plan.max_sample_age == 8 and plan.seed == 0 and plan.scheduled
    assert plan.compensate_degrees is False  # SAGEConv sends no degrees.
    assert plan.off_reason is None
    text = plan.describe()
    assert "'convs.0'" in text and 'homogeneous' in text
    assert 'hot ratio: 0.2' in text and 'refresh: batch' in text
    assert str(plan) == text
    shown = repr(plan)
    assert shown.startswith("OffloadPlan(mode='offload'")
    assert "layer='convs.0'" in shown and 'options=' not in shown

    # By default the size is measured; GCNConv needs degree compensation:
    plan = plan_offload(GCN(8, 16, 2, 3), loader, OffloadOptions())
    assert plan.offloads and plan.measure and plan.hot_ratio == 0.05
    assert plan.compensate_degrees is True
    assert 'decided by measurement around 0.05' in plan.describe()


def test_plan_has_no_side_effects():
    loader = tiny_loader(tiny_graph())
    sampler = loader.node_sampler
    before = loader.get_gpu_cache_nodes()
    plan = plan_offload(GraphSAGE(8, 16, 2, 3), loader,
                        OffloadOptions(hot_ratio=0.2))
    assert plan.offloads
    assert sampler.hot_nodes is None
    assert loader.get_gpu_cache_nodes() is before
    # The loader still yields full batches, which equal a fresh loader's:
    ref = tiny_loader(tiny_graph())
    for batch, expected in zip(loader, ref):
        assert torch.equal(batch.n_id, expected.n_id)


def test_plan_of_a_model_deeper_than_the_loader():
    loader = tiny_loader(tiny_graph())  # Two hops.
    plan = plan_offload(GraphSAGE(8, 16, 3, 3), loader,
                        OffloadOptions(hot_ratio=0.2))
    assert plan.offloads and '3 message-passing layers' in plan.off_reason
    assert 'no hot vertex' in plan.describe()


def test_pending_plans():
    loader = tiny_loader(tiny_graph())
    plan = plan_offload(GraphSAGE(-1, 16, 2, 3), loader, OffloadOptions())
    assert plan.mode == 'pending' and not plan.offloads
    assert 'lazily initialized parameters' in plan.reason
    assert plan.describe() == f'pending: {plan.reason}'

    class Encoded(torch.nn.Module):  # A Linear layer before the first conv.
        def __init__(self):
            super().__init__()
            self.conv = GraphSAGE(4, 16, 2, 3)
            self.lin = torch.nn.Linear(8, 4)

        def forward(self, x, edge_index):
            return self.conv(self.lin(x), edge_index)

    plan = plan_offload(Encoded(), loader, OffloadOptions())
    assert plan.mode == 'pending' and '4 input channels' in plan.reason


def test_pass_through_plans():
    data = tiny_graph()
    # A loader that does not implement the protocol (PyG's own):
    pyg_loader = NeighborLoader(data, [4, 3], batch_size=8)
    assert not isinstance(pyg_loader, OffloadableLoader)
    plan = plan_offload(GraphSAGE(8, 16, 2, 3), pyg_loader, OffloadOptions())
    assert plan.mode == 'pass_through'
    assert 'NeighborLoader' in plan.reason
    assert 'OffloadableLoader' in plan.reason
    # Temporal sampling:
    data.time = torch.arange(data.num_nodes)
    temporal = HybridNeighborLoader(data, [4, 3], batch_size=8,
                                    time_attr='time', device='cpu',
                                    input_time=data.time.clone())
    plan = plan_offload(GraphSAGE(8, 16, 2, 3), temporal, OffloadOptions())
    assert plan.mode == 'pass_through'
    assert plan.reason == f'the loader uses {TEMPORAL_REASON}'
    # Not a loader at all:
    with pytest.raises(TypeError, match="'loader'.*list"):
        plan_offload(GraphSAGE(8, 16, 2, 3), [data], OffloadOptions())


def test_a_plain_pyg_loader_trains_unchanged():
    data = tiny_graph()
    pyg_loader = NeighborLoader(data, [4, 3], batch_size=8)
    torch.manual_seed(0)
    model = GraphSAGE(8, 16, 2, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        off = BottomLayerOffload(model, pyg_loader)
    ours = [w for w in caught if 'BottomLayerOffload' in str(w.message)]
    assert len(ours) == 1 and ours[0].category is UserWarning
    assert off.plan.mode == 'pass_through'
    decision = off.stats()['decision']
    assert decision['mode'] == 'pass_through'
    assert 'OffloadableLoader' in decision['reason']
    # (PyG's loader needs pyg-lib or torch-sparse to sample: a batch of
    # ours, which the pass-through does not know either.)
    batch = next(iter(tiny_loader(data)))
    off.train()
    assert torch.equal(off(batch.x, batch.edge_index),
                       model(batch.x, batch.edge_index))
    off.close()


def _compiled(model, loader, how: str, options=None):
    # The wrapper and the model it calls (PyG skips its aggregation hooks in
    # any compiled code; the 'eager' backend keeps the test fast).
    if how == 'outer':
        off = BottomLayerOffload(model, loader, options=options)
        return off, torch.compile(off, backend='eager')
    if how == 'inner':
        model = torch.compile(model, backend='eager')
    else:
        model.compile(backend='eager')
    off = BottomLayerOffload(model, loader, options=options)
    return off, off


@pytest.mark.parametrize('how', ['outer', 'inner', 'in_place'])
def test_a_compiled_model_trains_unchanged(how):
    torch._dynamo.reset()
    data = tiny_graph()
    loader = tiny_loader(data)
    torch.manual_seed(0)
    model = GraphSAGE(8, 16, 2, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        off, net = _compiled(model, loader, how)
        if how != 'outer':  # Known when built.
            assert off.stats()['decision']['mode'] == 'pass_through'
        # Past the trial of the decision by measurement (steps 14-28 here),
        # where hot rows would have been replaced:
        train_steps(net, loader, 60, node_step)
    ours = [w for w in caught if 'BottomLayerOffload' in str(w.message)]
    assert len(ours) == 1 and 'torch.compile' in str(ours[0].message)
    st = off.stats()
    assert st['decision']['mode'] == 'pass_through'
    assert 'torch.compile' in st['decision']['reason']
    assert st['offloaded_forwards'] == 0 and st['hot_rows_replaced'] == 0
    assert st['training_forwards'] == 60
    assert st['gpu_cache_fit'] is not None  # Fitted after the 5th step.
    # The output is the model's:
    first = next(iter(tiny_loader(data, shuffle=False)))
    with torch.no_grad():
        plain = off.module(first.x, first.edge_index)
        assert torch.allclose(net(first.x, first.edge_index), plain,
                              atol=1e-6)
    off.close()


@pytest.mark.parametrize('how', ['outer', 'inner'])
def test_a_compiled_model_offloads_with_the_output_split(how):
    # GAT's first layer has no weight-free aggregation: split='auto' is
    # 'output', whose rows are replaced in the layer's output, compiled too.
    from torch_geometric.nn import GAT
    torch._dynamo.reset()
    loader = tiny_loader(tiny_graph())
    torch.manual_seed(0)
    off, net = _compiled(GAT(8, 16, 2, 3), loader, how,  # Offloads from
                         OffloadOptions(hot_ratio=0.2))  # the first batch.
    train_steps(net, loader, 10, node_step)
    st = off.stats()
    assert st['split'] == 'output' and st['hot_rows_replaced'] > 0
    off.close()


def test_plan_with_worker_processes():
    loader = tiny_loader(tiny_graph(), num_workers=1)
    assert loader_facts(loader).num_workers == 1
    plan = plan_offload(GraphSAGE(8, 16, 2, 3), loader, OffloadOptions())
    assert plan.offloads and not plan.measure
    assert 'worker processes' in plan.not_measured
    with pytest.raises(NotImplementedError, match='autotune'):
        plan_offload(GraphSAGE(8, 16, 2, 3), loader,
                     OffloadOptions(autotune=True))


def test_plan_of_a_heterogeneous_model():
    data = hetero_graph()
    loader = make_loader(data, num_neighbors=(3, 2))
    model = make_model('to_hetero', data)
    plan = plan_offload(model, loader, OffloadOptions(hot_ratio=0.3))
    assert plan.offloads and plan.is_hetero and plan.cache_ratio == 0.0
    assert plan.layer is not None and 'heterogeneous' in plan.describe()
    with pytest.raises(NotImplementedError, match="refresh='super_batch'"):
        plan_offload(model, loader, OffloadOptions(hot_ratio=0.3,
                                                   refresh='batch'))


def test_loader_protocol_of_both_loaders():
    data = tiny_graph()
    node_loader = tiny_loader(data)
    assert isinstance(node_loader, OffloadableLoader)
    assert node_loader.offload_sampler is node_loader.node_sampler
    assert node_loader.offload_data is data
    seeds, per_batch = node_loader.offload_seeds()
    assert torch.equal(seeds, torch.arange(data.num_nodes))
    assert per_batch == 8
    facts = loader_facts(node_loader)
    assert facts.device == torch.device('cpu') and facts.num_hops == 2
    assert facts.sampled_in_loop and facts.gpu_cache_capacity == 0
    assert facts.unsupported is None and not facts.partitioned

    label_index = data.edge_index[:, :40]
    link_loader = HybridLinkNeighborLoader(
        data, [4, 3], edge_label_index=label_index, batch_size=10,
        device='cpu')
    assert isinstance(link_loader, OffloadableLoader)
    seeds, per_batch = link_loader.offload_seeds()
    assert torch.equal(seeds, torch.cat([label_index[0], label_index[1]]))
    assert per_batch == 20  # Two endpoints per label edge.
    plan = plan_offload(GraphSAGE(8, 16, 2, 3), link_loader,
                        OffloadOptions(hot_ratio=0.1))
    assert plan.offloads


def test_options_object_and_deprecated_keywords():
    data = tiny_graph()
    options = OffloadOptions(hot_ratio=0.2, cache_ratio=0.1)
    assert options.seed == 0  # seed=None stands for the default seed.
    new = BottomLayerOffload(GraphSAGE(8, 16, 2, 3), tiny_loader(data),
                             options=options)
    with pytest.warns(DeprecationWarning) as record:
        old = BottomLayerOffload(GraphSAGE(8, 16, 2, 3), tiny_loader(data),
                                 hot_ratio=0.2, gpu_cache_ratio=0.1)
    messages = sorted(str(w.message) for w in record
                      if w.category is DeprecationWarning)
    assert messages == [
        "'gpu_cache_ratio' is deprecated; pass "
        "options=OffloadOptions(cache_ratio=0.1)",
        "'hot_ratio' is deprecated; pass "
        "options=OffloadOptions(hot_ratio=0.2)",
    ]
    # The old spelling still works, the same as the new one:
    assert old.options == new.options
    assert torch.equal(old.hot_nodes, new.hot_nodes)
    assert torch.equal(old.gpu_cache_nodes, new.gpu_cache_nodes)
    old.close()
    new.close()
    loader = tiny_loader(data)
    with pytest.raises(ValueError, match="'hot_ratio' and 'options'"):
        BottomLayerOffload(GraphSAGE(8, 16, 2, 3), loader, options=options,
                           hot_ratio=0.2)
    with pytest.raises(TypeError, match="'hot_ration'"):
        BottomLayerOffload(GraphSAGE(8, 16, 2, 3), loader, hot_ration=0.2)
    with pytest.raises(TypeError, match="'options'.*dict"):
        BottomLayerOffload(GraphSAGE(8, 16, 2, 3), loader,
                           options={'hot_ratio': 0.2})
    with pytest.raises(TypeError):
        OffloadOptions(gpu_cache_ratio=0.1)  # Only the new name there.
    with pytest.raises(TypeError):
        OffloadOptions(work_hook=print)  # No option: see offload_hooks.


def test_offload_hooks():
    data = tiny_graph()
    calls = []
    lock = threading.Lock()

    def hook(cancelled: threading.Event) -> None:
        with lock:
            calls.append(cancelled)

    with offload_hooks(work_hook=hook):
        off = BottomLayerOffload(GraphSAGE(8, 16, 2, 3), tiny_loader(data),
                                 options=OffloadOptions(hot_ratio=0.2))
    assert off.options.work_hook is hook
    train_steps(off, tiny_loader(data), 4, node_step)
    for _ in range(20):  # On a loaded machine the workers may start late.
        with lock:
            if calls:
                break
        train_steps(off, tiny_loader(data), 1, node_step)
    off.close()
    assert len(calls) > 0
    assert all(isinstance(e, threading.Event) for e in calls)
    # Outside the context, no hook:
    off = BottomLayerOffload(GraphSAGE(8, 16, 2, 3), tiny_loader(data),
                             options=OffloadOptions(hot_ratio=0.2))
    assert off.options.work_hook is None
    off.close()
    with pytest.raises(ValueError, match="'autotune_clock'.*3.0"):
        with offload_hooks(autotune_clock=3.0):
            BottomLayerOffload(GraphSAGE(8, 16, 2, 3), tiny_loader(data))
    # The old keyword still works, pointing at the context manager:
    with pytest.warns(DeprecationWarning, match='offload_hooks'):
        off = BottomLayerOffload(GraphSAGE(8, 16, 2, 3), tiny_loader(data),
                                 work_hook=hook)
    assert off.options.work_hook is hook
    off.close()


def test_wrapper_exposes_its_plan():
    data = Data(x=torch.randn(50, 8),
                edge_index=torch.randint(0, 50, (2, 400)))
    loader = tiny_loader(data)
    off = BottomLayerOffload(GraphSAGE(-1, 16, 2, 3), loader,
                             options=OffloadOptions(hot_ratio=0.2))
    assert off.plan.mode == 'pending'
    batch = next(iter(loader))
    off.train()
    off(batch.x, batch.edge_index)  # Plans again, with the traced layer.
    assert off.plan.offloads and off.plan.layer == 'convs.0'
    assert off.stats()['num_hot'] == 10
    off.close()
