"""Topology and feature cache sharded across the processes of one machine
(``topology_placement='sharded'``, :class:`ShardedFeatureStore`), checked
on CPU processes joined by gloo, with shards in shared memory: every read
and every batch must equal the one-process result. Under Triton's
interpreter (``TRITON_INTERPRET=1``) the fused kernels are checked too; on
two GPUs, ``tests/test_multi_gpu.py``."""
import os

import pytest
import torch
import torch.distributed as dist

from conftest import random_graph, random_hetero_graph
from multiproc import run_workers
from pyg_orch import HybridNeighborLoader, PlacementOptions
from pyg_orch.core.buffers import DenseBufferPool
from pyg_orch.topology.csc import CSCTopology
from pyg_orch.partition.partitioning import metis_available
from pyg_orch.core.triton_util import triton_available
from pyg_orch.multigpu import (
    PeerGroup,
    TopologySharding,
    shard_bounds,
    shard_topology,
)
from pyg_orch.features.sharded import ShardedFeatureStore

#: The neighbor lists split across the machine's processes.
SHARDED = PlacementOptions(topology='sharded')

INTERPRET = os.environ.get('TRITON_INTERPRET') == '1' and triton_available()


def _csc(num_nodes=300, num_edges=3000, seed=0, sort=False):
    data = random_graph(num_nodes, num_edges, seed, sort=sort)
    return CSCTopology.from_edge_index(data.edge_index, num_nodes, num_nodes,
                                       is_sorted=sort)


def _parts(num_nodes, world_size, split):
    # A partition of the destinations for `shard_topology`, or None.
    if split == 'random':
        gen = torch.Generator().manual_seed(4)
        return torch.randint(0, world_size, (num_nodes, ), generator=gen)
    if split == 'one_empty':  # A rank that holds no list at all.
        return torch.arange(num_nodes) % max(world_size - 1, 1)
    return None


def _every_position(rank, world_size, replicate, sort, split=None):
    csc = _csc(sort=sort)
    sharded = shard_topology(
        csc, PeerGroup(), replicate_bytes=replicate,
        node_parts=_parts(csc.num_dst_nodes, world_size, split))
    n = csc.num_dst_nodes
    pos = torch.arange(csc.num_edges)
    dst = torch.repeat_interleave(torch.arange(n),
                                  csc.colptr[1:] - csc.colptr[:-1])
    perm = torch.randperm(pos.numel(), generator=torch.Generator().manual_seed(
        rank))  # Any order, any mix of shards.
    return dict(
        rows=torch.equal(sharded.neighbors(pos[perm], dst[perm]),
                         csc.row[perm]),
        eids=torch.equal(sharded.edge_ids(pos[perm], dst[perm]),
                         csc.edge_ids(pos[perm])),
        bounds=sharded.node_bounds, own_edges=sharded.row.numel(),
        replicated=sharded.num_replicated,
        replicated_bytes=sharded.memory()['replicated'],
        reads=sharded.reads.tolist(), total=csc.num_edges,
        # Values split with the lists (here the sources themselves), read
        # by CSC position without the destination:
        values=torch.equal(_split_values(sharded, csc.row, rank).index_select(
            0, pos[perm]), csc.row[perm]))


def _split_values(sharded, values, rank):
    from pyg_orch.multigpu import ShardedValues
    own, bounds = sharded.row.numel(), sharded.edge_bounds
    peers = PeerGroup()
    shards = peers.allocate((max(int(bounds.diff().max()), 1), ),
                            values.dtype)
    pos = torch.arange(values.numel())
    placed = pos if sharded.placed is None else sharded.placed(pos)
    order = torch.argsort(placed)  # CSC positions in placed order.
    a = int(bounds[rank])
    shards.own[:own].copy_(values[order[a:a + own]])
    peers.barrier()
    return ShardedValues(shards, bounds, own, sharded.placed)


