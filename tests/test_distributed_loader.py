"""The same training script on one machine or several:
HybridNeighborLoader('parts/', ...) loads this rank's part and gives the
batches of the stores' spelling (and, with full fan-out, of the
single-process loader); folders that do not belong together are rejected on
every rank; a rank failing mid-epoch raises in the others, no hang."""
import copy
import time

import pytest
import torch
from conftest import random_graph
from multiproc import check_hetero_folder_loader, run_workers

from pyg_orch import CacheOptions, HybridNeighborLoader, PlacementOptions
from pyg_orch.distributed import load_partition, open_stores, partition_graph

FANOUTS = [-1, -1]
KEYS = ('n_id', 'e_id', 'edge_index', 'x', 'y', 'edge_attr')


def graph(seed=3):
    return random_graph(120, 500, seed=seed, num_features=4, num_classes=3,
                        train_ratio=0.5, edge_dim=2)


def global_seeds():
    return torch.arange(0, 120, 3)  # The seeds of all ranks together.


def _batches(loader):
    return [{k: b[k] for k in KEYS} | {'batch_size': b.batch_size}
            for b in loader]


def _hybrid_worker(rank, world_size, out_dir):
    part = load_partition(out_dir, rank)
    seeds = global_seeds()
    mine = seeds[part.owner(seeds) == rank]
    loader = HybridNeighborLoader(out_dir, FANOUTS, input_nodes=seeds,
                                  batch_size=5, even='pad', device='cpu')
    assert isinstance(loader, HybridNeighborLoader)
    assert loader.partition_batches is not None
    assert torch.equal(loader.partition_batches.input_nodes, mine)
    ours = _batches(loader)
    # The stores' spelling, given this rank's seeds:
    dist = _batches(HybridNeighborLoader(open_stores(out_dir), FANOUTS,
                                         batch_size=5, input_nodes=mine,
                                         even='pad', device='cpu'))
    # The same seeds as a mask over all vertices, and by attribute name:
    mask = torch.zeros(120, dtype=torch.bool)
    mask[seeds] = True
    as_mask = HybridNeighborLoader(out_dir, FANOUTS, input_nodes=mask,
                                   batch_size=5, device='cpu')
    by_name = HybridNeighborLoader(out_dir, [2], batch_size=4,
                                   input_nodes='train_mask', device='cpu')
    default = HybridNeighborLoader(out_dir, [2], batch_size=4, device='cpu')
    return (ours, dist, torch.equal(as_mask.partition_batches.input_nodes, mine),
            by_name.partition_batches.input_nodes, default.partition_batches.input_nodes)


def test_hybrid_loader_on_partition_folder(tmp_path):
    data = graph()
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    out = run_workers(_hybrid_worker, 2, args=(str(info.out_dir), ),
                      timeout=60)
    train = data.train_mask.nonzero().view(-1)
    seen = []
    for rank, (ours, dist, mask_ok, by_name, default) in enumerate(out):
        assert mask_ok
        part = load_partition(info.out_dir, rank)
        assert torch.equal(by_name, train[part.owner(train) == rank])
        assert torch.equal(default, by_name)
        assert len(ours) == len(dist) > 1
        for a, b in zip(ours, dist):  # Equal to the stores' spelling.
            assert a['batch_size'] == b['batch_size']
            for key in KEYS:
                assert torch.equal(a[key], b[key]), key
        # Full fan-out: equal to the single-process loader on the graph.
        seeds = global_seeds()
        mine = seeds[part.owner(seeds) == rank]
        ref = list(HybridNeighborLoader(data, FANOUTS, input_nodes=mine,
                                        batch_size=5, device='cpu'))
        real = [b for b in ours if b['batch_size'] > 0]
        assert len(real) == len(ref)
        for a, b in zip(real, ref):
            for key in KEYS:
                assert torch.equal(a[key], b[key]), key
        seen.append(mine)
    # Every seed went to exactly one rank:
    assert torch.equal(torch.sort(torch.cat(seen)).values, global_seeds())


