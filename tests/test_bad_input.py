"""Bad arguments fail early, with an exception that names the argument."""
import pytest
import torch
from torch_geometric.data import Data, HeteroData

from torch_geometric.sampler import NegativeSampling

from pyg_orch import (
    GraphTopology,
    HybridLinkNeighborLoader,
    HybridNeighborLoader,
    HybridNeighborSampler,
)

from conftest import (
    C_TO_A,
    TEMPORAL_SIZES,
    random_graph,
    temporal_graph,
    temporal_hetero_graph,
)


def small_graph() -> Data:
    return random_graph(10, 30, num_features=2, num_classes=10)


def small_hetero_graph() -> HeteroData:
    data = HeteroData()
    data['paper'].x = torch.randn(6, 2)
    data['author'].x = torch.randn(4, 2)
    data['author', 'writes', 'paper'].edge_index = torch.tensor([[0, 1, 3],
                                                                 [0, 5, 2]])
    data['paper', 'cites', 'paper'].edge_index = torch.tensor([[0, 1],
                                                               [1, 2]])
    return data


def loader(data=None, num_neighbors=(2, 2), **kwargs):
    kwargs.setdefault('device', 'cpu')
    return HybridNeighborLoader(small_graph() if data is None else data,
                                list(num_neighbors), **kwargs)


# num_neighbors ###############################################################


@pytest.mark.parametrize('num_neighbors', [[2, -2], [-5]])
def test_fanout_below_minus_one(num_neighbors):
    with pytest.raises(ValueError, match='num_neighbors'):
        loader(num_neighbors=num_neighbors)


@pytest.mark.parametrize('value', [2.5, '3', None, True])
def test_fanout_not_int(value):
    with pytest.raises((ValueError, TypeError), match='num_neighbors'):
        loader(num_neighbors=[2, value])


def test_fanout_not_a_list():
    with pytest.raises((ValueError, TypeError), match='num_neighbors'):
        HybridNeighborLoader(small_graph(), 5, device='cpu')


def test_fanout_dict_for_homogeneous_graph():
    with pytest.raises(ValueError, match='num_neighbors'):
        HybridNeighborLoader(small_graph(), {('a', 'to', 'b'): [2]},
                             device='cpu')


def test_fanout_dict_mismatched_hops():
    with pytest.raises(ValueError, match='num_neighbors'):
        HybridNeighborLoader(
            small_hetero_graph(), {
                ('author', 'writes', 'paper'): [2, 2],
                ('paper', 'cites', 'paper'): [2],
            }, input_nodes='paper', device='cpu')


def test_fanout_dict_unknown_edge_type():
    with pytest.raises(ValueError, match='num_neighbors'):
        HybridNeighborLoader(
            small_hetero_graph(), {
                ('author', 'writes', 'paper'): [2],
                ('paper', 'cites', 'paper'): [2],
                ('paper', 'likes', 'author'): [2],
            }, input_nodes='paper', device='cpu')


def test_fanout_dict_missing_edge_type():
    with pytest.raises(ValueError, match='num_neighbors'):
        HybridNeighborLoader(small_hetero_graph(),
                             {('author', 'writes', 'paper'): [2]},
                             input_nodes='paper', device='cpu')


def test_fanout_dict_bad_value():
    with pytest.raises(ValueError, match='num_neighbors'):
        HybridNeighborLoader(
            small_hetero_graph(), {
                ('author', 'writes', 'paper'): [2],
                ('paper', 'cites', 'paper'): [-3],
            }, input_nodes='paper', device='cpu')


# input_nodes #################################################################


@pytest.mark.parametrize('input_nodes', [
    torch.tensor([0.0, 1.0]),
    torch.tensor([1, -1]),
    torch.tensor([-3]),
    torch.tensor([0, 10]),
    torch.tensor([99]),
    torch.zeros(9, dtype=torch.bool),
    torch.zeros(11, dtype=torch.bool),
    torch.zeros(2, 5, dtype=torch.bool),
    torch.tensor([[0, 1], [2, 3]]),
    'paper',
    ('paper', torch.tensor([0])),
], ids=['float', 'negative', 'negative-only', 'equal-num-nodes', 'too-large',
        'mask-short', 'mask-long', 'mask-2d', 'index-2d', 'str', 'tuple'])
