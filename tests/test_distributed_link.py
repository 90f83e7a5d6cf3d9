"""Link prediction across machines: HybridLinkNeighborLoader over a
partitioned graph ('parts/' or (PartitionFeatureStore, PartitionGraphStore)),
two gloo ranks on the CPU. With full fan-out, every batch has the nodes,
edges and features of the single-machine loader for the same label edges
(negatives included: they are valid global ids, reproducible with a seed)
and edge attributes, also with worker threads, prefetch and caches;
heterogeneous and temporal graphs too; ranks that disagree on a collective
argument fail at construction on every rank, no hang. Also the collective
sampler as a PyG BaseSampler (sample_from_nodes(NodeSamplerInput))."""
import pytest
import torch
from conftest import (
    B_TO_A,
    random_graph,
    random_hetero_graph,
    temporal_graph,
    temporal_hetero_graph,
)
from multiproc import run_workers
from torch_geometric.nn import GraphSAGE
from torch_geometric.sampler import NegativeSampling, NodeSamplerInput

from pyg_orch import (
    BottomLayerOffload,
    HybridLinkNeighborLoader,
    HybridNeighborLoader,
    HybridNeighborSampler,
)
from pyg_orch.distributed import (
    DistributedNeighborSampler,
    PartitionFeatureStore,
    PartitionGraphStore,
    load_partition,
    open_stores,
    partition_graph,
)
from pyg_orch.sampling.edges import SeedSampler

FULL = [-1, -1]
NUM_NODES = 60
BATCH = 4
WRITES = ('author', 'writes', 'paper')


def graph():
    return random_graph(NUM_NODES, 240, seed=7, num_features=3,
                        num_classes=2)


def rank_edges(data, rank):
    # Rank 0 gets 13 label edges (4 batches), rank 1 gets 9 (3 batches):
    # they agree on 3.
    edges = data.edge_index[:, :22]
    return edges[:, :13] if rank == 0 else edges[:, 13:]


def _global(batch, neg):
    # A batch in global ids, as plain tensors (picklable, comparable).
    n_id = batch.n_id
    out = {'n_id': n_id, 'e_id': batch.e_id, 'x': batch.x,
           'edge': torch.stack([n_id[batch.edge_index[0]],
                                n_id[batch.edge_index[1]], batch.e_id]),
           'input_id': batch.input_id}
    if neg == 'triplet':
        out.update(src=n_id[batch.src_index], pos=n_id[batch.dst_pos_index],
                   neg=n_id[batch.dst_neg_index])
    else:
        out['label_index'] = n_id[batch.edge_label_index]
        out['label'] = batch.get('edge_label')
    return out


def _nodes(batch):
    n_id = batch.n_id
    return {'n_id': n_id, 'x': batch.x, 'edge': torch.stack([
        n_id[batch.edge_index[0]], n_id[batch.edge_index[1]], batch.e_id])}


NEGATIVES = {None: None, 'binary': NegativeSampling('binary', amount=1),
             'triplet': NegativeSampling('triplet', amount=2)}


def _homo_worker(rank, world_size, out_dir):
    data = graph()
    edges = rank_edges(data, rank)
    stores = open_stores(out_dir)
    out = {}
    for name, neg in NEGATIVES.items():
        loader = HybridLinkNeighborLoader(
            out_dir if name is None else stores, FULL,
            edge_label_index=edges, neg_sampling=neg, batch_size=BATCH,
            device='cpu', seed=5)
        out[name] = (len(loader), [_global(b, name) for b in loader])
    again = HybridLinkNeighborLoader(stores, FULL, edge_label_index=edges,
                                     neg_sampling='binary',
                                     batch_size=BATCH, device='cpu', seed=5)
    other = HybridLinkNeighborLoader(stores, FULL, edge_label_index=edges,
                                     neg_sampling='binary',
                                     batch_size=BATCH, device='cpu', seed=6)
    out['again'] = [_global(b, 'binary') for b in again]
    out['other'] = [_global(b, 'binary') for b in other]
    # The node loader over the same stores:
    node_seeds = torch.arange(rank, NUM_NODES, 7)
    nodes = HybridNeighborLoader(stores, FULL, input_nodes=node_seeds,
                                 batch_size=BATCH, device='cpu')
    out['node_loader'] = [(b.batch_size, b.input_id, _nodes(b)) for b in nodes]
    # The collective sampler as PyG's BaseSampler:
    sampler = stores[1].sampler(FULL)
    seeds = torch.tensor([3, 17, 40]) + rank
    ids = torch.tensor([0, 1, 2]) + 10 * rank
    a = sampler.sample_from_nodes(NodeSamplerInput(ids, seeds))
    b = sampler.sample_from_nodes(seeds)
    out['nodes'] = (seeds, a.metadata[0], a.node, a.row, a.col, a.edge,
                    b.metadata[0], b.node, b.row, b.col, b.edge)
    return out


