"""Bottom-layer offload (:class:`pyg_orch.offload.BottomLayerOffload`):
exactness, module behaviour, hot-set selection, errors and thread lifetime.
Staleness and accuracy have their own files (test_offload_staleness.py,
test_offload_accuracy.py)."""
import gc
import time
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import HeteroData
from torch_geometric.nn import GAT, GCN, GIN, GraphSAGE, SAGEConv

from pyg_orch import HybridNeighborLoader
from pyg_orch.offload import BottomLayerOffload, OffloadWorkerError
from pyg_orch.offload import OffloadOptions
from pyg_orch.offload.testing import offload_hooks
from pyg_orch.offload.bottom_layer import find_first_layer

from conftest import (
    SlowCPU,
    offload_threads,
    random_graph,
    step_matches_unpruned,
    tiny_graph,
    tiny_loader,
    wait_no_threads,
)

# No offload thread outlives a test; one intra-op thread (conftest):
pytestmark = pytest.mark.usefixtures('no_thread_leaks', 'one_intra_op_thread')

MODELS = {'sage': GraphSAGE, 'gcn': GCN, 'gin': GIN, 'gat': GAT}


def train_steps(model, loader, num_steps, trim=False, optimizer=None):
    optimizer = optimizer or torch.optim.SGD(model.parameters(), lr=0.01)
    model.train()
    done = 0
    while done < num_steps:
        for batch in loader:
            optimizer.zero_grad()
            kwargs = {}
            if trim:
                kwargs = dict(
                    num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                    num_sampled_edges_per_hop=batch.num_sampled_edges)
            out = model(batch.x, batch.edge_index, **kwargs)
            loss = F.cross_entropy(out[:batch.batch_size],
                                   batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            done += 1
            if done == num_steps:
                break
    return optimizer


# Exactness ###################################################################


def _cora_loaders(cora):
    def make():
        return HybridNeighborLoader(cora, [-1, -1], batch_size=64,
                                    input_nodes=cora.train_mask,
                                    device='cpu')

    return make(), make()


@pytest.mark.parametrize('trim', [False, True], ids=['plain', 'trim'])
@pytest.mark.parametrize('replace_rows,refresh', [
    ('pruned', 'super_batch'),
    ('all', 'super_batch'),
    ('pruned', 'batch'),
])
@pytest.mark.parametrize('name', ['sage', 'gin', 'gat'])
def test_synchronous_full_neighbors_is_exact(cora, name, replace_rows,
                                             refresh, trim):
    # max_staleness=0 and full neighbors: the pruned batch plus the CPU's
    # embeddings give the seeds exactly the outputs of the unpruned batch,
    # also after optimizer steps (the CPU uses the current weights).
    loader, ref_loader = _cora_loaders(cora)
    torch.manual_seed(0)
    model = MODELS[name](cora.num_features, 16, 2, 7)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.1, max_staleness=0, full_neighbors=True,
        replace_rows=replace_rows, refresh=refresh))
    optimizer = torch.optim.Adam(off.parameters(), lr=0.01)

    def kwargs(b):
        if not trim:
            return {}
        return dict(num_sampled_nodes_per_hop=b.num_sampled_nodes,
                    num_sampled_edges_per_hop=b.num_sampled_edges)

    pruned_any = False
    for batch, ref in zip(loader, ref_loader):
        assert torch.equal(batch.n_id[:batch.batch_size],
                           ref.n_id[:ref.batch_size])
        pruned_any |= batch.num_nodes < ref.num_nodes
        out = off(batch.x, batch.edge_index, **kwargs(batch))
        expected = model(ref.x, ref.edge_index, **kwargs(ref))
        out, expected = out[:batch.batch_size], expected[:ref.batch_size]
        assert torch.allclose(out, expected, atol=1e-5), \
            (out - expected).abs().max()
        optimizer.zero_grad()
        F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        optimizer.step()
    stats = off.stats()
    assert pruned_any
    assert stats['hot_rows_replaced'] > 0
    assert stats['steps'] == 3 and stats['step_source'] == 'optimizer'
    assert stats['staleness_hist'] == {0: 3}
    off.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