def test_bad_input_nodes(input_nodes):
    with pytest.raises(ValueError, match='input_nodes'):
        loader(input_nodes=input_nodes)


@pytest.mark.parametrize('input_nodes', [
    None,
    'institution',
    ('paper', torch.tensor([6])),
    ('paper', torch.tensor([0.5])),
    ('author', torch.ones(6, dtype=torch.bool)),
], ids=['none', 'unknown-type', 'out-of-range', 'float', 'mask-length'])
def test_bad_hetero_input_nodes(input_nodes):
    fanouts = {
        ('author', 'writes', 'paper'): [2],
        ('paper', 'cites', 'paper'): [2],
    }
    with pytest.raises(ValueError, match='input_nodes'):
        HybridNeighborLoader(small_hetero_graph(), fanouts,
                             input_nodes=input_nodes, device='cpu')


def test_empty_input_nodes_gives_no_batches():
    for input_nodes in (torch.empty(0, dtype=torch.long),
                        torch.zeros(10, dtype=torch.bool)):
        empty = loader(input_nodes=input_nodes, batch_size=4)
        assert len(empty) == 0
        assert list(empty) == []


# data ########################################################################


def test_edge_index_beyond_num_nodes():
    data = small_graph()
    del data.x, data.y
    data.num_nodes = 5  # Smaller than the largest index in edge_index.
    assert int(data.edge_index.max()) >= 5
    with pytest.raises(ValueError, match='edge_index'):
        loader(data)


def test_negative_edge_index():
    data = small_graph()
    data.edge_index[0, 3] = -1
    with pytest.raises(ValueError, match='edge_index'):
        loader(data)


def test_hetero_edge_index_beyond_num_nodes():
    data = small_hetero_graph()
    data['author', 'writes', 'paper'].edge_index[0, 0] = 4  # 4 authors.
    with pytest.raises(ValueError, match='edge_index'):
        HybridNeighborLoader(
            data, {
                ('author', 'writes', 'paper'): [2],
                ('paper', 'cites', 'paper'): [2],
            }, input_nodes='paper', device='cpu')


def test_x_rows_not_num_nodes():
    data = small_graph()
    data.x = torch.randn(9, 2)
    with pytest.raises(ValueError, match=r'\bx\b'):
        loader(data)


def test_data_of_wrong_type():
    with pytest.raises(TypeError, match='data'):
        HybridNeighborLoader({'edge_index': torch.zeros(2, 0)}, [2],
                             device='cpu')


def test_is_sorted_with_unsorted_edge_index():
    data = small_graph()
    assert (data.edge_index[1, 1:] < data.edge_index[1, :-1]).any()
    with pytest.raises(ValueError, match='is_sorted'):
        loader(data, is_sorted=True)
    # Sorted by destination, it is accepted:
    perm = torch.argsort(data.edge_index[1], stable=True)
    data.edge_index = data.edge_index[:, perm]
    assert len(loader(data, is_sorted=True, batch_size=5)) == 2


# Loader arguments ############################################################


@pytest.mark.parametrize('batch_size', [0, -1, 2.0])
def test_bad_batch_size(batch_size):
    with pytest.raises(ValueError, match='batch_size'):
        loader(batch_size=batch_size)


def test_cuda_device_without_cuda():
    if torch.cuda.is_available():
        pytest.skip('CUDA is available')
    with pytest.raises(ValueError, match='device'):
        loader(device='cuda')
    with pytest.raises(ValueError, match='device'):
        HybridNeighborSampler(small_graph(), [2], device='cuda')


def test_bad_device_string():
    with pytest.raises(ValueError, match='device'):
        loader(device='not-a-device')


@pytest.mark.gpu
def test_workers_with_cuda_device():
    with pytest.raises(ValueError, match='num_workers'):
        loader(device='cuda', num_workers=2)


def test_negative_num_workers():
    with pytest.raises(ValueError, match='num_workers'):
        loader(num_workers=-1)


# Sampling options ############################################################


@pytest.mark.parametrize('make_graph', [small_graph, temporal_graph],
                         ids=['plain', 'temporal'])
def test_disjoint_with_induced(make_graph):
    with pytest.raises(ValueError, match='disjoint') as info:
        loader(make_graph(), disjoint=True, subgraph_type='induced')
    assert 'induced' in str(info.value)


def test_invalid_subgraph_type():
    with pytest.raises(ValueError, match='subgraph_type'):
        loader(subgraph_type='undirected')