def _same_subgraph(ours, ref, data):
    # Same node set, same edges (global endpoints and ids), same features.
    assert torch.equal(ours['n_id'].sort().values, ref.n_id.sort().values)
    ref_edge = torch.stack([ref.n_id[ref.edge_index[0]],
                            ref.n_id[ref.edge_index[1]], ref.e_id])
    assert sorted(map(tuple, ours['edge'].t().tolist())) == \
        sorted(map(tuple, ref_edge.t().tolist()))
    assert torch.equal(ours['x'], data.x[ours['n_id']])


def test_link_batches_equal_one_machine(tmp_path):
    data = graph()
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    out = run_workers(_homo_worker, 2, args=(str(info.out_dir), ),
                      timeout=120)
    for rank, res in enumerate(out):
        edges = rank_edges(data, rank)
        ref = list(HybridLinkNeighborLoader(
            data, FULL, edge_label_index=edges, batch_size=BATCH,
            device='cpu'))
        # The ranks agree on the smaller number of batches:
        for name in NEGATIVES:
            assert res[name][0] == len(res[name][1]) == 3
        for ours, theirs in zip(res[None][1], ref):
            _same_subgraph(ours, theirs, data)
            assert torch.equal(ours['input_id'], theirs.input_id)
            assert torch.equal(ours['label_index'],
                               theirs.n_id[theirs.edge_label_index])
        for i, ours in enumerate(res['binary'][1]):
            pos = edges[:, i * BATCH:(i + 1) * BATCH]
            n = pos.size(1)
            label_index, label = ours['label_index'], ours['label']
            assert torch.equal(label_index[:, :n], pos)
            assert label.tolist() == [1.0] * n + [0.0] * n
            assert int(label_index.min()) >= 0
            assert int(label_index.max()) < NUM_NODES
            # One machine, given the same pairs (negatives as label edges),
            # samples the same subgraph:
            (one, ) = HybridLinkNeighborLoader(
                data, FULL, edge_label_index=label_index,
                batch_size=2 * n, device='cpu')
            _same_subgraph(ours, one, data)
        for i, ours in enumerate(res['triplet'][1]):
            pos = edges[:, i * BATCH:(i + 1) * BATCH]
            assert torch.equal(ours['src'], pos[0])
            assert torch.equal(ours['pos'], pos[1])
            assert ours['neg'].shape == (pos.size(1), 2)
            assert 0 <= int(ours['neg'].min()) <= int(ours['neg'].max()) \
                < NUM_NODES
            seeds = torch.cat([pos[0], pos[1], ours['neg'].view(-1)])
            assert set(seeds.tolist()) <= set(ours['n_id'].tolist())
        # Reproducible with a seed; another seed, other negatives:
        for a, b in zip(res['again'], res['binary'][1]):
            assert torch.equal(a['label_index'], b['label_index'])
            assert torch.equal(a['n_id'], b['n_id'])
        assert any(not torch.equal(a['label_index'], b['label_index'])
                   for a, b in zip(res['other'], res['binary'][1]))
        # HybridNeighborLoader over the stores: one machine's batches.
        node_seeds = torch.arange(rank, NUM_NODES, 7)
        ref = list(HybridNeighborLoader(data, FULL, input_nodes=node_seeds,
                                        batch_size=BATCH, device='cpu'))
        assert len(res['node_loader']) == 3  # 9 seeds on each rank.
        for (size, input_id, ours), theirs in zip(res['node_loader'], ref):
            assert size == theirs.batch_size
            assert torch.equal(input_id, theirs.input_id)
            assert torch.equal(ours['n_id'][:size], theirs.n_id[:size])
            _same_subgraph(ours, theirs, data)
        # sample_from_nodes(NodeSamplerInput): the plain call's output, the
        # input ids in the metadata, one machine's nodes at full fan-out.
        seeds, input_id, *a, b_id, b_node, b_row, b_col, b_edge = \
            res['nodes']
        assert torch.equal(input_id, torch.tensor([0, 1, 2]) + 10 * rank)
        assert b_id is None
        for x, y in zip(a, (b_node, b_row, b_col, b_edge)):
            assert torch.equal(x, y)
        one = HybridNeighborSampler(data, FULL, device='cpu')
        ref_out = one.sample_from_nodes(NodeSamplerInput(None, seeds))
        assert torch.equal(a[0], ref_out.node)
        assert torch.equal(a[3], ref_out.edge)