def drop_second_hop(out):
    r"""A sampler output with the edges of its first hop only."""
    out = copy.copy(out)
    k = out.num_sampled_edges[0]
    out.row, out.col, out.edge = out.row[:k], out.col[:k], out.edge[:k]
    out.num_sampled_edges = out.num_sampled_edges[:1]
    return out


def _transform_worker(rank, world_size, out_dir):
    part = load_partition(out_dir, rank)
    seeds = global_seeds()
    mine = seeds[part.owner(seeds) == rank]
    seen = []

    def hook(out):  # Hooks see the output before the transform.
        seen.append(out.row.numel())

    loader = HybridNeighborLoader(out_dir, FANOUTS, input_nodes=seeds,
                                  batch_size=5, even='pad', device='cpu',
                                  transform_sampler_output=drop_second_hop)
    loader.register_batch_hook(hook, when='sampled')
    ours = [b for b in loader if b.batch_size > 0]
    ref = list(HybridNeighborLoader(graph(), FANOUTS, input_nodes=mine,
                                    batch_size=5, device='cpu',
                                    transform_sampler_output=drop_second_hop))
    # A transform that builds a new output keeps the sampler's metadata
    # (where the ids of reversed edges point: their attributes' owners).
    kw = dict(input_nodes=seeds, batch_size=5, even='pad', device='cpu',
              subgraph_type='bidirectional')
    rebuilt = HybridNeighborLoader(
        out_dir, FANOUTS, **kw, transform_sampler_output=lambda out: type(
            out)(out.node, out.row, out.col, out.edge, out.batch,
                 out.num_sampled_nodes, out.num_sampled_edges))
    for a, b in zip(rebuilt, HybridNeighborLoader(out_dir, FANOUTS, **kw)):
        for key in KEYS:
            assert torch.equal(a[key], b[key]), key
    return ([{k: b[k] for k in KEYS + ('num_sampled_edges', )}
             for b in ours],
            [{k: b[k] for k in KEYS + ('num_sampled_edges', )} for b in ref],
            seen)


def test_transform_sampler_output_on_partition_folder(tmp_path):
    info = partition_graph(graph(), 2, tmp_path / 'p', 'random',
                           progress=False)
    out = run_workers(_transform_worker, 2, args=(str(info.out_dir), ),
                      timeout=60)
    for ours, ref, seen in out:
        assert len(ours) == len(ref) > 1
        for a, b in zip(ours, ref):  # As the one-process loader's.
            for key in KEYS:
                assert torch.equal(a[key], b[key]), key
            assert a['num_sampled_edges'] == b['num_sampled_edges']
            # Only the edges into the seeds are left:
            assert len(a['num_sampled_edges']) == 1
            assert a['edge_index'].size(1) == a['num_sampled_edges'][0]
        assert sum(seen) > sum(a['edge_index'].size(1) for a in ours)


def _loop_thread_transform():
    # A transform that records whether it ran in the loop's thread.
    import threading
    seen = []

    def transform(batch):
        seen.append(threading.current_thread() is threading.main_thread())
        return batch

    return transform, seen


def _break_at_second(*loaders):
    # Every rank breaks each loop at the same step.
    for loader in loaders:
        for i, _ in enumerate(loader):
            if i == 1:
                break


def _one_rank_breaks(loader, rank):
    # Rank 0 stops early, the others want the whole epoch: they are told.
    it = iter(loader)
    try:
        for i, _ in enumerate(it):
            if rank == 0 and i == 1:
                break
    except RuntimeError as e:
        return str(e)
    finally:
        del it
    return None


def _prefetch_worker(rank, world_size, out_dir):
    transform, seen = _loop_thread_transform()
    kw = dict(input_nodes=global_seeds(), batch_size=4, even='pad',
              device='cpu', shuffle=True, seed=3, num_neighbors=[3, 2])
    ahead = HybridNeighborLoader(out_dir, prefetch=2, transform=transform,
                                 **kw)
    plain = HybridNeighborLoader(out_dir, **kw)
    assert ahead.partition_batches.prefetch == 2
    epochs = [(_batches(ahead), _batches(plain)) for _ in range(2)]
    _break_at_second(ahead, plain)  # The next epoch is whole:
    epochs.append((_batches(ahead), _batches(plain)))
    error = _one_rank_breaks(ahead, rank)
    return epochs, all(seen) and len(seen) > 0, error, len(ahead)


