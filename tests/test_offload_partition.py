"""Bottom-layer offload over a partitioned graph (HybridNeighborLoader on a
partition folder), per rank: every rank's hot vertices are its own part's,
their in-neighbors' rows owned elsewhere are fetched once (the halo), the
sampler skips their last hop, and with full neighbors and max_staleness=0
training under DDP is that of plain partitioned training; the decision by
measurement is the same on every rank. 2 CPU processes with gloo
(tests/multiproc.py)."""
import pytest
import torch
import torch.nn.functional as F
from conftest import (
    PrunedClock,
    flat_params,
    tiny_graph,
    tiny_model,
    train_sgd,
)
from multiproc import run_workers
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import GCN

from pyg_orch import BottomLayerOffload, HybridNeighborLoader
from pyg_orch.offload import OffloadOptions
from pyg_orch.offload.testing import offload_hooks
from pyg_orch.distributed import load_partition, partition_graph

STEPS = 8


def _loader(out_dir, fanout=(-1, -1), **kwargs):
    return HybridNeighborLoader(out_dir, list(fanout), batch_size=16,
                                shuffle=True, seed=1, device='cpu', **kwargs)


@pytest.fixture
def parts(tmp_path):
    info = partition_graph(tiny_graph(), 2, tmp_path / 'p', 'random',
                           progress=False)
    return str(info.out_dir)


def _pruned_vs_unpruned(make_loader, device='cpu', make_model=tiny_model):
    # The same batches, pruned and not: the offloaded model's seed rows
    # are those of the plain model on the unpruned batch, step after step.
    loader, ref_loader = make_loader(), make_loader()
    model = make_model().to(device)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.2, max_staleness=0, full_neighbors=True))
    worst, pruned, placeholders = 0.0, 0, []
    optimizer = torch.optim.SGD(off.parameters(), lr=0.5)
    for batch, ref in zip(loader, ref_loader):
        assert torch.equal(batch.n_id[:batch.batch_size],
                           ref.n_id[:ref.batch_size])
        pruned += ref.num_nodes - batch.num_nodes
        info = off.runtime.batch_info(batch.x)
        if info.extra_edges is not None:  # Degree compensation.
            n_last = int(batch.num_sampled_nodes[0])
            info.hot_rows()
            rows = info.rows[info.rows >= n_last]
            placeholders.append((batch.n_id[rows].cpu(),
                                 info.extra_edges.size(1)))
        got = off(batch.x, batch.edge_index)[:batch.batch_size]
        expected = model(ref.x, ref.edge_index)[:ref.batch_size]
        worst = max(worst, float((got - expected).detach().abs().max()))
        optimizer.zero_grad()
        F.cross_entropy(got, batch.y[:batch.batch_size]).backward()
        optimizer.step()
    out = {'worst': worst, 'pruned': pruned, 'stats': off.stats(),
           'hot': off.hot_nodes.clone(), 'placeholders': placeholders,
           'compensated': off.runtime.compensate_degrees}
    off.close()
    return out


def _exact(rank, world_size, out_dir):
    out = _pruned_vs_unpruned(lambda: _loader(out_dir))
    # Under DDP, plain and offloaded training end with the same weights:
    out['plain'] = train_sgd(DistributedDataParallel(tiny_model()),
                             _loader(out_dir), STEPS)
    # Also with batches built by worker threads, pruned by the hot set alike:
    for name, kwargs in (('offload', {}), ('workers', {'num_workers': 2})):
        loader = _loader(out_dir, **kwargs)
        off = BottomLayerOffload(tiny_model(), loader, options=OffloadOptions(
            hot_ratio=0.2, max_staleness=0, full_neighbors=True,
            split='aggregate'))
        out[name] = train_sgd(DistributedDataParallel(off), loader, STEPS)
        out[f'{name}_stats'] = off.stats()
        off.close()
    return out


def test_full_neighbors_is_exact_and_ddp_equals_plain(parts):
    out = run_workers(_exact, 2, args=(parts, ), timeout=120)
    for rank, o in enumerate(out):
        part = load_partition(parts, rank)
        hot = o['hot']
        assert hot.numel() > 0
        # Its own part's vertices only, at most 20% of them:
        assert bool((part.owner(hot) == rank).all())
        assert hot.numel() <= round(0.2 * part.num_nodes)
        assert o['pruned'] > 0
        assert o['stats']['hot_rows_replaced'] > 0
        assert o['worst'] < 1e-5
        assert o['offload_stats']['hot_rows_replaced'] > 0
        assert o['offload_stats']['split'] == 'aggregate'
        assert o['offload_stats']['cpu_aggregation'] == 'embedding_bag'
        assert torch.allclose(o['offload'], o['plain'], atol=1e-5)
        assert torch.allclose(o['workers'], o['plain'], atol=1e-5)
        assert o['workers_stats']['hot_rows_replaced'] > 0
    assert torch.equal(out[0]['plain'], out[1]['plain'])
    assert torch.equal(out[0]['offload'], out[1]['offload'])
    assert not torch.allclose(out[0]['plain'], flat_params(tiny_model()))


