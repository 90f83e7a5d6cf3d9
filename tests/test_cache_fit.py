"""Growing the GPU feature cache into the memory training leaves free:
:meth:`TieredFeatureStore.grow_cache`, :meth:`HybridNeighborLoader.fit_gpu_cache`
and :class:`BottomLayerOffload`'s one call of it."""
import pytest
import torch
from torch_geometric.nn import GraphSAGE

from pyg_orch import CacheOptions, HybridNeighborLoader
from pyg_orch.features.cache_fit import CacheFit, GpuMemory
from pyg_orch.features.tiered import TieredFeatureStore, copy_rows
from pyg_orch.offload import BottomLayerOffload, OffloadOptions
from pyg_orch.offload.wrapper import FIT_AFTER_STEPS

from conftest import (
    node_step,
    paper_hetero_graph,
    random_graph,
    tiny_graph,
    train_steps,
)

GiB = 2**30
pytestmark = pytest.mark.usefixtures('no_thread_leaks', 'one_intra_op_thread')


def test_growth_leaves_the_working_set_and_a_reserve():
    mem = GpuMemory(total=100 * GiB, free=40 * GiB, reserved=50 * GiB,
                    allocated=40 * GiB, peak=45 * GiB)
    assert mem.working_set == 5 * GiB
    # 40 free + 10 cached by the allocator, less the working set, less the
    # default reserve (the larger of 2 GiB and 5% of 100 GiB):
    assert mem.growth() == 40 * GiB
    big = GpuMemory(total=100 * GiB, free=40 * GiB, reserved=50 * GiB,
                    allocated=40 * GiB, peak=60 * GiB)
    assert big.growth() == 25 * GiB  # 50 - 20 - 5
    assert mem.growth(reserve=0) == 45 * GiB
    assert mem.growth(reserve=60 * GiB) == 0
    small = GpuMemory(total=10 * GiB, free=3 * GiB, reserved=1 * GiB,
                      allocated=1 * GiB, peak=1 * GiB)
    assert small.growth() == 1 * GiB  # The 2 GiB floor.
    # A working set known better than the process's peak:
    assert big.growth(working_set=5 * GiB) == 40 * GiB


@pytest.mark.parametrize('chunk', [1, 7, 1000])
def test_copy_rows_in_chunks(chunk):
    g = torch.Generator().manual_seed(0)
    host = torch.randn(50, 6, generator=g)
    nodes = torch.randperm(50, generator=g)[:23]
    for in_id_order in (False, True):
        out = torch.empty(23, 6)
        copy_rows(host, nodes, out, chunk, in_id_order)
        assert torch.equal(out, host[nodes])
    out = torch.empty(50, 6)
    copy_rows(host, None, out, chunk)
    assert torch.equal(out, host)