def _lru_threads_worker(rank, world_size, out_dir, threads, kw):
    # A loader whose thread(s) (prefetch or workers) use the LRU cache, and
    # one without threads: two epochs of both, and the threaded one's
    # cache bookkeeping.
    kw = dict(input_nodes=global_seeds(), even='pad', device='cpu',
              shuffle=True, seed=3, cache=CacheOptions(policy='lru'),
              **kw)
    ahead = HybridNeighborLoader(out_dir, **threads, **kw)
    plain = HybridNeighborLoader(out_dir, **kw)
    out = []
    for _ in range(2):
        out.append((_batches(ahead), _batches(plain), ahead.batch_stats,
                    plain.batch_stats))
    return out, ahead.partition_batches.gather.slot_id, ahead.partition_batches.gather.cache_slot


def test_prefetch_with_lru_cache(tmp_path):
    info = partition_graph(graph(), 2, tmp_path / 'p', 'random',
                           progress=False)
    # The thread's view changes the loader's LRU cache as the loop would.
    out = run_workers(_lru_threads_worker, 2, args=(
        str(info.out_dir), dict(prefetch=2),
        dict(batch_size=4, num_neighbors=[3, 2], cache_size=10)),
        timeout=120)
    for epochs, _, _ in out:
        for ahead, plain, stats_ahead, stats_plain in epochs:
            assert len(ahead) == len(plain) > 2
            for a, b in zip(ahead, plain):
                for key in KEYS:
                    assert torch.equal(a[key], b[key]), key
            assert stats_ahead == stats_plain
        assert sum(s['cached_rows'] for s in epochs[1][2]) > 0


def test_num_workers_with_lru_cache(tmp_path):
    info = partition_graph(graph(), 2, tmp_path / 'p', 'random',
                           progress=False)
    # Three threads share one small LRU cache (evicting all the time).
    out = run_workers(_lru_threads_worker, 2, args=(
        str(info.out_dir), dict(num_workers=3),
        dict(batch_size=1, num_neighbors=FANOUTS, cache_size=6)),
        timeout=120)
    for epochs, slot_id, cache_slot in out:
        cached = 0
        for ours, ref, stats, ref_stats in epochs:
            assert len(ours) == len(ref) > 10
            for a, b in zip(ours, ref):  # The rows are right.
                for key in KEYS:
                    assert torch.equal(a[key], b[key]), key
            for s, r in zip(stats, ref_stats):
                assert s['local_rows'] == r['local_rows']
                assert s['cached_rows'] + s['remote_rows'] == \
                    r['cached_rows'] + r['remote_rows']
            cached += sum(s['cached_rows'] for s in stats)
        assert cached > 0
        # The bookkeeping is consistent: every cached id points at its slot.
        held = slot_id[slot_id >= 0]
        assert held.unique().numel() == held.numel()
        slots = (slot_id >= 0).nonzero().view(-1)
        assert torch.equal(cache_slot[held], slots)
        assert int((cache_slot >= 0).sum()) == held.numel()


def test_prefetch_on_partition_folder(tmp_path):
    info = partition_graph(graph(), 2, tmp_path / 'p', 'random',
                           progress=False)
    out = run_workers(_prefetch_worker, 2, args=(str(info.out_dir), ),
                      timeout=120)
    for rank, (epochs, in_loop_thread, error, num) in enumerate(out):
        assert in_loop_thread
        for epoch, (ahead, plain) in enumerate(epochs):
            assert len(ahead) == len(plain) == num > 2
            for a, b in zip(ahead, plain):
                assert a['batch_size'] == b['batch_size']
                n = a['batch_size']
                assert torch.equal(a['n_id'][:n], b['n_id'][:n])
                if epoch == 2:  # The thread sampled ahead of the break.
                    continue
                for key in KEYS:  # The same batches, in the same order.
                    assert torch.equal(a[key], b[key]), key
        if rank == 0:
            assert error is None
        else:
            assert 'another rank stopped' in error


