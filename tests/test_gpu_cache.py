"""GPUCachedFeatureStore over any PyG FeatureStore (PyG's LocalFeatureStore,
our TieredFeatureStore, a partition's PartitionFeatureStore across two gloo
ranks): every read equals the wrapped store's read (ids in any order,
repeats, empty, slices, heterogeneous attributes); hits and misses counted;
'lru' evicts the least recently read rows as a plain model of it does;
'static' never changes. Also the RowCache underneath on its own."""
import pytest
import torch
from conftest import random_graph
from multiproc import run_workers
from torch_geometric.data import FeatureStore
from torch_geometric.distributed import LocalFeatureStore

from pyg_orch import CacheOptions
from pyg_orch.distributed import open_stores, partition_graph
from pyg_orch.features.gpu_cache import RowCache
from pyg_orch.gpu import GPUCachedFeatureStore, TieredFeatureStore

ROW = 4 * 3  # Bytes of a row of x (3 float32).


def local_store(seed=0):
    gen = torch.Generator().manual_seed(seed)
    store = LocalFeatureStore()
    xs = {None: torch.randn(20, 3, generator=gen),
          'paper': torch.randn(12, 3, generator=gen),
          'author': torch.randn(7, 5, generator=gen)}
    for group, x in xs.items():
        store.put_tensor(x, group_name=group, attr_name='x')
    y = torch.randint(0, 4, (12, ), generator=gen)
    store.put_tensor(y, group_name='paper', attr_name='y')
    return store, xs, y


def requests():
    yield torch.tensor([3, 0, 19, 3, 3, 7])  # Repeats, any order.
    yield torch.empty(0, dtype=torch.long)
    yield torch.tensor([11, 10, 9, 8], dtype=torch.int32)
    yield torch.randperm(20)


def read(store, group, name, index):
    return store.get_tensor(group_name=group, attr_name=name, index=index)


@pytest.mark.parametrize('policy', ['static', 'lru'])
def test_reads_equal_the_wrapped_store(policy):
    store, xs, y = local_store()
    counts = {None: torch.arange(20), 'paper': torch.arange(12).flip(0)}
    cached = GPUCachedFeatureStore(
        store, CacheOptions(gpu_memory_budget=10 * ROW, policy=policy),
        device='cpu', counts=counts)
    assert isinstance(cached, FeatureStore)
    assert cached.get_all_tensor_attrs() == store.get_all_tensor_attrs()
    for _ in range(2):
        for index in requests():
            for group in (None, 'paper'):
                index = index[index < xs[group].size(0)]
                assert torch.equal(read(cached, group, 'x', index),
                                   xs[group][index.long()])
            assert torch.equal(read(cached, 'paper', 'y', index % 12),
                               y[(index % 12).long()])
            assert torch.equal(read(cached, 'author', 'x', index % 7),
                               xs['author'][(index % 7).long()])
    # No index, a slice, and PyG's store[...] spelling:
    assert torch.equal(read(cached, None, 'x', None), xs[None])
    assert torch.equal(cached[None, 'x', 2:9], xs[None][2:9])
    assert cached.get_tensor_size(group_name='author', attr_name='x') == \
        (7, 5)
    # Several attributes in one call:
    i, j = torch.tensor([1, 5, 1]), torch.tensor([6, 0])
    got = cached.multi_get_tensor([
        ('paper', 'x', i), ('author', 'x', j), ('paper', 'y', i)])
    assert torch.equal(got[0], xs['paper'][i])
    assert torch.equal(got[1], xs['author'][j])
    assert torch.equal(got[2], y[i])


