"""The batch assembler against PyG's own NodeLoader.filter_fn."""
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader.node_loader import NodeLoader
from torch_geometric.sampler import NodeSamplerInput

from pyg_orch import HybridNeighborSampler
from pyg_orch.loader.assemble import DataAssembler

from conftest import random_graph


def make_data(explicit_num_nodes: bool):
    data = random_graph(120, 900, num_features=6, num_classes=3,
                        train_ratio=0.5, edge_dim=2,
                        explicit_num_nodes=explicit_num_nodes)
    data.edge_weight = torch.rand(
        900, generator=torch.Generator().manual_seed(1))
    data.graph_attr = torch.tensor([1.0, 2.0, 3.0])  # Neither node nor edge.
    data.name = 'toy'
    return data


def assert_same(a: Data, b: Data):
    assert set(a.keys()) == set(b.keys())
    for key in a.keys():
        va, vb = a[key], b[key]
        if isinstance(va, torch.Tensor):
            assert va.dtype == vb.dtype and torch.equal(va, vb), key
        else:
            assert va == vb, key


@pytest.mark.parametrize('explicit_num_nodes', [False, True])
@pytest.mark.parametrize('options', [
    {}, {'disjoint': True}, {'subgraph_type': 'bidirectional'},
    {'subgraph_type': 'induced'}
])
def test_matches_pyg_filter_fn(explicit_num_nodes, options):
    data = make_data(explicit_num_nodes)
    sampler = HybridNeighborSampler(data, [4, 3], device='cpu', seed=0,
                                    **options)
    loader = NodeLoader(data, sampler, batch_size=16)
    assembler = DataAssembler(data, torch.device('cpu'))
    for start in (0, 40, 104):
        index = torch.arange(start, start + 16)
        out = sampler.sample_from_nodes(loader.input_data[index])
        assert_same(assembler(out), loader.filter_fn(out))


def test_features_come_from_the_callback():
    data = make_data(False)
    sampler = HybridNeighborSampler(data, [3], device='cpu', seed=0)
    calls = []

    def features(node):
        calls.append(node)
        return data.x[node] * 2

    batch = DataAssembler(data, torch.device('cpu'), features)(
        sampler.sample_from_nodes(
            NodeSamplerInput(input_id=torch.arange(8), node=torch.arange(8))))
    assert len(calls) == 1
    assert torch.equal(batch.x, 2 * data.x[batch.n_id])
    assert torch.equal(batch.y, data.y[batch.n_id])


def test_move_to_device_is_pygs_to():
    from torch_geometric.data import HeteroData

    from pyg_orch.loader.assemble import move_to_device
    meta = torch.device('meta')
    data = Data(x=torch.randn(4, 3), edge_index=torch.tensor([[0, 1], [1,
                                                                       2]]),
                pair=[torch.ones(2), 5], batch_size=4, name='b', empty=None)
    data.num_sampled_nodes = [4, 2]
    data.y = torch.zeros(4, device=meta)  # Already there: kept as is.
    y = data.y
    ref = data.clone().to(meta, non_blocking=True)
    out = move_to_device(data, meta)
    assert out is data
    assert out.keys() == ref.keys()
    for key in ref.keys():
        a, b = out[key], ref[key]
        if isinstance(b, torch.Tensor):
            assert a.device == b.device == meta and a.shape == b.shape
        elif key == 'pair':
            assert a[0].device == meta and a[1] == 5
        else:
            assert a == b
    assert out.y is y
    hetero = HeteroData()
    hetero['a'].x = torch.randn(3, 2)
    hetero['a', 'to', 'a'].edge_index = torch.tensor([[0], [1]])
    hetero.input_id = torch.arange(3)
    out = move_to_device(hetero, meta)
    assert out['a'].x.device == meta and out.input_id.device == meta
    assert out['a', 'to', 'a'].edge_index.device == meta


def test_stack_edges_views_adjacent_rows_and_copies_otherwise():
    from pyg_orch.loader.assemble import stack_edges
    buf = torch.arange(30).view(3, 10).clone()
    row, col, _ = buf  # Back to back in one buffer, as the fused sampler's.
    view = stack_edges(row, col)
    assert torch.equal(view, torch.stack([row, col]))
    assert view.is_contiguous() and view.data_ptr() == row.data_ptr()
    for r, c in ((col, row), (row.clone(), col.clone()), (row, buf[2]),
                 (buf[0, :4], buf[0, 5:9]), (buf[:, 0], buf[:, 1])):
        out = stack_edges(r, c)
        assert torch.equal(out, torch.stack([r, c]))
        assert out.data_ptr() != r.data_ptr() or r.numel() == 0
    half = stack_edges(buf[0, :5], buf[0, 5:])  # Adjacent halves of a row.
    assert torch.equal(half, buf[0].view(2, 5))
    assert half.data_ptr() == buf.data_ptr()
    empty = torch.empty(0, dtype=torch.int64)
    assert stack_edges(empty, empty).shape == (2, 0)