def test_invalid_relabel():
    with pytest.raises(ValueError, match='relabel'):
        HybridNeighborSampler(small_graph(), [2], relabel='hash',
                              device='cpu')


def test_invalid_seed():
    with pytest.raises(ValueError, match='seed'):
        loader(seed='42')


# Temporal and weighted sampling ##############################################


@pytest.mark.parametrize('strategy', ['first', 'recent', 'Last'])
def test_bad_temporal_strategy(strategy):
    with pytest.raises(ValueError, match='temporal_strategy'):
        loader(temporal_strategy=strategy)  # Also without time_attr.
    data = temporal_graph()
    with pytest.raises(ValueError, match='temporal_strategy'):
        loader(data, time_attr='time', temporal_strategy=strategy)
    with pytest.raises(ValueError, match='temporal_strategy'):
        HybridNeighborSampler(data, [2], time_attr='time',
                              temporal_strategy=strategy, device='cpu')


@pytest.mark.parametrize('make_graph', [small_graph, temporal_graph],
                         ids=['plain', 'temporal'])
@pytest.mark.parametrize('name,value', [('time_attr', 'missing'),
                                        ('time_attr', 3),
                                        ('weight_attr', 'missing'),
                                        ('weight_attr', 1.0),
                                        ('weight_attr', 1.5)])
def test_bad_time_or_weight_attr(name, value, make_graph):
    # (Temporal and weighted sampling are implemented: these used to raise
    # NotImplementedError, now a bad attribute name is a ValueError.)
    with pytest.raises(ValueError, match=name):
        loader(make_graph(), **{name: value})
    with pytest.raises(ValueError, match=name):
        HybridNeighborSampler(make_graph(), [2], device='cpu',
                              **{name: value})


def _with(data, **attrs):
    for key, value in attrs.items():
        setattr(data, key, value)
    return data


def _without(data, key, attr):
    del data[key][attr]
    return data


def _hetero_with_bool_time():
    data = temporal_hetero_graph()
    data['b'].time = torch.zeros(TEMPORAL_SIZES['b'], dtype=torch.bool)
    return data


@pytest.mark.parametrize('make', [
    lambda: (_with(temporal_graph(), time2=torch.zeros(80, 2)),
             dict(time_attr='time2')),
    # Neither node- nor edge-level:
    lambda: (_with(temporal_graph(), time3=torch.zeros(81)),
             dict(time_attr='time3')),
    lambda: (_with(temporal_graph(), time4=torch.zeros(80, dtype=torch.bool)),
             dict(time_attr='time4')),
    lambda: (_with(temporal_graph(),
                   edge_time2=torch.zeros(600, dtype=torch.bool)),
             dict(time_attr='edge_time2', input_time=torch.zeros(80))),
    lambda: (_hetero_with_bool_time(), dict(time_attr='time',
                                            input_nodes='a')),
], ids=['2d', 'length', 'bool', 'edge-bool', 'hetero-bool'])
def test_bad_time_attr(make):
    # (`time_attr` on only some node or edge types of a HeteroData is
    # accepted, as in PyG: see test_temporal_weighted.py.)
    data, kwargs = make()
    with pytest.raises(ValueError, match='time_attr'):
        loader(data, **kwargs)


def test_seed_type_without_time_needs_input_time():
    data = _without(temporal_hetero_graph(), 'a', 'time')
    batches = HybridNeighborLoader(data, [2], time_attr='time',
                                   input_nodes='a', batch_size=4,
                                   device='cpu')
    with pytest.raises(ValueError, match='input_time'):
        next(iter(batches))
    # With a time per seed, it samples:
    batches = HybridNeighborLoader(data, [2], time_attr='time',
                                   input_nodes='a', batch_size=4,
                                   input_time=torch.zeros(TEMPORAL_SIZES['a']),
                                   device='cpu')
    assert next(iter(batches))['a'].batch_size == 4


def _hetero_with_negative_weight():
    data = temporal_hetero_graph()
    data[C_TO_A].edge_weight[3] = -0.5
    return data


def _with_weight(value):
    w = torch.rand(600)
    w[17] = value
    return _with(temporal_graph(), w=w)