def _workers_worker(rank, world_size, out_dir):
    transform, seen = _loop_thread_transform()
    kw = dict(input_nodes=global_seeds(), batch_size=4, even='pad',
              device='cpu', shuffle=True, seed=3)
    out = {}
    # Full fan-out: the very batches of the loader without workers.
    full = HybridNeighborLoader(out_dir, FANOUTS, num_workers=3,
                                transform=transform, **kw)
    assert full.num_workers == 3
    plain = HybridNeighborLoader(out_dir, FANOUTS, **kw)
    out['full'] = [(_batches(full), _batches(plain)) for _ in range(2)]
    out['stats'] = (len(full.batch_stats), len(full))
    # Random fan-out: the same seeds in the same order, and the same
    # batches again from a loader made alike.
    a, b, c = (HybridNeighborLoader(out_dir, [3, 2], num_workers=w, **kw)
               for w in (2, 2, 0))
    out['random'] = (_batches(a), _batches(b), _batches(c))
    _break_at_second(full, plain)  # The next epoch is whole:
    out['after_break'] = (_batches(full), _batches(plain))
    # 20 batches: more than the threads build ahead of the loop.
    out['error'] = _one_rank_breaks(HybridNeighborLoader(
        out_dir, FANOUTS, num_workers=2, **{**kw, 'batch_size': 1}), rank)
    out['in_loop_thread'] = all(seen) and len(seen) > 0
    # Ranks that ask for different numbers of workers are told, on every
    # rank, instead of waiting for each other:
    try:
        HybridNeighborLoader(out_dir, [2], batch_size=4, device='cpu',
                             num_workers=1 + rank)
    except ValueError as e:
        out['mismatch'] = str(e)
    return out


def test_num_workers_on_partition_folder(tmp_path):
    info = partition_graph(graph(), 2, tmp_path / 'p', 'random',
                           progress=False)
    out = run_workers(_workers_worker, 2, args=(str(info.out_dir), ),
                      timeout=120)
    for rank, res in enumerate(out):
        assert res['in_loop_thread']
        for ours, ref in res['full'] + [res['after_break']]:
            assert len(ours) == len(ref) > 3
            for x, y in zip(ours, ref):  # In order, every field.
                assert x['batch_size'] == y['batch_size']
                for key in KEYS:
                    assert torch.equal(x[key], y[key]), key
        assert res['stats'][0] == res['stats'][1]
        a, b, c = res['random']
        assert len(a) == len(b) == len(c)
        same = True
        for x, y, z in zip(a, b, c):
            n = x['batch_size']
            assert n == z['batch_size']
            assert torch.equal(x['n_id'][:n], z['n_id'][:n])
            for key in KEYS:  # Reproducible for a given num_workers.
                assert torch.equal(x[key], y[key]), key
            # Every edge joins two nodes of the batch, with its feature row:
            assert int(x['edge_index'].max()) < x['n_id'].numel()
            same &= x['n_id'].numel() == z['n_id'].numel() and bool(
                torch.equal(x['n_id'], z['n_id']))
        assert not same  # Workers draw from generators of their own.
        if rank == 0:
            assert res['error'] is None
        else:
            assert 'another rank stopped' in res['error']
            assert "'num_workers'" in res['error']
        assert 'must be the same on every rank' in \
            res['mismatch']


def _train_worker(rank, world_size, out_dir, prefetch=0, num_workers=0):
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
    from torch_geometric.nn import GraphSAGE

    from pyg_orch.parallel.watchdog import rank_guard
    torch.manual_seed(0)
    model = DistributedDataParallel(GraphSAGE(4, 16, num_layers=2,
                                              out_channels=3))
    before = torch.cat([p.detach().clone().view(-1)
                        for p in model.parameters()])
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = HybridNeighborLoader(out_dir, num_neighbors=[5, 5],
                                  batch_size=16, shuffle=True, seed=1,
                                  device='cpu', prefetch=prefetch,
                                  num_workers=num_workers)
    losses = []
    with rank_guard(timeout=20):
        for epoch in range(2):
            for batch in loader:
                opt.zero_grad()
                out = model(batch.x, batch.edge_index)[:batch.batch_size]
                loss = F.cross_entropy(out, batch.y[:batch.batch_size])
                loss.backward()
                opt.step()
                losses.append(float(loss))
    after = torch.cat([p.detach().view(-1) for p in model.parameters()])
    return len(loader), losses, before, after