def edge_graph():
    return random_graph(NUM_NODES, 240, seed=8, num_features=3, edge_dim=2)


def _attrs(batch):
    n_id, e_id = batch.n_id, batch.e_id
    return {'n_id': n_id, 'e_id': e_id, 'x': batch.x,
            'edge_attr': batch.edge_attr,
            'edge': torch.stack([n_id[batch.edge_index[0]],
                                 n_id[batch.edge_index[1]], e_id]),
            'label_index': n_id[batch.get('edge_label_index')]
            if 'edge_label_index' in batch else None}


def _pipeline_worker(rank, world_size, out_dir):
    edges = rank_edges(edge_graph(), rank)
    cache = dict(cache_size=30, edge_cache_size=200)
    out = {}
    for name, neg, kwargs in (
            ('plain', 'binary', {}),
            ('prefetch', 'binary', dict(prefetch=1, **cache)),
            ('plain_pos', None, {}),
            ('workers', None, dict(num_workers=2, **cache)),
            ('bidirectional', 'triplet',
             dict(subgraph_type='bidirectional', edge_cache_size=200)),
            ('pad', 'binary', dict(even='pad'))):
        loader = HybridLinkNeighborLoader(
            out_dir, FULL, edge_label_index=edges, neg_sampling=neg,
            batch_size=BATCH, device='cpu', seed=5, **kwargs)
        batches = [_attrs(b) for b in loader]
        stats = loader.stats()['batches']
        out[name] = (batches, sum(s['cached_rows'] for s in stats),
                     sum(s['cached_edge_rows'] for s in stats))
    return out


def test_link_pipeline_threads_caches_edge_attrs(tmp_path):
    # Link batches with a prefetch thread or worker threads and caches are
    # the plain ones; edge attributes are gathered (also for reversed
    # edges of 'bidirectional'), one machine's at full fan-out.
    data = edge_graph()
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    out = run_workers(_pipeline_worker, 2, args=(str(info.out_dir), ),
                      timeout=120)
    for rank, res in enumerate(out):
        # even='pad': 4 batches (13 label edges on rank 0), rank 1's last
        # one empty (9 label edges); the others as without padding.
        pad = res.pop('pad')[0]
        assert len(pad) == 4 and pad[3]['label_index'].numel() == \
            (4 if rank == 0 else 0)
        for a, b in zip(pad, res['plain'][0]):
            assert torch.equal(a['label_index'], b['label_index'])
        for name, other in (('prefetch', 'plain'), ('workers', 'plain_pos')):
            ours, theirs = res[name][0], res[other][0]
            assert len(ours) == len(theirs) == 3
            for a, b in zip(ours, theirs):
                for key in a:
                    assert torch.equal(a[key], b[key]), (name, key)
            # Filled from pre-sampled link batches, and used:
            assert res[name][1] > 0 and res[name][2] > 0, name
            assert res[other][1] == res[other][2] == 0
        for name, (batches, _, _) in res.items():
            for b in batches:
                assert torch.equal(b['x'], data.x[b['n_id']])
                assert torch.equal(b['edge_attr'],
                                   data.edge_attr[b['e_id']]), name
        assert res['bidirectional'][2] > 0
        for b in res['plain'][0]:
            # One machine, given the same label edges, samples the same
            # edges, with the same attributes:
            (one, ) = HybridLinkNeighborLoader(
                data, FULL, edge_label_index=b['label_index'],
                batch_size=b['label_index'].size(1), device='cpu')
            ref = torch.stack([one.n_id[one.edge_index[0]],
                               one.n_id[one.edge_index[1]], one.e_id])
            mine = dict(zip(map(tuple, b['edge'].t().tolist()),
                            b['edge_attr']))
            theirs = dict(zip(map(tuple, ref.t().tolist()), one.edge_attr))
            assert mine.keys() == theirs.keys()
            for key, value in mine.items():
                assert torch.equal(value, theirs[key])