@pytest.mark.parametrize('split', ['output', 'aggregate'])
def test_cuda_tables_are_exact(split):
    # On a GPU, the CPU's rows reach the device table item by item through
    # reused pinned buffers (many small items on two threads here): the
    # seeds still get exactly the outputs of the unpruned batch.
    data = random_graph(600, 6000, num_features=24, num_classes=5,
                        train_ratio=0.3)

    def make():
        return HybridNeighborLoader(data, [-1, -1], batch_size=32,
                                    input_nodes=data.train_mask,
                                    device='cuda')

    loader, ref_loader = make(), make()
    torch.manual_seed(0)
    model = GraphSAGE(24, 16, 2, 5).cuda()
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.3, max_staleness=0, full_neighbors=True, split=split,
        num_threads=2, chunk_size=7))
    optimizer = torch.optim.Adam(off.parameters(), lr=0.01)
    for batch, ref in zip(loader, ref_loader):
        step_matches_unpruned(off, model, optimizer, batch, ref)
    stats = off.stats()
    assert stats['hot_rows_replaced'] > 0 and stats['tables_computed'] > 0
    off.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_pinned_staging_copies_items_from_threads():
    import threading

    from pyg_orch.offload.tables import PinnedStaging
    staging = PinnedStaging()
    stream = torch.cuda.Stream()
    src = torch.randn(1000, 33)
    dst = torch.full((1000, 33), float('nan'), device='cuda')

    def work(parts):
        for lo, hi in parts:  # Items of different sizes.
            staging.copy(src[lo:hi] * 1.0, dst[lo:hi], stream)

    bounds = list(range(0, 1000, 37)) + [1000]
    items = list(zip(bounds[:-1], bounds[1:]))
    threads = [threading.Thread(target=work, args=(items[i::2], ))
               for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stream.synchronize()
    assert torch.equal(dst.cpu(), src)


@pytest.mark.parametrize('replace_rows', ['pruned', 'all'])
def test_no_gradient_through_replaced_rows(cora, replace_rows):
    # Gradients equal those of the plain model on the unpruned batch with
    # the replaced rows of the first layer's output detached.
    import copy
    loader, ref_loader = _cora_loaders(cora)
    torch.manual_seed(0)
    model = GraphSAGE(cora.num_features, 16, 2, 7)
    ref_model = copy.deepcopy(model)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.1, max_staleness=0, full_neighbors=True,
        replace_rows=replace_rows, split='output'))
    hot = off.hot_mask
    state = {}

    def detach_hot(module, args, out):
        ref = state['ref']
        num = list(ref.num_sampled_nodes)
        lo = sum(num[:-2]) if replace_rows == 'pruned' else 0
        hi = sum(num[:-1])
        rows = torch.zeros(out.size(0), dtype=torch.bool)
        rows[lo:hi] = hot[ref.n_id[lo:hi]]
        return torch.where(rows.view(-1, 1), out.detach(), out)

    ref_model.convs[0].register_forward_hook(detach_hot)
    compared = 0
    for batch, ref in zip(loader, ref_loader):
        state['ref'] = ref
        for m in (off, ref_model, model):
            m.zero_grad()
        out = off(batch.x, batch.edge_index)[:batch.batch_size]
        F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        expected = ref_model(ref.x, ref.edge_index)[:ref.batch_size]
        F.cross_entropy(expected, ref.y[:ref.batch_size]).backward()
        assert torch.allclose(out, expected, atol=1e-5)
        for (name, p), q in zip(model.named_parameters(),
                                ref_model.parameters()):
            assert torch.allclose(p.grad, q.grad, atol=1e-6), name
        compared += 1
    assert compared == 3 and off.stats()['hot_rows_replaced'] > 0
    # The detached rows matter: without detaching, the first layer's
    # gradient differs.
    plain = copy.deepcopy(ref_model)
    plain.convs[0]._forward_hooks.clear()
    plain.zero_grad()
    out = plain(ref.x, ref.edge_index)[:ref.batch_size]
    F.cross_entropy(out, ref.y[:ref.batch_size]).backward()
    assert not torch.allclose(plain.convs[0].lin_l.weight.grad,
                              model.convs[0].lin_l.weight.grad, atol=1e-6)
    off.close()


@pytest.mark.parametrize('refresh', ['super_batch', 'batch'])
@pytest.mark.parametrize('name', ['sage', 'gin'])
def test_aggregate_split_exact_at_any_staleness(cora, name, refresh):
    # split='aggregate': the CPU aggregates raw features (no weights) and
    # the device applies the current weights, so with full neighbors the
    # seeds' outputs *and all gradients* equal those of the plain model on
    # the unpruned batch, after optimizer steps, whatever 'max_staleness'
    # (here tables are reused for up to 9 steps: all 9 of the test).
    import copy
    loader, ref_loader = _cora_loaders(cora)
    torch.manual_seed(0)
    model = MODELS[name](cora.num_features, 16, 2, 7)
    ref_model = copy.deepcopy(model)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.1, max_staleness=9, full_neighbors=True, refresh=refresh,
        split='aggregate'))
    assert off.stats()['split'] == 'aggregate'
    # Mean (SAGE) and sum (GIN) of raw rows: computed with embedding_bag.
    assert off.stats()['cpu_aggregation'] == 'embedding_bag'
    optimizer = torch.optim.Adam(off.parameters(), lr=0.01)
    atol = 1e-5
    for epoch in range(3):
        for batch, ref in zip(loader, ref_loader):
            ref_model.load_state_dict(model.state_dict())
            ref_model.zero_grad()
            optimizer.zero_grad()
            out = off(batch.x, batch.edge_index)[:batch.batch_size]
            expected = ref_model(ref.x, ref.edge_index)[:ref.batch_size]
            assert torch.allclose(out, expected, atol=atol), \
                (out - expected).abs().max()
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            F.cross_entropy(expected, ref.y[:ref.batch_size]).backward()
            for (pname, p), q in zip(model.named_parameters(),
                                     ref_model.parameters()):
                assert torch.allclose(p.grad, q.grad, atol=atol / 10), pname
            optimizer.step()
    stats = off.stats()
    assert stats['hot_rows_replaced'] > 0 and stats['steps'] == 9
    # All neighbors, no weights: every hot row was computed once and reused
    # at every step as exact (age 0), with current weights every time:
    assert stats['static_tables']
    assert 0 < stats['rows_computed'] <= stats['num_hot']
    if refresh == 'super_batch':
        assert stats['tables_submitted'] == 1
    assert stats['max_table_age'] == 0 and stats['max_staleness_seen'] == 0
    off.close()


def test_pre_linear_split_matches_synchronous_output_split(cora):
    # GCNConv applies its linear map before aggregating: the CPU aggregates
    # raw features and the device applies the current 'lin'. With tables
    # reused for up to 9 steps, the seeds get the outputs of the
    # synchronous output split (the CPU computing the whole layer with the
    # current weights), and the first layer gets gradient from the hot rows.
    import copy
    torch.manual_seed(0)
    model = GCN(cora.num_features, 16, 2, 7)
    sync_model = copy.deepcopy(model)
    loaders = _cora_loaders(cora)
    off = BottomLayerOffload(model, loaders[0], options=OffloadOptions(
        hot_ratio=0.1, max_staleness=9, full_neighbors=True))
    sync = BottomLayerOffload(sync_model, loaders[1], options=OffloadOptions(
        hot_ratio=0.1, max_staleness=0, full_neighbors=True, split='output'))
    assert off.stats()['split'] == 'pre_linear'
    # Deduplicated subgraphs (degree-normalized layer): the layer's copy.
    assert off.stats()['cpu_aggregation'] == 'layer'
    optimizer = torch.optim.Adam(off.parameters(), lr=0.01)
    grads_differ = False
    for epoch in range(3):
        for batch, ref in zip(*loaders):
            sync_model.load_state_dict(model.state_dict())
            optimizer.zero_grad()
            sync_model.zero_grad()
            out = off(batch.x, batch.edge_index)[:batch.batch_size]
            expected = sync(ref.x, ref.edge_index)[:ref.batch_size]
            assert torch.allclose(out, expected, atol=1e-5), \
                (out - expected).abs().max()
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            F.cross_entropy(expected, ref.y[:ref.batch_size]).backward()
            w, w_sync = (m.convs[0].lin.weight.grad
                         for m in (model, sync_model))
            grads_differ |= not torch.allclose(w, w_sync, atol=1e-7)
            assert torch.allclose(model.convs[1].lin.weight.grad,
                                  sync_model.convs[1].lin.weight.grad,
                                  atol=1e-6)
            optimizer.step()
    assert grads_differ  # The output split gives hot rows no gradient.
    assert off.stats()['max_table_age'] > 0
    off.close()
    sync.close()


