"""Bottom-layer offload of heterogeneous graphs: to_hetero() and HeteroConv
models, exactness against the plain model, pruning per node type, errors."""
import copy
import time

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import HeteroData
from torch_geometric.nn import (
    GATConv,
    GraphSAGE,
    HeteroConv,
    SAGEConv,
    to_hetero,
)

from pyg_orch import HybridNeighborLoader
from pyg_orch.offload import BottomLayerOffload, OffloadOptions
from pyg_orch.offload.testing import offload_hooks
from conftest import (
    SlowCPU,
    StepClock,
    num_pruned,
    train_steps,
    wait_no_threads,
)

# No offload thread outlives a test; one intra-op thread (conftest):
pytestmark = pytest.mark.usefixtures('no_thread_leaks', 'one_intra_op_thread')


def hetero_graph(seed=0):
    # Papers ('b', labelled) cited by papers and written by authors ('a');
    # skewed targets, so that some vertices are clearly hot.
    gen = torch.Generator().manual_seed(seed)
    data = HeteroData()
    data['a'].x = torch.randn(150, 6, generator=gen)
    data['b'].x = torch.randn(120, 8, generator=gen)
    data['b'].y = torch.randint(0, 3, (120, ), generator=gen)
    writes = torch.stack([
        torch.randint(0, 150, (600, ), generator=gen),
        (torch.rand(600, generator=gen)**2 * 120).long()
    ])
    data['a', 'writes', 'b'].edge_index = writes
    data['b', 'rev_writes', 'a'].edge_index = writes.flip(0)
    data['b', 'cites', 'b'].edge_index = torch.stack([
        torch.randint(0, 120, (500, ), generator=gen),
        (torch.rand(500, generator=gen)**3 * 120).long()
    ])
    return data


def make_loader(data, num_neighbors=(-1, -1), device='cpu', **kwargs):
    kwargs.setdefault('shuffle', True)
    return HybridNeighborLoader(data, list(num_neighbors), batch_size=16,
                                input_nodes='b', device=device, seed=1,
                                **kwargs)


class Net(torch.nn.Module):
    def __init__(self, conv=SAGEConv, **kwargs):
        super().__init__()
        self.conv1 = conv((-1, -1), 16, **kwargs)
        self.conv2 = conv((-1, -1), 3, **kwargs)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


class HeteroConvNet(torch.nn.Module):
    def __init__(self, edge_types):
        super().__init__()
        self.conv1 = HeteroConv(
            {et: SAGEConv((-1, -1), 16)
             for et in edge_types}, aggr='sum')
        self.conv2 = HeteroConv(
            {et: SAGEConv((-1, -1), 3)
             for et in edge_types}, aggr='mean')

    def forward(self, x_dict, edge_index_dict):
        h = self.conv1(x_dict, edge_index_dict)
        h = {k: v.relu() for k, v in h.items()}
        return self.conv2(h, edge_index_dict)


def make_model(kind, data, device='cpu'):
    torch.manual_seed(0)
    if kind == 'to_hetero':
        model = to_hetero(Net(), data.metadata(), aggr='sum')
    elif kind == 'graphsage':
        model = to_hetero(GraphSAGE((-1, -1), 16, 2, 3), data.metadata())
    elif kind == 'gat':
        model = to_hetero(Net(GATConv, add_self_loops=False),
                          data.metadata())
    else:
        model = HeteroConvNet(data.edge_types)
    with torch.no_grad():  # Materializes the lazy parameters.
        model(data.x_dict, data.edge_index_dict)
    return model.to(device)


def forward(model, batch):
    out = model(batch.x_dict, batch.edge_index_dict)
    return out['b'][:batch['b'].batch_size]