@pytest.mark.parametrize('make', [
    lambda: (_with(temporal_graph(), w=torch.rand(600, 2)), {}),
    lambda: (_with(temporal_graph(), w=torch.rand(601)), {}),
    lambda: (_with(temporal_graph(), w=torch.rand(599)), {}),
    lambda: (_with(temporal_graph(), w=torch.zeros(600, dtype=torch.bool)),
             {}),
    lambda: (_with_weight(-1.0), {}),
    lambda: (_with_weight(float('nan')), {}),
    lambda: (_with_weight(float('inf')), {}),
    lambda: (_with_weight(-float('inf')), {}),
    lambda: (_hetero_with_negative_weight(),
             dict(weight_attr='edge_weight', input_nodes='a')),
], ids=['2d', 'long', 'short', 'bool', 'negative', 'nan', 'inf', '-inf',
        'hetero-negative'])
def test_bad_weight_attr(make):
    data, kwargs = make()
    kwargs.setdefault('weight_attr', 'w')
    with pytest.raises(ValueError, match='weight_attr'):
        loader(data, **kwargs)


@pytest.mark.parametrize('make', [
    lambda: (temporal_graph(),
             dict(time_attr='time', input_nodes=torch.arange(10),
                  input_time=torch.zeros(9))),
    lambda: (temporal_graph(),
             dict(time_attr='time', input_nodes=torch.arange(80) < 10,
                  input_time=torch.zeros(11))),
    lambda: (temporal_graph(),
             dict(time_attr='time', input_nodes=torch.arange(10),
                  input_time=torch.zeros(10, 1))),
    lambda: (temporal_graph(),
             dict(time_attr='time', input_nodes=torch.arange(10),
                  input_time=torch.zeros(10, dtype=torch.bool))),
    # Without time_attr:
    lambda: (small_graph(), dict(input_nodes=torch.tensor([0, 1]),
                                 input_time=torch.tensor([3, 4]))),
    lambda: (temporal_graph(), dict(input_nodes=torch.arange(10),
                                    input_time=torch.zeros(10))),
    lambda: (temporal_hetero_graph(),
             dict(time_attr='time', input_nodes=('a', torch.arange(5)),
                  input_time=torch.zeros(6))),
    # All nodes as inputs (input_nodes None, or a node type):
    lambda: (temporal_graph(), dict(time_attr='time',
                                    input_time=torch.zeros(79))),
    lambda: (temporal_graph(), dict(time_attr='time',
                                    input_time=torch.zeros(81))),
    lambda: (temporal_hetero_graph(),
             dict(time_attr='time', input_nodes='a',
                  input_time=torch.zeros(TEMPORAL_SIZES['a'] + 1))),
], ids=['short', 'mask-long', '2d', 'bool', 'no-time-attr',
        'no-time-attr-temporal', 'hetero-long', 'homo_none_short',
        'homo_none_long', 'hetero_str'])
def test_bad_input_time(make):
    data, kwargs = make()
    with pytest.raises(ValueError, match='input_time'):
        loader(data, **kwargs)


def test_edge_temporal_needs_input_time(device):
    data = temporal_graph()
    with pytest.raises(ValueError, match='input_time'):
        loader = HybridNeighborLoader(data, [2], time_attr='edge_time',
                                      batch_size=4, device=device)
        next(iter(loader))
    hetero = temporal_hetero_graph()
    with pytest.raises(ValueError, match='input_time'):
        loader = HybridNeighborLoader(hetero, [2], time_attr='edge_time',
                                      input_nodes='a', batch_size=4,
                                      device=device)
        next(iter(loader))


def test_is_sorted_not_sorted_by_time():
    data = temporal_graph(seed=1, num_nodes=20, num_edges=200)
    # Sorted by destination, time descending within neighborhoods:
    key = data.edge_index[1] * 100 - data.time[data.edge_index[0]]
    data.edge_index = data.edge_index[:, key.argsort()]
    # Without time, this is a valid sorted input:
    loader(data, is_sorted=True)
    with pytest.raises(ValueError, match='is_sorted'):
        loader(data, time_attr='time', is_sorted=True)
    data.edge_time = torch.arange(200).flip(0)
    with pytest.raises(ValueError, match='is_sorted'):
        loader(data, time_attr='edge_time', is_sorted=True,
               input_time=torch.zeros(20))
    with pytest.raises(ValueError, match='is_sorted'):
        GraphTopology.from_data(data, is_sorted=True, time_attr='time')