def test_split_choice_and_errors(cora):
    loader = HybridNeighborLoader(cora, [5, 5], batch_size=64,
                                  input_nodes=cora.train_mask, device='cpu')
    torch.manual_seed(0)
    # Attention weighs messages with parameters: no split.
    gat = GAT(cora.num_features, 16, 2, 7)
    with BottomLayerOffload(gat, loader) as off:
        assert off.stats()['split'] == 'output'
    with pytest.raises(ValueError, match="split='aggregate'.*GATConv"):
        BottomLayerOffload(gat, loader, options=OffloadOptions(
            split='aggregate'))
    with pytest.raises(ValueError, match="'split' must be"):
        BottomLayerOffload(gat, loader, options=OffloadOptions(
            split='aggregation'))
    # A projection before aggregating (SAGEConv(project=True)): no split.
    sage = GraphSAGE(cora.num_features, 16, 2, 7, project=True)
    with BottomLayerOffload(sage, loader) as off:
        assert off.stats()['split'] == 'output'
    with BottomLayerOffload(GraphSAGE(cora.num_features, 16, 2, 7), loader,
                            options=OffloadOptions(split='output')) as off:
        assert off.stats()['split'] == 'output'


def test_aggregate_split_without_hooks_is_an_error():
    # PyG skips aggregation hooks under torch.compile and TorchScript
    # (simulated by removing them): a clear error, not silently unreplaced
    # rows.
    data = tiny_graph()
    loader = tiny_loader(data)
    model = GraphSAGE(8, 8, 2, 3)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.3, max_staleness=0))
    assert off.stats()['split'] == 'aggregate'
    conv = model.convs[0]
    conv._aggregate_forward_hooks.clear()
    conv._message_and_aggregate_forward_hooks.clear()
    for batch in loader:
        if bool(off.hot_mask[batch.n_id].any()):
            break
    with pytest.raises(RuntimeError, match="split='output'"):
        off(batch.x, batch.edge_index)
    off.close()


@pytest.mark.parametrize('name', ['sage', 'gat'])
def test_auto_hot_set_grows_and_stays_exact(cora, name):
    # hot_ratio='auto' with frozen weights (SGD, lr=0: versions advance, the
    # weights do not, so every table is exact): while the hot set grows,
    # every pruned vertex must still find its embedding, so the seeds get
    # exactly the outputs of the unpruned batch. Tables take longer than a
    # step (but less than a super-batch of 4): the sampler must not prune
    # the larger set before its table is in use.
    loader, ref_loader = _cora_loaders(cora)
    torch.manual_seed(0)
    model = MODELS[name](cora.num_features, 16, 2, 7)
    with offload_hooks(work_hook=SlowCPU(0.03)):
        off = BottomLayerOffload(model, loader, options=OffloadOptions(
            hot_ratio='auto', max_staleness=7, full_neighbors=True,
            num_threads=1, chunk_size=10**6))
    start = off.stats()['num_hot']
    assert start == round(0.01 * cora.num_nodes)
    optimizer = torch.optim.SGD(off.parameters(), lr=0.0)
    for _ in range(12):
        for batch, ref in zip(loader, ref_loader):
            step_matches_unpruned(off, model, optimizer, batch, ref)
            time.sleep(0.02)  # Steps far slower than the CPU tables.
    stats = off.stats()
    sizes = stats['hot_sizes']
    assert sizes[0] == start and len(sizes) > 2 and sizes == sorted(sizes)
    assert stats['num_hot'] == sizes[-1] == off.hot_nodes.numel()
    assert int(loader.node_sampler.hot_nodes[None].sum()) == sizes[-1]
    assert torch.equal(off.hot_mask.nonzero().view(-1),
                       off.hot_nodes.sort().values)
    assert stats['hot_rows_replaced'] > 0
    assert stats['max_staleness_seen'] <= 7
    off.close()


