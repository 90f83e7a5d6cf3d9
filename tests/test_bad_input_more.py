"""Bad input found by probing as a new user (issue 49, items 6-8): each
fails with a clear exception that names the argument, the file and row, or
the attribute."""
import math

import pytest
import torch

from pyg_orch import HybridLinkNeighborLoader, HybridNeighborLoader
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
