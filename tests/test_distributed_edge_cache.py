"""The per-rank cache of remote edges' attribute rows
(DistributedFeatureGather.build_edge_cache, the partition loader's
edge_cache_size): the same batches as without it, fewer edge rows exchanged,
right rows for local, cached and fetched edges, one budget over all edge
types of a heterogeneous partition."""
import pytest
import torch
from conftest import CITES, WRITES, random_graph, small_paper_graph
from multiproc import run_workers

from pyg_orch import CacheOptions, HybridNeighborLoader
from pyg_orch.distributed import load_partition, open_stores, partition_graph
from pyg_orch.features.partition_gather import DistributedFeatureGather


def graph():
    return random_graph(120, 500, seed=3, num_features=4, num_classes=3,
                        train_ratio=0.5, edge_dim=2)


def hetero_graph():
    # Two edge types with edge attributes (of different widths):
    data = small_paper_graph()
    num = data[WRITES].num_edges
    data[WRITES].edge_attr = torch.randn(
        num, 3, generator=torch.Generator().manual_seed(1))
    return data


def _epochs(loader, num_epochs, hetero=False):
    # Per epoch: the batches' ids and attributes, and the gather's stats.
    out = []
    for _ in range(num_epochs):
        batches = []
        for b in loader:
            if hetero:
                batches.append(
                    {t: (b[t].n_id, b[t].x) for t in b.node_types}
                    | {et: (b[et].e_id, b[et].edge_index, b[et].edge_attr)
                       for et in (CITES, WRITES) if 'e_id' in b[et]})
            else:
                batches.append((b.n_id, b.e_id, b.edge_index, b.x,
                                b.edge_attr))
        out.append((batches, list(loader.batch_stats)))
    return out


def _homo_worker(rank, world_size, out_dir):
    seeds = load_partition(out_dir, rank).node_ids[:30]

    def run(fanouts, policy='static', num_presample_batches=None, **kwargs):
        loader = HybridNeighborLoader(
            out_dir, fanouts, batch_size=6, input_nodes=seeds,
            shuffle=True, seed=5, device='cpu', cache=CacheOptions(
                policy=policy, num_presample_batches=num_presample_batches),
            **kwargs)
        return _epochs(loader, 2), loader.partition_batches.cached_edge_rows

    return {
        'plain': run([3, 2]),
        'cached': run([3, 2], edge_cache_size=40),
        # Under 'lru' for node rows, the edge cache is static:
        'lru': run([3, 2], edge_cache_size=40, cache_size=20,
                   policy='lru'),
        # Room for every pre-sampled remote edge, all batches pre-sampled:
        'all': run([3, 2], edge_cache_size=10**6, num_presample_batches=10),
        'full': run([-1, -1], edge_cache_size=10**6,
                    num_presample_batches=10),
    }


def test_edge_cache_homogeneous(tmp_path):
    data = graph()
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    results = run_workers(_homo_worker, 2, args=(str(info.out_dir), ),
                          timeout=60)
    for res in results:
        plain = res['plain'][0]
        for name in ('cached', 'lru', 'all'):
            for (ours, _), (ref, _) in zip(res[name][0], plain):
                assert len(ours) == len(ref) == 5
                for a, b in zip(ours, ref):  # The same batches.
                    for x, y in zip(a, b):
                        assert torch.equal(x, y), name
        for name, ((epochs, cached_edges)) in res.items():
            for batches, stats in epochs:
                for (_, e_id, _, _, edge_attr), s in zip(batches, stats):
                    assert torch.equal(edge_attr, data.edge_attr[e_id])
                    assert s['local_edge_rows'] + s['cached_edge_rows'] \
                        + s['remote_edge_rows'] == e_id.numel()
            if name == 'plain':
                assert cached_edges == 0
                continue
            assert cached_edges > 0
            if name in ('cached', 'lru'):
                assert cached_edges <= 40

        def total(name, key, epoch=None):
            epochs = res[name][0] if epoch is None else [res[name][0][epoch]]
            return sum(s[key] for _, stats in epochs for s in stats)

        assert total('plain', 'cached_edge_rows') == 0
        for name in ('cached', 'lru'):
            assert total(name, 'cached_edge_rows') > 0
            assert total(name, 'remote_edge_rows') < total(
                'plain', 'remote_edge_rows')
        # The first epoch's batches are those pre-sampled (the generator is
        # restored after), so every remote edge of them is cached; with
        # full fan-out, of the second epoch's too.
        assert total('all', 'remote_edge_rows', epoch=0) == 0
        assert total('all', 'cached_edge_rows', epoch=0) > 0
        assert total('full', 'remote_edge_rows') == 0
        assert total('full', 'cached_edge_rows', epoch=1) > 0


