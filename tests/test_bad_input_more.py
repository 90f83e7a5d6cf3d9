"""Bad input found by probing as a new user (issue 49, items 6-8): each
fails with a clear exception that names the argument, the file and row, or
the attribute."""
import math

import numpy as np
import pytest
import torch

from pyg_orch import (
    CacheOptions,
    GraphTopology,
    HybridLinkNeighborLoader,
    HybridNeighborLoader,
    PlacementOptions,
)
from pyg_orch.datasets import read_musae

from conftest import temporal_graph, temporal_hetero_graph


def _nan_at(value: torch.Tensor, index: int = 3) -> torch.Tensor:
    value = value.to(torch.float32).clone()
    value[index] = float('nan')
    return value


# NaN times (item 6) ##########################################################


def _homo(attr):
    data = temporal_graph()
    data[attr] = _nan_at(data[attr])
    return data


def _hetero(where, attr):
    data = temporal_hetero_graph()
    for store in data.stores:  # Float times everywhere, NaN in one store.
        if attr in store:
            store[attr] = store[attr].to(torch.float32)
    data[where][attr] = _nan_at(data[where][attr])
    return data


def _node_loader(data, **kwargs):
    return HybridNeighborLoader(data, [2, 2], batch_size=4, device='cpu',
                                **kwargs)


def _link_loader(data, **kwargs):
    return HybridLinkNeighborLoader(data, [2, 2], batch_size=4,
                                    device='cpu', **kwargs)


@pytest.mark.parametrize('make,name', [
    # Node and edge times of the graph, homogeneous and heterogeneous:
    (lambda: _node_loader(_homo('time'), time_attr='time'), 'data.time'),
    (lambda: _node_loader(_homo('edge_time'), time_attr='edge_time',
                          input_time=torch.zeros(80)), 'data.edge_time'),
    (lambda: _node_loader(_hetero('b', 'time'), time_attr='time',
                          input_nodes='a'), "data['b'].time"),
    (lambda: _node_loader(_hetero(('c', 'in', 'a'), 'edge_time'),
                          time_attr='edge_time', input_nodes='a',
                          input_time=torch.zeros(60)), 'edge_time'),
    (lambda: _link_loader(_homo('time'), time_attr='time',
                          edge_label_time=torch.zeros(600)), 'data.time'),
    # Seed times:
    (lambda: _node_loader(temporal_graph(), time_attr='time',
                          input_nodes=torch.arange(10),
                          input_time=_nan_at(torch.zeros(10))),
     'input_time'),
    (lambda: _node_loader(temporal_hetero_graph(), time_attr='time',
                          input_nodes=('a', torch.arange(10)),
                          input_time=_nan_at(torch.zeros(10))),
     'input_time'),
    (lambda: _link_loader(temporal_graph(), time_attr='time',
                          edge_label_time=_nan_at(torch.zeros(600))),
     'edge_label_time'),
    (lambda: _link_loader(temporal_hetero_graph(), time_attr='time',
                          edge_label_index=('b', 'to', 'a'),
                          edge_label_time=_nan_at(torch.zeros(300))),
     'edge_label_time'),
], ids=['node-time', 'edge-time', 'hetero-node-time', 'hetero-edge-time',
        'link-node-time', 'input-time', 'hetero-input-time',
        'edge-label-time', 'hetero-edge-label-time'])
def test_nan_times(make, name):
    with pytest.raises(ValueError, match='NaN') as e:
        make()
    assert name in str(e.value)


@pytest.mark.parametrize('attr', ['time', 'edge_time'])
def test_nan_times_in_a_partition_folder(tmp_path, attr):
    from pyg_orch.distributed import partition_graph
    info = partition_graph(_homo(attr), 1, tmp_path, 'contiguous',
                           progress=False)
    with pytest.raises(ValueError, match=f"partition's '{attr}' holds NaN"):
        HybridNeighborLoader(str(info.out_dir), [2], batch_size=4,
                             time_attr=attr, input_nodes=torch.arange(80),
                             input_time=torch.zeros(80), device='cpu')