@pytest.mark.parametrize('device,sampling_device', [
    ('cpu', 'cpu'),
    pytest.param('cuda', 'cpu', marks=pytest.mark.skipif(
        not torch.cuda.is_available(), reason='needs CUDA')),
    pytest.param('cuda', 'cuda', marks=pytest.mark.skipif(
        not torch.cuda.is_available(), reason='needs CUDA')),
])
@pytest.mark.parametrize('model', ['sage', 'gcn'])
def test_one_part_without_process_group_is_exact(tmp_path, device,
                                                 sampling_device, model):
    data = tiny_graph()
    info = partition_graph(data, 1, tmp_path / 'p', 'contiguous',
                           progress=False)

    def make():
        return HybridNeighborLoader(
            str(info.out_dir), [-1, -1], batch_size=16, shuffle=True,
            seed=1, device=device, sampling_device=sampling_device)

    make_model = tiny_model if model == 'sage' else lambda: GCN(
        8, 16, 2, 3, normalize=False, aggr='mean')
    out = _pruned_vs_unpruned(make, device, make_model)
    assert out['hot'].numel() == round(0.2 * 200)
    assert out['pruned'] > 0 and out['stats']['hot_rows_replaced'] > 0
    assert out['worst'] < 1e-5
    # Degree compensation (GCNConv): a placeholder per lost in-edge.
    assert out['compensated'] is (model == 'gcn')
    assert bool(out['placeholders']) is (model == 'gcn')
    deg = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
    for nodes, num in out['placeholders']:
        assert num == int(deg[nodes].sum())


@pytest.mark.parametrize('options,match', [
    ({'time_attr': 't'}, 'temporal'),
    ({'subgraph_type': 'induced'}, "subgraph_type='induced'"),
])
def test_sampling_modes_the_cpu_side_cannot_follow(tmp_path, options, match):
    data = tiny_graph()
    data.w = torch.rand(data.num_edges)
    data.t = torch.arange(data.num_nodes)
    info = partition_graph(data, 1, tmp_path / 'p', 'contiguous',
                           progress=False)
    loader = HybridNeighborLoader(str(info.out_dir), [3, 2], batch_size=16,
                                  device='cpu', **options)
    with pytest.raises(NotImplementedError, match=match):
        BottomLayerOffload(tiny_model(), loader, options=OffloadOptions(
            hot_ratio=0.1))


def _sampled_fanout(rank, world_size, out_dir):
    # A fan-out below the degrees: the CPU samples the hot vertices' in-edges
    # in the halo table, and training runs (its losses stay finite).
    loader = _loader(out_dir, (3, 2))
    off = BottomLayerOffload(tiny_model(), loader, options=OffloadOptions(
        hot_ratio=0.1, super_batch_size=2))
    flat = train_sgd(off, loader, 12)
    stats = off.stats()
    off.close()
    return flat, stats


def test_sampled_fanout_trains(parts):
    out = run_workers(_sampled_fanout, 2, args=(parts, ), timeout=120)
    for flat, stats in out:
        assert torch.isfinite(flat).all()
        assert stats['hot_rows_replaced'] > 0
        assert stats['num_hot'] > 0


def _autotune(rank, world_size, out_dir, per_pruned):
    loader = _loader(out_dir, (3, 2))
    clock = PrunedClock(loader, per_pruned[rank])
    with offload_hooks(autotune_clock=clock):
        off = BottomLayerOffload(tiny_model(), loader)
    ddp = DistributedDataParallel(off)
    train_sgd(ddp, loader, 300, lr=0.01,
              until=lambda: off.stats()['decision']['state'] == 'decided')
    steps = off.stats()['steps']
    # A chosen hot set is in use once a table holds it (plain training was
    # timed last):
    train_sgd(ddp, loader, 10, lr=0.01)
    stats = off.stats()
    off.close()
    return stats, steps