@pytest.mark.parametrize('slow', [False, True])
def test_auto_hot_set_grows_per_batch(slow):
    # hot_ratio='auto' with refresh='batch' and frozen weights: rows are
    # computed per batch, the set grows every GROW_WINDOW steps while the
    # CPU threads have room and the loop does not wait for them, and the
    # seeds get exactly the outputs of the unpruned batch. A CPU slower
    # than the steps keeps the set where it starts. (Rows with weights,
    # split='output': aggregations of all neighbors would be computed only
    # once, see test_offload_staleness.py::test_static_rows_*.)
    from pyg_orch.offload.batch_cache import BatchEmbeddingCache
    data = tiny_graph()
    loader = tiny_loader(data, num_neighbors=(-1, -1), batch_size=16)
    ref_loader = tiny_loader(data, num_neighbors=(-1, -1), batch_size=16)
    torch.manual_seed(0)
    model = GraphSAGE(8, 16, 2, 3)
    with offload_hooks(work_hook=SlowCPU(0.05 if slow else 0.0)):
        off = BottomLayerOffload(model, loader, options=OffloadOptions(
            hot_ratio='auto', refresh='batch', max_staleness=0,
            full_neighbors=True, num_threads=1, chunk_size=10**6,
            split='output'))
    assert isinstance(off.runtime.strategy, BatchEmbeddingCache)
    assert not off.stats()['static_tables']
    start = off.stats()['num_hot']
    assert start == round(0.01 * data.num_nodes)
    optimizer = torch.optim.SGD(off.parameters(), lr=0.0)
    steps = 0
    for _ in range(4):
        for batch, ref in zip(loader, ref_loader):
            # The batch's rows were requested when it was drawn; the CPU
            # has this long before the forward pass needs them:
            time.sleep(0.01)
            step_matches_unpruned(off, model, optimizer, batch, ref)
            steps += 1
    stats = off.stats()
    sizes = stats['hot_sizes']
    assert steps > 4 * BatchEmbeddingCache.GROW_WINDOW
    if slow:  # The loop waited for rows: no growth.
        assert sizes == [start] and stats['wait_s'] > 0
    else:
        assert sizes[0] == start and len(sizes) > 2
        assert sizes == sorted(sizes)
        assert sizes[-1] <= round(0.5 * data.num_nodes)
    assert stats['num_hot'] == sizes[-1] == off.hot_nodes.numel()
    assert int(loader.node_sampler.hot_nodes[None].sum()) == sizes[-1]
    assert stats['hot_rows_replaced'] > 0
    assert stats['max_staleness_seen'] == 0
    off.close()


@pytest.mark.parametrize('refresh', ['super_batch', 'batch'])
@pytest.mark.parametrize('max_staleness', [0, 2])
def test_exact_and_bounded_on_device(device, max_staleness, refresh):
    # The tiny graph on `device` (CUDA on GPU machines: pinned buffers, side
    # streams): exact with max_staleness=0, bounded with 2.
    data = tiny_graph()
    torch.manual_seed(0)
    model = GraphSAGE(8, 16, 2, 3).to(device)

    def make():
        return HybridNeighborLoader(data, [-1, -1], batch_size=16,
                                    device=device)

    loader, ref_loader = make(), make()
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.1, max_staleness=max_staleness, full_neighbors=True,
        refresh=refresh))
    optimizer = torch.optim.Adam(off.parameters(), lr=0.01)
    for _ in range(2):
        for batch, ref in zip(loader, ref_loader):
            out = off(batch.x, batch.edge_index)[:batch.batch_size]
            if max_staleness == 0:
                expected = model(ref.x, ref.edge_index)[:ref.batch_size]
                assert torch.allclose(out, expected, atol=1e-5)
            optimizer.zero_grad()
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
    stats = off.stats()
    assert stats['hot_rows_replaced'] > 0
    assert stats['max_staleness_seen'] <= max_staleness
    off.close()


def test_exactness_check_is_sensitive(cora):
    # With a truncated CPU-side fan-out, the replaced rows differ:
    loader, ref_loader = _cora_loaders(cora)
    torch.manual_seed(0)
    model = GraphSAGE(cora.num_features, 16, 2, 7)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.1, max_staleness=0, full_neighbors=True))
    off.runtime.strategy.computer.num_neighbors = 1
    batch, ref = next(iter(loader)), next(iter(ref_loader))
    with torch.no_grad():
        out = off(batch.x, batch.edge_index)[:batch.batch_size]
        expected = model(ref.x, ref.edge_index)[:ref.batch_size]
    assert not torch.allclose(out, expected, atol=1e-5)
    off.close()


def test_custom_module_is_exact(cora):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = SAGEConv(cora.num_features, 16)
            self.conv2 = SAGEConv(16, 7)

        def forward(self, x, edge_index):
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    loader, ref_loader = _cora_loaders(cora)
    torch.manual_seed(0)
    model = Net()
    options = OffloadOptions(hot_ratio=0.1, max_staleness=0,
                             full_neighbors=True)
    with BottomLayerOffload(model, loader, options=options) as off:
        assert off.runtime.layer_name == 'conv1'
        for batch, ref in zip(loader, ref_loader):
            with torch.no_grad():
                out = off(batch.x, batch.edge_index)[:batch.batch_size]
                expected = model(ref.x, ref.edge_index)[:ref.batch_size]
            assert torch.allclose(out, expected, atol=1e-5)
        assert off.stats()['hot_rows_replaced'] > 0
    assert off.closed


def test_eval_is_exact_path(cora):
    loader = HybridNeighborLoader(cora, [5, 5], batch_size=64,
                                  input_nodes=cora.train_mask, device='cpu',
                                  seed=0)
    model = GraphSAGE(cora.num_features, 16, 2, 7)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.1))
    sampler = loader.node_sampler
    assert off.training and sampler.hot_nodes is not None
    off.eval()
    assert not off.training and not model.training
    assert sampler.hot_nodes is None
    with torch.no_grad():
        for batch in loader:
            out = off(batch.x, batch.edge_index)
            assert torch.equal(out, model(batch.x, batch.edge_index))
    assert off.stats()['training_forwards'] == 0
    assert offload_threads() == []
    off.train()
    assert sampler.hot_nodes is not None
    assert torch.equal(sampler.hot_nodes[None].cpu(), off.hot_mask)
    off.close()
    assert sampler.hot_nodes is None


# Models and module behaviour #################################################


@pytest.mark.parametrize('trim', [False, True], ids=['plain', 'trim'])
@pytest.mark.parametrize('name', list(MODELS))
def test_basic_gnn_models_train(name, trim):
    data = tiny_graph()
    loader = tiny_loader(data)
    torch.manual_seed(0)
    model = MODELS[name](8, 8, 2, 3)
    before = [p.detach().clone() for p in model.parameters()]
    refresh = 'batch' if trim else 'super_batch'
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.1, max_staleness=1, refresh=refresh))
    train_steps(off, loader, 12, trim=trim)
    stats = off.stats()
    assert stats['steps'] == 12
    assert stats['offloaded_forwards'] == 12
    assert stats['hot_rows_replaced'] > 0
    assert stats['max_staleness_seen'] <= 1
    assert all(not torch.equal(a, b)
               for a, b in zip(before, model.parameters()))
    off.close()