def test_float_times_without_nan_still_load():
    data = temporal_graph(time_dtype=torch.float32)
    batch = next(iter(_node_loader(data, time_attr='time')))
    assert batch.n_id.numel() >= 4


# read_musae (item 7) #########################################################

_EDGES = 'id_1,id_2\n0,1\n1,2\n'
_TARGET = 'id,target\n0,1\n1,0\n2,1\n'


@pytest.mark.parametrize('edges,target,file,line,phrase', [
    (_EDGES, 'id,target\n0,1\n1\n2,1\n', 'target.csv', 3, 'columns'),
    (_EDGES, 'id,target\n0,1\n1,\n2,1\n', 'target.csv', 3, 'empty'),
    (_EDGES, 'id,target\n0,1\n1, \n2,1\n', 'target.csv', 3, 'empty'),
    (_EDGES, 'id,target\n0,1\n1,-2\n2,1\n', 'target.csv', 3, 'non-negative'),
    (_EDGES, 'id,target\n0,1\nx,0\n2,1\n', 'target.csv', 3, "'x'"),
    (_EDGES, 'id,target\n0,1\n-1,0\n2,1\n', 'target.csv', 3, 'non-negative'),
    (_EDGES, 'id,target\n0,1\n1,0\n0,1\n2,1\n', 'target.csv', 4, 'again'),
    (_EDGES, 'id,name,target\n0,a,1\n1,0\n2,c,1\n', 'target.csv', 3,
     'columns'),
    ('id_1,id_2\n0,1\n1,two\n', _TARGET, 'edges.csv', 3, "'two'"),
    ('id_1,id_2\n0,1\n-1,2\n', _TARGET, 'edges.csv', 3, 'non-negative'),
    ('id_1,id_2\n0,1\n1\n', _TARGET, 'edges.csv', 3, 'two node ids'),
    ('id_1,id_2\n0,1\n1,2,3\n', _TARGET, 'edges.csv', 3, 'two node ids'),
    ('0,1\n1,2.5\n', _TARGET, 'edges.csv', 2, "'2.5'"),
], ids=['no-label', 'empty-label', 'blank-label', 'negative-label',
        'non-numeric-id', 'negative-id', 'duplicate-id', 'short-row',
        'edge-not-numeric', 'edge-negative', 'edge-one-column',
        'edge-three-columns', 'edge-float-no-header'])
def test_read_musae_bad_rows(tmp_path, edges, target, file, line, phrase):
    (tmp_path / 'edges.csv').write_text(edges)
    (tmp_path / 'target.csv').write_text(target)
    with pytest.raises(ValueError) as e:
        read_musae(str(tmp_path))
    msg = str(e.value)
    assert file in msg and f'line {line}:' in msg and phrase in msg


def test_read_musae_missing_node_named(tmp_path):
    (tmp_path / 'edges.csv').write_text('id_1,id_2\n0,3\n')
    (tmp_path / 'target.csv').write_text(_TARGET)
    with pytest.raises(ValueError, match='target.csv.*node id 3 has none'):
        read_musae(str(tmp_path))


def test_read_musae_good_rows_still_load(tmp_path):
    (tmp_path / 'edges.csv').write_text(_EDGES + '\n')
    (tmp_path / 'target.csv').write_text('id,target\n2,b\n0,a\n\n1,a\n')
    data = read_musae(str(tmp_path))
    assert data.y.tolist() == [0, 0, 1]
    assert data.edge_index.tolist() == [[0, 1, 1, 2], [1, 2, 0, 1]]


# Boolean flags, callables, numbers and devices (item 8) ######################


def _graph():
    return temporal_graph(num_nodes=30, num_edges=120)


_FLAGS = ['replace', 'disjoint', 'is_sorted', 'directed', 'filter_per_worker',
          'lookahead', 'shuffle', 'drop_last', 'pin_memory']