def _hetero_worker(rank, world_size, out_dir):
    data = random_hetero_graph(3)
    edges = data[WRITES].edge_index[:, rank * 10:rank * 10 + 10]
    stores = open_stores(out_dir)
    out, cached = [], []
    # The same batches with a prefetch thread and both caches:
    for data_, kwargs, into in (
            (stores, {}, out),
            (out_dir, dict(prefetch=1, cache_size=20, edge_cache_size=60),
             cached)):
        loader = HybridLinkNeighborLoader(
            data_, {et: FULL for et in data.edge_types},
            edge_label_index=(WRITES, edges), neg_sampling='binary',
            batch_size=BATCH, device='cpu', seed=1, **kwargs)
        for b in loader:
            item = {'label_index': torch.stack([
                b['author'].n_id[b[WRITES].edge_label_index[0]],
                b['paper'].n_id[b[WRITES].edge_label_index[1]]]),
                'label': b[WRITES].edge_label}
            for t in data.node_types:
                item[t] = (b[t].n_id, b[t].x)
            for et in data.edge_types:
                item[et] = b[et].e_id if 'e_id' in b[et] else \
                    torch.empty(0, dtype=torch.long)
                item[et, 'attr'] = b[et].get('edge_attr')
            into.append(item)
    stats = loader.stats()['batches']
    cached.append(sum(s['cached_rows'] + s['cached_edge_rows']
                      for s in stats))
    nodes = HybridNeighborLoader(stores, {et: FULL for et in data.edge_types},
                                 input_nodes=('paper', torch.arange(rank, 30,
                                                                    3)),
                                 batch_size=5, device='cpu')
    return out, [(b['paper'].batch_size, {
        t: b[t].n_id for t in data.node_types}) for b in nodes], cached


def test_hetero_link_batches_equal_one_machine(tmp_path):
    data = random_hetero_graph(3)
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    out = run_workers(_hetero_worker, 2, args=(str(info.out_dir), ),
                      timeout=120)
    for rank, (batches, node_batches, cached) in enumerate(out):
        assert cached.pop() > 0  # Cache hits.
        assert len(cached) == len(batches)
        for a, b in zip(cached, batches):
            assert a.keys() == b.keys()
            for key in a:
                x, y = a[key], b[key]
                if isinstance(x, tuple):
                    assert all(torch.equal(u, v) for u, v in zip(x, y))
                else:
                    assert (x is None and y is None) or torch.equal(x, y)
        # HybridNeighborLoader over the stores: one machine's nodes.
        ref = list(HybridNeighborLoader(
            data, {et: FULL for et in data.edge_types},
            input_nodes=('paper', torch.arange(rank, 30, 3)), batch_size=5,
            device='cpu'))
        assert len(node_batches) == len(ref) == 2
        for (size, n_ids), one in zip(node_batches, ref):
            assert size == one['paper'].batch_size
            for t in data.node_types:
                assert torch.equal(n_ids[t].sort().values,
                                   one[t].n_id.sort().values)
        assert len(batches) == 3  # 10 label edges in batches of 4.
        for b in batches:
            n = b['label_index'].size(1)
            pos = n // 2
            assert b['label'].tolist() == [1.0] * pos + [0.0] * pos
            assert int(b['label_index'][0].max()) < data['author'].num_nodes
            assert int(b['label_index'][1].max()) < data['paper'].num_nodes
            (one, ) = HybridLinkNeighborLoader(
                data, {et: FULL for et in data.edge_types},
                edge_label_index=(WRITES, b['label_index']), batch_size=n,
                device='cpu')
            for t in data.node_types:
                n_id, x = b[t]
                assert torch.equal(n_id.sort().values,
                                   one[t].n_id.sort().values), t
                assert torch.equal(x, data[t].x[n_id])
            for et in data.edge_types:
                ref = one[et].e_id if 'e_id' in one[et] else \
                    torch.empty(0, dtype=torch.long)
                assert torch.equal(b[et].sort().values,
                                   ref.sort().values), et
                # Edge attributes gathered across machines:
                assert torch.equal(b[et, 'attr'], data[et].edge_attr[b[et]])


