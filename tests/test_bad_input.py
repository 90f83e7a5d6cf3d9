"""Bad arguments fail early, with an exception that names the argument."""
import pytest
import torch
from torch_geometric.data import Data, HeteroData

from pyg_orch import HybridNeighborLoader, HybridNeighborSampler


def small_graph(num_nodes: int = 10) -> Data:
    g = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, num_nodes, (2, 30), generator=g)
    return Data(edge_index=edge_index, x=torch.randn(num_nodes, 2),
                y=torch.arange(num_nodes), num_nodes=num_nodes)


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


def test_disjoint_with_induced():
    with pytest.raises(ValueError, match='disjoint'):
        loader(disjoint=True, subgraph_type='induced')


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


def test_invalid_temporal_strategy():
    with pytest.raises(ValueError, match='temporal_strategy'):
        loader(temporal_strategy='first')


def test_input_time_without_time_attr():
    with pytest.raises(ValueError, match='input_time'):
        loader(input_nodes=torch.tensor([0, 1]),
               input_time=torch.tensor([3, 4]))


@pytest.mark.parametrize('name,value', [('time_attr', 'missing'),
                                        ('time_attr', 3),
                                        ('weight_attr', 'missing'),
                                        ('weight_attr', 1.0)])
def test_bad_time_or_weight_attr(name, value):
    # (Temporal and weighted sampling are implemented: these used to raise
    # NotImplementedError, now a bad attribute name is a ValueError.)
    with pytest.raises(ValueError, match=name):
        loader(**{name: value})
    with pytest.raises(ValueError, match=name):
        HybridNeighborSampler(small_graph(), [2], device='cpu',
                              **{name: value})