@pytest.mark.parametrize('kind', ['to_hetero', 'graphsage', 'hetero_conv'])
def test_aggregate_split_is_exact(kind, device):
    # Full neighbors: the seeds' outputs and all gradients equal those of
    # the plain model on the unpruned batch, after optimizer steps, with
    # tables reused for several steps (on CUDA: pinned buffers, side
    # streams).
    data = hetero_graph()
    loader = make_loader(data, device=device)
    ref_loader = make_loader(data, device=device)
    model = make_model(kind, data, device)
    ref_model = copy.deepcopy(model)
    off = BottomLayerOffload(
        model, loader, options=OffloadOptions(
            hot_ratio=0.2, max_staleness=6, full_neighbors=True,
            split='aggregate'))
    hot = off.hot_nodes
    assert set(hot) == {'a', 'b'} and all(v.numel() > 0
                                          for v in hot.values())
    optimizer = torch.optim.Adam(off.parameters(), lr=0.01)
    for _ in range(2):
        for batch, ref in zip(loader, ref_loader):
            ref_model.load_state_dict(model.state_dict())
            ref_model.zero_grad()
            optimizer.zero_grad()
            out = forward(off, batch)
            expected = forward(ref_model, ref)
            assert torch.allclose(out, expected, atol=1e-5), \
                (out - expected).abs().max()
            y = batch['b'].y[:batch['b'].batch_size]
            F.cross_entropy(out, y).backward()
            F.cross_entropy(expected, y).backward()
            for (name, p), q in zip(model.named_parameters(),
                                    ref_model.parameters()):
                if q.grad is None:
                    assert p.grad is None or not p.grad.any(), name
                else:
                    assert torch.allclose(p.grad, q.grad, atol=1e-6), name
            optimizer.step()
    stats = off.stats()
    assert stats['split'] == 'aggregate'
    assert stats['cpu_aggregation'] == 'embedding_bag'
    assert stats['hot_rows_replaced'] > 0
    # All neighbors, no weights: one table, exact at every step (age 0).
    assert stats['static_tables'] and stats['tables_submitted'] == 1
    assert stats['max_staleness_seen'] == 0 and stats['max_table_age'] == 0
    assert stats['offloaded_forwards'] == stats['training_forwards'] > 0
    off.close()


def test_output_split_synchronous_is_exact(device):
    # GATConv's aggregation depends on its weights: 'auto' picks the output
    # split, and with max_staleness=0 and full neighbors it is exact.
    data = hetero_graph()
    loader = make_loader(data, device=device)
    ref_loader = make_loader(data, device=device)
    model = make_model('gat', data, device)
    ref_model = copy.deepcopy(model)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.2, max_staleness=0, full_neighbors=True))
    assert off.stats()['split'] == 'output'
    optimizer = torch.optim.SGD(off.parameters(), lr=0.1)
    for batch, ref in zip(loader, ref_loader):
        ref_model.load_state_dict(model.state_dict())
        optimizer.zero_grad()
        out = forward(off, batch)
        expected = forward(ref_model, ref)
        assert torch.allclose(out, expected, atol=1e-5), \
            (out - expected).abs().max()
        F.cross_entropy(out, batch['b'].y[:batch['b'].batch_size]).backward()
        optimizer.step()
    stats = off.stats()
    assert stats['hot_rows_replaced'] > 0
    assert stats['max_staleness_seen'] == 0
    off.close()


def test_output_split_bounded_staleness_with_slow_cpu():
    data = hetero_graph()
    loader = make_loader(data, num_neighbors=(4, 3))
    with offload_hooks(work_hook=SlowCPU(0.01)):
        off = BottomLayerOffload(
            make_model('to_hetero', data), loader, options=OffloadOptions(
                hot_ratio=0.3, max_staleness=3, split='output'))
    optimizer = torch.optim.SGD(off.parameters(), lr=0.01)
    for _ in range(4):
        for batch in loader:
            optimizer.zero_grad()
            out = forward(off, batch)
            F.cross_entropy(out, batch['b'].y[:batch['b'].batch_size]
                            ).backward()
            optimizer.step()
    stats = off.stats()
    assert stats['steps'] == 4 * len(loader)
    assert 0 < stats['max_staleness_seen'] <= 3
    assert max(stats['staleness_hist']) <= 3
    off.close()


def test_auto_hot_set_grows_and_stays_exact(device):
    # hot_ratio='auto' with frozen weights (SGD, lr=0: versions advance, the
    # weights do not): the hot set over all node types starts at 1% of the
    # first layer's destination vertices and grows while the CPU keeps up,
    # and every pruned vertex still finds its row, so the seeds get exactly
    # the outputs of the unpruned batch.
    data = hetero_graph()
    loader = make_loader(data, device=device)
    ref_loader = make_loader(data, device=device)
    model = make_model('to_hetero', data, device)
    with offload_hooks(work_hook=SlowCPU(0.03)):
        off = BottomLayerOffload(model, loader, options=OffloadOptions(
            hot_ratio='auto', max_staleness=7, full_neighbors=True,
            num_threads=1, chunk_size=10**6))
    num_nodes = data['a'].num_nodes + data['b'].num_nodes
    start = off.stats()['num_hot']
    assert start == round(0.01 * num_nodes)
    optimizer = torch.optim.SGD(off.parameters(), lr=0.0)
    for _ in range(12):
        for batch, ref in zip(loader, ref_loader):
            out, expected = forward(off, batch), forward(model, ref)
            assert torch.allclose(out, expected, atol=1e-5), \
                (out - expected).abs().max()
            optimizer.zero_grad()
            F.cross_entropy(out, batch['b'].y[:batch['b'].batch_size]
                            ).backward()
            optimizer.step()
            time.sleep(0.02)  # Steps far slower than the CPU tables.
    stats = off.stats()
    sizes = stats['hot_sizes']
    assert sizes[0] == start and len(sizes) > 2 and sizes == sorted(sizes)
    assert sizes[-1] <= round(0.5 * num_nodes)  # The candidates' cap.
    assert stats['num_hot'] == sizes[-1]
    assert sum(v.numel() for v in off.hot_nodes.values()) == sizes[-1]
    masks = loader.node_sampler.hot_nodes
    assert sum(int(masks[t].sum()) for t in ('a', 'b')) == sizes[-1]
    assert stats['hot_rows_replaced'] > 0
    assert stats['max_staleness_seen'] <= 7
    off.close()