@pytest.mark.parametrize('per_pruned,wins', [
    ((-0.01, 0.002), True),  # Faster on average.
    ((0.01, 0.01), False),
])
def test_default_decides_alike_on_every_rank(parts, per_pruned, wins):
    out = run_workers(_autotune, 2, args=(parts, per_pruned), timeout=180)
    (s0, steps0), (s1, steps1) = out
    assert steps0 == steps1 < 300
    d0, d1 = s0['decision'], s1['decision']
    assert d0['mode'] == 'measure' and d0['state'] == 'decided'
    assert d0['candidates'] == d1['candidates']  # The ranks' mean times.
    assert (s0['num_hot'] > 0) == (s1['num_hot'] > 0) == wins
    assert (d0['chosen_num_hot'] > 0) == wins


def _halo(rank, world_size, out_dir):
    from pyg_orch.offload.partition import build_halo
    loader = _loader(out_dir)
    part = loader.partition_batches.partition
    cand = part.node_ids[:10].to(torch.int64)
    table, kept = build_halo(loader, cand, 15)
    full, all_kept = build_halo(loader, cand, 10**6)
    return cand, table.ids, table.x, kept, full.ids, full.x, all_kept, \
        full.csc.colptr, full.csc.row


def test_halo_holds_the_in_neighbors_rows_within_the_budget(parts):
    data = tiny_graph()
    out = run_workers(_halo, 2, args=(parts, ), timeout=60)
    for cand, ids, x, kept, full_ids, full_x, all_kept, colptr, row in out:
        assert ids.numel() <= 15 and kept.numel() < cand.numel()
        assert torch.equal(kept, cand[:kept.numel()])
        assert torch.equal(all_kept, cand)
        assert torch.equal(x, data.x[ids])
        assert torch.equal(full_x, data.x[full_ids])
        for v in cand.tolist():  # Every in-edge, over the table's rows.
            col = int(torch.searchsorted(full_ids, torch.tensor(v)))
            got = full_ids[row[colptr[col]:colptr[col + 1]]]
            expected = data.edge_index[0, data.edge_index[1] == v]
            assert torch.equal(torch.sort(got).values,
                               torch.sort(expected).values)


def _mismatch(rank, world_size, out_dir, case):
    from torch_geometric.nn import GraphSAGE
    loader = _loader(out_dir)
    if case == 'options':
        model, kwargs = tiny_model(), dict(hot_ratio=0.1 * (rank + 1))
    else:  # Rank 0's model cannot be offloaded (lazy parameters).
        model = GraphSAGE(-1, 16, 2, 3) if rank == 0 else tiny_model()
        kwargs = dict(hot_ratio=0.1)
    try:
        BottomLayerOffload(model, loader, options=OffloadOptions(**kwargs))
    except (ValueError, NotImplementedError) as e:
        return type(e).__name__, str(e)
    return None


@pytest.mark.parametrize('case', ['options', 'one_rank_fails'])
def test_a_rank_that_cannot_build_fails_every_rank(parts, case):
    # Building is a collective: a rank that fails before it, or passes other
    # options, makes every rank raise at once, none waits for it.
    (t0, m0), (t1, m1) = run_workers(_mismatch, 2, args=(parts, case),
                                     timeout=60, pg_timeout=20)
    if case == 'options':
        assert t0 == t1 == 'ValueError'
        assert 'other options' in m0 and 'other options' in m1
    else:
        assert t0 == 'ValueError' and 'lazily' in m0
        assert t1 == 'ValueError' and 'rank 0 could not build' in m1
        assert 'lazily' in m1


def _compensated(rank, world_size, out_dir):
    # GCNConv needs degree compensation (normalize=False: exact with all
    # neighbors, the normalization uses no degree the CPU cannot know; the
    # mean keeps the outputs' scale).
    return _pruned_vs_unpruned(lambda: _loader(out_dir), make_model=lambda:
                               GCN(8, 16, 2, 3, normalize=False,
                                   aggr='mean'))


def test_degree_compensation_on_every_rank(parts):
    # Pruned hot vertices get one placeholder in-edge per in-edge of theirs
    # (all neighbors), counted from the halo table, and training stays
    # exact.
    data = tiny_graph()
    deg = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
    out = run_workers(_compensated, 2, args=(parts, ), timeout=120)
    checked = 0
    for o in out:
        assert o['compensated'] and o['worst'] < 1e-5
        for nodes, num in o['placeholders']:
            assert num == int(deg[nodes].sum())
            checked += int(nodes.numel() > 0)
    assert checked > 0