def test_module_behaviour():
    data = tiny_graph()
    loader = tiny_loader(data)
    model = GraphSAGE(8, 8, 2, 3)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.1))
    # Same parameters, same order, no duplicates:
    assert [id(p) for p in off.parameters()] == \
        [id(p) for p in model.parameters()]
    assert list(dict(off.named_parameters())) == \
        list(dict(model.named_parameters()))
    # state_dict keys and values identical; loadable both ways:
    sd = off.state_dict()
    assert list(sd) == list(model.state_dict())
    plain = GraphSAGE(8, 8, 2, 3)
    plain.load_state_dict(sd)
    for a, b in zip(plain.parameters(), model.parameters()):
        assert torch.equal(a, b)
    other = GraphSAGE(8, 8, 2, 3)
    off.load_state_dict(other.state_dict())
    for a, b in zip(other.parameters(), model.parameters()):
        assert torch.equal(a, b)

    # Nested in another module, keys are those of the plain model:
    class Holder(torch.nn.Module):
        def __init__(self, gnn):
            super().__init__()
            self.gnn = gnn
            self.head = torch.nn.Linear(3, 2)

    held, held_plain = Holder(off), Holder(plain)
    assert list(held.state_dict()) == list(held_plain.state_dict())
    held.load_state_dict(held_plain.state_dict())
    assert torch.equal(model.convs[0].lin_l.weight,
                       plain.convs[0].lin_l.weight)
    # Attributes of the model:
    assert off.convs is model.convs and off.num_layers == 2
    assert off.module is model
    assert 'BottomLayerOffload' in repr(off) and "convs.0" in repr(off)
    # to() moves the model's own tensors:
    off.to(torch.float64)
    assert model.convs[0].lin_l.weight.dtype == torch.float64
    off.to(torch.float32)
    # An optimizer over the wrapper's parameters trains the model:
    optimizer = train_steps(off, loader, 3)
    assert optimizer.param_groups[0]['params'][0] is \
        next(model.parameters())
    # Copies and pickles are plain models (offload hooks disabled):
    import copy
    import io
    best = copy.deepcopy(off)
    assert type(best) is GraphSAGE and best is not model
    inner = copy.deepcopy(model)
    buffer = io.BytesIO()
    torch.save(off, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert type(loaded) is GraphSAGE
    batch = next(iter(loader))
    for copied in (best, inner, loaded):
        assert torch.equal(copied.convs[0].lin_l.weight,
                           model.convs[0].lin_l.weight)
        copied.train()
        with torch.no_grad():
            copied(batch.x, batch.edge_index)  # No offload, no error.
    with pytest.raises(AttributeError, match='shares the submodules'):
        off.extra = torch.nn.Linear(2, 2)
    off.close()


def test_first_layer_detection():
    model = GraphSAGE(8, 8, 2, 3)
    assert find_first_layer(model) == ('convs.0', model.convs[0])
    assert find_first_layer(model, 'convs.1')[1] is model.convs[1]
    assert find_first_layer(model, model.convs[1])[0] == 'convs.1'
    with pytest.raises(ValueError, match='not a module'):
        find_first_layer(model, 'nope')
    with pytest.raises(ValueError, match='no MessagePassing'):
        find_first_layer(torch.nn.Linear(2, 2))


def test_first_layer_must_consume_x():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)
            self.conv = SAGEConv(8, 3)

        def forward(self, x, edge_index):
            return self.conv(self.lin(x), edge_index)

    data = tiny_graph()
    loader = tiny_loader(data)
    model = Net()
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.1))
    assert loader.node_sampler.hot_nodes is not None
    batch = next(iter(loader))
    # The model runs unchanged from its first training step on, with one
    # warning that says why:
    with pytest.warns(UserWarning, match='does not consume') as record:
        out = off(batch.x, batch.edge_index)
    assert len([w for w in record if 'does not offload' in str(w.message)
                ]) == 1
    assert torch.equal(out, model(batch.x, batch.edge_index))
    decision = off.stats()['decision']
    assert decision['mode'] == 'pass_through'
    assert 'does not consume' in decision['reason']
    assert loader.node_sampler.hot_nodes is None  # Sampling unpruned.
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        train_steps(off, loader, 2)
    assert off.stats()['offloaded_forwards'] == 0
    off.close()


def test_call_order_is_checked():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.top = SAGEConv(8, 3)  # Registered first, called second.
            self.bottom = SAGEConv(8, 8)

        def forward(self, x, edge_index):
            return self.top(self.bottom(x, edge_index).relu(), edge_index)

    data = tiny_graph()
    loader = tiny_loader(data)
    off = BottomLayerOffload(Net(), loader, options=OffloadOptions(
        hot_ratio=0.1))
    assert off.runtime.layer_name == 'top'
    # The first step finds that 'bottom' runs first and rebuilds with it:
    train_steps(off, loader, 3)
    assert off.runtime.layer_name == 'bottom'
    assert off.stats()['hot_rows_replaced'] > 0
    off.close()
    off = BottomLayerOffload(Net(), loader, options=OffloadOptions(
        hot_ratio=0.1, layer='bottom'))
    train_steps(off, loader, 3)
    assert off.stats()['hot_rows_replaced'] > 0
    off.close()


