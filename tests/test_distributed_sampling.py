"""Collective sampling and feature gathering across ranks
(pyg_orch.sampling.collective / features): each rank holds one part; with
full fan-out the batches equal the single-machine sampler's exactly."""
import time

import pytest
import torch
from conftest import (
    paper_hetero_graph,
    random_graph,
    small_paper_graph,
    small_paper_partition,
)
from multiproc import run_workers

from pyg_orch.distributed import load_partition, partition_graph
from pyg_orch.features.partition_gather import DistributedFeatureGather
from pyg_orch.partition.partitioning import metis_available
from pyg_orch.sampling.collective import DistributedNeighborSampler
from pyg_orch.sampling.multi_hop import sample_multi_hop
from pyg_orch.topology.graph import GraphTopology

FANOUTS = [-1, -1]



def _stores_loader(out_dir, num_neighbors, batch_size=1, device='cpu',
                   **placement):
    # The stores' spelling: the placement goes to open_stores().
    from pyg_orch import HybridNeighborLoader
    from pyg_orch.distributed import open_stores
    return HybridNeighborLoader(open_stores(out_dir, device=device,
                                            **placement),
                                num_neighbors, batch_size=batch_size,
                                device=device)

def graph():
    return random_graph(120, 500, seed=3, num_features=4, num_classes=3,
                        train_ratio=0.5, edge_dim=2)


def seeds_of(rank, step):
    if rank == 1 and step == 1:
        return torch.empty(0, dtype=torch.int64)  # An empty seed set.
    gen = torch.Generator().manual_seed(100 * rank + step)
    return torch.randint(0, 120, (6, ), generator=gen)


def _sample_worker(rank, world_size, out_dir, fanouts, num_steps):
    part = load_partition(out_dir, rank)
    sampler = DistributedNeighborSampler(
        part, fanouts, generator=torch.Generator().manual_seed(rank))
    gather = DistributedFeatureGather(part)
    results = []
    for step in range(num_steps):
        out = sampler.sample_from_nodes(seeds_of(rank, step))
        feats = gather.gather(out.node)
        edge_feats = gather.gather_edges(out.edge, out.node[out.col])
        results.append((out.node, out.row, out.col, out.edge,
                        out.num_sampled_nodes, out.num_sampled_edges,
                        feats['x'], feats['y'], vars(sampler.stats).copy(),
                        gather.stats.as_dict(), edge_feats['edge_attr']))
    return results


def _reference(data, fanouts, seeds):
    topo = GraphTopology.from_data(data)
    out = sample_multi_hop(topo, {None: fanouts}, {None: seeds})
    return (out.node[None], out.row[None], out.col[None], out.edge[None],
            out.num_sampled_nodes[None], out.num_sampled_edges[None])


@pytest.mark.parametrize('world_size,method', [
    (2, 'random'), (3, 'contiguous'),
    pytest.param(2, 'metis', marks=pytest.mark.skipif(
        not metis_available(), reason='needs pymetis'))])
def test_full_fanout_equals_single_machine(tmp_path, world_size, method):
    data = graph()
    info = partition_graph(data, world_size, tmp_path / 'p', method,
                           progress=False)
    results = run_workers(_sample_worker, world_size,
                          args=(str(info.out_dir), FANOUTS, 3), timeout=60)
    remote = 0
    for rank, steps in enumerate(results):
        for step, res in enumerate(steps):
            node, row, col, edge, nsn, nse, x, y, sstats, gstats = res[:10]
            assert torch.equal(res[10], data.edge_attr[edge])
            ref = _reference(data, FANOUTS, seeds_of(rank, step))
            # Exactly the same batch, order included:
            for a, b in zip((node, row, col, edge), ref[:4]):
                assert torch.equal(a, b)
            assert nsn == ref[4] and nse == ref[5]
            assert torch.equal(x, data.x[node])
            assert torch.equal(y, data.y[node])
            assert gstats['local_rows'] + gstats['remote_rows'] \
                == node.numel()
            remote += sstats['remote_requests']
    assert remote > 0  # Some vertices really were sampled elsewhere.