def _hetero_worker(rank, world_size, out_dir):
    def run(**kwargs):
        loader = HybridNeighborLoader(
            out_dir, [3, 2], batch_size=8, input_nodes=('paper', 'train_mask'),
            shuffle=True, seed=2, device='cpu', **kwargs)
        epochs = _epochs(loader, 2, hetero=True)
        per_type = {et: g.num_cached_edge_rows
                    for et, g in loader.partition_batches.gather.by_edge_type.items()}
        return epochs, loader.partition_batches.cached_edge_rows, per_type

    return run(), run(edge_cache_size=30)


def test_edge_cache_heterogeneous(tmp_path):
    data = hetero_graph()
    info = partition_graph(data, 2, tmp_path / 'h', 'random',
                           progress=False)
    results = run_workers(_hetero_worker, 2, args=(str(info.out_dir), ),
                          timeout=60)
    for (plain, none_cached, _), (cached, num_cached, per_type) in results:
        assert none_cached == 0
        assert 0 < num_cached <= 30
        assert set(per_type) == {CITES, WRITES}
        assert sum(per_type.values()) == num_cached
        for (ours, ours_stats), (ref, ref_stats) in zip(cached, plain):
            assert len(ours) == len(ref) > 0
            for a, b in zip(ours, ref):  # The same batches.
                assert a.keys() == b.keys()
                for key in a:
                    for x, y in zip(a[key], b[key]):
                        assert torch.equal(x, y), key
                for et in (CITES, WRITES):
                    if et in a:
                        e_id, _, edge_attr = a[et]
                        assert torch.equal(edge_attr,
                                           data[et].edge_attr[e_id])
            for s, r in zip(ours_stats, ref_stats):
                assert s['local_edge_rows'] == r['local_edge_rows']
                assert s['cached_edge_rows'] + s['remote_edge_rows'] == \
                    r['remote_edge_rows']
        cached_rows = sum(s['cached_edge_rows'] for _, st in cached
                          for s in st)
        remote = sum(s['remote_edge_rows'] for _, st in cached for s in st)
        remote_plain = sum(s['remote_edge_rows'] for _, st in plain
                           for s in st)
        assert cached_rows > 0 and remote < remote_plain


def _split_edges(edge_index, node_part, rank):
    # This rank's (local) edges and the others (remote), by destination.
    mine = node_part[edge_index[1]] == rank
    return mine.nonzero().view(-1), (~mine).nonzero().view(-1)


def _unit_worker(rank, world_size, out_dir, hetero_dir):
    data = graph()
    part = load_partition(out_dir, rank)
    gather = DistributedFeatureGather(part)
    dst_of = data.edge_index[1]
    local, remote = _split_edges(data.edge_index, part.node_part, rank)
    out = {}
    # Ranking with repeats: local edges are never cached, however often.
    hot, warm = remote[:5], remote[5:10]
    e_id = torch.cat([hot.repeat(3), warm, local[:4].repeat(5)])
    out['weighted'] = (
        gather.build_edge_cache(remote[10:15], dst_of[remote[10:15]], 2,
                                counts=torch.tensor([1, 9, 0, 8, 2])),
        gather.edge_cache_ids.clone(), remote[10:15][[1, 3]].sort().values)
    out['built'] = gather.build_edge_cache(e_id, dst_of[e_id], 5)
    out['ids'] = (gather.edge_cache_ids, hot.sort().values)
    out['bytes'] = gather.edge_cache_bytes
    # A mix of local, cached and fetched remote edges:
    mix = torch.stack([local[0], hot[2], remote[20], hot[0], local[1],
                       remote[21], hot[2]])
    rows = gather.gather_edges(mix, dst_of[mix])['edge_attr']
    out['mix'] = (rows, data.edge_attr[mix], gather.stats.as_dict())
    # Rank 1 asks for nothing, rank 0 only for local and cached edges:
    # both still take part (rank 0 serves rank 1's requests, if any).
    ask = torch.stack([local[2], hot[1]]) if rank == 0 else \
        torch.empty(0, dtype=torch.int64)
    if rank == 1:
        ask = torch.stack([remote[30], local[3]])
    rows = gather.gather_edges(ask, dst_of[ask])['edge_attr']
    out['sparse'] = (rows, data.edge_attr[ask], gather.stats.as_dict())
    rows = gather.gather_edges(*(([], []) if rank == 1 else
                                 (remote[:3], dst_of[remote[:3]])))
    out['empty'] = (rows['edge_attr'].shape, gather.stats.as_dict())

    # Heterogeneous: one budget over both edge types with attributes.
    hdata = hetero_graph()
    hpart = load_partition(hetero_dir, rank)
    hgather = DistributedFeatureGather(hpart)
    splits = {et: _split_edges(hdata[et].edge_index, hpart.node_part[et[-1]],
                               rank) for et in (CITES, WRITES)}
    rc, rw = splits[CITES][1], splits[WRITES][1]
    e_id = {CITES: torch.cat([rc[:4], rc[4:8]]),
            WRITES: torch.cat([rw[:2], rw[2:6]])}
    counts = {CITES: torch.tensor([10] * 4 + [5] * 4),
              WRITES: torch.tensor([20] * 2 + [1] * 4)}
    dst = {et: hdata[et].edge_index[1][e] for et, e in e_id.items()}
    out['hetero_built'] = hgather.build_edge_cache(e_id, dst, 6, counts)
    out['hetero_ids'] = {
        et: (hgather.by_edge_type[et].edge_cache_ids, want.sort().values)
        for et, want in ((CITES, rc[:4]), (WRITES, rw[:2]))}
    ask = {CITES: torch.stack([rc[0], splits[CITES][0][0], rc[9], rc[3]]),
           WRITES: torch.stack([rw[1], rw[7], splits[WRITES][0][0]])}
    rows = hgather.gather_edges(ask, {et: hdata[et].edge_index[1][e]
                                      for et, e in ask.items()})
    out['hetero_mix'] = (
        {et: (rows[et]['edge_attr'], hdata[et].edge_attr[e])
         for et, e in ask.items()}, hgather.stats.as_dict())
    return out