def _temporal_worker(rank, world_size, out_dir):
    data = temporal_graph(4)
    edges = data.edge_index[:, rank * 8:rank * 8 + 8]
    label_time = data.time[edges[1]] + 3
    out = []
    for neg in (None, 'binary'):
        loader = HybridLinkNeighborLoader(
            out_dir, FULL, edge_label_index=edges,
            edge_label_time=label_time, time_attr='time', neg_sampling=neg,
            batch_size=BATCH, device='cpu', seed=2)
        out.append([(b.n_id, b.batch, b.n_id[b.edge_label_index],
                     b.edge_label_time, b.e_id, b.num_sampled_nodes[0],
                     b.input_id.numel()) for b in loader])
    return edges, label_time, out


def test_temporal_link_batches(tmp_path):
    data = temporal_graph(4)
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    out = run_workers(_temporal_worker, 2, args=(str(info.out_dir), ),
                      timeout=120)
    for edges, label_time, (plain, with_neg) in out:
        ref = list(HybridLinkNeighborLoader(
            data, FULL, edge_label_index=edges, edge_label_time=label_time,
            time_attr='time', batch_size=BATCH, device='cpu'))
        assert len(plain) == len(with_neg) == len(ref) == 2
        for (n_id, batch, label_index, _, e_id, _, _), one in zip(plain,
                                                                  ref):
            assert torch.equal(n_id, one.n_id)
            assert torch.equal(batch, one.batch)
            assert torch.equal(e_id, one.e_id)
            assert torch.equal(label_index, one.n_id[one.edge_label_index])
        for n_id, batch, label_index, time, _, num_seeds, num_pos in \
                plain + with_neg:
            # No sampled node later than its label edge's time:
            assert bool((data.time[n_id[num_seeds:]]
                         <= time[batch[num_seeds:]]).all())
        for _, _, label_index, time, _, _, num_pos in with_neg:
            # Nor any negative:
            assert label_index.size(1) == 2 * num_pos
            assert bool((data.time[label_index[:, num_pos:]]
                         <= time[num_pos:]).all())


def _hetero_temporal_worker(rank, world_size, out_dir):
    data = temporal_hetero_graph(5)
    edges = data[B_TO_A].edge_index[:, rank * 6:rank * 6 + 6]
    label_time = data['a'].time[edges[1]] + 2
    out = []
    for neg in (None, 'binary'):
        loader = HybridLinkNeighborLoader(
            out_dir, {et: FULL for et in data.edge_types},
            edge_label_index=(B_TO_A, edges), edge_label_time=label_time,
            time_attr='time', neg_sampling=neg, batch_size=3, device='cpu',
            seed=3)
        out.append([({t: (b[t].n_id, b[t].batch, b[t].num_sampled_nodes[0])
                      for t in data.node_types},
                     b[B_TO_A].edge_label_time) for b in loader])
    return edges, label_time, out


def test_hetero_temporal_link_batches(tmp_path):
    data = temporal_hetero_graph(5)
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    out = run_workers(_hetero_temporal_worker, 2,
                      args=(str(info.out_dir), ), timeout=120)
    fanouts = {et: FULL for et in data.edge_types}
    for edges, label_time, (plain, with_neg) in out:
        ref = list(HybridLinkNeighborLoader(
            data, fanouts, edge_label_index=(B_TO_A, edges),
            edge_label_time=label_time, time_attr='time', batch_size=3,
            device='cpu'))
        assert len(plain) == len(with_neg) == len(ref) == 2
        for (ours, _), one in zip(plain, ref):
            for t in data.node_types:
                assert torch.equal(ours[t][0], one[t].n_id), t
                assert torch.equal(ours[t][1], one[t].batch), t
        for ours, time in plain + with_neg:
            for t, (n_id, batch, num_seeds) in ours.items():
                # No sampled node later than its label edge's time:
                assert bool((data[t].time[n_id[num_seeds:]]
                             <= time[batch[num_seeds:]]).all()), t


def _disagree_worker(rank, world_size, out_dir, case):
    data = graph()
    edges = rank_edges(data, rank)
    kwargs = dict(edge_label_index=edges, batch_size=BATCH, device='cpu')
    if case == 'num_neighbors':
        kwargs['num_neighbors'] = FULL if rank == 0 else [-1]
    elif case == 'neg_sampling':
        kwargs.update(num_neighbors=FULL,
                      neg_sampling='binary' if rank == 0 else 'triplet')
    else:  # Rank 1's own label edges are bad.
        kwargs['num_neighbors'] = FULL
        if rank == 1:
            kwargs['edge_label_index'] = edges + NUM_NODES
    try:
        HybridLinkNeighborLoader(out_dir, **kwargs)
    except ValueError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize('case', ['num_neighbors', 'neg_sampling',
                                  'bad_edges'])