@pytest.mark.parametrize('loader_cls', [HybridNeighborLoader,
                                        HybridLinkNeighborLoader])
@pytest.mark.parametrize('name', _FLAGS)
@pytest.mark.parametrize('value', ['no', 'False', 1, 0.0])
def test_flag_not_a_bool(loader_cls, name, value):
    with pytest.raises(TypeError, match=f"'{name}'") as e:
        loader_cls(_graph(), [2], batch_size=4, device='cpu',
                   **{name: value})
    assert repr(value) in str(e.value)


def test_topology_is_sorted_not_a_bool():
    with pytest.raises(TypeError, match="'is_sorted'.*'no'"):
        GraphTopology.from_data(_graph(), is_sorted='no')


@pytest.mark.parametrize('name', ['disjoint', 'replace', 'shuffle'])
def test_numpy_bool_flag_is_a_bool(name):
    # A NumPy bool means what the bool means: the batches are the same.
    kwargs = dict(batch_size=4, device='cpu', seed=3)
    ref = next(iter(HybridNeighborLoader(_graph(), [2, 2], **kwargs,
                                         **{name: True})))
    out = next(iter(HybridNeighborLoader(_graph(), [2, 2], **kwargs,
                                         **{name: np.True_})))
    assert torch.equal(ref.n_id, out.n_id)
    assert torch.equal(ref.edge_index, out.edge_index)


@pytest.mark.parametrize('kwargs,name,exc', [
    (dict(transform=5), 'transform', TypeError),
    (dict(transform_sampler_output='f'), 'transform_sampler_output',
     TypeError),
    (dict(cache=0.5), 'cache', TypeError),
    (dict(placement='host'), 'placement', TypeError),
    (dict(num_workers=True), 'num_workers', ValueError),
    (dict(timeout=math.nan), 'timeout', ValueError),
])
def test_bad_loader_argument(kwargs, name, exc):
    # Checked on the CPU too, where no feature store is built.
    for loader_cls in (HybridNeighborLoader, HybridLinkNeighborLoader):
        with pytest.raises(exc, match=f"'{name}'"):
            loader_cls(_graph(), [2], batch_size=4, device='cpu', **kwargs)


@pytest.mark.parametrize('cls,kwargs,name,exc', [
    (CacheOptions, dict(cache_ratio='0.5'), 'cache_ratio', TypeError),
    (CacheOptions, dict(cache_ratio=float('nan')), 'cache_ratio',
     ValueError),
    (CacheOptions, dict(cache_ratio=1.5), 'cache_ratio', ValueError),
    (CacheOptions, dict(gpu_memory_budget='1GB'), 'gpu_memory_budget',
     ValueError),
    (CacheOptions, dict(ranking='lru'), 'ranking', ValueError),
    (CacheOptions, dict(policy='often'), 'policy', ValueError),
    (CacheOptions, dict(store='gpu'), 'store', ValueError),
    (CacheOptions, dict(num_presample_batches=0), 'num_presample_batches',
     ValueError),
    (PlacementOptions, dict(topology='shard'), 'topology', ValueError),
    (PlacementOptions, dict(backend='cuda'), 'backend', ValueError),
])
def test_bad_option(cls, kwargs, name, exc):
    # Checked when the options are made, on every device.
    with pytest.raises(exc, match=f"'{name}'"):
        cls(**kwargs)


def test_lru_cache_is_for_partition_folders():
    for loader_cls in (HybridNeighborLoader, HybridLinkNeighborLoader):
        with pytest.raises(NotImplementedError, match="policy='lru'"):
            loader_cls(_graph(), [2], batch_size=4, device='cpu',
                       cache=CacheOptions(policy='lru'))