@pytest.mark.parametrize('world_size,replicate,sort,split', [
    (2, 0, False, None),
    (2, 4000, False, None),
    (3, 2000, True, None),
    (2, 0, False, 'random'),
    (3, 3000, False, 'random'),
    (3, 0, True, 'one_empty'),
])
def test_sharded_csc_reads_every_position(world_size, replicate, sort,
                                          split):
    out = run_workers(_every_position, world_size,
                      args=(replicate, sort, split), timeout=120)
    total = out[0]['total']
    for rank, o in enumerate(out):
        assert o['rows'] and o['eids'] and o['values']
        assert o['bounds'] == out[0]['bounds']
        assert o['replicated_bytes'] <= replicate
        assert (o['replicated'] > 0) == (replicate > 0)
        local, rep, peer = o['reads']
        assert local + rep + peer == total
        # Copies are read locally instead of from peers; shards split by
        # ranges split the edges evenly (up to one list):
        assert local == o['own_edges']
        if split is None:
            assert abs(o['own_edges'] - total / world_size) < 60
    if split == 'one_empty':
        assert out[-1]['own_edges'] == 0 and out[-1]['reads'][0] == 0
    assert sum(o['own_edges'] for o in out) == total


def test_shard_bounds_balance_edges_and_cover_nodes():
    colptr = torch.tensor([0, 10, 10, 11, 12, 30, 31, 40])
    b = shard_bounds(colptr, 3)
    assert b[0] == 0 and b[-1] == 7 and b == sorted(b)
    assert shard_bounds(torch.zeros(1, dtype=torch.int64), 2) == [0, 0, 0]


def _with_mode(data, mode: str, kw: dict, hetero: bool) -> None:
    # Adds the times or weights of a sampling mode to `data` and `kw`.
    gen = torch.Generator().manual_seed(11)
    stores = data.node_stores if hetero else [data]
    edge_stores = data.edge_stores if hetero else [data]
    if mode == 'node_time':
        for store in stores:
            store.time = torch.randint(0, 40, (store.num_nodes, ),
                                       generator=gen)
        kw.update(time_attr='time')
    elif mode == 'edge_time':  # The most recent neighbors before the seed's.
        for store in edge_stores:
            store.time = torch.randint(0, 40, (store.num_edges, ),
                                       generator=gen)
        kw.update(time_attr='time', temporal_strategy='last',
                  input_time=torch.randint(20, 60, (data.num_nodes, ),
                                           generator=gen))
    elif mode in ('weight', 'weight_replace'):
        for store in edge_stores:
            w = torch.rand(store.num_edges, generator=gen)
            store.w = torch.where(w < 0.2, 0.0, w)  # Some never drawn.
        kw.update(weight_attr='w', replace=mode == 'weight_replace')


def _loader_batches(rank, world_size, hetero, sharding, mode=None):
    if hetero:
        data = random_hetero_graph(0)
        kw = dict(input_nodes=('paper', None))
        nn = [4, 3]
    else:
        data = random_graph(500, 6000, 1, num_features=6)
        kw = {}
        nn = [5, 3]
    if mode is not None:
        _with_mode(data, mode, kw, hetero)
    kw.update(num_neighbors=nn, batch_size=32, shuffle=True, seed=7,
              device='cpu')
    plain = HybridNeighborLoader(data, **kw)
    sharded = HybridNeighborLoader(
        data, placement=PlacementOptions(topology=sharding), **kw)
    assert sharded.topology.is_sharded and not plain.topology.is_sharded
    split = [type(getattr(c, a)).__name__
             for c in sharded.topology.csc.values()
             for a in ('time', 'weight') if getattr(c, a) is not None]
    n = edges = 0
    for a, b in zip(plain, sharded):
        stores = a.node_types if hetero else [None]
        for t in stores:
            sa, sb = (a, b) if t is None else (a[t], b[t])
            assert torch.equal(sa.n_id, sb.n_id)
            assert torch.equal(sa.x, sb.x)
            if 'batch' in sa:  # Temporal subgraphs are disjoint.
                assert torch.equal(sa.batch, sb.batch)
        etypes = a.edge_types if hetero else [None]
        for et in etypes:
            sa, sb = (a, b) if et is None else (a[et], b[et])
            assert torch.equal(sa.edge_index, sb.edge_index)
            assert torch.equal(sa.e_id, sb.e_id)
            edges += sa.e_id.numel()
        n += 1
    # A second loader over the same graph shares the shards (with times or
    # weights, which may change, where it is given the topology):
    again = HybridNeighborLoader(
        data, placement=PlacementOptions(topology=sharding),
        topology=None if mode is None else sharded.topology, **kw)
    same = all(x is y for x, y in zip(again.topology.csc.values(),
                                      sharded.topology.csc.values()))
    return n, same, split, edges


