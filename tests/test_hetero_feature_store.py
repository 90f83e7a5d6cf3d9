"""The tiered feature store of heterogeneous graphs
(:class:`~pyg_orch.gpu.HeteroTieredFeatureStore`): exact rows per node type,
one budget split by one ranking across types, PyG's FeatureStore interface,
and the loader's batches with it (the same as without)."""
import os

import pytest
import torch
from torch_geometric.data import HeteroData

from pyg_orch import CacheOptions, HybridNeighborLoader
from pyg_orch.gpu import HeteroTieredFeatureStore, TieredFeatureStore
from pyg_orch.sampling.triton.fused_sampler import triton_available
from pyg_orch.features.hetero_tiered import split_budget
from pyg_orch.loader.features import build_store as build_hetero_store
from pyg_orch.loader.stats import StageTimer
from pyg_orch.sampling.contract import presample_batches
from pyg_orch.sampling.presample import count_node_access

from conftest import (
    paper_hetero_graph,
    random_hetero_graph,
    temporal_hetero_graph,
)

METHODS = ['cpu']
if triton_available() and (torch.cuda.is_available()
                           or os.environ.get('TRITON_INTERPRET') == '1'):
    METHODS.append('uva')
DEVICE = 'cuda' if torch.cuda.is_available() else 'cpu'