def test_topology_attr_mismatch():
    data = temporal_graph()
    topo = GraphTopology.from_data(data, time_attr='time')
    with pytest.raises(ValueError, match='time_attr'):
        loader(data, topology=topo)
    with pytest.raises(ValueError, match='weight_attr'):
        loader(data, time_attr='time', weight_attr='edge_weight',
               topology=topo)


# PyG's wording ###############################################################
#
# Code written against PyG matches on its error messages (its own tests do:
# `pytest.raises(ValueError, match="hops must be the same across all")`).
# Wherever PyG rejects the same input for the same cause, our error has the
# same type and contains PyG's key phrase. The PyG side is checked too, so
# that the table catches drift: directly where PyG raises without sampling,
# with the parity marker (torch-sparse) where it raises when sampling.

WRITES_P = ('author', 'writes', 'paper')
CITES_P = ('paper', 'cites', 'paper')


def _pyg_loader(data, num_neighbors, sample=False, **kwargs):
    import warnings

    from torch_geometric.loader import NeighborLoader
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # "... without 'pyg-lib' ..."
        pyg = NeighborLoader(data, num_neighbors, **kwargs)
        if sample:
            next(iter(pyg))


def _pyg_num_neighbors(num_neighbors, default=None):
    # What PyG's `NeighborSampler` calls when sampling a heterogeneous graph:
    from torch_geometric.sampler import NumNeighbors
    NumNeighbors(num_neighbors, default).get_values(
        small_hetero_graph().edge_types)


def _ours_hetero(num_neighbors, **kwargs):
    kwargs.setdefault('input_nodes', 'paper')
    HybridNeighborLoader(small_hetero_graph(), num_neighbors, device='cpu',
                         **kwargs)


def _num_neighbors_default(values, default):
    from torch_geometric.sampler import NumNeighbors
    return NumNeighbors(values, default)


def _stores(hetero=False, sort=True, node_time=False, edge_time=False):
    r"""A (MyFeatureStore, MyGraphStore) pair of :func:`small_graph` (or
    :func:`small_hetero_graph`), edges sorted by destination
    (:obj:`is_sorted=True`, as PyG requires for temporal sampling)."""
    from torch_geometric.testing import MyFeatureStore, MyGraphStore
    fs, gs = MyFeatureStore(), MyGraphStore()
    data = small_hetero_graph() if hetero else small_graph()
    nodes = {t: data[t] for t in data.node_types} if hetero else {None: data}
    edges = {t: data[t] for t in data.edge_types} if hetero else {None: data}
    for t, store in nodes.items():
        fs.put_tensor(store.x, group_name=t, attr_name='x', index=None)
        if node_time:
            fs.put_tensor(torch.zeros(store.num_nodes, dtype=torch.long),
                          group_name=t, attr_name='time', index=None)
    for et, store in edges.items():
        ei = store.edge_index
        ei = ei[:, torch.sort(ei[1], stable=True)[1]] if sort else ei
        size = (nodes[None if et is None else et[0]].num_nodes,
                nodes[None if et is None else et[-1]].num_nodes)
        gs.put_edge_index((ei[0], ei[1]), edge_type=et, layout='coo',
                          size=size, is_sorted=sort)
        if edge_time:
            fs.put_tensor(torch.zeros(ei.size(1), dtype=torch.long),
                          group_name=et, attr_name='time', index=None)
    return fs, gs


def _time_both_levels():
    data = small_hetero_graph()
    data['paper'].t = torch.zeros(6)
    data[CITES_P].t = torch.zeros(2)
    return data


def _with_time(data, name, value):
    data[name] = value
    return data