def test_fanout_invariants(tmp_path):
    data = graph()
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    fanouts = [3, 2]
    results = run_workers(_sample_worker, 2,
                          args=(str(info.out_dir), fanouts, 3), timeout=60)
    src, dst = data.edge_index
    indeg = torch.bincount(dst, minlength=data.num_nodes)
    for rank, steps in enumerate(results):
        for step, res in enumerate(steps):
            node, row, col, edge, nsn, nse, x, y = res[:8]
            seeds = seeds_of(rank, step)
            # Seeds first (duplicates kept), then no duplicate node:
            assert torch.equal(node[:seeds.numel()], seeds)
            rest = node[seeds.numel():]
            assert rest.unique().numel() == rest.numel()
            assert not bool(torch.isin(rest, seeds).any())
            # Every edge exists with its edge id:
            assert torch.equal(src[edge], node[row])
            assert torch.equal(dst[edge], node[col])
            assert edge.unique().numel() == edge.numel()
            # Per-hop fan-out bound, and in-neighbors of the right hop:
            assert sum(nsn) == node.numel() and sum(nse) == edge.numel()
            offset = 0
            for hop, k in enumerate(fanouts):
                c = col[offset:offset + nse[hop]]
                lo = sum(nsn[:hop])
                assert bool(((c >= lo) & (c < lo + nsn[hop])).all())
                # Exactly min(k, in-degree) in-edges per frontier vertex:
                frontier = node[lo:lo + nsn[hop]]
                got = torch.bincount(c - lo, minlength=nsn[hop])
                assert torch.equal(got, indeg[frontier].clamp(max=k))
                offset += nse[hop]
            assert torch.equal(x, data.x[node])


def _cache_worker(rank, world_size, out_dir):
    part = load_partition(out_dir, rank)
    sampler = DistributedNeighborSampler(
        part, [4, 4], generator=torch.Generator().manual_seed(rank))
    gather = DistributedFeatureGather(part)
    seeds = seeds_of(rank, 0)
    # Pre-sample to count accesses, then cache the hottest remote rows:
    nodes = [sampler.sample_from_nodes(seeds).node for _ in range(3)]
    counts = gather.count_accesses(nodes, part.node_part.numel())
    cached = gather.build_cache(counts, 40)
    out = sampler.sample_from_nodes(seeds)
    feats = gather.gather(out.node)
    return (cached, out.node, feats['x'], gather.stats.as_dict(),
            gather.cache_bytes)


def test_cache_serves_repeated_remote_rows(tmp_path):
    data = graph()
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    results = run_workers(_cache_worker, 2, args=(str(info.out_dir), ),
                          timeout=60)
    for cached, node, x, stats, cache_bytes in results:
        assert 0 < cached <= 40
        assert cache_bytes > 0
        assert stats['cached_rows'] > 0
        assert stats['local_rows'] + stats['cached_rows'] \
            + stats['remote_rows'] == node.numel()
        assert torch.equal(x, data.x[node])


def _dying_worker(rank, world_size, out_dir):
    part = load_partition(out_dir, rank)
    sampler = DistributedNeighborSampler(part, [2, 2])
    sampler.sample_from_nodes(seeds_of(rank, 0))
    if rank == 1:
        raise RuntimeError('rank 1 fails on purpose')
    start = time.monotonic()
    try:
        sampler.sample_from_nodes(seeds_of(rank, 1))
    except Exception as exc:  # The lost rank is noticed, no hang.
        return ('raised', type(exc).__name__, time.monotonic() - start)
    return ('returned', None, time.monotonic() - start)


def test_lost_rank_raises_not_hangs(tmp_path):
    data = graph()
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    start = time.monotonic()
    results = run_workers(_dying_worker, 2, args=(str(info.out_dir), ),
                          timeout=60, pg_timeout=5.0,
                          return_exceptions=True)
    assert isinstance(results[1], RuntimeError)
    status, _, seconds = results[0]
    assert status == 'raised'
    assert seconds < 15.0
    assert time.monotonic() - start < 40.0