def x_dict(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return {'paper': torch.randn(300, 16, generator=g),
            'author': torch.randn(200, 5, generator=g),
            'institution': torch.randn(20, 130, generator=g)}


def hotness_dict(xs, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return {t: torch.rand(x.size(0), generator=g) for t, x in xs.items()}


def assert_same_batch(a: HeteroData, b: HeteroData):
    assert set(a.node_types) == set(b.node_types)
    assert set(a.edge_types) == set(b.edge_types)
    for key in a.node_types + a.edge_types:
        sa, sb = a[key], b[key]
        assert list(sa.keys()) == list(sb.keys()), key
        for name in sa.keys():
            va, vb = sa[name], sb[name]
            if isinstance(va, torch.Tensor):
                assert va.device == vb.device, (key, name)
                assert va.dtype == vb.dtype, (key, name)
                assert torch.equal(va, vb), (key, name)
            else:
                assert va == vb, (key, name)


# The store ###################################################################


@pytest.mark.parametrize('method', METHODS)
@pytest.mark.parametrize('reuse', [False, True])
def test_gather_is_exact_per_type(method, reuse):
    xs = x_dict()
    row_bytes = {t: x.size(1) * 4 for t, x in xs.items()}
    store = HeteroTieredFeatureStore(
        xs, DEVICE, hotness=hotness_dict(xs),
        gpu_memory_budget=40 * row_bytes['paper'], method=method,
        reuse=reuse)
    assert store.method == method
    assert 0 < store.num_cached < sum(x.size(0) for x in xs.values())
    used = sum(n * row_bytes[t]
               for t, n in store.num_cached_per_type.items())
    assert used <= 40 * row_bytes['paper']
    g = torch.Generator().manual_seed(5)
    for _ in range(3):
        for t, x in xs.items():
            index = torch.randint(0, x.size(0), (97, ), generator=g)
            assert torch.equal(store.gather(t, index).cpu(), x[index])
        out = store.gather_dict({t: torch.arange(x.size(0) // 2)
                                 for t, x in xs.items()})
        for t, x in xs.items():
            assert torch.equal(out[t].cpu(), x[:x.size(0) // 2])
    empty = store.gather('author', torch.empty(0, dtype=torch.long))
    assert empty.shape == (0, 5)
    stats = store.stats
    if reuse:
        assert stats.reused_rows > 0
    else:
        assert stats.reused_rows == 0


@pytest.mark.parametrize('method', METHODS)
def test_pyg_feature_store_interface(method):
    from torch_geometric.data import TensorAttr
    xs = x_dict()
    store = HeteroTieredFeatureStore(xs, DEVICE, gpu_memory_budget=4096,
                                     method=method)
    index = torch.tensor([3, 1, 3])
    for t, x in xs.items():
        assert torch.equal(store[t, 'x', index].cpu(), x[index])
        assert torch.equal(
            store.get_tensor(group_name=t, attr_name='x', index=index).cpu(),
            x[index])
        assert store.get_tensor_size(group_name=t, attr_name='x') == \
            tuple(x.shape)
        assert torch.equal(store[t, 'x', None].cpu(), x)
        assert torch.equal(store[t, 'x', 2:5].cpu(), x[2:5])
    assert torch.equal(store.view(group_name='author', attr_name='x')[index]
                       .cpu(), xs['author'][index])
    assert {(a.group_name, a.attr_name)
            for a in store.get_all_tensor_attrs()} == {(t, 'x') for t in xs}
    with pytest.raises(KeyError, match='venue'):
        store.get_tensor(group_name='venue', attr_name='x', index=index)
    with pytest.raises(KeyError, match="'y'"):
        store.get_tensor(TensorAttr(group_name='paper', attr_name='y',
                                    index=index))
    with pytest.raises(NotImplementedError):
        store.put_tensor(xs['paper'], group_name='paper', attr_name='x',
                         index=None)


def test_one_budget_goes_to_the_hottest_type():
    # Every hot row is a paper: the whole budget caches papers, none of the
    # other types, whatever their own ranking.
    xs = x_dict()
    hot = {t: torch.zeros(x.size(0)) for t, x in xs.items()}
    hot['paper'][100:150] = torch.arange(50, 0, -1, dtype=torch.float)
    hot['author'][:] = 0.0
    store = HeteroTieredFeatureStore(xs, 'cpu', hotness=hot,
                                     gpu_memory_budget=30 * 16 * 4,
                                     method='cpu', reuse=False)
    assert store.num_cached_per_type == {'paper': 30, 'author': 0,
                                         'institution': 0}
    assert store.cached_nodes['paper'].tolist() == list(range(100, 130))
    assert store.capacity == {'paper': 30, 'author': 0, 'institution': 0}
    store.gather('paper', torch.tensor([100, 129, 130, 0]))
    store.gather('author', torch.tensor([0, 1]))
    per_type = store.stats.per_type
    assert (per_type['paper'].cache_rows, per_type['paper'].host_rows) == \
        (2, 2)
    assert (per_type['author'].cache_rows, per_type['author'].host_rows) == \
        (0, 2)


def test_ranking_is_per_byte_across_types():
    # The same counts: narrow author rows (20 B) beat paper rows (64 B);
    # then the budget left over goes to the hottest papers.
    num_nodes = {'paper': 10, 'author': 10}
    row_bytes = {'paper': 64, 'author': 20}
    hot = {'paper': torch.arange(10, 0, -1).float(),
           'author': torch.full((10, ), 4.0)}
    # Per byte: paper 0..3 score 10/64..7/64 > 4/20? 10/64 = 0.156 < 0.2:
    # authors first (200 B), then papers 0, 1 (128 B) in 350 B.
    chosen = split_budget(num_nodes, row_bytes, hot, 350)
    assert chosen['author'].tolist() == list(range(10))
    assert chosen['paper'].tolist() == [0, 1]
    # A row cap across types, and no budget at all:
    chosen = split_budget(num_nodes, row_bytes, hot, 10**6, max_rows=4)
    assert chosen['author'].tolist() == [0, 1, 2, 3]
    assert chosen['paper'].numel() == 0
    chosen = split_budget(num_nodes, row_bytes, hot, 0)
    assert all(v.numel() == 0 for v in chosen.values())
    # Without hotness: narrow rows first, in index order.
    chosen = split_budget(num_nodes, row_bytes, None, 100)
    assert chosen['author'].tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize('method', METHODS)
def test_everything_fits_and_cache_ratio(method):
    xs = x_dict()
    store = HeteroTieredFeatureStore(xs, DEVICE, gpu_memory_budget=10**9,
                                     method=method)
    assert all(s.full for s in store.stores.values())
    for t, x in xs.items():
        index = torch.randint(0, x.size(0), (50, ))
        assert torch.equal(store.gather(t, index).cpu(), x[index])
    assert store.stats.host_rows == 0
    # A ratio caps the rows of all types together:
    ratio = HeteroTieredFeatureStore(xs, DEVICE, hotness=hotness_dict(xs),
                                     gpu_memory_budget=10**9,
                                     cache_ratio=0.1, method=method)
    assert ratio.num_cached == 52  # ceil(0.1 * 520)


def test_stats_are_summed_and_per_type():
    xs = x_dict()
    store = HeteroTieredFeatureStore(xs, 'cpu', hotness=hotness_dict(xs),
                                     gpu_memory_budget=2000, method='cpu',
                                     reuse=False)
    for _ in range(2):
        store.gather('paper', torch.arange(10))
        store.gather('author', torch.arange(30))
    store.gather('paper', torch.arange(5))
    stats = store.stats
    assert stats.rows == 2 * 40 + 5
    assert stats.batches == 3  # The most gathers of one type.
    assert stats.per_type['author'].batches == 2
    assert stats.per_type['institution'].rows == 0
    for name in ('cache_rows', 'host_rows', 'host_bytes'):
        assert getattr(stats, name) == sum(
            getattr(s, name) for s in stats.per_type.values())
    assert stats.cache_rows + stats.host_rows == stats.rows
    d = stats.as_dict()
    assert set(d['per_type']) == set(xs)
    assert d['h2d_bytes_per_batch'] == pytest.approx(stats.host_bytes / 3)
    store.reset_stats()
    assert store.stats.rows == 0 and store.stats.batches == 0


def test_set_cached_nodes_per_type():
    xs = x_dict()
    store = HeteroTieredFeatureStore(xs, 'cpu', hotness=hotness_dict(xs),
                                     gpu_memory_budget=10 * 16 * 4 + 4 * 20,
                                     method='cpu', reuse=False)
    capacity = store.capacity
    assert sum(c * xs[t].size(1) * 4 for t, c in capacity.items()) <= \
        10 * 16 * 4 + 4 * 20
    before = store.cached_nodes
    paper = torch.arange(299, 200, -1)
    store.set_cached_nodes({'paper': paper})
    assert store.cached_nodes['paper'].tolist() == \
        paper[:capacity['paper']].tolist()
    assert torch.equal(store.cached_nodes['author'], before['author'])
    index = torch.arange(300)
    assert torch.equal(store.gather('paper', index), xs['paper'])
    with pytest.raises(ValueError, match="'nodes'"):
        store.set_cached_nodes(torch.arange(3))
    with pytest.raises(ValueError, match="'nodes'.*venue"):
        store.set_cached_nodes({'venue': torch.arange(3)})


def test_bad_arguments():
    xs = x_dict()
    with pytest.raises(ValueError, match="'x_dict'"):
        HeteroTieredFeatureStore({}, 'cpu')
    with pytest.raises(ValueError, match="'x_dict'"):
        HeteroTieredFeatureStore(xs['paper'], 'cpu')
    with pytest.raises(ValueError, match="'x_dict'.*author"):
        HeteroTieredFeatureStore(dict(xs, author=torch.ones(200)), 'cpu')
    hot = hotness_dict(xs)
    with pytest.raises(ValueError, match="'hotness'.*venue"):
        HeteroTieredFeatureStore(xs, 'cpu', hotness=dict(hot,
                                                          venue=hot['paper']))
    with pytest.raises(ValueError, match="'hotness'.*missing.*author"):
        HeteroTieredFeatureStore(xs, 'cpu', hotness={
            t: h for t, h in hot.items() if t != 'author'})
    with pytest.raises(ValueError, match="'hotness'.*'paper'.*300"):
        HeteroTieredFeatureStore(xs, 'cpu', hotness=dict(
            hot, paper=torch.ones(299)))
    with pytest.raises(ValueError, match="'hotness'"):
        HeteroTieredFeatureStore(xs, 'cpu', hotness=hot['paper'])
    with pytest.raises(ValueError, match='cache_ratio'):
        HeteroTieredFeatureStore(xs, 'cpu', cache_ratio=1.5)
    with pytest.raises(ValueError, match='gpu_memory_budget'):
        HeteroTieredFeatureStore(xs, 'cpu', gpu_memory_budget='lots')
    with pytest.raises(ValueError, match='method'):
        HeteroTieredFeatureStore(xs, 'cpu', method='fast')
    store = HeteroTieredFeatureStore(xs, 'cpu', method='cpu')
    with pytest.raises(ValueError, match="'node_type'"):
        store.gather('venue', torch.arange(3))
    with pytest.raises(ValueError, match="'index_dict'"):
        store.gather_dict({'venue': torch.arange(3)})


# The loader ##################################################################


def loaders(data, store, **kwargs):
    kwargs = dict(dict(batch_size=32, seed=3, device=DEVICE,
                       input_nodes='paper'), **kwargs)
    fanout = kwargs.pop('fanout', [4, 3])
    return (HybridNeighborLoader(data, fanout,
                                 cache=CacheOptions(store=store), **kwargs),
            HybridNeighborLoader(data, fanout,
                                 cache=CacheOptions(store=None), **kwargs))


@pytest.mark.parametrize('method', METHODS)
@pytest.mark.parametrize('options', [{}, {'disjoint': True}])
def test_loader_with_store_matches_plain_loader(method, options):
    data = paper_hetero_graph()
    xs = {t: data[t].x for t in data.node_types}
    store = HeteroTieredFeatureStore(xs, DEVICE, hotness=hotness_dict(xs),
                                     gpu_memory_budget=60 * 16 * 4,
                                     method=method)
    tiered, plain = loaders(data, store, **options)
    assert tiered.feature_store is store
    count = 0
    for a, b in zip(tiered, plain):
        assert_same_batch(a, b)
        for t in data.node_types:
            assert torch.equal(a[t].x.cpu(), data[t].x[a[t].n_id.cpu()])
        count += 1
    assert count == len(plain)
    stats = tiered.stats()
    assert stats['features']['rows'] == sum(
        s['rows'] for s in stats['features']['per_type'].values())
    assert stats['features']['rows'] > 0
    assert stats['memory']['feature_cache_rows_per_type'] == \
        store.num_cached_per_type
    assert stats['memory']['feature_cache_rows'] == store.num_cached > 0


def test_loader_store_of_some_types_and_explicit_num_nodes():
    # 'c' has no `x` in the store (the graph's is sliced as before), every
    # type has `num_nodes`, every edge type `edge_attr`.
    data = random_hetero_graph(0)
    types = data.node_types
    store = HeteroTieredFeatureStore(
        {t: data[t].x for t in types[:2]}, DEVICE, gpu_memory_budget=64,
        method='cpu')
    tiered, plain = loaders(data, store, input_nodes=types[0], fanout=[3, 2])
    batches = 0
    for a, b in zip(tiered, plain):
        assert_same_batch(a, b)
        batches += 1
    assert batches == len(plain) > 1
    assert set(tiered.stats()['features']['per_type']) == set(types[:2])


def test_temporal_loader_with_store_matches_plain_loader():
    data = temporal_hetero_graph()
    store = HeteroTieredFeatureStore({t: data[t].x for t in data.node_types},
                                     DEVICE, gpu_memory_budget=100,
                                     method='cpu')
    tiered, plain = loaders(data, store, input_nodes='a', batch_size=16,
                            time_attr='time', weight_attr='edge_weight')
    for a, b in zip(tiered, plain):
        assert_same_batch(a, b)
        assert 'batch' in a['a']  # Temporal sampling is disjoint.


def test_loader_with_store_and_transforms():
    data = paper_hetero_graph()
    store = HeteroTieredFeatureStore({t: data[t].x for t in data.node_types},
                                     DEVICE, gpu_memory_budget=0,
                                     method='cpu')

    def transform(batch):
        batch['paper'].x = batch['paper'].x * 2
        return batch

    tiered, plain = loaders(data, store, transform=transform)
    for a, b in zip(tiered, plain):
        assert_same_batch(a, b)
        assert torch.equal(a['paper'].x.cpu(),
                           2 * data['paper'].x[a['paper'].n_id.cpu()])


def test_loader_set_gpu_cache_nodes():
    data = paper_hetero_graph()
    store = HeteroTieredFeatureStore({t: data[t].x for t in data.node_types},
                                     'cpu', gpu_memory_budget=20 * 16 * 4,
                                     method='cpu')
    loader = HybridNeighborLoader(data, [3, 2], batch_size=16, device='cpu',
                                  input_nodes='paper',
                                  cache=CacheOptions(store=store))
    assert loader.set_gpu_cache_nodes({'author': torch.arange(5)})
    assert store.cached_nodes['author'].tolist() == \
        list(range(min(5, store.capacity['author'])))
    batch = next(iter(loader))
    for t in data.node_types:
        assert torch.equal(batch[t].x, data[t].x[batch[t].n_id])


def test_loader_rejects_stores_that_do_not_fit():
    data = paper_hetero_graph()
    xs = {t: data[t].x for t in data.node_types}
    kwargs = dict(batch_size=16, device='cpu', input_nodes='paper')
    with pytest.raises(ValueError, match="'store'"):
        HybridNeighborLoader(data, [3, 2], cache=CacheOptions(
            store=TieredFeatureStore(data['paper'].x, 'cpu', method='cpu')),
            **kwargs)
    wide = dict(xs, author=torch.randn(200, 7))
    with pytest.raises(ValueError, match="'store'.*author"):
        HybridNeighborLoader(data, [3, 2], cache=CacheOptions(
            store=HeteroTieredFeatureStore(wide, 'cpu', method='cpu')),
            **kwargs)
    venue = dict(xs, venue=torch.randn(4, 16))
    with pytest.raises(ValueError, match="'store'.*venue"):
        HybridNeighborLoader(data, [3, 2], cache=CacheOptions(
            store=HeteroTieredFeatureStore(venue, 'cpu', method='cpu')),
            **kwargs)
    homo = data.to_homogeneous()
    with pytest.raises(ValueError, match="'store'"):
        HybridNeighborLoader(homo, [3, 2], batch_size=16, device='cpu',
                             cache=CacheOptions(
                                 store=HeteroTieredFeatureStore(
                                     xs, 'cpu', method='cpu')))


def test_auto_store_only_on_cuda():
    data = paper_hetero_graph()
    loader = HybridNeighborLoader(data, [3, 2], batch_size=16, device='cpu',
                                  input_nodes='paper')
    assert loader.feature_store is None


@pytest.mark.parametrize('policy', ['frequency', 'degree'])
def test_built_store_ranks_by_presampled_accesses(policy):
    data = paper_hetero_graph()
    # Narrow institution rows: cheap per byte.
    data['institution'].x = data['institution'].x[:, :4].contiguous()
    loader = HybridNeighborLoader(data, [3, 2], batch_size=16, device='cpu',
                                  input_nodes='paper', seed=0)
    budget = 50 * 16 * 4
    n = loader.input_data.node.numel()

    def count():
        return count_node_access(loader.node_sampler, loader.input_data.node,
                                 16, num_batches=presample_batches(n, 16),
                                 input_type='paper')

    torch.manual_seed(0)  # The pre-sampled seed order.
    store = build_hetero_store(
        data, loader.node_sampler, torch.device('cpu'), count,
        StageTimer(torch.device('cpu')), budget, None, policy)
    assert isinstance(store, HeteroTieredFeatureStore)
    assert set(store.node_types) == set(data.node_types)
    if policy == 'frequency':
        torch.manual_seed(0)
        hot = count()
    else:
        hot = {t: torch.zeros(data[t].num_nodes, dtype=torch.long)
               for t in data.node_types}
        for (src, _, _), s in data.edge_items():
            hot[src] += torch.bincount(s.edge_index[0],
                                       minlength=data[src].num_nodes)
    row_bytes = {t: data[t].x.size(1) * 4 for t in data.node_types}
    expected = split_budget({t: data[t].num_nodes for t in data.node_types},
                            row_bytes, hot, budget)
    for t in data.node_types:
        cached = store.cached_nodes[t]
        if store.stores[t].full:  # Then kept in index order.
            cached, expected[t] = cached.sort()[0], expected[t].sort()[0]
        assert cached.tolist() == expected[t].tolist(), t
    # Narrow institution rows rank high per byte:
    assert store.num_cached_per_type['institution'] > 0


@pytest.mark.gpu
@pytest.mark.parametrize('lookahead', [False, True])
def test_auto_store_on_cuda_matches_plain_loader(lookahead):
    data = paper_hetero_graph()
    kwargs = dict(batch_size=32, seed=3, device='cuda', input_nodes='paper')
    auto = HybridNeighborLoader(data, [4, 3], lookahead=lookahead,
                                cache=CacheOptions(
                                    gpu_memory_budget=40 * 16 * 4), **kwargs)
    plain = HybridNeighborLoader(data, [4, 3], cache=CacheOptions(store=None),
                                 lookahead=lookahead, **kwargs)
    assert isinstance(auto.feature_store, HeteroTieredFeatureStore)
    for a, b in zip(auto, plain):
        assert_same_batch(a, b)
    stats = auto.stats()
    assert stats['features']['rows'] > 0
    assert sum(stats['memory']['feature_cache_rows_per_type'].values()) > 0


@pytest.mark.gpu
def test_device_features_are_served_as_before():
    data = paper_hetero_graph()
    data['author'].x = data['author'].x.cuda()
    loader = HybridNeighborLoader(data, [4, 3], batch_size=32, seed=3,
                                  device='cuda', input_nodes='paper')
    assert set(loader.feature_store.node_types) == {'paper', 'institution'}
    for batch in loader:
        for t in data.node_types:
            assert torch.equal(batch[t].x.cpu(),
                               data[t].x.cpu()[batch[t].n_id.cpu()])


# The link loader #############################################################


def link_loaders(data, store, edge_type, mode, cache=None, **kwargs):
    from torch_geometric.sampler import NegativeSampling

    from pyg_orch import HybridLinkNeighborLoader
    kwargs = dict(dict(batch_size=32, seed=3, device=DEVICE), **kwargs)
    label_index = kwargs.pop('label_index', data[edge_type].edge_index[:,
                                                                       :100])
    if mode is not None:
        kwargs['neg_sampling'] = NegativeSampling(mode, 2)
    fanout = kwargs.pop('fanout', [4, 3])
    return tuple(
        HybridLinkNeighborLoader(data, fanout,
                                 cache=CacheOptions(store=fs,
                                                    **(cache or {})),
                                 edge_label_index=(edge_type, label_index),
                                 **kwargs) for fs in (store, None))


@pytest.mark.parametrize('method', METHODS)
@pytest.mark.parametrize('mode', ['binary', 'triplet', None])
@pytest.mark.parametrize('edge_type', [('author', 'writes', 'paper'),
                                       ('paper', 'cites', 'paper')],
                         ids=['two_types', 'one_type'])
def test_link_loader_with_store_matches_plain_loader(method, mode,
                                                     edge_type):
    data = paper_hetero_graph()
    xs = {t: data[t].x for t in data.node_types}
    store = HeteroTieredFeatureStore(xs, DEVICE, hotness=hotness_dict(xs),
                                     gpu_memory_budget=60 * 16 * 4,
                                     method=method)
    tiered, plain = link_loaders(data, store, edge_type, mode)
    assert tiered.feature_store is store
    assert plain.feature_store is None
    count = 0
    for a, b in zip(tiered, plain):
        assert_same_batch(a, b)
        for t in data.node_types:
            assert torch.equal(a[t].x.cpu(), data[t].x[a[t].n_id.cpu()])
        if mode == 'triplet':
            assert 'dst_neg_index' in a[edge_type[-1]]
        else:
            assert 'edge_label_index' in a[edge_type]
        count += 1
    assert count == len(plain) == 4
    stats = tiered.stats()['features']
    assert stats['rows'] == sum(s['rows'] for s in
                                stats['per_type'].values()) > 0
    assert stats['cache_rows'] > 0 and stats['host_rows'] > 0


def test_link_loader_with_store_disjoint_and_temporal():
    data = paper_hetero_graph()
    store = HeteroTieredFeatureStore({t: data[t].x for t in data.node_types},
                                     DEVICE, gpu_memory_budget=500,
                                     method='cpu')
    tiered, plain = link_loaders(data, store, ('author', 'writes', 'paper'),
                                 'binary', disjoint=True)
    for a, b in zip(tiered, plain):
        assert_same_batch(a, b)
        assert 'batch' in a['paper']
    data = temporal_hetero_graph()
    edge_type = ('b', 'to', 'a')
    assert edge_type in data.edge_types
    store = HeteroTieredFeatureStore({t: data[t].x for t in data.node_types},
                                     DEVICE, gpu_memory_budget=100,
                                     method='cpu')
    label_time = torch.randint(5, 30, (60, ),
                               generator=torch.Generator().manual_seed(1))
    tiered, plain = link_loaders(
        data, store, edge_type, 'triplet', time_attr='time', batch_size=20,
        label_index=data[edge_type].edge_index[:, :60],
        edge_label_time=label_time, fanout=[2, 2])
    batches = 0
    for a, b in zip(tiered, plain):
        assert_same_batch(a, b)
        batches += 1
    assert batches == 3


def test_link_store_ranks_by_presampled_link_batches():
    from torch_geometric.sampler import NegativeSampling

    from pyg_orch import HybridLinkNeighborLoader
    from pyg_orch.sampling.presample import count_link_access
    data = paper_hetero_graph()
    edge_type = ('author', 'writes', 'paper')
    def make():
        return HybridLinkNeighborLoader(
            data, [3, 2], edge_label_index=(edge_type, None), batch_size=64,
            neg_sampling=NegativeSampling('binary', 1), device='cpu', seed=0,
            shuffle=True)

    loader, untouched = make(), make()

    def count():
        torch.manual_seed(0)  # The pre-sampled label edge order.
        return count_link_access(loader.link_sampler, loader.input_data, 64,
                                 num_batches=5,
                                 neg_sampling=loader.neg_sampling)

    budget = 50 * 16 * 4
    store = build_hetero_store(data, loader.link_sampler,
                               torch.device('cpu'), count,
                               StageTimer(torch.device('cpu')), budget, None,
                               'frequency')
    hot = count()  # The same: counting restores the sampler's state.
    assert set(hot) == set(data.node_types)
    # Both endpoint types are seeds; every type is reached in two hops.
    assert all(int(h.sum()) > 0 for h in hot.values())
    # Nor does it change the loader's batches:
    for a, b in zip(loader, untouched):
        assert_same_batch(a, b)
    expected = split_budget({t: data[t].num_nodes for t in data.node_types},
                            {t: 64 for t in data.node_types}, hot, budget)
    for t in data.node_types:
        assert store.cached_nodes[t].tolist() == expected[t].tolist(), t


@pytest.mark.parametrize('mode', ['binary', 'triplet'])
def test_count_link_access_counts_endpoints_and_negatives(mode):
    from torch_geometric.sampler import NegativeSampling

    from pyg_orch import HybridLinkNeighborLoader
    from pyg_orch.sampling.presample import count_link_access
    data = paper_hetero_graph()
    edge_type = ('author', 'writes', 'paper')
    label_index = data[edge_type].edge_index[:, :40]
    loader = HybridLinkNeighborLoader(
        data, [3], edge_label_index=(edge_type, label_index), batch_size=40,
        device='cpu', seed=0)
    # One batch of every label edge, seed hop only: each endpoint once.
    hot = count_link_access(loader.link_sampler, loader.input_data, 40,
                            hops=1)
    assert torch.equal(hot['author'].nonzero().view(-1),
                       label_index[0].unique())
    assert torch.equal(hot['paper'].nonzero().view(-1),
                       label_index[1].unique())
    assert int(hot['author'].max()) == int(hot['paper'].max()) == 1
    assert int(hot['institution'].sum()) == 0
    # Negatives are seeds too: more seed nodes, on the types they belong to.
    neg = count_link_access(loader.link_sampler, loader.input_data, 40,
                            hops=1, neg_sampling=NegativeSampling(mode, 3))
    assert (neg['paper'] >= hot['paper']).all()
    assert int(neg['paper'].sum()) > int(hot['paper'].sum())
    if mode == 'binary':  # Negative sources are authors.
        assert int(neg['author'].sum()) > int(hot['author'].sum())
    else:  # Triplet negatives are destinations only.
        assert torch.equal(neg['author'], hot['author'])
    # Two epochs: twice the seed counts.
    two = count_link_access(loader.link_sampler, loader.input_data, 40,
                            num_batches=2, hops=1)
    assert torch.equal(two['paper'], 2 * hot['paper'])


@pytest.mark.gpu
@pytest.mark.parametrize('mode', ['binary', 'triplet'])
@pytest.mark.parametrize('policy', ['frequency', 'degree'])
def test_auto_store_on_cuda_link_loader(mode, policy):
    data = paper_hetero_graph()
    auto, plain = link_loaders(data, 'auto', ('author', 'writes', 'paper'),
                               mode, device='cuda',
                               cache=dict(ranking=policy,
                                          gpu_memory_budget=40 * 16 * 4))
    assert isinstance(auto.feature_store, HeteroTieredFeatureStore)
    assert plain.feature_store is None
    for a, b in zip(auto, plain):
        assert_same_batch(a, b)
    stats = auto.stats()
    assert stats['features']['rows'] > 0
    assert sum(stats['memory']['feature_cache_rows_per_type'].values()) > 0
