"""Folders written by PyG's Partitioner read back and converted."""
import json
import warnings

import pytest
import torch
from torch_geometric.data import Data

from pyg_orch.distributed import load_partition, partition_graph
from pyg_orch.partition.pyg_partition import (
    convert_pyg_partition,
    read_pyg_partition,
)


def _graph(num_nodes=60, num_edges=240, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(num_nodes, 4, generator=gen),
                edge_index=torch.randint(0, num_nodes, (2, num_edges),
                                         generator=gen),
                edge_attr=torch.randn(num_edges, 3, generator=gen),
                num_nodes=num_nodes)


def _write_pyg_folder(data, root, monkeypatch):
    # PyG's Partitioner needs METIS (pyg-lib, or torch-sparse built with
    # it) only to assign vertices to parts; where it is missing the
    # assignment is replaced and the folder is written by PyG's own code.
    pytest.importorskip('torch_sparse')
    from torch_geometric.distributed import Partitioner
    from torch_geometric.loader import ClusterData
    import torch_geometric.typing as pyg_typing
    if not (pyg_typing.WITH_METIS or pyg_typing.WITH_PYG_LIB):
        monkeypatch.setattr(
            ClusterData, '_metis',
            lambda self, edge_index, num_nodes: torch.arange(num_nodes) % 3)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        Partitioner(data, num_parts=3, root=str(root)).generate_partition()


@pytest.fixture
def pyg_folder(tmp_path, monkeypatch):
    data = _graph()
    _write_pyg_folder(data, tmp_path / 'pyg', monkeypatch)
    return data, tmp_path / 'pyg'


@pytest.mark.parity  # PyG's Partitioner needs torch-sparse.
@pytest.mark.parametrize('level', ['node', 'edge'])
def test_read_pyg_partition_times(tmp_path, monkeypatch, level):
    data = _graph()
    size = data.num_nodes if level == 'node' else data.num_edges
    time = torch.randperm(size)
    if level == 'node':
        data.time = time
    else:
        data.edge_time = time
    _write_pyg_folder(data, tmp_path / 'pyg', monkeypatch)
    out = read_pyg_partition(tmp_path / 'pyg')
    assert torch.equal(out.edge_index, data.edge_index)
    assert torch.equal(out.time if level == 'node' else out.edge_time, time)


@pytest.mark.parity  # PyG's Partitioner needs torch-sparse.
def test_read_pyg_partition_restores_graph(pyg_folder):
    data, root = pyg_folder
    y = torch.arange(data.num_nodes) % 5
    out = read_pyg_partition(root, node_attrs={'y': y})
    assert out.num_nodes == data.num_nodes
    assert torch.equal(out.edge_index, data.edge_index)
    assert torch.equal(out.x, data.x)
    assert torch.equal(out.edge_attr, data.edge_attr)
    assert torch.equal(out.y, y)


@pytest.mark.parity  # PyG's Partitioner needs torch-sparse.
def test_convert_pyg_partition_equals_partition_graph(pyg_folder, tmp_path):
    data, root = pyg_folder
    info = convert_pyg_partition(root, tmp_path / 'ours', method='random',
                                 progress=False)
    ref = partition_graph(data, 3, tmp_path / 'ref', method='random',
                          progress=False)
    assert info.num_parts == ref.num_parts == 3
    for k in range(3):
        ours = load_partition(tmp_path / 'ours', k)
        theirs = load_partition(tmp_path / 'ref', k)
        assert ours.meta['fingerprint'] == theirs.meta['fingerprint']
        assert torch.equal(ours.node_ids, theirs.node_ids)
        assert torch.equal(ours.node_attrs['x'], theirs.node_attrs['x'])
        assert torch.equal(ours.edge_attrs['edge_attr'],
                           theirs.edge_attrs['edge_attr'])


def test_bad_folders(tmp_path):
    with pytest.raises(ValueError, match="'root'.*META.json"):
        read_pyg_partition(tmp_path)
    (tmp_path / 'META.json').write_text(json.dumps({'num_parts': 2,
                                                    'is_hetero': True}))
    with pytest.raises(NotImplementedError, match='Heterogeneous'):
        read_pyg_partition(tmp_path)


@pytest.mark.parity  # PyG's Partitioner needs torch-sparse.
def test_bad_node_attrs(pyg_folder):
    _, root = pyg_folder
    with pytest.raises(ValueError, match=r"node_attrs\['y'\].*60"):
        read_pyg_partition(root, node_attrs={'y': torch.zeros(5)})


class _RunsCode:
    def __reduce__(self):
        import os
        return (os.system, ('touch should_not_exist',))


def test_crafted_file_does_not_run_code(tmp_path, monkeypatch):
    # A PyG folder whose graph file would run code when unpickled is
    # refused, naming the file, and the code does not run.
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'META.json').write_text(json.dumps({
        'num_parts': 1, 'is_hetero': False, 'node_types': None,
        'edge_types': None, 'node_offset': None, 'is_sorted': False}))
    torch.save(torch.zeros(4, dtype=torch.long), tmp_path / 'node_map.pt')
    torch.save({'x': _RunsCode()}, tmp_path / 'edge_map.pt')
    with pytest.raises(ValueError, match=r"edge_map\.pt.*posix\.system|"
                       r"edge_map\.pt.*os\.system|edge_map\.pt.*refusing"):
        read_pyg_partition(tmp_path)
    assert not (tmp_path / 'should_not_exist').exists()