def test_bad_arguments(tmp_path):
    data = graph()
    info = partition_graph(data, 1, tmp_path / 'p', 'contiguous',
                           progress=False)
    part = load_partition(info.out_dir, 0)
    # One part, no process group: the sampler works alone and equals the
    # single-machine sampler.
    sampler = DistributedNeighborSampler(part, [-1, -1])
    seeds = torch.tensor([3, 5, 3])
    out = sampler.sample_from_nodes(seeds)
    ref = _reference(data, [-1, -1], seeds)
    for a, b in zip((out.node, out.row, out.col, out.edge), ref[:4]):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match='num_neighbors'):
        DistributedNeighborSampler(part, [2, -3])
    with pytest.raises(ValueError, match='seeds'):
        sampler.sample_from_nodes(torch.tensor([500]))
    with pytest.raises(ValueError, match="'replace' must be a bool"):
        DistributedNeighborSampler(part, [2], replace='yes')
    with pytest.raises(ValueError, match="'disjoint' must be a bool"):
        DistributedNeighborSampler(part, [2], disjoint=None)
    with pytest.raises(ValueError, match='no node attribute'):
        DistributedFeatureGather(part, keys=['nope'])
    hetero = partition_graph(paper_hetero_graph(), 1, tmp_path / 'h',
                             'contiguous', progress=False)
    hpart = load_partition(hetero.out_dir, 0)
    with pytest.raises(ValueError, match='edge types'):
        DistributedNeighborSampler(hpart, {('a', 'to', 'b'): [2]})
    with pytest.raises(ValueError, match='per edge type'):
        DistributedNeighborSampler(part, {('a', 'to', 'b'): [2]})
    with pytest.raises(ValueError, match='node type'):
        DistributedNeighborSampler(hpart, [2]).sample_from_nodes(
            torch.tensor([0]))
    with pytest.raises(ValueError, match='node type'):
        DistributedNeighborSampler(hpart, [2]).sample_from_nodes(
            {'venue': torch.tensor([0])})
    with pytest.raises(ValueError, match='no node type'):
        DistributedFeatureGather(hpart, keys=['nope'])
    with pytest.raises(ValueError, match='dictionary'):
        DistributedFeatureGather(hpart).gather(torch.tensor([0]))
    with pytest.raises(ValueError, match='no edge attribute'):
        DistributedFeatureGather(part, edge_keys=['nope'])
    gather = DistributedFeatureGather(part)
    with pytest.raises(ValueError, match='same'):
        gather.gather_edges(torch.tensor([0, 1]), torch.tensor([0]))
    with pytest.raises(ValueError, match='policy'):
        DistributedFeatureGather(part, policy='fifo')
    with pytest.raises(ValueError, match='cache_size'):
        DistributedFeatureGather(part, policy='lru', cache_size=-1)