def _with_weights(tmp_path, replace):
    from torch_geometric.utils import coalesce
    data = tiny_graph()
    data.edge_index = coalesce(data.edge_index, num_nodes=data.num_nodes)
    gen = torch.Generator().manual_seed(3)
    data.w = (torch.rand(data.num_edges, generator=gen) < 0.5).float()
    info = partition_graph(data, 1, tmp_path / f'p{int(replace)}',
                           'contiguous', progress=False)
    loader = HybridNeighborLoader(str(info.out_dir), [3, 2], batch_size=16,
                                  weight_attr='w', replace=replace,
                                  device='cpu')
    return data, loader


def _edges_by_target(ids, edges, n):
    # Real sampled edges (targets among the first n ids) as global
    # (source, target) pairs, and the global targets of placeholder edges.
    real = edges[1] < n
    pairs = torch.stack([ids[edges[0, real]], ids[edges[1, real]]])
    return pairs, torch.sort(ids[edges[1, ~real]]).values


@pytest.mark.parametrize('replace', [False, True])
@pytest.mark.parametrize('model', ['sage', 'gcn'])
def test_cpu_side_samples_as_the_loader_does(tmp_path, replace, model):
    # Weighted, with or without replacement: the CPU side draws the hot
    # vertices' in-neighbors from the halo table as the whole graph's
    # computer does (as many per vertex, only over positive weights, with
    # repeats only with replacement) and, for GCN-like layers, gives the
    # same placeholder in-edges.
    from pyg_orch.offload.bottom_layer import BottomLayerComputer
    data, loader = _with_weights(tmp_path, replace)
    if model == 'sage':
        off = BottomLayerOffload(tiny_model(), loader, options=OffloadOptions(
            hot_ratio=0.2))
    else:  # Offloaded although its normalization uses batch degrees:
        with pytest.warns(UserWarning, match='degrees'):
            off = BottomLayerOffload(
                GCN(8, 8, 2, 3), loader, options=OffloadOptions(hot_ratio=0.2))
    part = off.runtime.strategy.computer
    table = part.table
    assert part.replace is replace and part.csc.weight is not None
    assert part.num_neighbors == 2  # The bottom hop's fan-out.
    assert part.dedup is (model == 'gcn')
    hot = off.hot_nodes
    n = hot.numel()
    mask = torch.zeros(data.num_nodes, dtype=torch.bool)
    mask[hot] = True
    if part.dedup:  # Placeholders for the candidates, over table rows:
        assert torch.equal(part.in_edge_mask, mask[table.ids])
    whole = HybridNeighborLoader(data, [3, 2], weight_attr='w',
                                 replace=replace, device='cpu')
    ref = BottomLayerComputer(part.template, data.x,
                              whole.node_sampler.topology.csc[None],
                              part.num_neighbors,
                              replace=replace, dedup=part.dedup)
    if part.dedup:
        ref.in_edge_mask = mask
    weight = torch.zeros(data.num_nodes, data.num_nodes)
    weight[data.edge_index[0], data.edge_index[1]] = data.w
    repeats = 0
    for seed in range(20):
        ids, edges = part.subgraph(hot, torch.Generator().manual_seed(seed))
        assert torch.equal(table.ids[ids[:n]], hot)
        pairs, extra = _edges_by_target(table.ids[ids], edges, n)
        ref_pairs, ref_extra = _edges_by_target(
            *ref.subgraph(hot, torch.Generator().manual_seed(seed)), n)
        assert torch.equal(torch.bincount(pairs[1], minlength=200),
                           torch.bincount(ref_pairs[1], minlength=200))
        assert torch.equal(extra, ref_extra)
        assert bool((weight[pairs[0], pairs[1]] > 0).all())
        repeats += pairs.size(1) - torch.unique(pairs, dim=1).size(1)
    assert (repeats > 0) is replace
    off.close()


# Heterogeneous partitions ###################################################


