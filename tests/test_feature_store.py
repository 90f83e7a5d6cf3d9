import os

import pytest
import torch

from pyg_orch import CacheOptions, HybridNeighborLoader
from pyg_orch.features.tiered import TieredFeatureStore, parse_budget
from pyg_orch.sampling.triton.fused_sampler import triton_available
from pyg_orch.sampling.presample import count_node_access

from conftest import random_graph

METHODS = ['cpu']
if triton_available() and (torch.cuda.is_available()
                           or os.environ.get('TRITON_INTERPRET') == '1'):
    METHODS.append('uva')
DEVICE = 'cuda' if torch.cuda.is_available() else 'cpu'


@pytest.fixture
def graph():
    return random_graph(500, 5000, num_features=24, num_classes=5,
                        edge_dim=3)


@pytest.mark.parametrize('method', METHODS)
@pytest.mark.parametrize('reuse', [False, True])
@pytest.mark.parametrize('width', [1, 24, 130])
def test_gather_is_exact(method, reuse, width):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(700, width, generator=g)
    store = TieredFeatureStore(x, DEVICE, hotness=torch.rand(700,
                                                             generator=g),
                               gpu_memory_budget=70 * width * 4,
                               method=method, reuse=reuse)
    assert store.num_cached == 70
    for _ in range(4):
        index = torch.randint(0, 700, (256, ), generator=g)
        assert torch.equal(store.gather(index).cpu(), x[index])
    stats = store.stats.as_dict()
    assert stats['rows'] == 4 * 256
    assert stats['cache_rows'] + stats['reused_rows'] + stats[
        'host_rows'] == stats['rows']
    if reuse:
        assert stats['reused_rows'] > 0
    else:
        assert stats['reused_rows'] == 0
    assert stats['h2d_bytes_per_batch'] == pytest.approx(
        stats['host_rows'] * width * 4 / 4)


@pytest.mark.skipif('uva' not in METHODS, reason='needs Triton')
@pytest.mark.parametrize('blocks', [1, 3])
def test_capped_gather_grid_is_exact(blocks):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(900, 20, generator=g)
    hot = torch.rand(900, generator=g)
    stores = [
        TieredFeatureStore(x, DEVICE, hotness=hot, cache_ratio=0.1,
                           gpu_memory_budget=10**9, method='uva',
                           gather_blocks=b) for b in (None, blocks)
    ]
    for _ in range(3):
        index = torch.randperm(900, generator=g)[:500]
        for store in stores:
            assert torch.equal(store.gather(index).cpu(), x[index])
    assert stores[0].stats == stores[1].stats


@pytest.mark.parametrize('method', METHODS)
def test_full_cache_gathers_by_index_select(method):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(300, 7, generator=g)
    store = TieredFeatureStore(x, DEVICE, hotness=torch.rand(300, generator=g),
                               gpu_memory_budget=10**9, method=method)
    assert store.full and store.num_cached == 300
    for _ in range(2):
        index = torch.randint(0, 300, (128, ), generator=g)
        assert torch.equal(store.gather(index).cpu(), x[index])
    stats = store.stats
    assert (stats.rows, stats.cache_rows, stats.host_rows) == (256, 256, 0)
    store.set_cached_nodes(torch.arange(10, 40))  # No longer full.
    assert not store.full
    index = torch.randint(0, 300, (128, ), generator=g)
    assert torch.equal(store.gather(index).cpu(), x[index])
    assert store.stats.host_rows > 0


@pytest.mark.parametrize('method', METHODS)
def test_hottest_rows_are_cached(method):
    x = torch.randn(100, 4)
    hotness = torch.zeros(100)
    hotness[[7, 42, 99]] = torch.tensor([3.0, 2.0, 1.0])
    store = TieredFeatureStore(x, DEVICE, hotness=hotness, cache_ratio=0.02,
                               gpu_memory_budget=10**9,
                               method=method, reuse=False)
    assert store.cached_nodes.tolist() == [7, 42]
    store.gather(torch.tensor([7, 42, 99, 7]))
    assert store.stats.cache_rows == 3 and store.stats.host_rows == 1


@pytest.mark.parametrize('method', METHODS)
def test_reuse_skips_rows_modified_in_place(method):
    x = torch.randn(50, 8)
    store = TieredFeatureStore(x, DEVICE, gpu_memory_budget=0, method=method)
    first = store.gather(torch.arange(10))
    first.mul_(0)  # The user changed the batch in place: no reuse now.
    again = store.gather(torch.arange(10))
    assert torch.equal(again.cpu(), x[:10])
    assert store.stats.reused_rows == 0


def test_feature_store_interface():
    from torch_geometric.data import TensorAttr
    x = torch.randn(30, 5)
    store = TieredFeatureStore(x, DEVICE, gpu_memory_budget=0, method='cpu')
    attr = TensorAttr(group_name=None, attr_name='x',
                      index=torch.tensor([3, 1]))
    assert torch.equal(store.get_tensor(attr).cpu(), x[[3, 1]])
    assert store.get_tensor_size(attr) == (30, 5)
    with pytest.raises(KeyError, match="'y'"):
        store.get_tensor(
            TensorAttr(group_name=None, attr_name='y',
                       index=torch.tensor([0])))
    with pytest.raises(NotImplementedError):
        store.put_tensor(x, group_name=None, attr_name='x', index=None)


def test_bad_gather_blocks():
    for bad in (0, -2, 1.5, True, '4', 'max'):
        with pytest.raises(ValueError, match='gather_blocks'):
            TieredFeatureStore(torch.randn(4, 2), DEVICE, gather_blocks=bad)