def test_bad_sampling_device(tmp_path):
    from pyg_orch import HybridNeighborLoader
    info = partition_graph(graph(), 1, tmp_path / 'p', 'contiguous',
                           progress=False)
    part = load_partition(info.out_dir, 0)
    with pytest.raises(ValueError, match="'device' must be a torch.device"):
        DistributedNeighborSampler(part, [2], device='tpu:0')
    with pytest.raises(ValueError, match="'device' must be a CPU or CUDA"):
        DistributedNeighborSampler(part, [2], device='meta')
    with pytest.raises(ValueError, match="'generator' must be a torch"):
        DistributedNeighborSampler(part, [2], generator=7)
    for loader in (_stores_loader, HybridNeighborLoader):
        with pytest.raises(ValueError, match="'sampling_device' must be"):
            loader(str(info.out_dir), [2], batch_size=4, device='cpu',
                   sampling_device='tpu:0')
        if not torch.cuda.is_available():
            with pytest.raises(ValueError,
                               match="'sampling_device'.*not available"):
                loader(str(info.out_dir), [2], batch_size=4, device='cpu',
                       sampling_device='cuda')


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_cuda_sampling_one_part(tmp_path):
    # One part, no process group: the sampler alone, on the GPU.
    from pyg_orch import HybridNeighborLoader
    data = graph()
    info = partition_graph(data, 1, tmp_path / 'p', 'contiguous',
                           progress=False)
    part = load_partition(info.out_dir, 0)
    cuda = torch.device('cuda', torch.cuda.current_device())
    with pytest.raises(ValueError, match="'generator'"):
        DistributedNeighborSampler(part, [2], device='cuda',
                                   generator=torch.Generator())
    with pytest.raises(ValueError, match="'generator'"):
        DistributedNeighborSampler(part, [2], device='cpu',
                                   generator=torch.Generator(device=cuda))
    sampler = DistributedNeighborSampler(
        part, FANOUTS, device='cuda',
        generator=torch.Generator(device=cuda).manual_seed(0))
    assert sampler.device == cuda
    assert part.csc.row.device.type == 'cpu'  # Copied, not moved.
    for step in range(2):
        seeds = seeds_of(0, step)
        out = sampler.sample_from_nodes(seeds)
        ref = _reference(data, FANOUTS, seeds)
        for a, b in zip((out.node, out.row, out.col, out.edge), ref[:4]):
            assert a.device == cuda
            assert torch.equal(a.cpu(), b)
        assert out.num_sampled_nodes == ref[4]
        assert out.num_sampled_edges == ref[5]
    # Sampled on the GPU, delivered on the CPU:
    seeds = torch.arange(0, 120, 7)
    kw = dict(batch_size=5, input_nodes=seeds, device='cpu')
    ours = list(HybridNeighborLoader(info.out_dir, FANOUTS,
                                     sampling_device='cuda', **kw))
    ref = list(HybridNeighborLoader(info.out_dir, FANOUTS, **kw))
    assert len(ours) == len(ref) > 0
    for a, b in zip(ours, ref):
        for key in ('n_id', 'e_id', 'edge_index', 'x', 'y', 'edge_attr'):
            assert a[key].device.type == 'cpu', key
            assert torch.equal(a[key], b[key]), key


def _sampling_device_worker(rank, world_size, out_dir):
    from pyg_orch import HybridNeighborLoader
    out = []
    for device in (None, 'cpu', torch.device('cpu')):
        loader = HybridNeighborLoader(out_dir, [3, 2], batch_size=5,
                                      shuffle=True, seed=5, device='cpu',
                                      sampling_device=device)
        assert loader.node_sampler.device == torch.device('cpu')
        out.append([(b.n_id, b.e_id, b.edge_index, b.x) for b in loader])
    return out


def test_sampling_device_cpu_is_the_default(tmp_path):
    info = partition_graph(graph(), 2, tmp_path / 'p', 'random',
                           progress=False)
    results = run_workers(_sampling_device_worker, 2,
                          args=(str(info.out_dir), ), timeout=60)
    for default, *explicit in results:
        assert len(default) > 0
        for batches in explicit:
            assert len(batches) == len(default)
            for a, b in zip(batches, default):
                for x, y in zip(a, b):
                    assert torch.equal(x, y)


def test_bad_feature_device(tmp_path):
    from pyg_orch import HybridNeighborLoader
    info = partition_graph(graph(), 1, tmp_path / 'p', 'contiguous',
                           progress=False)
    part = load_partition(info.out_dir, 0)
    hetero = partition_graph(paper_hetero_graph(num_papers=30,
                                                num_authors=20),
                             1, tmp_path / 'h', 'contiguous', progress=False)
    hpart = load_partition(hetero.out_dir, 0)
    for p in (part, hpart):
        with pytest.raises(ValueError,
                           match="'feature_device' must be a torch.device"):
            DistributedFeatureGather(p, feature_device='tpu:0')
        with pytest.raises(ValueError,
                           match="'feature_device' must be a CPU or CUDA"):
            DistributedFeatureGather(p, feature_device='meta')
    for loader in (_stores_loader, HybridNeighborLoader):
        with pytest.raises(ValueError, match="'feature_device' must be"):
            loader(str(info.out_dir), [2], batch_size=4, device='cpu',
                   feature_device='tpu:0')
        if not torch.cuda.is_available():
            with pytest.raises(ValueError,
                               match="'feature_device'.*not available"):
                loader(str(info.out_dir), [2], batch_size=4, device='cpu',
                       feature_device='cuda')