@pytest.mark.parametrize('hetero,mode', [
    (False, None),
    (True, None),
    (False, 'node_time'),
    (True, 'node_time'),
    (False, 'edge_time'),
    (False, 'weight'),
    (False, 'weight_replace'),
    (True, 'weight'),
])
def test_sharded_loader_equals_one_process_loader(hetero, mode):
    out = run_workers(_loader_batches, 2,
                      args=(hetero, TopologySharding(replicate_bytes=0.2),
                            mode), timeout=180)
    assert all(n > 0 and same and edges > 0 for n, same, _, edges in out)
    # Times and weights are split with the neighbor lists:
    for _, _, split, _ in out:
        assert set(split) == (set() if mode is None else {'ShardedValues'})


@pytest.mark.parametrize('hetero,mode,split_by', [
    pytest.param(False, None, 'metis', marks=pytest.mark.skipif(
        not metis_available(), reason='needs pymetis')),
    (False, 'edge_time', 'random'),
    (False, 'weight_replace', 'random'),
    (True, 'node_time', 'random'),
])
def test_lists_split_by_partition_give_the_same_batches(hetero, mode,
                                                        split_by):
    out = run_workers(_loader_batches, 2,
                      args=(hetero, TopologySharding(replicate_bytes=0.1,
                                                     split_by=split_by),
                            mode), timeout=180)
    assert all(n > 0 and same and edges > 0 for n, same, _, edges in out)