def test_pruning_per_node_type():
    data = hetero_graph()
    loader = make_loader(data, num_neighbors=(3, 2))
    off = BottomLayerOffload(
        make_model('to_hetero', data), loader, options=OffloadOptions(
            hot_ratio=0.3))
    masks = {t: torch.zeros(data[t].num_nodes, dtype=torch.bool)
             for t in ('a', 'b')}
    for t, nodes in off.hot_nodes.items():
        masks[t][nodes] = True
        assert torch.equal(off.hot_mask[t], masks[t])
    assert off.stats()['num_hot_per_type'] == {
        t: int(m.sum()) for t, m in masks.items()
    }
    assert sum(int(m.sum()) for m in masks.values()) == round(
        0.3 * (data['a'].num_nodes + data['b'].num_nodes))
    # Most accessed first, and no less accessed than any cold vertex:
    counts = off.access_counts
    for t in ('a', 'b'):
        hot_counts = counts[t][off.hot_nodes[t]]
        assert torch.all(hot_counts[:-1] >= hot_counts[1:])
    cold_max = max(int(counts[t][~masks[t]].max()) for t in ('a', 'b'))
    hot_min = min(int(counts[t][masks[t]].min()) for t in ('a', 'b'))
    assert hot_min >= cold_max

    def last_hop_in_edges(batch):
        # Vertices of the last frontier that got sampled in-edges:
        out = {}
        for et in batch.edge_types:
            dst = et[-1]
            num = batch[dst].num_sampled_nodes
            lo = sum(num[:1])
            col = batch[et].edge_index[1]
            n = batch[et].num_sampled_edges
            col = col[n[0]:]  # Edges of the last hop.
            got = batch[dst].n_id[col[col >= lo]]
            out.setdefault(dst, []).append(got)
        return {t: torch.cat(v) for t, v in out.items()}

    def frontier(batch, t):
        num = batch[t].num_sampled_nodes
        return batch[t].n_id[num[0]:num[0] + num[1]]

    off.train()
    pruned_seen = 0
    for batch in loader:
        for t, got in last_hop_in_edges(batch).items():
            assert not masks[t][got].any()
            pruned_seen += int(masks[t][frontier(batch, t)].sum())
    assert pruned_seen > 0
    off.eval()
    expanded = 0
    for batch in loader:
        for t, got in last_hop_in_edges(batch).items():
            expanded += int(masks[t][got].sum())
    assert expanded > 0
    off.close()
    assert loader.node_sampler.hot_nodes is None


def test_state_dict_and_eval():
    data = hetero_graph()
    loader = make_loader(data, num_neighbors=(3, 2))
    model = make_model('to_hetero', data)
    plain = copy.deepcopy(model)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.2))
    assert list(off.state_dict()) == list(plain.state_dict())
    optimizer = torch.optim.Adam(off.parameters(), lr=0.01)
    off.train()
    for batch in loader:
        optimizer.zero_grad()
        F.cross_entropy(forward(off, batch),
                        batch['b'].y[:batch['b'].batch_size]).backward()
        optimizer.step()
    plain.load_state_dict(off.state_dict())
    off.eval()
    with torch.no_grad():
        assert torch.allclose(
            off(data.x_dict, data.edge_index_dict)['b'],
            plain(data.x_dict, data.edge_index_dict)['b'])
    off.close()