def _feature_device_worker(rank, world_size, out_dir, hetero_dir):
    from multiproc import check_hetero_folder_loader

    from pyg_orch import CacheOptions, HybridNeighborLoader
    out = []
    for policy in ('static', 'lru'):
        runs = []
        for device in (None, torch.device('cpu')):
            loader = HybridNeighborLoader(
                out_dir, [3, 2], batch_size=5, shuffle=True, seed=5,
                cache_size=15, cache=CacheOptions(policy=policy),
                feature_device=device, device='cpu')
            assert loader.partition_batches.gather.feature_device == torch.device('cpu')
            batches, stats = [], []
            for _ in range(2):  # The second epoch reads the cache.
                batches += [(b.n_id, b.e_id, b.edge_index, b.x, b.y,
                             b.edge_attr) for b in loader]
                stats += loader.batch_stats
            runs.append((batches, stats))
        out.append(runs)
    loader, count = check_hetero_folder_loader(
        hetero_dir, rank, 'cpu', [-1, -1], cache_size=20,
        feature_device='cpu')
    assert loader.partition_batches.gather.feature_device == torch.device('cpu')
    return out, count


def test_feature_device_cpu_is_the_default(tmp_path):
    info = partition_graph(graph(), 2, tmp_path / 'p', 'random',
                           progress=False)
    hetero = small_paper_partition(tmp_path / 'h')
    results = run_workers(_feature_device_worker, 2,
                          args=(str(info.out_dir), str(hetero.out_dir)),
                          timeout=90)
    for runs_per_policy, hetero_batches in results:
        assert hetero_batches > 0
        for (default, default_stats), *explicit in runs_per_policy:
            assert len(default) > 0
            assert sum(s['cached_rows'] for s in default_stats) > 0
            for batches, stats in explicit:
                assert stats == default_stats  # Rows from the same places.
                assert len(batches) == len(default)
                for a, b in zip(batches, default):
                    for x, y in zip(a, b):
                        assert torch.equal(x, y)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_cuda_features_one_part(tmp_path):
    # One part, no process group: the gather alone, on the GPU.
    data = graph()
    info = partition_graph(data, 1, tmp_path / 'p', 'contiguous',
                           progress=False)
    part = load_partition(info.out_dir, 0)
    cuda = torch.device('cuda', torch.cuda.current_device())
    ids = torch.tensor([5, 0, 119, 5, 42])
    e_id = torch.tensor([3, 499, 0, 17])
    dst = data.edge_index[1, e_id]
    for policy in ('static', 'lru'):
        for device in (cuda, torch.device('cpu')):
            gather = DistributedFeatureGather(part, policy=policy,
                                              cache_size=10, device=device,
                                              feature_device='cuda')
            assert gather.feature_device == cuda
            assert gather.cache_slot.device == cuda
            assert gather.last_used.device == cuda
            assert part.x.device.type == 'cpu'  # Copied, not moved.
            assert gather.build_cache(torch.ones(120, dtype=torch.int64),
                                      10) == 0  # Nothing is remote.
            for n_id in (ids, ids.to(cuda)):  # Ids from anywhere.
                feats = gather.gather(n_id)
                assert feats['x'].device == device
                assert torch.equal(feats['x'].cpu(), data.x[ids])
                assert torch.equal(feats['y'].cpu(), data.y[ids])
                assert gather.stats.local_rows == ids.numel()
            edges = gather.gather_edges(e_id.to(cuda), dst.to(cuda))
            assert edges['edge_attr'].device == device
            assert torch.equal(edges['edge_attr'].cpu(),
                               data.edge_attr[e_id])
            with pytest.raises(RuntimeError, match='in-edge'):
                gather.gather_edges(torch.tensor([500]), torch.tensor([0]))