def test_gather_edge_cache_lookups(tmp_path):
    info = partition_graph(graph(), 2, tmp_path / 'p', 'random',
                           progress=False)
    hetero = partition_graph(hetero_graph(), 2, tmp_path / 'h', 'random',
                             progress=False)
    results = run_workers(_unit_worker, 2,
                          args=(str(info.out_dir), str(hetero.out_dir)),
                          timeout=60)
    for rank, out in enumerate(results):
        num, got, want = out['weighted']
        assert num == 2 and torch.equal(got, want)
        assert out['built'] == 5
        assert torch.equal(*out['ids'])  # The 5 hottest remote edges.
        assert out['bytes'] == 5 * 8 + 5 * 2 * 4
        rows, want, stats = out['mix']
        assert torch.equal(rows, want)
        assert (stats['local_edge_rows'], stats['cached_edge_rows'],
                stats['remote_edge_rows']) == (2, 3, 2)
        rows, want, stats = out['sparse']
        assert torch.equal(rows, want)
        assert (stats['local_edge_rows'], stats['cached_edge_rows'],
                stats['remote_edge_rows']) == ((1, 1, 0) if rank == 0 else
                                               (1, 0, 1))
        shape, stats = out['empty']
        assert shape == ((0, 2) if rank == 1 else (3, 2))
        if rank == 1:
            assert stats['cached_edge_rows'] == stats['remote_edge_rows'] \
                == stats['local_edge_rows'] == 0
        else:
            assert stats['cached_edge_rows'] == 3
        assert out['hetero_built'] == 6
        for et, (got, want) in out['hetero_ids'].items():
            assert torch.equal(got, want), et
        rows, stats = out['hetero_mix']
        for et, (got, want) in rows.items():
            assert torch.equal(got, want), et
        assert (stats['local_edge_rows'], stats['cached_edge_rows'],
                stats['remote_edge_rows']) == (2, 3, 2)


@pytest.mark.parametrize('value', [-1, 1.5, True, '3', None])
def test_bad_edge_cache_size(tmp_path, value):
    info = partition_graph(graph(), 1, tmp_path / 'p', 'contiguous',
                           progress=False)
    with pytest.raises(ValueError, match="'edge_cache_size'"):
        open_stores(str(info.out_dir), edge_cache_size=value)
    with pytest.raises(ValueError, match="'edge_cache_size'"):
        HybridNeighborLoader(str(info.out_dir), [2], batch_size=4,
                             device='cpu', edge_cache_size=value)
    gather = DistributedFeatureGather(load_partition(info.out_dir, 0))
    with pytest.raises(ValueError, match="'edge_cache_size'"):
        gather.build_edge_cache(torch.tensor([0]), torch.tensor([0]), value)


def test_edge_cache_one_part(tmp_path):
    # One part: no remote edge, nothing cached; the option is forwarded.
    data = graph()
    info = partition_graph(data, 1, tmp_path / 'p', 'contiguous',
                           progress=False)
    loader = HybridNeighborLoader(str(info.out_dir), [3, 2], batch_size=16,
                                  device='cpu', edge_cache_size=50)
    assert loader.partition_batches.edge_cache_size == 50 and loader.partition_batches.cached_edge_rows == 0
    for batch in loader:
        assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
    assert loader.partition_batches.cached_edge_rows == 0
    assert all(s['cached_edge_rows'] == s['remote_edge_rows'] == 0
               for s in loader.batch_stats)
    gather = loader.partition_batches.gather
    with pytest.raises(ValueError, match="same length"):
        gather.build_edge_cache(torch.tensor([0, 1]), torch.tensor([0]), 1)
    with pytest.raises(ValueError, match="'counts'"):
        gather.build_edge_cache(torch.tensor([0]), torch.tensor([0]), 1,
                                counts=torch.tensor([-1]))