def test_edge_weights_in_first_layer_pass_through():
    data = tiny_graph()
    loader = tiny_loader(data)
    model = GCN(8, 8, 2, 3)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.1))
    batch = next(iter(loader))
    weight = torch.rand(batch.edge_index.size(1))
    # The model runs unchanged from its first step on, and says why:
    with pytest.warns(UserWarning, match='edge-level tensors'):
        out = off(batch.x, batch.edge_index, edge_weight=weight)
    assert torch.equal(out, model(batch.x, batch.edge_index,
                                  edge_weight=weight))
    decision = off.stats()['decision']
    assert decision['mode'] == 'pass_through'
    assert 'edge-level tensors' in decision['reason']
    off.close()


def test_unsupported_inputs():
    data = tiny_graph()
    loader = tiny_loader(data)
    model = GraphSAGE(8, 8, 2, 3)
    with pytest.raises(ValueError, match='cache_ratio'):
        BottomLayerOffload(model, loader, options=OffloadOptions(
            cache_ratio='all'))
    with pytest.raises(ValueError, match='hot_ratio'):
        BottomLayerOffload(model, loader, options=OffloadOptions(
            hot_ratio='most'))
    with pytest.raises(ValueError, match='hot_ratio'):
        BottomLayerOffload(model, loader, options=OffloadOptions(
            hot_ratio=1.5))
    with pytest.raises(ValueError, match='must not exceed'):
        BottomLayerOffload(model, loader, options=OffloadOptions(
            hot_ratio=0.5, cache_ratio=0.6))
    with pytest.raises(ValueError, match='max_staleness'):
        BottomLayerOffload(model, loader, options=OffloadOptions(
            max_staleness=-1))
    with pytest.raises(ValueError, match='refresh'):
        BottomLayerOffload(model, loader, options=OffloadOptions(
            refresh='never'))
    with pytest.raises(ValueError, match='replace_rows'):
        BottomLayerOffload(model, loader, options=OffloadOptions(
            replace_rows='some'))
    with pytest.raises(TypeError, match='HybridNeighborLoader'):
        BottomLayerOffload(model, [data])

    hetero = HeteroData()
    hetero['a'].x = torch.randn(10, 4)
    hetero['a', 'to', 'a'].edge_index = torch.randint(0, 10, (2, 30))
    hetero_loader = HybridNeighborLoader(hetero, [2], input_nodes='a',
                                         batch_size=4, device='cpu')
    # A homogeneous model for a heterogeneous graph (see
    # test_offload_hetero.py for heterogeneous models): its layers are not
    # named after edge types, so it is planned on the first batch (where
    # PyG's own error comes):
    off = BottomLayerOffload(model, hetero_loader)
    assert off.stats()['decision']['mode'] == 'pending'
    batch = next(iter(hetero_loader))
    with pytest.raises((TypeError, AttributeError, ValueError)):
        off(batch.x_dict, batch.edge_index_dict)
    assert hetero_loader.node_sampler.hot_nodes is None


# Hot set #####################################################################


def test_cache_ratio_auto_fills_the_feature_store():
    data = tiny_graph()
    loader = tiny_loader(data)
    model = GraphSAGE(8, 8, 2, 3)
    # A CPU loader has no feature store: no candidates.
    assert loader.feature_store is None
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        cache_ratio='auto'))
    assert off.gpu_cache_nodes.numel() == 0
    off.close()

    class Store:
        capacity = 30
        cached = None

        def set_cached_nodes(self, nodes):
            self.cached = nodes

    loader.feature_store = store = Store()
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.05, cache_ratio='auto'))
    assert off.gpu_cache_nodes.numel() == 30
    assert torch.equal(store.cached, off.gpu_cache_nodes)
    ref = BottomLayerOffload(model, tiny_loader(data), options=OffloadOptions(
        hot_ratio=0.05, cache_ratio=30 / data.num_nodes))
    assert torch.equal(ref.gpu_cache_nodes, off.gpu_cache_nodes)
    off.close()
    ref.close()


def test_hot_set_selection():
    data = tiny_graph(num_nodes=300)
    loader = tiny_loader(data, batch_size=16)
    seen = []
    loader.set_gpu_cache_nodes = seen.append  # As a GPU feature store would.
    off = BottomLayerOffload(
        GraphSAGE(8, 8, 2, 3), loader, options=OffloadOptions(
            hot_ratio=0.05, cache_ratio=0.1))
    counts, hot, cache = off.access_counts, off.hot_nodes, off.gpu_cache_nodes
    assert hot.numel() == 15 and cache.numel() == 30
    assert cache.unique().numel() == 30
    rest = torch.ones(300, dtype=torch.bool)
    rest[hot] = False
    assert counts[hot].min() >= counts[rest].max()
    assert torch.equal(off.hot_mask.nonzero().view(-1), hot.sort()[0])
    assert len(seen) == 1 and torch.equal(seen[0], cache)
    # The cache candidates are the rows that pruned training batches fetch
    # most often, counted here independently over two epochs:
    fetched = torch.zeros(300, dtype=torch.int64)
    for _ in range(2):
        for batch in loader:
            fetched += torch.bincount(batch.n_id, minlength=300)
    in_cache = torch.zeros(300, dtype=torch.bool)
    in_cache[cache] = True
    assert fetched[in_cache].float().mean() > \
        1.4 * fetched[~in_cache].float().mean()
    # One epoch of seeds was pre-sampled; every seed counts at least once:
    stats = off.stats()
    assert stats['presample_batches'] == 300 // 16 + 1
    assert bool((counts > 0).all())
    assert 0 < stats['hot_coverage'] < 1
    off.close()


def test_presampling_keeps_training_batches():
    # Pre-sampling restores the sampler's generator: the first training
    # batch is the one drawn without offload (up to pruning).
    data = tiny_graph()
    plain = next(iter(tiny_loader(data)))
    loader = tiny_loader(data)
    off = BottomLayerOffload(
        GraphSAGE(8, 8, 2, 3), loader, options=OffloadOptions(hot_ratio=0.1))
    off.eval()
    batch = next(iter(loader))
    assert torch.equal(batch.n_id, plain.n_id)
    off.close()