def _loader_worker(rank, world_size, out_dir, even, cache_size,
                   policy='static'):
    from pyg_orch import CacheOptions, HybridNeighborLoader
    # Rank 0 has more seeds than rank 1: equal batch counts all the same.
    part = load_partition(out_dir, rank)
    seeds = part.node_ids[:20 if rank == 0 else 7]
    loader = HybridNeighborLoader(out_dir, FANOUTS, batch_size=5,
                                  input_nodes=seeds, even=even,
                                  cache_size=cache_size, device='cpu',
                                  cache=CacheOptions(policy=policy))
    # By default, the part's training vertices:
    default = HybridNeighborLoader(out_dir, [2], batch_size=4, device='cpu')
    assert torch.equal(default.partition_batches.input_nodes,
                       part.node_ids[part.node_attrs['train_mask']])
    assert len(default) == min(
        (int(load_partition(out_dir, r).node_attrs['train_mask'].sum())
         + 3) // 4 for r in range(world_size))
    out = []
    for epoch in range(2):
        out.append([(b.n_id, b.e_id, b.edge_index, b.x, b.y, b.batch_size,
                     b.edge_attr) for b in loader])
    return len(loader), out, loader.batch_stats


@pytest.mark.parametrize('even,num_batches,policy', [
    ('min', 2, 'static'), ('pad', 4, 'static'), ('min', 2, 'lru')])
def test_loader_batches(tmp_path, even, num_batches, policy):
    data = graph()
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    results = run_workers(_loader_worker, 2,
                          args=(str(info.out_dir), even, 30, policy),
                          timeout=60)
    for rank, (length, epochs, stats) in enumerate(results):
        assert length == num_batches
        cached = 0
        for epoch, batches in enumerate(epochs):
            assert len(batches) == num_batches
            for n_id, e_id, edge_index, x, y, batch_size, ea in batches:
                assert torch.equal(ea, data.edge_attr[e_id])
                ref = _reference(data, FANOUTS, n_id[:batch_size])
                assert torch.equal(n_id, ref[0])
                assert torch.equal(edge_index[0], ref[1])
                assert torch.equal(edge_index[1], ref[2])
                assert torch.equal(e_id, ref[3])
                assert torch.equal(x, data.x[n_id])
                assert torch.equal(y, data.y[n_id])
        sizes = [b[5] for b in epochs[0]]
        if even == 'pad' and rank == 1:
            assert sizes == [5, 2, 0, 0]  # Padded with empty batches.
        cached = sum(s['cached_rows'] for s in stats)
        assert cached > 0


def _stalled_worker(rank, world_size, out_dir):
    part = load_partition(out_dir, rank)
    sampler = DistributedNeighborSampler(part, [2, 2])
    if rank == 1:  # Alive but never joins the collective.
        time.sleep(8.0)
        return ('slept', None, 0.0)
    start = time.monotonic()
    try:
        sampler.sample_from_nodes(seeds_of(rank, 0))
    except Exception as exc:
        return ('raised', type(exc).__name__, time.monotonic() - start)
    return ('returned', None, time.monotonic() - start)


def test_stalled_rank_times_out(tmp_path):
    data = graph()
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    results = run_workers(_stalled_worker, 2, args=(str(info.out_dir), ),
                          timeout=60, pg_timeout=2.0,
                          return_exceptions=True)
    status, _, seconds = results[0]
    assert status == 'raised'  # After the process group's timeout.
    assert 1.0 < seconds < 7.0


def _lru_worker(rank, world_size, out_dir, capacity):
    part = load_partition(out_dir, rank)
    sampler = DistributedNeighborSampler(
        part, [3, 3], generator=torch.Generator().manual_seed(rank))
    gather = DistributedFeatureGather(part, policy='lru',
                                      cache_size=capacity)
    out = []
    for step in range(4):
        node = sampler.sample_from_nodes(seeds_of(rank, step % 2)).node
        for _ in range(2):  # The same rows twice in a row.
            feats = gather.gather(node)
            out.append((node, feats['x'], feats['y'],
                        gather.stats.as_dict(),
                        int((gather.cache_slot >= 0).sum())))
    return out


@pytest.mark.parametrize('capacity', [1000, 5])
def test_lru_cache(tmp_path, capacity):
    data = graph()
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    results = run_workers(_lru_worker, 2,
                          args=(str(info.out_dir), capacity), timeout=60)
    for steps in results:
        for i, (node, x, y, stats, num_cached) in enumerate(steps):
            assert torch.equal(x, data.x[node])
            assert torch.equal(y, data.y[node])
            assert num_cached <= capacity
            assert stats['local_rows'] + stats['cached_rows'] \
                + stats['remote_rows'] == node.numel()
            if capacity == 1000 and i % 2 == 1:
                # Everything remote was kept by the first read:
                assert stats['remote_rows'] == 0
                assert stats['cached_rows'] == steps[i - 1][3][
                    'remote_rows'] + steps[i - 1][3]['cached_rows']
        assert sum(s[3]['cached_rows'] for s in steps) > 0


def test_loader_equals_hybrid_neighbor_loader(tmp_path):
    from pyg_orch import HybridNeighborLoader
    data = graph()
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    results = run_workers(_loader_worker, 2,
                          args=(str(info.out_dir), 'pad', 0), timeout=60)
    for rank, (_, epochs, _) in enumerate(results):
        seeds = load_partition(info.out_dir, rank).node_ids[
            :20 if rank == 0 else 7]
        ref = list(HybridNeighborLoader(data, FANOUTS, batch_size=5,
                                        input_nodes=seeds, shuffle=False,
                                        device='cpu'))
        ours = [b for b in epochs[0] if b[5] > 0]
        assert len(ours) == len(ref)
        for (n_id, e_id, edge_index, x, y, bs, ea), b in zip(ours, ref):
            assert bs == b.batch_size
            assert torch.equal(n_id, b.n_id)
            assert torch.equal(e_id, b.e_id)
            assert torch.equal(edge_index, b.edge_index)
            assert torch.equal(x, b.x) and torch.equal(y, b.y)
            assert torch.equal(ea, b.edge_attr)


# Heterogeneous partitions ####################################################

HETERO_SEEDS = {0: torch.arange(0, 40, 3), 1: torch.arange(100, 130, 2)}


def _hetero_worker(rank, world_size, out_dir, fanouts):
    part = load_partition(out_dir, rank)
    sampler = DistributedNeighborSampler(part, fanouts)
    gather = DistributedFeatureGather(part)
    out = sampler.sample_from_nodes(('paper', HETERO_SEEDS[rank]))
    feats = gather.gather(out.node)
    dst = {et: out.node[et[-1]][out.col[et]] for et in out.edge}
    edge_feats = gather.gather_edges(out.edge, dst)
    return (out.node, out.row, out.col, out.edge, out.num_sampled_nodes,
            out.num_sampled_edges, feats, edge_feats,
            vars(sampler.stats).copy())


def _hetero_reference(data, fanouts, seeds):
    from pyg_orch import HybridNeighborLoader
    loader = HybridNeighborLoader(data, fanouts, batch_size=seeds.numel(),
                                  input_nodes=('paper', seeds),
                                  device='cpu')
    (batch, ) = list(loader)
    return batch


def _edge_triples(n_id_src, n_id_dst, row, col, e_id):
    return sorted(zip(n_id_src[row].tolist(), n_id_dst[col].tolist(),
                      e_id.tolist()))


@pytest.mark.parametrize('method', ['random', 'contiguous'])
def test_hetero_full_fanout_equals_single_machine(tmp_path, method):
    data = small_paper_graph()
    info = small_paper_partition(tmp_path / 'h', method)
    results = run_workers(_hetero_worker, 2,
                          args=(str(info.out_dir), FANOUTS), timeout=60)
    remote = 0
    for rank, res in enumerate(results):
        node, row, col, edge, nsn, nse, feats, edge_feats, stats = res
        ref = _hetero_reference(data, FANOUTS, HETERO_SEEDS[rank])
        for t in data.node_types:
            # The same vertices per type, in the same (hop) order:
            assert torch.equal(node[t], ref[t].n_id), t
            assert nsn[t] == ref[t].num_sampled_nodes, t
            assert torch.equal(feats[t]['x'], data[t].x[node[t]])
        assert torch.equal(feats['paper']['y'], data['paper'].y[
            node['paper']])
        for et in data.edge_types:
            src, _, dst = et
            ours = _edge_triples(node[src], node[dst], row[et], col[et],
                                 edge[et])
            theirs = _edge_triples(ref[src].n_id, ref[dst].n_id,
                                   ref[et].edge_index[0],
                                   ref[et].edge_index[1], ref[et].e_id)
            assert ours == theirs, et  # The same edge set per type.
            assert torch.equal(torch.stack([row[et], col[et]]),
                               ref[et].edge_index), et
            assert torch.equal(edge[et], ref[et].e_id), et
            assert nse[et] == ref[et].num_sampled_edges, et
        cites = ('paper', 'cites', 'paper')
        assert torch.equal(edge_feats[cites]['edge_attr'],
                           data[cites].edge_attr[edge[cites]])
        assert set(edge_feats) == {cites}
        remote += stats['remote_requests']
    assert remote > 0


def _hetero_loader_worker(rank, world_size, out_dir, cache_size):
    from pyg_orch import HybridNeighborLoader
    loader = HybridNeighborLoader(
        out_dir, {('author', 'writes', 'paper'): [3, 2],
                  ('paper', 'cites', 'paper'): [2, 2],
                  ('paper', 'rev_writes', 'author'): [0, 2]},
        batch_size=8, input_nodes=('paper', 'train_mask'),
        cache_size=cache_size, shuffle=True, device='cpu')
    out = []
    for epoch in range(2):
        for b in loader:
            paper = b['paper']
            assert torch.equal(loader.partition_batches.input_nodes[paper.input_id],
                               paper.n_id[:paper.batch_size])
            out.append({t: (b[t].n_id, b[t].x) for t in b.node_types}
                       | {'bs': b['paper'].batch_size,
                          'edges': {et: (b[et].edge_index, b[et].e_id)
                                    for et in b.edge_types},
                          'cites_attr': b['paper', 'cites',
                                          'paper'].edge_attr})
    return len(loader), out, loader.batch_stats


def test_hetero_loader(tmp_path):
    data = small_paper_graph()
    info = small_paper_partition(tmp_path / 'h')
    results = run_workers(_hetero_loader_worker, 2,
                          args=(str(info.out_dir), 40), timeout=60)
    cached = 0
    for rank, (length, batches, stats) in enumerate(results):
        assert len(batches) == 2 * length > 0
        for b in batches:
            assert 0 < b['bs'] <= 8
            for t in data.node_types:
                n_id, x = b[t]
                assert torch.equal(x, data[t].x[n_id])
            for et, (edge_index, e_id) in b['edges'].items():
                src, _, dst = et
                # Every edge exists, with its edge id:
                assert torch.equal(data[et].edge_index[0, e_id],
                                   b[src][0][edge_index[0]])
                assert torch.equal(data[et].edge_index[1, e_id],
                                   b[dst][0][edge_index[1]])
            cites = ('paper', 'cites', 'paper')
            assert torch.equal(b['cites_attr'], data[cites].edge_attr[
                b['edges'][cites][1]])
            # Unsampled edge types stay empty:
            employs = [et for et in b['edges'] if et[1] == 'employs']
            assert all(b['edges'][et][1].numel() == 0 for et in employs)
        cached += sum(s['cached_rows'] for s in stats)
    assert cached > 0