def test_ddp_graphsage_step(tmp_path):
    info = partition_graph(graph(), 2, tmp_path / 'p', 'random',
                           progress=False)
    out = run_workers(_train_worker, 2, args=(str(info.out_dir), ),
                      timeout=90)
    (n0, losses0, before0, after0), (n1, losses1, before1, after1) = out
    assert n0 == n1 > 0
    assert len(losses0) == len(losses1) == 2 * n0
    assert all(torch.isfinite(torch.tensor(losses0)))
    assert torch.equal(before0, before1)
    assert torch.equal(after0, after1)  # DDP kept the ranks in step.
    assert not torch.equal(before0, after0)  # It trained.
    # Batches built ahead by a thread, whose exchanges never mix with DDP's
    # all-reduces: the same training.
    ahead = run_workers(_train_worker, 2, args=(str(info.out_dir), 2),
                        timeout=90)
    for (n, losses, _, after), (n_a, losses_a, _, after_a) in zip(out,
                                                                   ahead):
        assert n == n_a and losses == losses_a
        assert torch.equal(after, after_a)
    # Batches built by two worker threads (other draws): DDP keeps the
    # ranks in step.
    (n0, losses0, _, after0), (n1, losses1, _, after1) = run_workers(
        _train_worker, 2, args=(str(info.out_dir), 0, 2), timeout=90)
    assert n0 == n1 == out[0][0] and len(losses0) == 2 * n0
    assert all(torch.isfinite(torch.tensor(losses0 + losses1)))
    assert torch.equal(after0, after1) and not torch.equal(after0, before0)


def test_one_part_without_process_group(tmp_path):
    data = graph()
    info = partition_graph(data, 1, tmp_path / 'p', 'contiguous',
                           progress=False)
    seeds = torch.tensor([4, 9, 9, 30, 77, 100, 5])
    loader = HybridNeighborLoader(str(info.out_dir), FANOUTS, batch_size=3,
                                  input_nodes=seeds, device='cpu',
                                  seed=torch.Generator().manual_seed(7),
                                  transform=lambda b: b.update(
                                      {'tagged': True}))
    ref = list(HybridNeighborLoader(data, FANOUTS, batch_size=3,
                                    input_nodes=seeds, device='cpu'))
    ours = list(loader)
    assert len(ours) == len(ref) == 3
    for a, b in zip(ours, ref):
        assert a.tagged
        for key in KEYS:
            assert torch.equal(a[key], b[key]), key
    # A pathlib.Path works too, and keyword 'data':
    assert len(HybridNeighborLoader(data=info.out_dir, num_neighbors=[1],
                                    batch_size=50, device='cpu')) == 2
    # A transform of the sampler output must return one:
    bad = HybridNeighborLoader(str(info.out_dir), FANOUTS, batch_size=3,
                               input_nodes=seeds, device='cpu',
                               transform_sampler_output=lambda out: out.node)
    with pytest.raises(ValueError, match='must return a SamplerOutput'):
        next(iter(bad))