def test_pruning_and_hot_rows():
    data = tiny_graph()
    loader = tiny_loader(data, num_neighbors=(4, 3))
    for replace_rows in ('pruned', 'all'):
        off = BottomLayerOffload(
            GraphSAGE(8, 8, 2, 3), loader, options=OffloadOptions(
                hot_ratio=0.1, replace_rows=replace_rows,
                compensate_degrees=True))
        hot = off.hot_mask
        for batch in loader:
            num = batch.num_sampled_nodes
            n_last, n_bottom = num[0], num[0] + num[1]
            # Hot vertices of the last frontier have no in-edges:
            last_edges = batch.edge_index[:, -batch.num_sampled_edges[-1]:]
            dst = batch.n_id[last_edges[1]]
            assert not bool(hot[dst].any())
            info = off.runtime.batch_info(batch.x)
            lo = n_last if replace_rows == 'pruned' else 0
            expected = lo + hot[batch.n_id[lo:n_bottom]].nonzero().view(-1)
            # Table rows of all candidate rows, -1 where not hot:
            assert (info.lo, info.hi) == (lo, n_bottom)
            assert torch.equal(info.slot >= 0, hot[batch.n_id[lo:n_bottom]])
            info.hot_rows()
            assert torch.equal(info.rows, expected)
            assert torch.equal(off.hot_nodes[info.pos],
                               batch.n_id[info.rows])
            # Degree compensation: one placeholder per lost in-edge.
            rows = info.rows[info.rows >= n_last]
            deg = torch.bincount(data.edge_index[1], minlength=200)
            expected = deg[batch.n_id[rows]].clamp(max=3).sum()
            assert info.extra_edges.size(1) == int(expected)
        off.close()


def test_loader_sampled_hooks_run_before_received():
    data = tiny_graph()
    loader = tiny_loader(data)
    events = []
    remove_s = loader.register_batch_hook(
        lambda out: events.append(('sampled', out.node)), when='sampled')
    remove_r = loader.register_batch_hook(
        lambda batch: events.append(('received', batch.n_id)))
    for batch in loader:
        kind, node = events[-2]
        assert kind == 'sampled' and torch.equal(node, batch.n_id)
        assert events[-1][0] == 'received'
    remove_s()
    remove_r()
    n = len(events)
    next(iter(loader))
    assert len(events) == n
    with pytest.raises(ValueError, match="'when'"):
        loader.register_batch_hook(print, when='later')


def test_batch_rows_requested_when_sampled():
    # refresh='batch' queues a batch's hot rows from the sampled hook (a
    # step ahead with look-ahead), not when the loop receives the batch.
    data = tiny_graph()
    loader = tiny_loader(data)
    off = BottomLayerOffload(
        GraphSAGE(8, 8, 2, 3), loader, options=OffloadOptions(
            hot_ratio=0.1, max_staleness=2, refresh='batch'))
    runtime = off.runtime
    calls = []
    original = runtime.strategy.request

    def request(pos, version, weights_version=None):
        calls.append(weights_version)
        return original(pos, version, weights_version)

    runtime.strategy.request = request
    optimizer = torch.optim.SGD(off.parameters(), lr=0.01)
    for batch in loader:
        assert len(runtime.sampled) == 0  # Taken by the received hook.
        info = runtime.batch_info(batch.x)
        assert torch.equal(off.hot_nodes[info.pos], batch.n_id[info.rows])
        out = off(batch.x, batch.edge_index)[:batch.batch_size]
        optimizer.zero_grad()
        F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        optimizer.step()
    assert calls and all(v is not None for v in calls)
    assert off.stats()['max_staleness_seen'] <= 2
    off.close()


def test_degree_compensation_only_where_needed():
    from torch_geometric.nn import GCN
    data = tiny_graph()
    loader = tiny_loader(data, num_neighbors=(4, 3))
    for model, needed in ((GraphSAGE(8, 8, 2, 3), False),
                          (GCN(8, 8, 2, 3), True)):
        off = BottomLayerOffload(model, loader, options=OffloadOptions(
            hot_ratio=0.1))
        assert off.runtime.compensate_degrees is needed
        batch = next(iter(loader))
        info = off.runtime.batch_info(batch.x)
        assert (info.extra_edges is not None) is needed
        off.close()
    with pytest.raises(ValueError, match='compensate_degrees'):
        BottomLayerOffload(
            GraphSAGE(8, 8, 2, 3), loader, options=OffloadOptions(
                compensate_degrees='yes'))


# Failures and thread lifetime ################################################


@pytest.mark.parametrize('full_neighbors', [False, True])
def test_worker_exception_is_raised_in_training_loop(full_neighbors):
    # Rows with the fan-out: a later table fails; rows computed once: the
    # one table does.
    data = tiny_graph()
    loader = tiny_loader(data)
    calls = []
    fail_at = 1 if full_neighbors else 4

    def flaky(cancelled):  # Before every CPU work item.
        calls.append(1)
        if len(calls) == fail_at:
            raise ValueError('boom in a worker')

    with offload_hooks(work_hook=flaky):
        off = BottomLayerOffload(
            GraphSAGE(8, 8, 2, 3), loader, options=OffloadOptions(
                hot_ratio=0.1, max_staleness=1, full_neighbors=full_neighbors))
    assert off.stats()['static_tables'] == full_neighbors
    with pytest.raises(OffloadWorkerError, match='boom') as info:
        train_steps(off, loader, 20)
    cause = info.value.__cause__
    assert isinstance(cause, ValueError)
    frames = []
    tb = cause.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert 'flaky' in frames and 'run_item' in frames
    # Training goes on after the error:
    train_steps(off, loader, 3)
    off.close()