def test_bad_arguments():
    x = torch.randn(10, 3)
    with pytest.raises(ValueError, match='gpu_memory_budget'):
        parse_budget(1.5, torch.device('cpu'))
    with pytest.raises(ValueError, match='gpu_memory_budget'):
        parse_budget('lots', torch.device('cpu'))
    with pytest.raises(ValueError, match='method'):
        TieredFeatureStore(x, 'cpu', method='fast')
    with pytest.raises(ValueError, match='hotness'):
        TieredFeatureStore(x, 'cpu', hotness=torch.ones(3))
    with pytest.raises(ValueError, match="'x'"):
        TieredFeatureStore(torch.ones(10), 'cpu')
    with pytest.raises(ValueError, match='cache_ratio'):
        TieredFeatureStore(x, 'cpu', cache_ratio=2.0)


def test_loader_with_feature_store_matches_plain_loader(graph):
    store = TieredFeatureStore(graph.x, DEVICE, gpu_memory_budget=10**9,
                               cache_ratio=0.1, method='cpu')
    kwargs = dict(batch_size=64, seed=3, device=DEVICE, prefetch=0)
    tiered = HybridNeighborLoader(graph, [5, 3],
                                  cache=CacheOptions(store=store), **kwargs)
    plain = HybridNeighborLoader(graph, [5, 3],
                                 cache=CacheOptions(store=None), **kwargs)
    assert tiered.feature_store is store
    for a, b in zip(tiered, plain):
        assert set(a.keys()) == set(b.keys())
        for key in a.keys():
            va, vb = a[key], b[key]
            if isinstance(va, torch.Tensor):
                assert va.device == vb.device, key
                assert torch.equal(va, vb), key
            else:
                assert va == vb, key
    stats = tiered.stats()
    assert stats['features']['rows'] > 0
    assert stats['memory']['feature_cache_rows'] == 50


def test_count_node_access(graph):
    loader = HybridNeighborLoader(graph, [5, 3], batch_size=50, seed=0,
                                  device='cpu')
    seeds = torch.arange(200)
    counts = count_node_access(loader.node_sampler, seeds, 50)
    assert counts.sum() > 0
    assert (counts[seeds] >= 1).all()  # Every seed is its own batch's node.
    frontier = count_node_access(loader.node_sampler, seeds, 50, hops=1)
    assert torch.equal(frontier[:200], torch.ones(200, dtype=torch.long))
    assert frontier[200:].sum() == 0
    assert count_node_access(loader.node_sampler, seeds, 50,
                             num_batches=8).sum() > counts.sum()


@pytest.mark.parametrize('method', METHODS)
def test_set_cached_nodes(method):
    x = torch.randn(60, 5)
    store = TieredFeatureStore(x, DEVICE, cache_ratio=0.05,
                               gpu_memory_budget=10**9, method=method,
                               reuse=False)
    assert store.capacity == 3
    store.set_cached_nodes(torch.tensor([50, 7, 50, 9, 1, 2]))
    assert store.cached_nodes.tolist() == [50, 7, 9]  # Deduplicated, capped.
    index = torch.tensor([50, 7, 9, 1, 2, 50])
    assert torch.equal(store.gather(index).cpu(), x[index])
    assert store.stats.cache_rows == 4 and store.stats.host_rows == 2
    with pytest.raises(ValueError, match='nodes'):
        store.set_cached_nodes(torch.tensor([60]))


def test_offload_fills_the_loaders_gpu_cache(graph):
    from pyg_orch import BottomLayerOffload
    from pyg_orch.offload import OffloadOptions
    from torch_geometric.nn import GraphSAGE
    store = TieredFeatureStore(graph.x, 'cpu', cache_ratio=0.2,
                               gpu_memory_budget=10**9, method='cpu')
    loader = HybridNeighborLoader(graph, [4, 3], batch_size=50, seed=0,
                                  device='cpu',
                                  cache=CacheOptions(store=store))
    model = GraphSAGE(24, 16, 2, 5)
    options = OffloadOptions(hot_ratio=0.05, cache_ratio=0.1)
    with BottomLayerOffload(model, loader, options=options) as offloaded:
        expected = offloaded.gpu_cache_nodes[:store.capacity]
        assert torch.equal(store.cached_nodes, expected.cpu())
        assert loader.get_gpu_cache_nodes() is store.cached_nodes
        batch = next(iter(loader))
        assert torch.equal(batch.x, graph.x[batch.n_id])
    plain = HybridNeighborLoader(graph, [4, 3], batch_size=50, device='cpu',
                                 cache=CacheOptions(store=None))
    assert plain.set_gpu_cache_nodes(torch.tensor([1, 2])) is False
    assert plain.get_gpu_cache_nodes() is None


@pytest.mark.gpu
@pytest.mark.skipif(not triton_available(), reason='needs Triton')
def test_uva_gather_compiles_once_whatever_the_batch_size():
    # Batch sizes in every "divisible by 16" class: a kernel specialized on
    # them would compile (and stall the batch) once per class.
    from pyg_orch.sampling.triton import kernels as tk
    x = torch.randn(5000, 24)
    store = TieredFeatureStore(x, 'cuda', gpu_memory_budget=0, method='uva',
                               cache_ratio=0.1)
    gen = torch.Generator().manual_seed(0)

    def compiled() -> int:
        caches = tk.gather_rows_kernel.device_caches
        return sum(len(c[0]) for c in caches.values())

    store.gather(torch.randint(0, 5000, (1000, ), generator=gen))
    store.gather(torch.randint(0, 5000, (1000, ), generator=gen))
    before = compiled()  # Without and with the previous batch's rows.
    for n in (1, 16, 17, 1024, 1031, 4096):
        index = torch.randint(0, 5000, (n, ), generator=gen)
        assert torch.equal(store.gather(index).cpu(), x[index])
    assert compiled() == before