def test_input_nodes_as_lists():
    data = _graph()
    mask = [i % 3 == 0 for i in range(data.num_nodes)]
    # PyG reads a list of bools as the ids 0 and 1; we refuse it:
    with pytest.raises(ValueError, match="'input_nodes' is a list of bools"):
        HybridNeighborLoader(data, [2], batch_size=4, device='cpu',
                             input_nodes=mask)
    ref = HybridNeighborLoader(data, [2], batch_size=4, device='cpu',
                               input_nodes=torch.tensor(mask))
    out = HybridNeighborLoader(data, [2], batch_size=4, device='cpu',
                               input_nodes=np.array(mask))
    assert torch.equal(ref.input_data.node, out.input_data.node)
    out = HybridNeighborLoader(data, [2], batch_size=4, device='cpu',
                               input_nodes=np.array([4, 2, 9]))
    assert out.input_data.node.tolist() == [4, 2, 9]
    with pytest.raises(ValueError, match="'input_nodes'.*float"):
        HybridNeighborLoader(data, [2], batch_size=4, device='cpu',
                             input_nodes=[0.5, 1.0])


@pytest.mark.parametrize('attr,value,phrase', [
    ('num_nodes', '30', "'data.num_nodes'"),
    ('num_nodes', -1, "'data.num_nodes'"),
    ('edge_index', [[0, 1], [1, 2]], "'data.edge_index'"),
])
def test_bad_graph_attribute(attr, value, phrase):
    data = _graph()
    data[attr] = value
    with pytest.raises(ValueError) as e:
        HybridNeighborLoader(data, [2], batch_size=4, device='cpu')
    assert phrase in str(e.value)


def test_cuda_device_without_cuda_everywhere():
    if torch.cuda.is_available():
        pytest.skip('CUDA is available')
    from pyg_orch.datasets import power_law_graph
    from pyg_orch.gpu import HeteroTieredFeatureStore, TieredFeatureStore
    x = torch.randn(10, 4)
    for make in (lambda: TieredFeatureStore(x, 'cuda'),
                 lambda: HeteroTieredFeatureStore({'a': x}, 'cuda'),
                 lambda: power_law_graph(10, 10, device='cuda'),
                 lambda: GraphTopology.from_data(_graph(), device='cuda'),
                 lambda: HybridNeighborLoader(_graph(), [2], device='cuda')):
        with pytest.raises(ValueError, match="'device' is 'cuda'.*CUDA is "
                           "not available"):
            make()


# TieredFeatureStore ##########################################################


def _store(**kwargs):
    from pyg_orch.gpu import TieredFeatureStore
    return TieredFeatureStore(torch.arange(40.).view(10, 4), 'cpu',
                              cache_ratio=0.3, **kwargs)


@pytest.mark.parametrize('index,exc,phrase', [
    (torch.tensor([1.0, 2.0]), TypeError, 'torch.float32'),
    (torch.tensor([True, False]), TypeError, 'torch.bool'),
    ([1, 2], TypeError, 'list'),
    (torch.tensor([[1]]), ValueError, 'one-dimensional'),
    (torch.tensor([0, 10]), IndexError, r'\[0, 10\) \(got ids in \[0, 10\]'),
    (torch.tensor([-1, 3]), IndexError, r'\[0, 10\) \(got ids in \[-1, 3\]'),
])
def test_gather_bad_ids(index, exc, phrase):
    store = _store()
    with pytest.raises(exc, match=phrase) as e:
        store.gather(index)
    assert "'index'" in str(e.value)


def test_gather_good_ids_match_rows():
    store = _store()
    index = torch.tensor([9, 0, 3, 3], dtype=torch.int32)
    assert torch.equal(store.gather(index), store.host[index.long()])
    assert store.gather(torch.empty(0, dtype=torch.long)).shape == (0, 4)