@pytest.mark.parametrize('kwargs,error,match', [
    (dict(placement=PlacementOptions(topology='device')), ValueError,
     'placement.topology'),
    (dict(placement=PlacementOptions(topology='sharded')), ValueError,
     'one part per machine'),
    (dict(placement=PlacementOptions(backend='torch')), ValueError,
     'placement.backend'),
    (dict(cache=CacheOptions(store=None)), ValueError, 'cache.store'),
    (dict(cache=CacheOptions(cache_ratio=0.5)), ValueError,
     'cache.cache_ratio'),
    (dict(cache='lru'), TypeError, "'cache' must be a CacheOptions"),
    (dict(lookahead=True), ValueError, 'lookahead'),
    (dict(prefetch=-1), ValueError, 'prefetch'),
    (dict(pin_memory=True), ValueError, 'pin_memory'),
    (dict(replace='yes'), ValueError, 'replace'),
    (dict(disjoint=1), ValueError, 'disjoint'),
    (dict(drop_last=None), ValueError, 'drop_last'),
    (dict(time_attr='time'), ValueError, 'neither a node-level'),
    (dict(input_nodes=torch.tensor([0, 1]), input_time=torch.tensor([3, 4])),
     ValueError, "'input_time' is for temporal sampling"),
    (dict(input_time=torch.tensor([3])), ValueError, 'seeds of all ranks'),
    (dict(subgraph_type='full'), ValueError, "'subgraph_type' must be"),
    (dict(subgraph_type='induced', disjoint=True), ValueError,
     "'disjoint' sampling not supported"),
    (dict(weight_attr='w'), ValueError, 'not an edge attribute'),
    (dict(num_workers=-1), ValueError, 'num_workers'),
    (dict(num_workers=2, prefetch=2), ValueError, 'needs num_workers=0'),
    (dict(num_workers=2, persistent_workers=True), ValueError,
     'persistent_workers'),
    (dict(transform_sampler_output='f'), ValueError,
     "'transform_sampler_output' must be callable"),
    (dict(num_neighbors={('a', 'b', 'c'): [2]}), ValueError,
     'per edge type'),
    (dict(input_nodes=('paper', torch.tensor([0]))), ValueError,
     'heterogeneous'),
    (dict(input_nodes=torch.zeros(5, dtype=torch.bool)), ValueError,
     'one entry per vertex'),
    (dict(input_nodes=torch.tensor([500])), ValueError, 'global vertex'),
    (dict(frobnicate=1), ValueError, 'frobnicate'),
    (dict(seed='x'), ValueError, 'seed'),
    (dict(expected_fingerprint='0' * 16), ValueError, 'another graph'),
    (dict(sampling_device='tpu:0'), ValueError, 'sampling_device'),
    (dict(feature_device='tpu:0'), ValueError, 'feature_device'),
])
def test_partition_folder_arguments(tmp_path, kwargs, error, match):
    info = partition_graph(graph(), 1, tmp_path / 'p', 'contiguous',
                           progress=False)
    kwargs = {'num_neighbors': [2], 'batch_size': 4, 'device': 'cpu',
              **kwargs}
    with pytest.raises(error, match=match):
        HybridNeighborLoader(str(info.out_dir), **kwargs)
    # Defaults passed explicitly are fine:
    HybridNeighborLoader(str(info.out_dir), [2], batch_size=4, device='cpu',
                         placement=PlacementOptions(), prefetch=0,
                         replace=False, num_workers=0,
                         cache=CacheOptions(), sampling_device='cpu',
                         feature_device='cpu')


# Faults ######################################################################

def _mismatch_worker(rank, world_size, good, others):
    messages = []
    for other in others:
        try:
            HybridNeighborLoader(good if rank == 0 else other, [2],
                                 batch_size=4, device='cpu')
        except ValueError as exc:
            messages.append(str(exc))
        else:
            messages.append(None)
    # The group still works: a folder that matches loads on both ranks.
    loader = HybridNeighborLoader(good, [2], batch_size=4, device='cpu')
    return messages, len(list(loader))


def test_mismatched_folders_rejected_on_every_rank(tmp_path):
    data = graph()
    good = partition_graph(data, 2, tmp_path / 'good', 'random',
                           progress=False).out_dir
    other_graph = partition_graph(graph(seed=4), 2, tmp_path / 'graph',
                                  'random', progress=False).out_dir
    three = partition_graph(data, 3, tmp_path / 'three', 'random',
                            progress=False).out_dir
    reseeded = partition_graph(data, 2, tmp_path / 'seed', 'random', seed=9,
                               progress=False).out_dir
    again = partition_graph(data, 2, tmp_path / 'again', 'random',
                            progress=False).out_dir
    start = time.monotonic()
    out = run_workers(_mismatch_worker, 2,
                      args=(str(good), [str(other_graph), str(three),
                                        str(reseeded), str(again)]),
                      timeout=60, pg_timeout=20)
    assert time.monotonic() - start < 15.0  # No collective waited.
    for rank, (messages, num_batches) in enumerate(out):
        assert num_batches > 0
        graph_msg, three_msg, seed_msg, again_msg = messages
        assert 'another graph' in graph_msg and 'fingerprint' in graph_msg
        assert 'another partitioning' in seed_msg
        if rank == 1:
            assert '3 parts' in three_msg and '2 parts were expected' \
                in three_msg
        else:
            assert 'rank 1 could not load its part' in three_msg
            assert '3 parts' in three_msg
        # The same partitioning written twice belongs together:
        assert again_msg is None