def test_errors():
    data = hetero_graph()
    loader = make_loader(data, num_neighbors=(3, 2))
    model = make_model('to_hetero', data)
    # Layers not named after edge types: planned on the first batch.
    off = BottomLayerOffload(GraphSAGE(8, 8, 2, 3), loader)
    assert off.stats()['decision']['mode'] == 'pending'
    off.close()
    with pytest.raises(ValueError, match="'layer' must name"):
        BottomLayerOffload(model, loader, options=OffloadOptions(
            layer='conv3'))
    with pytest.raises(NotImplementedError, match='heterogeneous'):
        BottomLayerOffload(model, loader, options=OffloadOptions(
            refresh='batch'))
    with pytest.raises(NotImplementedError, match='autotune'):
        BottomLayerOffload(
            model, make_loader(data, num_neighbors=(3, 2), num_workers=1),
            options=OffloadOptions(autotune=True))
    with pytest.raises(ValueError, match="split='aggregate'"):
        BottomLayerOffload(
            make_model('gat', data), loader, options=OffloadOptions(
                split='aggregate'))
    assert loader.node_sampler.hot_nodes is None

    # The second layer chosen as the first: its input is no raw feature.
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        layer='conv2', hot_ratio=0.1))
    off.train()
    batch = next(iter(loader))
    with pytest.warns(UserWarning, match='does not consume'):
        out = forward(off, batch)  # Runs unchanged, says why.
    assert torch.equal(out, forward(model, batch))
    decision = off.stats()['decision']
    assert decision['mode'] == 'pass_through'
    assert 'does not consume' in decision['reason']
    off.close()


def test_missing_features_are_an_error():
    data = hetero_graph()
    del data['a'].x
    data['a'].num_nodes = 150
    loader = make_loader(data, num_neighbors=(3, 2))
    torch.manual_seed(0)
    model = HeteroConvNet([('b', 'cites', 'b'), ('b', 'rev_writes', 'a')])
    off = BottomLayerOffload(model, loader)  # Lazy: planned on a batch.
    off.train()
    with pytest.raises(ValueError, match=r"data\['a'\].x"):
        forward(off, next(iter(loader)))


def test_count_node_access_per_node_type():
    from pyg_orch.sampling.presample import count_node_access
    data = hetero_graph()
    sampler = make_loader(data, num_neighbors=(3, 2)).node_sampler
    seeds = torch.arange(data['b'].num_nodes)
    with pytest.raises(ValueError, match='input_type'):
        count_node_access(sampler, seeds, 16)
    # One epoch, hop 0 only: every seed once, no other vertex.
    counts = count_node_access(sampler, seeds, 16, hops=1, input_type='b')
    assert set(counts) == {'a', 'b'}
    assert torch.equal(counts['b'], torch.ones_like(counts['b']))
    assert not counts['a'].any()
    # Hops 0 and 1: 'a' vertices appear as first-hop neighbors of seeds.
    counts = count_node_access(sampler, seeds, 16, hops=2, input_type='b')
    assert counts['a'].sum() > 0
    assert torch.all(counts['b'] >= 1)


# The decision by measurement (fake clocks) ##################################


def hetero_step(off, batch):
    out = forward(off, batch)
    return out, F.cross_entropy(out, batch['b'].y[:batch['b'].batch_size])