def test_threads_stop_on_close_eval_and_idle():
    data = tiny_graph()
    loader = tiny_loader(data)
    # Rows with the fan-out (recomputed: work comes back):
    off = BottomLayerOffload(
        GraphSAGE(8, 8, 2, 3), loader, options=OffloadOptions(
            hot_ratio=0.1, num_threads=2, idle_timeout=1.0,
            full_neighbors=False, chunk_size=5))  # Several work items per table.
    train_steps(off, loader, 5)
    assert 1 <= len(offload_threads()) <= 2
    assert all(t.daemon for t in offload_threads())
    assert wait_no_threads(10.0) == []  # Idle threads exit...
    # ... and come back on demand (with a seed, weight-free tables are
    # queued every super-batch of 4 steps, from max_sample_age=8):
    assert off.super_batch_size == 4
    train_steps(off, loader, 4)
    assert offload_threads()
    off.eval()
    assert offload_threads() == []
    train_steps(off, loader, 2)
    assert offload_threads()
    off.close()
    assert offload_threads() == []
    assert loader.node_sampler.hot_nodes is None
    # (Read once the threads are gone: a table in flight may finish first.)
    counts = {k: v for k, v in off.stats().items() if k.endswith(
        ('_forwards', 'submitted', 'computed'))}
    assert counts['offloaded_forwards'] == 11
    # What only offloading needs is released; the counts stay:
    assert off.runtime.strategy.computer.released
    after = off.stats()
    assert all(after[k] == v for k, v in counts.items())
    assert after['num_hot'] == off.hot_nodes.numel() > 0
    # After close, the wrapper is the plain model:
    batch = next(iter(loader))
    assert torch.equal(off(batch.x, batch.edge_index),
                       off.module(batch.x, batch.edge_index))


def test_threads_stop_when_wrapper_is_deleted():
    data = tiny_graph()
    loader = tiny_loader(data)
    model = GraphSAGE(8, 8, 2, 3)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.1))
    train_steps(off, loader, 3)
    assert offload_threads()
    del off
    gc.collect()
    assert offload_threads() == []
    assert loader.node_sampler.hot_nodes is None
    assert loader._batch_hooks == {}
    assert not model.convs[0]._forward_hooks
    assert not model.convs[0]._forward_pre_hooks


def test_threads_stop_on_keyboard_interrupt():
    data = tiny_graph()
    loader = tiny_loader(data)
    model = GraphSAGE(8, 8, 2, 3)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.1))
    train_steps(off, loader, 2)

    def interrupt(module, args):
        raise KeyboardInterrupt

    handle = model.convs[1].register_forward_pre_hook(interrupt)
    with pytest.raises(KeyboardInterrupt):
        train_steps(off, loader, 1)
    assert offload_threads() == []
    handle.remove()
    train_steps(off, loader, 2)  # Usable again.
    off.close()


def test_unmatched_input_runs_exact_path():
    data = tiny_graph()
    loader = tiny_loader(data)
    model = GraphSAGE(8, 8, 2, 3)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.1))
    x = torch.randn(7, 8)
    edge_index = torch.tensor([[1, 2, 3], [0, 0, 1]])
    assert torch.equal(off(x, edge_index), model(x, edge_index))
    assert off.stats()['exact_forwards'] == 1
    # A copy of batch.x with the batch's shape is matched (with a warning):
    batch = next(iter(loader))
    with pytest.warns(UserWarning, match='newest mini-batch'):
        off(batch.x.clone(), batch.edge_index)
    assert off.stats()['offloaded_forwards'] == 1
    off.close()


def test_changed_features_are_detected():
    data = tiny_graph()
    loader = HybridNeighborLoader(data, [3, 3], batch_size=8, device='cpu',
                                  transform=lambda b: b.update(
                                      {'x': b.x * 2}))
    off = BottomLayerOffload(
        GraphSAGE(8, 8, 2, 3), loader, options=OffloadOptions(hot_ratio=0.1))
    with pytest.raises(ValueError, match='differs from'):
        next(iter(loader))
    off.close()


def test_layers_normalized_by_neighbor_degrees_are_detected():
    from torch_geometric.nn import GCNConv, GINConv

    from pyg_orch.offload.aggregate_split import depends_on_source_degrees
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 4, generator=gen)
    # Targets 0 and 1; sources 2-5 (5 also feeds source 2).
    edge_index = torch.tensor([[2, 3, 4, 2, 5], [0, 0, 1, 1, 2]])
    cases = [(GCNConv(4, 3), True), (GCNConv(4, 3, normalize=False), False),
             (SAGEConv(4, 3), False),
             (GINConv(torch.nn.Linear(4, 3)), False)]
    for layer, expected in cases:
        assert depends_on_source_degrees(layer, x, edge_index, 2) is \
            expected, layer
    # No source outside the targets: nothing to probe.
    assert not depends_on_source_degrees(GCNConv(4, 3), x,
                                         torch.tensor([[1], [0]]), 2)


def test_gcn_normalization_turns_the_default_offload_off():
    # GCN's symmetric normalization uses the neighbors' degrees in each
    # mini-batch: by default offload stays off (it cost about 3 points on
    # MUSAE GitHub); with a hot_ratio it runs, with a warning.
    data = tiny_graph()
    loader = tiny_loader(data)
    torch.manual_seed(0)
    off = BottomLayerOffload(GCN(8, 8, 2, 3), loader)
    decision = off.stats()['decision']
    assert decision['mode'] == 'fixed' and decision['chosen_num_hot'] == 0
    assert 'degrees' in decision['reason'] and 'off' in decision['reason']
    assert off.stats()['num_hot'] == 0
    off.close()
    with pytest.warns(UserWarning, match="neighbors' degrees"):
        forced = BottomLayerOffload(
            GCN(8, 8, 2, 3), loader, options=OffloadOptions(hot_ratio=0.1))
    assert forced.stats()['num_hot'] > 0
    forced.close()
    # Not for layers that do not normalize so (no warning either):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        sage = BottomLayerOffload(
            GCN(8, 8, 2, 3, normalize=False), loader, options=OffloadOptions(
                hot_ratio=0.1))
    assert sage.stats()['num_hot'] > 0
    sage.close()