@pytest.mark.parametrize('kwargs,name,exc', [
    (dict(cache_ratio='0.5'), 'cache_ratio', TypeError),
    (dict(cache_ratio=float('nan')), 'cache_ratio', ValueError),
    (dict(reuse='no'), 'reuse', TypeError),
    (dict(num_threads=0), 'num_threads', ValueError),
    (dict(attr_name=5), 'attr_name', TypeError),
    (dict(hotness=[1.0] * 10), 'hotness', TypeError),
    (dict(hotness=torch.full((10, ), math.nan)), 'hotness', ValueError),
])
def test_bad_store_argument(kwargs, name, exc):
    from pyg_orch.gpu import HeteroTieredFeatureStore, TieredFeatureStore
    x = torch.randn(10, 4)
    with pytest.raises(exc, match=name):
        TieredFeatureStore(x, 'cpu', **kwargs)
    if 'hotness' in kwargs:
        kwargs = dict(hotness={'a': kwargs['hotness']})
    if 'attr_name' not in kwargs and 'num_threads' not in kwargs:
        with pytest.raises(exc, match=name):
            HeteroTieredFeatureStore({'a': x}, 'cpu', **kwargs)


def test_set_cached_nodes_float_ids():
    with pytest.raises(TypeError, match="'nodes'.*float"):
        _store().set_cached_nodes(torch.tensor([1.5]))


# OffloadOptions ##############################################################


@pytest.mark.parametrize('kwargs,name,exc', [
    (dict(full_neighbors='no'), 'full_neighbors', TypeError),
    (dict(full_neighbors=1), 'full_neighbors', TypeError),
    (dict(compensate_degrees='yes'), 'compensate_degrees', TypeError),
    (dict(idle_timeout=math.nan), 'idle_timeout', ValueError),
    (dict(idle_timeout=math.inf), 'idle_timeout', ValueError),
    (dict(idle_timeout=-1.0), 'idle_timeout', ValueError),
    (dict(seed='0'), 'seed', ValueError),
    (dict(seed=1.5), 'seed', ValueError),
])
def test_bad_offload_option(kwargs, name, exc):
    from pyg_orch.offload.options import OffloadOptions
    with pytest.raises(exc, match=f"'{name}'"):
        OffloadOptions(**kwargs)


def test_offload_numpy_bools_are_bools():
    from pyg_orch.offload.options import OffloadOptions
    opts = OffloadOptions(full_neighbors=np.True_,
                          compensate_degrees=np.False_, autotune=np.False_)
    assert opts.full_neighbors is True and opts.compensate_degrees is False
    assert opts.autotune is False and not opts.measure


# power_law_graph #############################################################


@pytest.mark.parametrize('kwargs,name,exc', [
    (dict(num_nodes=10**13, num_edges=10), 'num_nodes=10000000000000',
     MemoryError),
    (dict(num_nodes=10, num_edges=10**14), 'num_edges=100000000000000',
     MemoryError),
    (dict(num_nodes=10, num_edges=10, num_features=10**12),
     'num_features=1000000000000', MemoryError),
    (dict(num_nodes=0, num_edges=10), 'num_nodes', ValueError),
    (dict(num_nodes=-3, num_edges=10), 'num_nodes', ValueError),
    (dict(num_nodes='10', num_edges=10), 'num_nodes', ValueError),
    (dict(num_nodes=10, num_edges=-1), 'num_edges', ValueError),
    (dict(num_nodes=10, num_edges=10, exponent='2.5'), 'exponent',
     ValueError),
    (dict(num_nodes=10, num_edges=10, exponent=math.inf), 'exponent',
     ValueError),
    (dict(num_nodes=10, num_edges=10, seed='1'), 'seed', ValueError),
    (dict(num_nodes=10, num_edges=10, seed=1.5), 'seed', ValueError),
])
def test_power_law_bad_sizes(kwargs, name, exc):
    from pyg_orch.datasets import power_law_graph
    with pytest.raises(exc, match=name):
        power_law_graph(**kwargs)


def test_power_law_estimate_covers_the_graph():
    from pyg_orch.datasets import power_law_graph
    from pyg_orch.datasets.power_law import estimate_bytes
    data = power_law_graph(500, 4000, num_features=16)
    out = sum(v.numel() * v.element_size() for v in data.values()
              if isinstance(v, torch.Tensor))
    assert out <= estimate_bytes(500, 4000, 16, 47, torch.int64,
                                 torch.float32) <= 4 * out