@pytest.mark.parametrize('full_neighbors', [False, 'auto'])
@pytest.mark.parametrize('lookahead', [False, True])
@pytest.mark.parametrize('offload_wins', [True, False])
def test_default_decides_by_measurement(offload_wins, lookahead,
                                        full_neighbors, caplog):
    # By default the hot-set size over all node types is measured as on
    # homogeneous graphs: plain training, then larger hot sets, the fastest
    # kept (offload off unless more than 2% faster). Rows computed once
    # (the default for this mean-aggregating model) try larger sets, all
    # of them.
    import logging
    data = hetero_graph()
    # With look-ahead, a batch drawn before the hot set changes trains
    # after it does.
    loader = make_loader(data, num_neighbors=(3, 2), lookahead=lookahead)
    sign = -1.0 if offload_wins else 1.0
    clock = StepClock(lambda: 1.0 + sign * 0.005 * num_pruned(loader))
    model = make_model('to_hetero', data)
    plain = copy.deepcopy(model)
    with offload_hooks(autotune_clock=clock):
        off = BottomLayerOffload(model, loader, options=OffloadOptions(
            full_neighbors=full_neighbors))
    static = full_neighbors == 'auto'
    assert off.stats()['static_tables'] == off.full_neighbors == static
    decision = off.stats()['decision']
    assert decision['mode'] == 'measure' and decision['state'] == 'trial'
    total = data['a'].num_nodes + data['b'].num_nodes  # Both are targets.
    ratios = [0.0, 0.25, 0.5, 0.7] if static else [0.0, 0.05, 0.15]
    assert [c['hot_ratio'] for c in decision['candidates']] == \
        pytest.approx(ratios)
    sizes = [c['num_hot'] for c in decision['candidates']]
    assert sizes == sorted(set(sizes))
    assert sizes == pytest.approx([r * total for r in ratios], abs=1)
    assert off.stats()['num_hot'] == 0  # Plain training first.

    def plain_while_off(batch, out):
        # Whenever no vertex is hot, the output is the model's own.
        if off.runtime.hot.size == 0:
            plain.load_state_dict(model.state_dict())
            with torch.no_grad():
                assert torch.equal(out, forward(plain, batch))

    with caplog.at_level(logging.INFO, logger='pyg_orch.offload'):
        train_steps(off, loader, 100 if static else 70, hetero_step,
                    plain_while_off)
        # A chosen hot set grows from none (plain training was timed again
        # last) once a table holds it:
        for _ in range(60):
            if num_pruned(loader) == off.stats()['decision'].get(
                    'chosen_num_hot'):
                break
            train_steps(off, loader, 1, hetero_step)
    stats = off.stats()
    decision = stats['decision']
    assert decision['state'] == 'decided'
    measured = [c['measured_steps'] for c in decision['candidates']]
    # A hot set 7% slower than plain training: larger ones are not tried,
    # unless rows are computed once.
    assert measured == [10] * len(sizes) if offload_wins or static else \
        [10, 10, 0]
    chosen = sizes[-1] if offload_wins else 0
    assert decision['chosen_num_hot'] == chosen
    assert stats['num_hot'] == chosen == num_pruned(loader)
    assert sum(stats['num_hot_per_type'].values()) == chosen
    records = [r.getMessage() for r in caplog.records
               if r.name == 'pyg_orch.offload']
    assert len(records) == 1
    before = stats['hot_rows_replaced']
    if offload_wins:
        assert decision['speedup'] > 1.02
        train_steps(off, loader, 5, hetero_step)
        assert off.stats()['hot_rows_replaced'] > before
    else:
        assert 'offload off' in decision['reason']
        assert not off.runtime.active and off.runtime.handles == []
        assert wait_no_threads() == []
        submitted = stats['tables_submitted']
        train_steps(off, loader, 10, hetero_step, plain_while_off)
        stats = off.stats()
        assert stats['tables_submitted'] == submitted
        assert stats['hot_rows_replaced'] == before
    off.close()


def test_explicit_hot_ratio_is_not_measured():
    data = hetero_graph()
    loader = make_loader(data, num_neighbors=(3, 2))
    off = BottomLayerOffload(
        make_model('to_hetero', data), loader, options=OffloadOptions(
            hot_ratio=0.1))
    assert off.runtime.tuner is None
    assert off.stats()['decision']['mode'] == 'fixed'
    assert off.stats()['num_hot'] == 27
    off.close()


class HandWrittenNet(torch.nn.Module):
    # Modules not named after edge types: found from the first batch.
    def __init__(self):
        super().__init__()
        self.from_authors = SAGEConv((6, 8), 16)
        self.from_papers = SAGEConv(8, 16)
        self.out = SAGEConv(16, 3)

    def forward(self, x_dict, edge_index_dict):
        h = self.from_authors((x_dict['a'], x_dict['b']),
                              edge_index_dict['a', 'writes', 'b'])
        h = h + self.from_papers(x_dict['b'],
                                 edge_index_dict['b', 'cites', 'b'])
        return {'b': self.out(h.relu(), edge_index_dict['b', 'cites', 'b'])}


def test_hand_written_model_is_exact():
    # The first layer is found by tracing the first training batch (which
    # runs unchanged); from then on the offloaded outputs equal the plain
    # model's on unpruned batches (full neighbors, aggregate split).
    data = hetero_graph()
    loader = make_loader(data)
    ref_loader = make_loader(data)
    torch.manual_seed(0)
    model = HandWrittenNet()
    ref_model = copy.deepcopy(model)
    off = BottomLayerOffload(
        model, loader, options=OffloadOptions(
            hot_ratio=0.2, max_staleness=6, full_neighbors=True,
            split='aggregate'))
    assert off.stats()['decision']['mode'] == 'pending'
    off.train()
    ref_model.train()
    for step, (batch, ref) in enumerate(zip(loader, ref_loader)):
        ref_model.load_state_dict(model.state_dict())
        out = forward(off, batch)
        assert torch.allclose(out, forward(ref_model, ref), atol=1e-5)
        if step == 3:
            break
    assert off.runtime.convs == {('a', 'writes', 'b'): model.from_authors,
                                 ('b', 'cites', 'b'): model.from_papers}
    stats = off.stats()
    assert stats['decision']['mode'] == 'fixed'
    assert stats['offloaded_forwards'] == 3 and stats['hot_rows_replaced'] > 0
    off.close()