def test_ranks_that_disagree_fail_together(tmp_path, case):
    info = partition_graph(graph(), 2, tmp_path / 'p', 'random',
                           progress=False)
    out = run_workers(_disagree_worker, 2, args=(str(info.out_dir), case),
                      timeout=60, pg_timeout=20)
    assert out[0] is not None and out[1] is not None
    if case == 'bad_edges':  # Rank 1's own error, and on rank 0 named:
        assert out[0].startswith('rank 1 could not build its loader')
        assert "'edge_label_index' holds source ids outside" in out[1]
        assert out[1] in out[0]
    else:
        assert out[0] == out[1]
        assert f"disagree on {case!r}" in out[0]


def test_stores_single_process(tmp_path):
    # Without a process group: one part, the stores as PyG's interfaces.
    data = graph()
    info = partition_graph(data, 1, tmp_path / 'p', 'random',
                           progress=False)
    fs, gs = open_stores(str(info.out_dir))
    assert isinstance(fs, PartitionFeatureStore)
    assert isinstance(gs, PartitionGraphStore)
    ids = torch.tensor([5, 0, 59, 5])
    assert torch.equal(fs.get_tensor(None, 'x', index=ids), data.x[ids])
    assert fs.get_tensor_size(None, 'x') == (NUM_NODES, 3)
    (attr, ) = gs.get_all_edge_attrs()
    assert attr.size == (NUM_NODES, NUM_NODES)
    row, col = gs.get_edge_index(None, 'coo')
    assert sorted(zip(row.tolist(), col.tolist())) == sorted(
        zip(*data.edge_index.tolist()))
    assert isinstance(gs.sampler(FULL), DistributedNeighborSampler)
    # Both samplers declare what edge sampling needs from them:
    assert isinstance(gs.sampler(FULL), SeedSampler)
    assert isinstance(HybridNeighborSampler(data, FULL, device='cpu'),
                      SeedSampler)
    assert gs.sampler(FULL).global_num_nodes == {None: NUM_NODES}
    with pytest.raises(ValueError, match=r"global node ids in \[0, 60\)"):
        fs.get_tensor(None, 'x', index=torch.tensor([60]))
    with pytest.raises(ValueError, match="1-D tensor of global node ids"):
        fs.get_tensor(None, 'x', index=None)
    with pytest.raises(ValueError, match="outside \\[0, 60\\)"):
        HybridLinkNeighborLoader((fs, gs), FULL,
                                 edge_label_index=torch.tensor([[0], [60]]))
    with pytest.raises(ValueError, match="'neg_sampling.dst_weight' must "
                       "hold one weight per vertex of the whole graph"):
        HybridLinkNeighborLoader((fs, gs), FULL, neg_sampling=NegativeSampling(
            'binary', dst_weight=torch.ones(NUM_NODES - 1)))
    with pytest.raises(ValueError, match="has no attribute 'z'"):
        fs.get_tensor(None, 'z', index=ids)
    with pytest.raises(ValueError, match=r"HybridLinkNeighborLoader on a "
                       r"partition folder: 'lookahead' applies to a graph "
                       r"held in memory"):
        HybridLinkNeighborLoader((fs, gs), FULL, lookahead=True)
    with pytest.raises(ValueError, match=r"does not take \['pin_memory'\]"):
        HybridLinkNeighborLoader((fs, gs), FULL, pin_memory=True)
    with pytest.raises(NotImplementedError, match="HybridLinkNeighborLoader "
                       "of a partitioned graph is not supported yet"):
        BottomLayerOffload(GraphSAGE(3, 8, 2), HybridLinkNeighborLoader(
            (fs, gs), [2, 2], edge_label_index=data.edge_index[:, :8],
            batch_size=4, device='cpu'))
    with pytest.raises(NotImplementedError, match='read-only'):
        fs.put_tensor(data.x, None, 'x', index=None)
    part = load_partition(info.out_dir, 0)
    with pytest.raises(TypeError, match='PartitionFeatureStore'):
        HybridLinkNeighborLoader((object(), PartitionGraphStore(part)), FULL)