def test_static_cache_holds_the_top_ranked_rows_and_never_changes():
    store, xs, _ = local_store()
    counts = torch.zeros(20)
    counts[[4, 9, 2, 17]] = torch.tensor([5., 9., 1., 7.])
    cached = GPUCachedFeatureStore(
        store, CacheOptions(gpu_memory_budget=3 * ROW, cache_ratio=1.0),
        device='cpu', counts={None: counts})
    cache = cached.caches[(None, 'x')]
    assert cache.ids.tolist() == [9, 17, 4]  # Hottest first.
    slot, rows = cache.slot.clone(), cache.rows['x'].clone()
    assert torch.equal(rows, xs[None][[9, 17, 4]])
    cached.reset_stats()
    index = torch.tensor([9, 1, 4, 4, 0, 17, 3])
    for _ in range(3):
        assert torch.equal(read(cached, None, 'x', index), xs[None][index])
    assert torch.equal(cache.slot, slot)
    assert torch.equal(cache.rows['x'], rows)
    # Hits and misses of the x of the homogeneous group only:
    assert (cache.hits, cache.misses) == (3 * 4, 3 * 3)


def test_degree_ranking_caches_the_sources_of_most_edges():
    store, xs, _ = local_store()
    edge_index = torch.tensor([[5, 5, 5, 8, 8, 1], [0, 1, 2, 3, 4, 5]])
    cached = GPUCachedFeatureStore(
        store, CacheOptions(gpu_memory_budget=5 * ROW, ranking='degree'),
        device='cpu', edge_index={('v', 'to', 'v'): edge_index,
                                  ('paper', 'to', 'paper'): edge_index})
    assert cached.caches[('paper', 'x')].ids.tolist()[:2] == [5, 8]
    assert cached.num_cached[(None, 'x')] == 0  # No edges: not ranked up.
    index = torch.tensor([5, 0, 8])
    assert torch.equal(read(cached, 'paper', 'x', index), xs['paper'][index])
    with pytest.raises(ValueError, match="needs 'edge_index'"):
        GPUCachedFeatureStore(store, CacheOptions(ranking='degree'),
                              device='cpu')


class LRUModel:
    r"""A plain LRU of the cache's rule: a batch's hits are read at its
    step; its distinct misses, smallest ids first, take the free slots, then
    the slots read least recently (the lowest slot of equal steps)."""
    def __init__(self, capacity):
        self.ids = [-1] * capacity
        self.used = [-1] * capacity
        self.step = 0

    def batch(self, ids):
        self.step += 1
        for i in ids:
            if i in self.ids:
                self.used[self.ids.index(i)] = self.step
        misses = sorted({i for i in ids if i not in self.ids})
        misses = misses[:len(self.ids)]
        victims = sorted(range(len(self.ids)),
                         key=lambda s: (self.used[s], s))[:len(misses)]
        for s, i in zip(victims, misses):
            self.ids[s], self.used[s] = i, self.step


def test_lru_evicts_the_least_recently_read_rows():
    _, xs, _ = local_store()
    store = LocalFeatureStore()
    store.put_tensor(xs[None], group_name=None, attr_name='x')
    cached = GPUCachedFeatureStore(
        store, CacheOptions(gpu_memory_budget=5 * ROW, policy='lru'),
        device='cpu')
    cache = cached.caches[(None, 'x')]
    assert cache.capacity == 5 and cache.num_cached == 0  # Starts empty.
    model = LRUModel(5)
    gen = torch.Generator().manual_seed(3)
    hits = misses = 0
    for step in range(30):
        index = torch.randint(0, 9, (int(torch.randint(0, 7, (1, ),
                                                          generator=gen)), ),
                              generator=gen)
        held = set(model.ids)
        hits += sum(int(i) in held for i in index)
        misses += sum(int(i) not in held for i in index)
        assert torch.equal(read(cached, None, 'x', index), xs[None][index])
        model.batch(index.tolist())
        assert cache.slot_id.tolist() == model.ids, step
        slots = (cache.slot_id >= 0).nonzero().view(-1)
        assert torch.equal(cache.slot[cache.slot_id[slots]], slots)
        assert torch.equal(cache.rows['x'][slots],
                           xs[None][cache.slot_id[slots]])
    assert (cache.hits, cache.misses) == (hits, misses)