FAIL_AT = 2


def _dying_worker(rank, world_size, out_dir):
    from pyg_orch.parallel.watchdog import RankFailedError, rank_guard
    loader = HybridNeighborLoader(out_dir, [3, 3], batch_size=4,
                                  device='cpu')
    assert len(loader) > FAIL_AT + 1
    waiting = None
    try:
        with rank_guard(timeout=10):
            for step, batch in enumerate(loader):
                if rank == 1 and step == FAIL_AT:
                    raise ValueError(f'rank 1 fails at step {step}')
                waiting = time.monotonic()  # Rank 0 next waits in sampling.
    except ValueError:
        time.sleep(4.0)  # Alive, its process group aborted by the guard.
        raise
    except RankFailedError as exc:
        return exc.failed_rank, str(exc), time.monotonic() - waiting
    return 'finished'


def test_rank_lost_mid_epoch_raises_in_the_others(tmp_path):
    info = partition_graph(graph(), 2, tmp_path / 'p', 'random',
                           progress=False)
    start = time.monotonic()
    out = run_workers(_dying_worker, 2, args=(str(info.out_dir), ),
                      timeout=60, pg_timeout=30, return_exceptions=True)
    assert isinstance(out[1], ValueError) and 'step 2' in str(out[1])
    failed_rank, msg, waited = out[0]
    assert failed_rank == 1 and 'rank 1 fails at step 2' in msg
    assert waited < 3.0  # Not the process group's 30 s timeout.
    assert time.monotonic() - start < 20.0


def test_comm_device(monkeypatch):
    import torch.distributed as dist

    from pyg_orch.parallel import exchange as collective
    assert collective.comm_device() == torch.device('cpu')  # No group.
    monkeypatch.setattr(dist, 'is_initialized', lambda: True)
    monkeypatch.setattr(torch.cuda, 'current_device', lambda: 1)
    for backend, device in [('gloo', 'cpu'), ('nccl', 'cuda:1'),
                            ('cpu:gloo,cuda:nccl', 'cpu'),
                            ('cuda:nccl', 'cuda:1')]:
        monkeypatch.setattr(dist, 'get_backend',
                            lambda group=None, b=backend: b)
        assert collective.comm_device() == torch.device(device), backend


def _hetero_hybrid_worker(rank, world_size, out_dir):
    _, count = check_hetero_folder_loader(out_dir, rank, 'cpu', FANOUTS)
    # Built by two worker threads (views of every node and edge type's
    # gather): the same batches.
    _, with_workers = check_hetero_folder_loader(out_dir, rank, 'cpu',
                                                 FANOUTS, num_workers=2)
    assert with_workers == count
    # A view exchanges over its own group at every level, shares the rows
    # and the hot nodes, and leaves the original as it was:
    from pyg_orch.parallel.exchange import gloo_twin
    loader = HybridNeighborLoader(out_dir, FANOUTS, batch_size=6,
                                  input_nodes='paper', device='cpu')
    twin = gloo_twin(loader.partition_batches.group)
    gather = loader.partition_batches.gather.worker_view(twin)
    subs = list(gather.by_node_type.values()) + list(
        gather.by_edge_type.values())
    assert subs and all(g.group is twin for g in subs)
    assert all(g.group is loader.partition_batches.group for g in list(
        loader.partition_batches.gather.by_node_type.values()) + list(
            loader.partition_batches.gather.by_edge_type.values()))
    assert gather.by_node_type['paper']._attrs['x'] is \
        loader.partition_batches.gather.by_node_type['paper']._attrs['x']
    sampler = loader.node_sampler.worker_view(twin)
    assert sampler.group is twin and loader.node_sampler.group is loader.partition_batches.group
    hot = {'paper': torch.zeros(150, dtype=torch.bool)}
    loader.node_sampler.set_hot_nodes(hot)
    assert torch.equal(sampler.hot_nodes['paper'], hot['paper'])
    # A node type: all of the part's vertices of it.
    by_type = HybridNeighborLoader(out_dir, [2], batch_size=50,
                                   input_nodes='author', device='cpu')
    part = load_partition(out_dir, rank)
    assert torch.equal(by_type.partition_batches.input_nodes, part.node_ids['author'])
    return count