def _community_graph(num_nodes=400, num_edges=6000, outside=0.05, seed=0):
    # Two communities whose vertices interleave (even and odd ids): ranges
    # of ids cut every community in half, a partition need not.
    gen = torch.Generator().manual_seed(seed)
    dst = torch.randint(0, num_nodes, (num_edges, ), generator=gen)
    src = torch.randint(0, num_nodes // 2, (num_edges, ), generator=gen) * 2
    cross = torch.rand(num_edges, generator=gen) < outside
    src = src + torch.where(cross, 1 - dst % 2, dst % 2)
    return random_graph(num_nodes, 0, num_features=4).update(
        {'edge_index': torch.stack([src, dst])})


def _locality(rank, world_size, split_by):
    data = _community_graph()
    sharding = TopologySharding(replicate_bytes=0, split_by=split_by)
    parts = sharding.node_parts(
        HybridNeighborLoader(data, [2], device='cpu').topology, world_size)
    if parts is None:  # Ranges: this rank's range of ids.
        parts = torch.arange(400) * world_size // 400
    seeds = (parts == rank).nonzero().view(-1)  # This rank's part's seeds.
    loader = HybridNeighborLoader(data, [5, 5], batch_size=20, seed=1,
                                  input_nodes=seeds, device='cpu',
                                  placement=PlacementOptions(
                                      topology=sharding))
    ref = HybridNeighborLoader(data, [5, 5], batch_size=20, seed=1,
                               input_nodes=seeds, device='cpu')
    for a, b in zip(loader, ref):
        assert torch.equal(a.n_id, b.n_id)
        assert torch.equal(a.edge_index, b.edge_index)
    reads = loader.stats()['topology_reads']
    return reads['local'] / (reads['local'] + reads['peer'])


@pytest.mark.skipif(not metis_available(), reason='needs pymetis')
def test_metis_split_reads_own_lists():
    ranges = run_workers(_locality, 2, args=('ranges', ), timeout=120)
    metis = run_workers(_locality, 2, args=('metis', ), timeout=120)
    # Seeds in a rank's part read their lists mostly from its own shard
    # with METIS (about 95% of edges stay in a community), about half
    # with ranges of ids:
    assert all(0.3 < f < 0.7 for f in ranges)
    assert all(f > 0.85 for f in metis)


def _fused(rank, world_size, replicate, split=None):
    from pyg_orch.sampling.triton.fused_sampler import fused_sample_multi_hop

    csc = _csc(600, 8000, 3)
    sharded = shard_topology(csc, PeerGroup(), replicate_bytes=replicate,
                             node_parts=_parts(600, world_size, split))
    seeds = torch.arange(rank, 600, 5)
    cpu = torch.device('cpu')
    outs = [
        fused_sample_multi_hop(t, 600, [6, 3], seeds, False,
                               torch.Generator().manual_seed(5),
                               DenseBufferPool(), cpu) for t in (csc, sharded)
    ]
    a, b = outs
    same = all(
        torch.equal(x[None], y[None]) for x, y in ((a.node, b.node),
                                                   (a.row, b.row),
                                                   (a.col, b.col),
                                                   (a.edge, b.edge)))
    return same, sharded.reads.tolist()


@pytest.mark.skipif(not INTERPRET, reason='needs TRITON_INTERPRET=1')
@pytest.mark.parametrize('replicate,split', [(0, None), (6000, None),
                                             (0, 'random'),
                                             (6000, 'random')])
def test_fused_kernel_reads_shards_like_one_topology(replicate, split):
    out = run_workers(_fused, 2, args=(replicate, split), timeout=300,
                      env={'TRITON_INTERPRET': '1'})
    for same, (local, rep, peer) in out:
        assert same
        assert local > 0 and peer > 0 and (rep > 0) == (replicate > 0)


#: The gather methods of the feature-store tests (the UVA kernel under
#: Triton's interpreter).
METHODS = [
    'cpu',
    pytest.param('uva', marks=pytest.mark.skipif(
        not INTERPRET, reason='needs TRITON_INTERPRET=1')),
]


def _method_env(method):
    return {'TRITON_INTERPRET': '1'} if method == 'uva' else None


def _sharded_store(rank, hot, budget_rows, method):
    # 1,000 rows of 12 features (rank 0's copied to shared memory) and a
    # cache of `budget_rows` per rank.
    x = torch.randn(1000, 12, generator=torch.Generator().manual_seed(0))
    store = ShardedFeatureStore(x if rank == 0 else torch.zeros_like(x),
                                PeerGroup(), hotness=hot,
                                gpu_memory_budget=budget_rows * 12 * 4,
                                method=method)
    return x, store


def _features(rank, world_size, method, budget_rows):
    # Each rank sees other nodes as hot: the machine adds them up.
    hot = torch.zeros(1000)
    hot[rank * 100:(rank + 1) * 100] = 1.0
    x, store = _sharded_store(rank, hot, budget_rows, method)
    ok = True
    gen = torch.Generator().manual_seed(rank)
    for _ in range(4):
        index = torch.randint(0, 1000, (300, ), generator=gen)
        index[:50] = torch.arange(50) + 100 * (1 - rank)  # Peer's rows.
        ok &= torch.equal(store.gather(index), x[index])
    stats = store.stats
    return dict(ok=ok, cached=sorted(store.cached_nodes.tolist()),
                capacity=store.capacity, peer=stats.peer_rows,
                own=stats.cache_rows, host=stats.host_rows,
                rows=stats.rows, host_shared=store.host.is_shared()
                or store.host.data_ptr() != x.data_ptr())


@pytest.mark.parametrize('method', METHODS)
def test_sharded_feature_store_gathers_from_own_peer_and_host(method):
    out = run_workers(_features, 2, args=(method, 100), timeout=300,
                      env=_method_env(method))
    for o in out:
        assert o['ok']
        # The machine caches both ranks' hot rows, 100 per rank:
        assert o['capacity'] == 100
        assert o['cached'] == list(range(200))
        assert o['peer'] > 0 and o['own'] > 0 and o['host'] > 0
        assert o['rows'] == 1200
    assert out[0]['cached'] == out[1]['cached']


def test_sharded_placement_bad_input():
    with pytest.raises(ValueError, match="'replicate_bytes' must be"):
        TopologySharding(replicate_bytes=-1)
    with pytest.raises(ValueError, match="'replicate_bytes' must be"):
        TopologySharding(replicate_bytes=1.5)
    with pytest.raises(ValueError, match="'split_by' must be 'ranges'"):
        TopologySharding(split_by='hash')
    with pytest.raises(ValueError, match="'split_by' must be 'ranges'"):
        TopologySharding(split_by=[0, 1])
    with pytest.raises(ValueError, match="'topology' must be .*'sharded'"):
        HybridNeighborLoader(random_graph(20, 50), [2], device='cpu',
                             placement=PlacementOptions(topology='shard'))


def _bad_split(rank, world_size):
    data = random_graph(100, 800, 2, num_features=3)
    errors = []
    cases = [
        # Rank 1's parts are of the wrong size: both ranks raise.
        (data, torch.zeros(100 if rank == 0 else 99, dtype=torch.long)),
        # A rank that does not exist, on rank 1 only:
        (data, torch.full((100, ), 2 * rank)),
        (data, torch.arange(100) % 2 if rank == 0 else torch.zeros(
            100, dtype=torch.long)),  # The ranks disagree.
        (random_hetero_graph(0), 'metis'),
    ]
    for graph, split in cases:
        try:
            HybridNeighborLoader(graph, [2], batch_size=8, device='cpu',
                                 input_nodes=('paper', None)
                                 if split == 'metis' else None,
                                 placement=PlacementOptions(
                                     topology=TopologySharding(
                                         split_by=split)))
        except (ValueError, NotImplementedError) as e:
            errors.append(f'{type(e).__name__}: {e}')
    return errors


def test_bad_split_raises_on_every_rank():
    out = run_workers(_bad_split, 2, timeout=120)
    for errors in out:
        assert len(errors) == 4
        assert 'one part per vertex' in errors[0]
        assert 'parts in [0, 2)' in errors[1]
        assert 'same parts' in errors[2]
        assert errors[3].startswith('NotImplementedError') and \
            'homogeneous' in errors[3]


def test_sharded_placement_without_process_group_is_one_shard():
    assert not dist.is_initialized()
    data = random_graph(100, 800, 2, num_features=3)
    kw = dict(num_neighbors=[3, 2], batch_size=16, seed=3, device='cpu')
    a = HybridNeighborLoader(data, **kw)
    b = HybridNeighborLoader(data, placement=SHARDED, **kw)
    assert b.topology.csc[None].num_shards == 1
    for x, y in zip(a, b):
        assert torch.equal(x.n_id, y.n_id)
        assert torch.equal(x.edge_index, y.edge_index)


def test_choose_replicated_ranks_reads_saved_per_byte():
    from pyg_orch.topology.sharded import choose_replicated

    # Degrees 1, 4, 40, 2; a fan-out of 2 reads at most 2 per expansion.
    colptr = torch.tensor([0, 1, 5, 45, 47])
    weight = torch.tensor([1.0, 1.0, 30.0, 0.0])
    # Per byte: v0 1, v1 0.5, v2 30 * 2 / 40 = 1.5, v3 never expanded.
    got = choose_replicated(colptr, 41 * 4, 4, weight, max_fanout=2)
    assert got.tolist() == [2, 0]
    # In-degree first (HyDRA's rule), and the budget is a hard cap:
    assert choose_replicated(colptr, 47 * 4, 4).tolist() == [2, 1, 3, 0]
    assert choose_replicated(colptr, 3, 4).tolist() == []
    # The rank's own shard is never copied:
    assert 2 not in choose_replicated(colptr, 1000, 4, weight,
                                      exclude=range(2, 4)).tolist()
    with pytest.raises(ValueError, match="'replicate_by' must be"):
        TopologySharding(replicate_by='random')


def _refill(rank, world_size, method):
    hot = torch.zeros(1000)
    hot[:200] = 1.0
    x, store = _sharded_store(rank, hot, 100, method)
    before = sorted(store.cached_nodes.tolist())
    store.gather_blocks = 7  # Set by hand: a refill keeps it.
    # E.g. BottomLayerOffload's cache candidates: the same on every rank.
    new = torch.arange(999, 599, -1)  # 400 candidates, 200 fit.
    store.set_cached_nodes(new)
    store.gather_blocks = 5
    store.set_cached_nodes(new)
    blocks = store.gather_blocks
    after = store.cached_nodes.tolist()
    store.reset_stats()
    ok = True
    gen = torch.Generator().manual_seed(rank)
    for _ in range(3):
        index = torch.randint(0, 1000, (300, ), generator=gen)
        index[:40] = torch.arange(960, 1000)  # Now cached on both ranks.
        ok &= torch.equal(store.gather(index), x[index])
    stats = store.stats
    mismatch = None
    try:  # Different candidates per rank: refused on every rank.
        store.set_cached_nodes(torch.arange(10) + rank)
    except ValueError as e:
        mismatch = str(e)
    return dict(ok=ok, before=before, after=after, own=stats.cache_rows,
                peer=stats.peer_rows, mismatch=mismatch, blocks=blocks)


@pytest.mark.parametrize('method', METHODS)
def test_sharded_feature_store_takes_new_cached_nodes(method):
    out = run_workers(_refill, 2, args=(method, ), timeout=300,
                      env=_method_env(method))
    for o in out:
        assert o['ok']
        assert o['before'] == list(range(200))
        # The 200 most important candidates, in order, over both GPUs:
        assert o['after'] == list(range(999, 799, -1))
        assert o['own'] > 0 and o['peer'] > 0
        assert 'same' in o['mismatch']
        assert o['blocks'] == 5  # A grid set by hand outlives a refill.


def _copies(rank, world_size, method):
    hot = torch.linspace(1.0, 0.0, 1000)  # Node 0 the hottest.
    x, store = _sharded_store(rank, hot, 100, method)
    store.gather_blocks = 7  # Set by hand: growing keeps it.
    out = dict(before=store.num_local, blocks=[], ok=True)
    gen = torch.Generator().manual_seed(rank)

    def gathers():
        store.reset_stats()
        for _ in range(3):
            index = torch.randint(0, 1000, (300, ), generator=gen)
            index[:40] = torch.arange(40)  # Both ranks' shards.
            out['ok'] &= torch.equal(store.gather(index), x[index])
        st = store.stats
        return dict(own=st.cache_rows, peer=st.peer_rows, host=st.host_rows)

    out['start'] = gathers()
    # 150 rows: the peer's 100 shard rows, then the 50 hottest cached nowhere.
    out['added'] = store.grow_cache(150 * 12 * 4 + 47)
    out['local'] = store.num_local
    out['bytes'] = store.cached_bytes
    out['cached'] = sorted(store.cached_nodes.tolist())
    out['grown'] = gathers()
    out['blocks'].append(store.gather_blocks)
    out['rest'] = store.grow_cache(10**9)
    out['all'] = gathers()
    out['again'] = store.grow_cache(10**9)
    # A refill keeps this GPU's copies.
    store.set_cached_nodes(torch.arange(999, 599, -1))
    out['refilled'] = gathers()
    try:
        store.grow_cache(-1)
    except ValueError as e:
        out['error'] = str(e)
    return out


@pytest.mark.parametrize('method', METHODS)
def test_sharded_feature_store_grows_copies_on_its_own_gpu(method):
    out = run_workers(_copies, 2, args=(method, ), timeout=300,
                      env=_method_env(method))
    for rank, o in enumerate(out):
        assert o['ok']
        assert o['before'] == 100
        assert o['start']['peer'] > 0 and o['start']['host'] > 0
        assert o['added'] == 150 and o['local'] == 250
        assert o['bytes'] == 250 * 12 * 4
        # The machine's 200 rows and the next 50 hottest:
        assert o['cached'] == list(range(250))
        assert o['grown']['peer'] == 0 and o['grown']['own'] > 0
        assert o['grown']['host'] > 0
        assert o['rest'] == 750 and o['again'] == 0
        assert o['all'] == dict(own=900, peer=0, host=0)
        # The new shards' rows are copies here; the old shard's are read
        # from host memory again:
        assert o['refilled']['peer'] == 0 and o['refilled']['host'] > 0
        assert o['blocks'] == [7]
        assert "'num_bytes'" in o['error']


def test_sharded_gather_grid_rule():
    # 'auto': no cap while the GPUs hold every row (peer reads), the one-GPU
    # store's cap once rows come from host memory.
    from pyg_orch.features.sharded import sharded_gather_blocks
    assert sharded_gather_blocks(66, 100, 100) is None
    assert sharded_gather_blocks(66, 99, 100) == 66
    assert sharded_gather_blocks(None, 10, 100) is None


def _offload_on_shards(rank, world_size):
    import warnings

    from torch_geometric.nn import GraphSAGE

    from pyg_orch import BottomLayerOffload
    from pyg_orch.offload.protocol import SHARDED_REASON
    data = random_graph(400, 4000, 4, num_features=6, num_classes=3)
    loader = HybridNeighborLoader(data, [4, 3], batch_size=32, seed=5,
                                  device='cpu', placement=SHARDED)
    torch.manual_seed(0)
    model = GraphSAGE(6, 16, 2, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        off = BottomLayerOffload(model, loader)
    ours = [str(w.message) for w in caught
            if 'BottomLayerOffload' in str(w.message)]
    decision = off.stats()['decision']
    # The pass-through trains the model as it is, on every batch:
    optimizer = torch.optim.Adam(off.parameters(), lr=0.01)
    same = True
    for batch in loader:
        out = off(batch.x, batch.edge_index)
        same &= torch.equal(out, model(batch.x, batch.edge_index))
        loss = torch.nn.functional.cross_entropy(out[:batch.batch_size],
                                                 batch.y[:batch.batch_size])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    off.close()
    return (len(ours), decision['mode'], decision['reason'] ==
            f'the loader uses {SHARDED_REASON}', same,
            loader.topology.csc[None].num_shards)


def test_offload_passes_through_a_sharded_topology():
    # A rank holds only its shard of the neighbor lists; the CPU side needs
    # them all: the wrapper must not compute from a shard (or fail).
    out = run_workers(_offload_on_shards, 2, timeout=180)
    assert out == [(1, 'pass_through', True, True, 2)] * 2


def test_list_positions():
    from pyg_orch.topology.sharded import list_positions
    # Lists copied to slots 0-1, 2-4, 5, from CSC positions 7-8, 3-5, 13:
    got = list_positions(torch.tensor([7, 1, 8]), torch.tensor([2, 3, 1]),
                         torch.device('cpu'))
    assert got.tolist() == [7, 8, 3, 4, 5, 13]
    if torch.cuda.is_available():
        on_gpu = list_positions(torch.tensor([7, 1, 8]),
                                torch.tensor([2, 3, 1]), torch.device('cuda'))
        assert on_gpu.is_cuda and on_gpu.tolist() == got.tolist()