def _store(num=300, width=8, cached=30, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(num, width, generator=g)
    hot = torch.rand(num, generator=g)
    store = TieredFeatureStore(x, 'cpu', hotness=hot,
                               gpu_memory_budget=cached * width * 4)
    return store, x, hot


def test_grow_cache_adds_the_next_hottest_rows():
    store, x, hot = _store()
    row = 8 * 4
    order = torch.argsort(hot, descending=True)
    assert set(store.cached_nodes.tolist()) == set(order[:30].tolist())
    # 50.5 rows' bytes: 50 rows.
    assert store.grow_cache(50 * row + row // 2) == 50
    assert store.num_cached == store.capacity == 80
    assert set(store.cached_nodes.tolist()) == set(order[:80].tolist())
    assert not store.full
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        index = torch.randint(0, 300, (64, ), generator=g)
        assert torch.equal(store.gather(index), x[index])
    # More than the rest: every row, gathered in place.
    assert store.grow_cache(10**9) == 220
    assert store.full and store.num_cached == 300
    index = torch.randint(0, 300, (64, ), generator=g)
    assert torch.equal(store.gather(index), x[index])
    assert store.grow_cache(10**9) == 0
    assert store.grow_cache(0) == 0


def test_grow_cache_keeps_rows_set_by_hand():
    store, x, hot = _store()
    mine = torch.tensor([5, 6, 7])
    store.set_cached_nodes(mine)
    assert store.grow_cache(4 * 8 * 4) == 4
    cached = store.cached_nodes.tolist()
    assert cached[:3] == [5, 6, 7]
    rest = [n for n in torch.argsort(hot, descending=True).tolist()
            if n not in (5, 6, 7)][:4]
    assert cached[3:] == rest
    assert torch.equal(store.gather(torch.tensor(cached)),
                       x[torch.tensor(cached)])


def test_an_allocation_failure_keeps_the_old_cache(monkeypatch):
    store, x, _ = _store()
    before = store.cached_nodes.clone()
    load = store._load_rows

    def small_only(nodes, full):  # A GPU with room for 30 rows only.
        if nodes.numel() > 30:
            raise torch.OutOfMemoryError('out of memory (simulated)')
        return load(nodes, full)

    monkeypatch.setattr(store, '_load_rows', small_only)
    with pytest.raises(torch.OutOfMemoryError):
        store.grow_cache(10**6)
    assert torch.equal(store.cached_nodes, before)
    assert store.capacity == 30 and not store.full
    index = torch.arange(300)
    assert torch.equal(store.gather(index), x)
    assert store.stats.cache_rows == 30

    def old_only(nodes, full):  # Room for the rows cached now, no other.
        if not torch.equal(nodes, before):
            raise torch.OutOfMemoryError('out of memory (simulated)')
        return load(nodes, full)

    monkeypatch.setattr(store, '_load_rows', old_only)
    with pytest.raises(torch.OutOfMemoryError):
        store.set_cached_nodes(torch.arange(30))
    assert torch.equal(store.cached_nodes, before)
    assert torch.equal(store.gather(index), x)


def test_grow_cache_checks_its_argument():
    store, _, _ = _store()
    with pytest.raises(ValueError, match="'num_bytes'"):
        store.grow_cache(-1)
    with pytest.raises(ValueError, match="'num_bytes'"):
        store.grow_cache(2.5)


def test_fit_gpu_cache_without_a_gpu_says_why():
    data = random_graph(200, 1500, num_features=8, num_classes=3)
    loader = HybridNeighborLoader(data, [5, 5], batch_size=32, device='cpu')
    fit = loader.fit_gpu_cache()
    assert isinstance(fit, CacheFit) and not fit.grew
    assert fit.reason == 'the loader has no GPU feature store'
    store = TieredFeatureStore(data.x, 'cpu', gpu_memory_budget=10 * 8 * 4)
    loader = HybridNeighborLoader(data, [5, 5], batch_size=32, device='cpu',
                                  cache=CacheOptions(store=store))
    fit = loader.fit_gpu_cache()
    assert (fit.rows_before, fit.rows_after, fit.num_rows) == (10, 10, 200)
    assert 'not a GPU' in fit.reason
    with pytest.raises(ValueError, match="'reserve'"):
        loader.fit_gpu_cache(reserve=-1)
    with pytest.raises(ValueError, match="'working_set'"):
        loader.fit_gpu_cache(working_set=1.5)


def _train(model, loader, steps):
    train_steps(model, loader, steps, node_step)


@pytest.mark.parametrize('fit', [True, False])
def test_offload_fits_the_cache_once_after_its_decision(fit):
    data = tiny_graph()
    loader = HybridNeighborLoader(data, [-1, -1], batch_size=4, device='cpu')
    calls = []

    def counted(reserve=None, working_set=None):  # The loader's, counted.
        calls.append(model.steps)
        return HybridNeighborLoader.fit_gpu_cache(loader, reserve,
                                                  working_set)

    loader.fit_gpu_cache = counted
    torch.manual_seed(0)
    model = BottomLayerOffload(GraphSAGE(8, 16, 2, 3), loader,
                               options=OffloadOptions(hot_ratio=0.1,
                                                      fit_gpu_cache=fit))
    _train(model, loader, FIT_AFTER_STEPS)
    assert calls == []
    _train(model, loader, 3 * FIT_AFTER_STEPS)
    stats = model.stats()['gpu_cache_fit']
    if fit:
        assert len(calls) == 1 and calls[0] >= FIT_AFTER_STEPS
        assert stats['reason'] == 'the loader has no GPU feature store'
        assert stats['grew'] is False
    else:
        assert calls == [] and stats['reason'] == 'fit_gpu_cache=False'
    model.close()


@pytest.mark.gpu
def test_fit_gpu_cache_grows_to_every_row_on_a_gpu():
    data = random_graph(3000, 30000, num_features=16, num_classes=4)
    loader = HybridNeighborLoader(
        data, [10, 5], batch_size=128, device='cuda', shuffle=True,
        cache=CacheOptions(gpu_memory_budget=100 * 16 * 4))
    assert loader.feature_store.num_cached == 100
    torch.manual_seed(0)
    model = GraphSAGE(16, 32, 2, 4).cuda()
    _train(model, loader, 4)
    fit = loader.fit_gpu_cache()
    assert fit.grew and fit.rows_after == fit.num_rows == 3000
    assert fit.bytes_added == 2900 * 16 * 4
    assert fit.memory.total > 0
    assert loader.feature_store.full
    for batch in loader:
        assert torch.equal(batch.x.cpu(), data.x[batch.n_id.cpu()])
    assert loader.stats()['memory']['feature_cache_rows'] == 3000
    assert loader.fit_gpu_cache().reason == 'every row is cached already'


@pytest.mark.gpu
def test_offload_fits_the_loader_cache_on_a_gpu():
    data = random_graph(3000, 30000, num_features=16, num_classes=4)
    loader = HybridNeighborLoader(
        data, [10, 5], batch_size=64, device='cuda',
        cache=CacheOptions(gpu_memory_budget=100 * 16 * 4))
    torch.manual_seed(0)
    model = BottomLayerOffload(GraphSAGE(16, 32, 2, 4).cuda(), loader,
                               options=OffloadOptions(hot_ratio=0.05))
    _train(model, loader, 4 * FIT_AFTER_STEPS)
    fit = model.stats()['gpu_cache_fit']
    assert fit['grew'] and fit['rows_after'] == 3000
    model.close()


def test_link_loader_fits_its_cache_too():
    from pyg_orch import HybridLinkNeighborLoader

    data = random_graph(200, 1500, num_features=8, num_classes=3)
    store = TieredFeatureStore(data.x, 'cpu', gpu_memory_budget=10 * 8 * 4)
    loader = HybridLinkNeighborLoader(data, [5, 5], batch_size=32,
                                      edge_label_index=data.edge_index,
                                      device='cpu',
                                      cache=CacheOptions(store=store))
    fit = loader.fit_gpu_cache()
    assert (fit.rows_before, fit.rows_after) == (10, 10) and not fit.grew
    assert 'not a GPU' in fit.reason


def test_a_hetero_cache_grows_across_types_by_hotness_per_byte():
    from torch_geometric.data import HeteroData

    from pyg_orch.features.gpu_cache import split_budget
    from pyg_orch.gpu import HeteroTieredFeatureStore

    g = torch.Generator().manual_seed(3)
    x = {'a': torch.randn(30, 4, generator=g),
         'b': torch.randn(20, 8, generator=g)}
    hot = {'a': torch.rand(30, generator=g), 'b': torch.rand(20, generator=g)}
    rows = {'a': 16, 'b': 32}
    store = HeteroTieredFeatureStore(x, 'cpu', hotness=hot,
                                     gpu_memory_budget=200)
    first = split_budget({'a': 30, 'b': 20}, rows, hot, 200)
    for t in x:  # Built as the split chose.
        assert set(store.stores[t].cached_nodes.tolist()) == \
            set(first[t].tolist())
    before = store.cached_bytes
    added = store.grow_cache(300)
    assert added > 0 and store.cached_bytes - before <= 300
    grown = split_budget({'a': 30, 'b': 20}, rows, hot, before + 300)
    for t in x:  # The same as a split of the larger budget.
        assert set(store.stores[t].cached_nodes.tolist()) == \
            set(grown[t].tolist())
        index = torch.randint(0, x[t].size(0), (40, ), generator=g)
        assert torch.equal(store.gather(t, index), x[t][index])
    rest = store.num_rows - store.num_cached
    assert rest > 0 and store.grow_cache(10**6) == rest
    assert store.num_cached == store.num_rows == 50
    with pytest.raises(ValueError, match="'num_bytes'"):
        store.grow_cache(-1)

    # Through a loader on the CPU: the store is not on a GPU.
    data = HeteroData()
    data['a'].x, data['b'].x = x['a'], x['b']
    data['a', 'to', 'b'].edge_index = torch.stack(
        [torch.randint(0, 30, (80, ), generator=g),
         torch.randint(0, 20, (80, ), generator=g)])
    data['b', 'to', 'a'].edge_index = data['a', 'to', 'b'].edge_index.flip(0)
    store = HeteroTieredFeatureStore(x, 'cpu', hotness=hot,
                                     gpu_memory_budget=200)
    loader = HybridNeighborLoader(data, [3, 3], batch_size=8,
                                  input_nodes='a', device='cpu',
                                  cache=CacheOptions(store=store))
    fit = loader.fit_gpu_cache()
    assert fit.num_rows == 50 and not fit.grew and 'not a GPU' in fit.reason


@pytest.mark.gpu
def test_fit_gpu_cache_grows_a_hetero_cache_on_a_gpu():
    data = paper_hetero_graph(num_papers=2000, num_authors=1500)
    loader = HybridNeighborLoader(
        data, [5, 5], batch_size=64, device='cuda',
        input_nodes=('paper', data['paper'].train_mask),
        cache=CacheOptions(gpu_memory_budget=100 * 16 * 4))
    assert loader.feature_store.num_cached == 100
    for _ in loader:
        pass
    fit = loader.fit_gpu_cache()
    assert fit.grew and fit.rows_after == fit.num_rows == 2000 + 1500 + 20
    for batch in loader:
        for t in batch.node_types:
            assert torch.equal(batch[t].x.cpu(),
                               data[t].x[batch[t].n_id.cpu()])


def test_hottest_first_ranks_ties_in_id_order():
    from pyg_orch.features.gpu_cache import hottest_first
    hot = torch.tensor([1.0, 3.0, 1.0, 3.0, 0.0, 2.0])
    assert hottest_first(hot, 6).tolist() == [1, 3, 5, 0, 2, 4]
    assert hottest_first(None, 3).tolist() == [0, 1, 2]


@pytest.mark.gpu
def test_sorting_on_the_gpu_gives_the_cpu_order():
    # Store construction and the choice of replicated lists sort on the
    # GPU: the same order as on the CPU, many ties included.
    from pyg_orch.core.devices import argsort_descending
    from pyg_orch.topology.sharded import choose_replicated
    gen = torch.Generator().manual_seed(0)
    values = torch.randint(0, 50, (200000, ), generator=gen).double()
    cpu = argsort_descending(values)
    assert torch.equal(cpu, torch.argsort(values, descending=True,
                                          stable=True))
    on_gpu = argsort_descending(values, torch.device('cuda'))
    assert on_gpu.device.type == 'cpu' and torch.equal(on_gpu, cpu)
    deg = torch.randint(0, 30, (50000, ), generator=gen)
    colptr = torch.cat([torch.zeros(1, dtype=torch.long), deg.cumsum(0)])
    score = torch.randint(0, 5, (50000, ), generator=gen).double()
    args = (colptr, 100000, 4, score)
    assert torch.equal(
        choose_replicated(*args, exclude=range(0, 1000), max_fanout=10),
        choose_replicated(*args, exclude=range(0, 1000), max_fanout=10,
                          device=torch.device('cuda')))


def test_bench_cache_fill_tiny(monkeypatch, tmp_path):
    import importlib
    from pathlib import Path
    monkeypatch.syspath_prepend(
        str(Path(__file__).resolve().parents[1] / 'benchmarks'))
    bench = importlib.import_module('bench_cache_fill')
    res = bench.main(['--nodes', '5000', '--rows', '3000', '--width', '4',
                      '--repeats', '2', '--device', 'cpu', '--out',
                      str(tmp_path / 'r.json')])
    assert (tmp_path / 'r.json').exists()
    for order in ('given_order', 'id_order'):
        r = res[order]
        assert r['rows_right'] and r['min_s'] <= r['median_s'] <= r['max_s']
    with pytest.raises(SystemExit):
        bench.main(['--nodes', '10', '--rows', '11', '--device', 'cpu'])