def _hetero_exact(rank, world_size, out_dir, kind, fanout):
    # Pruned and unpruned batches of the same seeds: with all neighbors and
    # max_staleness=0, the seeds' outputs are the plain model's.
    from test_offload_hetero import forward, hetero_graph, make_model

    def make():
        return HybridNeighborLoader(out_dir, list(fanout), batch_size=16,
                                    input_nodes='b', shuffle=True, seed=1,
                                    device='cpu')

    loader, ref_loader = make(), make()
    model = make_model(kind, hetero_graph())
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.2, max_staleness=0, full_neighbors=fanout[-1] == -1,
        split='aggregate' if kind != 'gat' else 'auto'))
    optimizer = torch.optim.SGD(off.parameters(), lr=0.5)
    worst, pruned = 0.0, 0
    for batch, ref in zip(loader, ref_loader):
        pruned += sum(ref[t].num_nodes - batch[t].num_nodes
                      for t in ref.node_types)
        got = forward(off, batch)
        expected = forward(model, ref)
        worst = max(worst, float((got - expected).detach().abs().max()))
        optimizer.zero_grad()
        y = batch['b'].y[:batch['b'].batch_size]
        F.cross_entropy(got, y).backward()
        optimizer.step()
    out = {'worst': worst, 'pruned': pruned, 'stats': off.stats(),
           'hot': {t: v.clone() for t, v in off.hot_nodes.items()}}
    off.close()
    return out


@pytest.mark.parametrize('kind', ['to_hetero', 'hetero_conv'])
def test_heterogeneous_partition_full_neighbors_is_exact(tmp_path, kind):
    from test_offload_hetero import hetero_graph
    info = partition_graph(hetero_graph(), 2, tmp_path / 'p', 'random',
                           progress=False)
    out = run_workers(_hetero_exact, 2,
                      args=(str(info.out_dir), kind, (-1, -1)), timeout=120)
    for rank, o in enumerate(out):
        part = load_partition(info.out_dir, rank)
        assert set(o['hot']) == {'a', 'b'}
        assert sum(v.numel() for v in o['hot'].values()) > 0
        for t, ids in o['hot'].items():  # Its own part's vertices only.
            assert bool((part.owner(ids, t) == rank).all())
        assert o['worst'] < 1e-5
    # On this small graph the hot vertices' in-neighbors fill the halo
    # budget (the part's size) after a few of them on one rank:
    assert sum(o['pruned'] for o in out) > 0
    assert sum(o['stats']['hot_rows_replaced'] for o in out) > 0


@pytest.mark.parametrize('device', [
    'cpu',
    pytest.param('cuda', marks=pytest.mark.skipif(
        not torch.cuda.is_available(), reason='needs CUDA')),
])
def test_heterogeneous_one_part_without_process_group(tmp_path, device):
    from test_offload_hetero import forward, hetero_graph, make_model
    info = partition_graph(hetero_graph(), 1, tmp_path / 'p', 'contiguous',
                           progress=False)

    def make():
        return HybridNeighborLoader(
            str(info.out_dir), [-1, -1], batch_size=16, input_nodes='b',
            shuffle=True, seed=1, device=device, sampling_device=device,
            feature_device=device)

    loader, ref_loader = make(), make()
    model = make_model('to_hetero', hetero_graph(), device)
    off = BottomLayerOffload(
        model, loader, options=OffloadOptions(
            hot_ratio=0.2, max_staleness=0, full_neighbors=True,
            split='aggregate'))
    assert all(v.numel() > 0 for v in off.hot_nodes.values())
    pruned = 0
    for batch, ref in zip(loader, ref_loader):
        pruned += ref['a'].num_nodes - batch['a'].num_nodes
        got, expected = forward(off, batch), forward(model, ref)
        assert torch.allclose(got, expected, atol=1e-5)
    assert pruned > 0 and off.stats()['hot_rows_replaced'] > 0
    off.close()


def test_heterogeneous_partition_auto_hot_set_is_exact(tmp_path):
    # hot_ratio='auto' on a heterogeneous part: the hot set starts at 1% of
    # the first layer's destination vertices, grows while the CPU keeps up
    # (within the halo budget), and the seeds get the unpruned outputs.
    from test_offload_hetero import forward, hetero_graph, make_model
    data = hetero_graph()
    info = partition_graph(data, 1, tmp_path / 'p', 'contiguous',
                           progress=False)

    def make():
        return HybridNeighborLoader(
            str(info.out_dir), [-1, -1], batch_size=16, input_nodes='b',
            shuffle=True, seed=1, device='cpu')

    loader, ref_loader = make(), make()
    model = make_model('to_hetero', data)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio='auto', max_staleness=7, full_neighbors=True))
    assert off.stats()['num_hot'] == round(
        0.01 * (data['a'].num_nodes + data['b'].num_nodes))
    optimizer = torch.optim.SGD(off.parameters(), lr=0.0)
    for _ in range(4):
        for batch, ref in zip(loader, ref_loader):
            got, expected = forward(off, batch), forward(model, ref)
            assert torch.allclose(got, expected, atol=1e-5)
            optimizer.zero_grad()
            F.cross_entropy(got, batch['b'].y[:batch['b'].batch_size]
                            ).backward()
            optimizer.step()
    stats = off.stats()
    assert stats['hot_rows_replaced'] > 0
    assert stats['hot_sizes'] == sorted(stats['hot_sizes'])
    off.close()