# (id, exception type, PyG's phrase, ours, PyG's, PyG raises when sampling)
PYG_PHRASES = [
    ('hops', ValueError, 'hops must be the same across all',
     lambda: _ours_hetero({WRITES_P: [2, 2], CITES_P: [2]}),
     lambda: _pyg_num_neighbors({WRITES_P: [2, 2], CITES_P: [2]}), False),
    ('hops-loader', ValueError, 'hops must be the same across all',
     lambda: _ours_hetero({WRITES_P: [2, 2], CITES_P: [2]}),
     lambda: _pyg_loader(small_hetero_graph(), {WRITES_P: [2, 2],
                                                CITES_P: [2]}, sample=True,
                         input_nodes='paper'), True),
    ('hops-default', ValueError, 'hops must be the same across all',
     lambda: _ours_hetero(_num_neighbors_default({WRITES_P: [2, 2]}, [1])),
     lambda: _pyg_num_neighbors({WRITES_P: [2, 2]}, [1]), False),
    ('unknown-edge-type', ValueError,
     "Not all edge types specified in 'num_neighbors' exist in the graph",
     lambda: _ours_hetero({WRITES_P: [2], CITES_P: [2],
                           ('paper', 'likes', 'author'): [2]}),
     lambda: _pyg_num_neighbors({WRITES_P: [2], CITES_P: [2],
                                 ('paper', 'likes', 'author'): [2]}), False),
    ('unknown-edge-type-default', ValueError,
     "Not all edge types specified in 'num_neighbors' exist in the graph",
     lambda: _ours_hetero(_num_neighbors_default(
         {('paper', 'likes', 'author'): [2]}, [1])),
     lambda: _pyg_num_neighbors({('paper', 'likes', 'author'): [2]}, [1]),
     False),
    ('missing-edge-type', ValueError,
     'Missing number of neighbors for edge type',
     lambda: _ours_hetero({WRITES_P: [2]}),
     lambda: _pyg_num_neighbors({WRITES_P: [2]}), False),
    ('missing-edge-type-loader', ValueError,
     'Missing number of neighbors for edge type',
     lambda: _ours_hetero({WRITES_P: [2]}),
     lambda: _pyg_loader(small_hetero_graph(), {WRITES_P: [2]}, sample=True,
                         input_nodes='paper'), True),
    ('input-time-without-time-attr', ValueError,
     "Received conflicting 'input_time' and 'time_attr' arguments",
     lambda: loader(input_time=torch.zeros(10)),
     lambda: _pyg_loader(small_graph(), [2], input_time=torch.zeros(10)),
     False),
    ('time-attr-neither', ValueError,
     'is neither a node-level or edge-level attribute',
     lambda: loader(_with_time(small_graph(), 't', torch.zeros(11)),
                    time_attr='t'),
     lambda: _pyg_loader(_with_time(small_graph(), 't', torch.zeros(11)),
                         [2], time_attr='t'), False),
    ('time-attr-neither-hetero', ValueError,
     'is neither a node-level or edge-level attribute',
     lambda: _ours_hetero([2], time_attr='t'),
     lambda: _pyg_loader(small_hetero_graph(), [2], time_attr='t',
                         input_nodes='paper'), False),
    ('time-attr-both', ValueError,
     'holds both node-level and edge-level information',
     lambda: HybridNeighborLoader(_time_both_levels(), [2], time_attr='t',
                                  input_nodes='paper', device='cpu'),
     lambda: _pyg_loader(_time_both_levels(), [2], time_attr='t',
                         input_nodes='paper'), False),
    ('subgraph-type', ValueError, 'is not a valid SubgraphType',
     lambda: loader(subgraph_type='undirected'),
     lambda: _pyg_loader(small_graph(), [2], subgraph_type='undirected'),
     False),
    ('data-type', ValueError,
     "Expected a 'Data', 'HeteroData', or a tuple of 'FeatureStore' and "
     "'GraphStore'",
     lambda: HybridNeighborLoader({'edge_index': torch.zeros(2, 0)}, [2],
                                  device='cpu'),
     lambda: _pyg_loader({'edge_index': torch.zeros(2, 0)}, [2]), False),
    ('data-pair', ValueError,
     "Expected a 'Data', 'HeteroData', or a tuple of 'FeatureStore' and "
     "'GraphStore'",
     lambda: HybridNeighborLoader((1, 2), [2], device='cpu'),
     lambda: _pyg_loader((1, 2), [2]), False),
    ('sampler-data-type', ValueError,
     "Expected a 'Data', 'HeteroData', or a tuple of 'FeatureStore' and "
     "'GraphStore'",
     lambda: HybridNeighborSampler([1, 2, 3], [2], device='cpu'),
     lambda: _pyg_loader([1, 2, 3], [2]), False),
    ('disjoint-induced', ValueError,
     "'disjoint' sampling not supported for neighbor sampling",
     lambda: loader(disjoint=True, subgraph_type='induced'),
     lambda: _pyg_loader(small_graph(), [2], disjoint=True,
                         subgraph_type='induced', sample=True), True),
    ('disjoint-induced-hetero', ValueError,
     "'disjoint' sampling not supported for neighbor sampling",
     lambda: _ours_hetero([2], disjoint=True, subgraph_type='induced'),
     lambda: _pyg_loader(small_hetero_graph(), [2], disjoint=True,
                         subgraph_type='induced', input_nodes='paper',
                         sample=True), True),
    ('temporal-induced', ValueError,
     "'disjoint' sampling not supported for neighbor sampling",
     lambda: loader(temporal_graph(), time_attr='time',
                    subgraph_type='induced'),
     lambda: _pyg_loader(temporal_graph(), [2], time_attr='time',
                         subgraph_type='induced', sample=True), True),
    ('remote-weight-attr', NotImplementedError,
     "'weight_attr' argument not yet supported",
     lambda: HybridNeighborLoader(_stores(), [2], weight_attr='w',
                                  input_nodes=torch.arange(4), device='cpu'),
     lambda: _pyg_loader(_stores(), [2], weight_attr='w',
                         input_nodes=torch.arange(4)), False),
    ('remote-no-temporal-data', ValueError,
     'Temporal sampling specified but did not find any temporal data',
     lambda: HybridNeighborLoader(_stores(), [2], time_attr='time',
                                  input_nodes=torch.arange(4), device='cpu'),
     lambda: _pyg_loader(_stores(), [2], time_attr='time',
                         input_nodes=torch.arange(4)), False),
    ('remote-time-both-levels', ValueError,
     'for both node-level and edge-level types',
     lambda: HybridNeighborLoader(
         _stores(True, node_time=True, edge_time=True), [2],
         time_attr='time', input_nodes='paper', device='cpu'),
     lambda: _pyg_loader(_stores(True, node_time=True, edge_time=True), [2],
                         time_attr='time', input_nodes='paper'), False),
]