def test_over_our_tiered_store():
    x = torch.randn(30, 4)
    tiered = TieredFeatureStore(x, 'cpu', gpu_memory_budget=0)
    cached = GPUCachedFeatureStore(
        tiered, CacheOptions(gpu_memory_budget=6 * 16), device='cpu',
        counts=torch.arange(30))
    assert cached.caches[(None, 'x')].ids.tolist() == list(range(29, 23, -1))
    for index in (torch.tensor([29, 0, 25, 0]), torch.arange(30).flip(0),
                  torch.empty(0, dtype=torch.long)):
        assert torch.equal(cached[None, 'x', index], x[index])
    assert cached.hits == 2 + 6 and cached.misses == 2 + 24


def test_bad_input_names_the_argument():
    store, _, _ = local_store()
    with pytest.raises(TypeError, match="'store'"):
        GPUCachedFeatureStore(torch.zeros(3, 2), device='cpu')
    with pytest.raises(TypeError, match="'cache'"):
        GPUCachedFeatureStore(store, {'policy': 'lru'}, device='cpu')
    with pytest.raises(ValueError, match="'cache.store'"):
        GPUCachedFeatureStore(store, CacheOptions(store=None), device='cpu')
    with pytest.raises(ValueError, match="'counts' of node type 'paper'"):
        GPUCachedFeatureStore(store, device='cpu',
                              counts={'paper': torch.ones(3)})
    with pytest.raises(ValueError, match=r"'counts' has .*\['papr'\]"):
        GPUCachedFeatureStore(store, device='cpu',
                              counts={'papr': torch.ones(12)})
    with pytest.raises(ValueError, match="'store' holds no tensors"):
        GPUCachedFeatureStore(LocalFeatureStore(), device='cpu')
    cached = GPUCachedFeatureStore(store, device='cpu')
    with pytest.raises(KeyError, match="'z'"):
        read(cached, None, 'z', torch.tensor([0]))
    with pytest.raises(IndexError, match=r'\[0, 20\)'):
        read(cached, None, 'x', torch.tensor([0, 20]))
    with pytest.raises(TypeError, match='integer'):
        read(cached, None, 'x', torch.tensor([0.5]))
    with pytest.raises(NotImplementedError, match='read-only'):
        cached.put_tensor(torch.zeros(2, 3), group_name=None, attr_name='x',
                          index=torch.tensor([0, 1]))


def test_row_cache_gather_over_a_fetch():
    rows = torch.arange(40.).view(10, 4)
    cache = RowCache(10)
    cache.fill(torch.tensor([7, 2]), {'x': rows[[7, 2]]})
    asked = []

    def fetch(ids):
        asked.append(ids.tolist())
        return {'x': rows[ids]}

    index = torch.tensor([2, 5, 7, 5, 0])
    assert torch.equal(cache.gather(index, fetch)['x'], rows[index])
    assert asked == [[5, 5, 0]]
    with pytest.raises(ValueError, match="'policy'"):
        RowCache(10, policy='fifo')


def _partition_worker(rank, world_size, out_dir):
    x = random_graph(60, 240, seed=7, num_features=3, num_classes=2).x
    fs, _ = open_stores(out_dir)
    # One remote row per rank: x and y come in one exchange of one row.
    remote = (fs.partition.node_part != rank).nonzero()[:1].view(-1)
    out = [torch.equal(fs[None, 'x', remote], x[remote])]
    for policy in ('static', 'lru'):
        cached = GPUCachedFeatureStore(
            fs, CacheOptions(gpu_memory_budget=30 * (ROW + 8), policy=policy),
            device='cpu', counts=torch.arange(60) % (7 + rank))
        gen = torch.Generator().manual_seed(rank)
        same = True
        for _ in range(4):
            index = torch.randint(0, 60, (9, ), generator=gen)
            same &= torch.equal(cached[None, 'x', index], x[index])
        out.append((same, cached.hits, cached.misses))
    return out


def test_over_a_partition_store(tmp_path):
    data = random_graph(60, 240, seed=7, num_features=3, num_classes=2)
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    out = run_workers(_partition_worker, 2, args=(str(info.out_dir), ),
                      timeout=120)
    for res in out:
        assert res[0]
        for same, hits, misses in res[1:]:
            assert same and hits > 0 and hits + misses == 36