def _hetero_autotune(rank, world_size, out_dir, per_pruned):
    from test_offload_hetero import forward, hetero_graph, make_model
    loader = HybridNeighborLoader(out_dir, [3, 2], batch_size=16,
                                  input_nodes='b', shuffle=True, seed=1,
                                  device='cpu')
    with offload_hooks(autotune_clock=PrunedClock(loader, per_pruned[rank])):
        off = BottomLayerOffload(make_model('to_hetero', hetero_graph()),
                                 loader)
    # The loss reads the 'b' outputs only: the last layer's modules into 'a'
    # get no gradient.
    ddp = DistributedDataParallel(off, find_unused_parameters=True)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    steps = 0
    while off.stats()['decision']['state'] != 'decided' and steps < 300:
        for batch in loader:
            optimizer.zero_grad()
            y = batch['b'].y[:batch['b'].batch_size]
            F.cross_entropy(forward(ddp, batch), y).backward()
            optimizer.step()
            steps += 1
    stats = off.stats()
    off.close()
    return stats, steps


@pytest.mark.parametrize('per_pruned,wins', [
    ((-0.01, 0.002), True),
    ((0.01, 0.01), False),
])
def test_heterogeneous_default_decides_alike_on_every_rank(tmp_path,
                                                           per_pruned, wins):
    from test_offload_hetero import hetero_graph
    info = partition_graph(hetero_graph(), 2, tmp_path / 'p', 'random',
                           progress=False)
    out = run_workers(_hetero_autotune, 2,
                      args=(str(info.out_dir), per_pruned), timeout=180)
    (s0, steps0), (s1, steps1) = out
    assert steps0 == steps1 < 300
    d0, d1 = s0['decision'], s1['decision']
    assert d0['state'] == 'decided' and d0['candidates'] == d1['candidates']
    sizes = [c['num_hot'] for c in d0['candidates']]
    assert sizes[0] == 0 and len(sizes) > 1
    assert (s0['num_hot'] > 0) == (s1['num_hot'] > 0) == wins


def test_heterogeneous_partition_with_sampled_fanout_trains(tmp_path):
    from test_offload_hetero import hetero_graph
    info = partition_graph(hetero_graph(), 2, tmp_path / 'p', 'random',
                           progress=False)
    out = run_workers(_hetero_exact, 2,
                      args=(str(info.out_dir), 'graphsage', (3, 2)),
                      timeout=120)
    # Sampled neighbors: not exact, but offloaded and finite.
    assert sum(o['stats']['hot_rows_replaced'] for o in out) > 0
    assert all(o['worst'] < float('inf') for o in out)


@pytest.mark.parametrize('replace', [False, True])
def test_heterogeneous_partition_weighted_sampling(tmp_path, replace):
    # Edge types with the weight attribute keep their in-edge weights in the
    # halo tables (the others are sampled uniformly, as by the loader), and
    # every part of the CPU side samples with replacement as the loader.
    from test_offload_hetero import forward, hetero_graph, make_model
    data = hetero_graph()
    gen = torch.Generator().manual_seed(0)
    et = ('a', 'writes', 'b')
    data[et].w = (torch.rand(data[et].num_edges, generator=gen) < 0.5).float()
    info = partition_graph(data, 1, tmp_path / 'p', 'contiguous',
                           progress=False)
    loader = HybridNeighborLoader(str(info.out_dir), [3, 2], batch_size=16,
                                  input_nodes='b', weight_attr='w',
                                  replace=replace, device='cpu')
    off = BottomLayerOffload(
        make_model('to_hetero', data), loader, options=OffloadOptions(
            hot_ratio=0.2))
    computer = off.runtime.strategy.computer
    for edge_type, part in zip(computer.edge_types, computer.parts):
        assert part.replace is replace
        assert (part.csc.weight is not None) is (edge_type == et)
    optimizer = torch.optim.SGD(off.parameters(), lr=0.01)
    for batch in loader:
        out = forward(off, batch)
        optimizer.zero_grad()
        F.cross_entropy(out, batch['b'].y[:batch['b'].batch_size]).backward()
        optimizer.step()
    assert off.stats()['hot_rows_replaced'] > 0
    off.close()