@pytest.mark.parametrize('exc,phrase,ours', [
    pytest.param(exc, phrase, ours, id=name)
    for name, exc, phrase, ours, _, _ in PYG_PHRASES
])
def test_error_contains_pyg_phrase(exc, phrase, ours):
    with pytest.raises(exc) as info:
        ours()
    assert phrase in str(info.value)


@pytest.mark.filterwarnings('ignore::UserWarning')
@pytest.mark.filterwarnings('ignore::DeprecationWarning')
@pytest.mark.parametrize('exc,phrase,pyg', [
    pytest.param(exc, phrase, pyg, id=name,
                 marks=[pytest.mark.parity] if sampling else [])
    for name, exc, phrase, _, pyg, sampling in PYG_PHRASES
])
def test_pyg_raises_the_phrase(exc, phrase, pyg):
    with pytest.raises(exc) as info:
        pyg()
    assert phrase in str(info.value)


# HybridLinkNeighborLoader ####################################################


def link_loader(data=None, num_neighbors=(2, 2), **kwargs):
    kwargs.setdefault('device', 'cpu')
    return HybridLinkNeighborLoader(small_graph() if data is None else data,
                                    list(num_neighbors), **kwargs)


@pytest.mark.parametrize('edge_label_index', [
    torch.zeros(3, 4, dtype=torch.long),
    torch.zeros(8, dtype=torch.long),
    torch.zeros(2, 4),
    torch.tensor([[0, 1], [2, 10]]),
    torch.tensor([[-1, 1], [2, 3]]),
    [[0, 1], [2, 3]],
    ('paper', 'cites', 'paper'),
], ids=['3-rows', '1d', 'float', 'beyond-num-nodes', 'negative', 'list',
        'edge-type-for-homo'])
def test_link_bad_edge_label_index(edge_label_index):
    with pytest.raises(ValueError, match='edge_label_index'):
        link_loader(edge_label_index=edge_label_index)


@pytest.mark.parametrize('edge_label_index', [
    None,
    torch.zeros(2, 3, dtype=torch.long),
    ('paper', 'unknown', 'author'),
    (('author', 'writes', 'paper'), torch.tensor([[0, 4], [0, 1]])),
    (('author', 'writes', 'paper'), torch.tensor([[0, 1], [0, 6]])),
    (('author', 'writes', 'paper'), torch.zeros(3, 2, dtype=torch.long)),
], ids=['none', 'tensor', 'unknown-type', 'src-beyond', 'dst-beyond',
        'bad-shape'])