def test_hybrid_loader_on_hetero_partition_folder(tmp_path):
    from conftest import small_paper_partition
    info = small_paper_partition(tmp_path / 'h')
    out = run_workers(_hetero_hybrid_worker, 2, args=(str(info.out_dir), ),
                      timeout=60)
    assert all(n > 0 for n in out)


def _degree_cache_worker(rank, world_size, out_dir, hetero):
    kw = dict(batch_size=4, device='cpu', shuffle=True, seed=3)
    if hetero:
        kw['input_nodes'] = 'a'
    else:
        kw['input_nodes'] = global_seeds()
    cached = HybridNeighborLoader(out_dir, [3, 2],
                                  cache=CacheOptions(ranking='degree'),
                                  cache_size=5, **kw)
    plain = HybridNeighborLoader(out_dir, [3, 2], **kw)
    ours, ref = list(cached), list(plain)
    stats = cached.batch_stats
    gather = cached.partition_batches.gather
    slots = ({t: g.cache_slot for t, g in gather.by_node_type.items()}
             if hetero else {None: gather.cache_slot})
    return ours, ref, stats, {t: (s >= 0).nonzero().view(-1)
                              for t, s in slots.items()}


@pytest.mark.parametrize('hetero', [False, True])
def test_degree_ranked_cache_on_partition_folder(tmp_path, hetero):
    from conftest import temporal_hetero_graph
    data = temporal_hetero_graph() if hetero else graph()
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    out = run_workers(_degree_cache_worker, 2,
                      args=(str(info.out_dir), hetero), timeout=120)
    for rank, (ours, ref, stats, cached) in enumerate(out):
        part = load_partition(info.out_dir, rank)
        owner = part.node_part if hetero else {None: part.node_part}
        # The remote vertices that are the sources of the most in-edges of
        # this part's vertices, counted on the whole graph (one ranking over
        # all node types, in their order):
        flat = []
        for t in owner:
            counts = torch.zeros(owner[t].numel(), dtype=torch.int64)
            for et in (data.edge_types if hetero else [None]):
                src, dst = (data[et] if hetero else data).edge_index
                if hetero and et[0] != t:
                    continue
                mine = owner[et[-1] if hetero else None][dst] == rank
                counts += torch.bincount(src[mine],
                                         minlength=counts.numel())
            counts[owner[t] == rank] = 0
            flat.append(counts)
        counts = torch.cat(flat)
        k = min(5, int((counts > 0).sum()))
        want = torch.sort(counts, descending=True,
                          stable=True).indices[:k].sort().values
        offset = 0
        for t, c in zip(owner, flat):
            mine = want[(want >= offset) & (want < offset + c.numel())]
            assert torch.equal(cached[t], mine - offset), t
            offset += c.numel()
        assert sum(c.numel() for c in cached.values()) == k == 5
        # The same batches as without a cache (nothing pre-sampled), some
        # rows served from it:
        assert len(ours) == len(ref) > 0
        for a, b in zip(ours, ref):
            for store_a, store_b in zip(a.stores, b.stores):
                assert set(store_a.keys()) == set(store_b.keys())
                for key, value in store_a.items():
                    if isinstance(value, torch.Tensor):
                        assert torch.equal(value, store_b[key]), key
        assert sum(s['cached_rows'] for s in stats) > 0