def test_link_bad_hetero_edge_label_index(edge_label_index):
    with pytest.raises(ValueError, match='edge_label_index'):
        link_loader(small_hetero_graph(), edge_label_index=edge_label_index)


def test_link_edge_label_wrong_length():
    with pytest.raises(ValueError, match='edge_label'):
        link_loader(edge_label_index=torch.tensor([[0, 1], [2, 3]]),
                    edge_label=torch.zeros(3))


@pytest.mark.parametrize('neg_sampling', [
    'unary', dict(mode='pairs'), ('binary', 0), dict(mode='triplet',
                                                      amount=-1)
], ids=['bad-mode-str', 'bad-mode-dict', 'zero-amount', 'negative-amount'])
def test_link_bad_neg_sampling(neg_sampling):
    with pytest.raises(ValueError, match='neg_sampling'):
        link_loader(neg_sampling=neg_sampling)


def test_link_bad_neg_sampling_amount_phrases():
    # PyG's key phrases for the same causes:
    with pytest.raises(ValueError, match="'amount' needs to be positive"):
        link_loader(neg_sampling=('binary', -2))
    with pytest.raises(ValueError, match="'amount' needs to be positive"):
        link_loader(neg_sampling_ratio=-1.0)
    neg = NegativeSampling('binary', 1)
    neg.mode = NegativeSampling('triplet').mode
    neg.amount = 1.5
    with pytest.raises(ValueError, match='needs to be an integer'):
        link_loader(neg_sampling=neg)


def test_link_bad_neg_sampling_ratio():
    with pytest.raises(ValueError, match='neg_sampling_ratio'):
        link_loader(neg_sampling_ratio='1')


def test_link_triplet_with_edge_label():
    with pytest.raises(ValueError, match="'edge_label' needs to be "
                       "undefined for 'triplet'"):
        link_loader(neg_sampling='triplet', edge_label=torch.zeros(30))


@pytest.mark.parametrize('weight', [
    torch.ones(9), torch.ones(10, 1), -torch.ones(10), torch.zeros(10),
    torch.ones(10, dtype=torch.bool)
], ids=['short', '2d', 'negative', 'all-zero', 'bool'])
@pytest.mark.parametrize('name', ['src_weight', 'dst_weight'])
def test_link_bad_neg_sampling_weight(weight, name):
    neg = NegativeSampling('binary', **{name: weight})
    with pytest.raises(ValueError, match=f'neg_sampling.{name}'):
        link_loader(neg_sampling=neg)


def test_link_bad_neg_sampling_weight_matches_pyg_phrase():
    neg = NegativeSampling('binary', dst_weight=torch.ones(11))
    with pytest.raises(ValueError, match='needs to match the number of '
                       'nodes 10'):
        link_loader(neg_sampling=neg)


def test_link_edge_label_time_needs_time_attr():
    # PyG's message: both or neither.
    data = temporal_graph()
    with pytest.raises(ValueError, match="conflicting 'edge_label_time' "
                       "and 'time_attr'"):
        link_loader(data, edge_label_time=torch.zeros(data.num_edges))
    with pytest.raises(ValueError, match="conflicting 'edge_label_time' "
                       "and 'time_attr'"):
        link_loader(data, time_attr='time')


@pytest.mark.parametrize('edge_label_time', [
    torch.zeros(5), torch.zeros(600, 1), torch.zeros(600, dtype=torch.bool)
], ids=['short', '2d', 'bool'])
def test_link_bad_edge_label_time(edge_label_time):
    with pytest.raises(ValueError, match='edge_label_time'):
        link_loader(temporal_graph(), time_attr='time',
                    edge_label_time=edge_label_time)


def test_link_bad_lookahead_arguments():
    with pytest.raises(ValueError, match="'lookahead' must be None, True or"):
        link_loader(lookahead='yes')
    with pytest.raises(ValueError, match="'lookahead=True' needs"):
        link_loader(lookahead=True, prefetch=1)


def test_link_shared_checks():
    # The checks shared with HybridNeighborLoader apply too:
    with pytest.raises(ValueError, match='batch_size'):
        link_loader(batch_size=0)
    with pytest.raises(ValueError, match='num_neighbors'):
        link_loader(num_neighbors=[2, -3])
    with pytest.raises(ValueError, match='prefetch'):
        link_loader(prefetch=-1)
    with pytest.raises(TypeError, match='data'):
        HybridLinkNeighborLoader(object(), [2], device='cpu')
