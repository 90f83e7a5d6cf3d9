"""The dense and the sort relabeling give the same samples; the dense buffer
is left clean; both follow first-occurrence order."""
import inspect

import pytest
import torch
from torch_geometric.sampler import NodeSamplerInput

import pyg_orch.sampling.multi_hop as multi_hop
from pyg_orch import HybridNeighborSampler
from pyg_orch.sampling.relabel import DenseRelabeler, SortRelabeler

from conftest import hub_graph, random_hetero_graph

# The relabelers under test belong to the PyTorch sampling path; on CUDA the
# sampler may otherwise pick a fused kernel that relabels by itself.
TORCH_PATH = ({
    'backend': 'torch'
} if 'backend' in inspect.signature(HybridNeighborSampler).parameters else
              {})

# Graphs ######################################################################


# 300 nodes; a hub (node 1) above FLOYD_MAX_FANOUT; no in-edges into the
# last quarter (nodes 225 to 299):
GRAPH = dict(num_nodes=300, num_edges=2400, hub=1)


HETERO_FANOUTS = {
    ('author', 'writes', 'paper'): [4, 3, 2],
    ('paper', 'cites', 'paper'): [-1, 2, 0],
    ('inst', 'employs', 'author'): [2, 0, 1],
    ('paper', 'written_by', 'author'): [3, 40, 2],
}
# The node and edge counts of random_hetero_graph (edges per edge type, in
# the order of HETERO_FANOUTS):
HETERO_SIZES = {'paper': 150, 'author': 90, 'inst': 8}
HETERO_EDGES = dict(zip(HETERO_FANOUTS, (500, 700, 80, 500)))


# Instrumented relabelers #####################################################


class _Record:
    def __init__(self):
        self.used = []  # Relabeler classes used.
        self.buffers = []  # Dense buffers, with the number of set entries.

    def install(self, monkeypatch):
        record = self

        class Dense(DenseRelabeler):
            def __init__(self, buffer):
                super().__init__(buffer)
                record.used.append('dense')
                record.buffers.append([buffer, 0])

            def close(self):
                record.buffers[-1][1] = max(record.buffers[-1][1],
                                            int((self.buf >= 0).sum()))
                super().close()

        class Sort(SortRelabeler):
            def __init__(self, device):
                super().__init__(device)
                record.used.append('sort')

        monkeypatch.setattr(multi_hop, 'DenseRelabeler', Dense)
        monkeypatch.setattr(multi_hop, 'SortRelabeler', Sort)
        return self


FIELDS = ('node', 'row', 'col', 'edge', 'batch', 'num_sampled_nodes',
          'num_sampled_edges')


def assert_same_output(a, b):
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, dict):
            assert isinstance(y, dict) and x.keys() == y.keys(), name
            for key in x:
                _assert_same(x[key], y[key], f'{name}[{key}]')
        else:
            _assert_same(x, y, name)


def _assert_same(x, y, where):
    if isinstance(x, torch.Tensor):
        assert isinstance(y, torch.Tensor), where
        assert x.dtype == y.dtype and torch.equal(x, y), where
    else:
        assert x == y, where


# Dense == sort ###############################################################


@pytest.mark.parametrize('subgraph_type', ['directional', 'induced'])
@pytest.mark.parametrize('replace', [False, True], ids=['norep', 'rep'])
def test_dense_and_sort_identical_homogeneous(device, monkeypatch, replace,
                                              subgraph_type):
    record = _Record().install(monkeypatch)
    data = hub_graph(0, **GRAPH)
    kw = dict(num_neighbors=[5, -1, 40, 2], replace=replace,
              subgraph_type=subgraph_type, device=device, seed=1,
              **TORCH_PATH)
    dense = HybridNeighborSampler(data, relabel='dense', **kw)
    sort = HybridNeighborSampler(data, relabel='sort', **kw)
    g = torch.Generator().manual_seed(2)
    batches = [
        torch.tensor([1, 7, 7, 299, 1, 250]),  # Duplicates, no in-edges.
        torch.randint(0, 300, (40, ), generator=g),
        torch.randperm(300, generator=g)[:64],
        torch.tensor([0]),
    ]
    for seeds in batches:  # Each sampler goes through the same sequence.
        inputs = NodeSamplerInput(input_id=None, node=seeds.to(device))
        n = len(record.used)
        out_dense = dense.sample_from_nodes(inputs)
        assert record.used[n:] == ['dense']
        out_sort = sort.sample_from_nodes(inputs)
        assert record.used[n + 1:] == ['sort']
        assert_same_output(out_dense, out_sort)
        assert out_dense.node.numel() > seeds.numel() or seeds.numel() == 1
    # The dense buffer was used (entries set) and is clean again:
    assert record.buffers and all(set_ > 0 for _, set_ in record.buffers)
    for buf, _ in record.buffers:
        assert (buf == -1).all()


@pytest.mark.parametrize('replace', [False, True], ids=['norep', 'rep'])
def test_dense_and_sort_identical_heterogeneous(device, monkeypatch,
                                                replace):
    record = _Record().install(monkeypatch)
    data = random_hetero_graph(3, HETERO_SIZES, HETERO_EDGES)
    kw = dict(num_neighbors=HETERO_FANOUTS, replace=replace, device=device,
              seed=4, **TORCH_PATH)
    dense = HybridNeighborSampler(data, relabel='dense', **kw)
    sort = HybridNeighborSampler(data, relabel='sort', **kw)
    g = torch.Generator().manual_seed(5)
    for seeds, node_type in [
        (torch.tensor([0, 3, 3, 149, 10]), 'paper'),
        (torch.randint(0, 90, (30, ), generator=g), 'author'),
        (torch.randperm(150, generator=g)[:50], 'paper'),
    ]:
        inputs = NodeSamplerInput(input_id=None, node=seeds.to(device),
                                  input_type=node_type)
        out_dense = dense.sample_from_nodes(inputs)
        out_sort = sort.sample_from_nodes(inputs)
        assert_same_output(out_dense, out_sort)
        assert sum(v.numel() for v in out_dense.row.values()) > 0
    assert {'dense', 'sort'} <= set(record.used)
    # One dense buffer per node type and batch, each clean after the batch:
    assert len(record.buffers) == 3 * len(data.node_types)
    for buf, _ in record.buffers:
        assert (buf == -1).all()
    assert sum(set_ > 0 for _, set_ in record.buffers) >= 3


def test_dense_and_sort_identical_through_loader(device):
    # 'auto' (the loader's default) matches 'sort', batch after batch.
    from pyg_orch import HybridNeighborLoader
    data = hub_graph(6, **GRAPH)
    outs = []
    for relabel in ('auto', 'sort'):
        sampler = HybridNeighborSampler(data, [6, 4], relabel=relabel,
                                        device=device, seed=7, **TORCH_PATH)
        loader = HybridNeighborLoader(data, [6, 4], batch_size=64,
                                      neighbor_sampler=sampler,
                                      device=device)
        outs.append([(b.n_id.cpu(), b.e_id.cpu(), b.edge_index.cpu())
                     for b in loader])
    assert len(outs[0]) == len(outs[1]) == 5
    for a, b in zip(*outs):
        for x, y in zip(a, b):
            assert torch.equal(x, y)


def test_dense_sampler_same_batch_twice(device):
    # A buffer left dirty by the first batch would change the second.
    data = hub_graph(8, **GRAPH)
    gen = torch.Generator(device=device).manual_seed(9)
    sampler = HybridNeighborSampler(data, [4, 4, 4], relabel='dense',
                                    device=device, seed=gen, **TORCH_PATH)
    inputs = NodeSamplerInput(
        input_id=None, node=torch.tensor([5, 1, 17, 5]).to(device))
    first = sampler.sample_from_nodes(inputs)
    gen.manual_seed(9)
    second = sampler.sample_from_nodes(inputs)
    assert_same_output(first, second)
    assert first.node.numel() > 20


def test_dense_buffer_reset_after_error(device, monkeypatch):
    # An error in the middle of a batch must not leave a dirty buffer.
    record = _Record().install(monkeypatch)
    data = hub_graph(10, **GRAPH)
    gen = torch.Generator(device=device).manual_seed(11)
    sampler = HybridNeighborSampler(data, [4, 4], relabel='dense',
                                    device=device, seed=gen, **TORCH_PATH)
    inputs = NodeSamplerInput(input_id=None,
                              node=torch.tensor([1, 2, 3]).to(device))
    good = sampler.sample_from_nodes(inputs)
    original = multi_hop.sample_neighbors
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # In the second hop, after the first relabel.
            raise RuntimeError('injected')
        return original(*args, **kwargs)

    monkeypatch.setattr(multi_hop, 'sample_neighbors', failing)
    with pytest.raises(RuntimeError, match='injected'):
        sampler.sample_from_nodes(inputs)
    assert len(calls) == 2
    assert (record.buffers[-1][0] == -1).all()
    monkeypatch.setattr(multi_hop, 'sample_neighbors', original)
    gen.manual_seed(11)
    assert_same_output(sampler.sample_from_nodes(inputs), good)


# First-occurrence semantics ##################################################


def make_relabelers(num_nodes: int, device):
    buf = torch.full((num_nodes, ), -1, dtype=torch.int32, device=device)
    return {'dense': DenseRelabeler(buf), 'sort': SortRelabeler(device)}


@pytest.mark.parametrize('kind', ['dense', 'sort'])
def test_first_occurrence_hand_made(device, kind):
    def t(*values):
        return torch.tensor(values, dtype=torch.long, device=device)

    r = make_relabelers(20, device)[kind]
    r.init(t(5, 2, 5, 7))  # Duplicate seeds keep their slots...
    assert r.num_nodes == 4
    # ... but a key maps to its first one:
    assert r.lookup(t(5, 2, 7, 3)).tolist() == [0, 1, 3, -1]

    local, new = r.add(t(9, 2, 3, 9, 3, 8))
    assert local.tolist() == [4, 1, 5, 4, 5, 6]
    assert new.tolist() == [9, 3, 8]
    assert r.num_nodes == 7

    local, new = r.add(t(8, 10, 5, 10))
    assert local.tolist() == [6, 7, 0, 7]
    assert new.tolist() == [10]

    local, new = r.add(t(2, 9))  # Nothing new.
    assert local.tolist() == [1, 4] and new.tolist() == []
    local, new = r.add(t())  # Nothing at all.
    assert local.numel() == 0 and new.numel() == 0
    assert r.num_nodes == 8
    assert r.lookup(t(10, 8, 11, 0)).tolist() == [7, 6, -1, -1]
    r.close()
    if kind == 'dense':
        assert (r.buf == -1).all()


def test_sort_relabeler_large_keys(device):
    # Disjoint sampling relabels (batch * num_nodes + node) keys.
    base = 2**40
    r = SortRelabeler(device)
    r.init(torch.tensor([base + 3, 7, base + 3], device=device))
    local, new = r.add(torch.tensor([2 * base, 7, 2 * base, base + 4],
                                    device=device))
    assert local.tolist() == [3, 1, 3, 4]
    assert new.tolist() == [2 * base, base + 4]


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_relabelers_match_python_reference(device, seed):
    g = torch.Generator().manual_seed(seed)
    num_nodes = 50
    rels = make_relabelers(num_nodes, device)
    seeds = torch.randint(0, num_nodes, (6, ), generator=g)
    hops = [torch.randint(0, num_nodes, (int(s), ), generator=g)
            for s in torch.randint(0, 30, (5, ), generator=g)]

    ref = {}
    for i, v in enumerate(seeds.tolist()):
        ref.setdefault(v, i)
    count = len(seeds)
    want = []
    for keys in hops:
        new = []
        for v in keys.tolist():
            if v not in ref:
                ref[v] = count
                count += 1
                new.append(v)
        want.append(([ref[v] for v in keys.tolist()], new))

    for kind, r in rels.items():
        r.init(seeds.to(device))
        for keys, (local, new) in zip(hops, want):
            out_local, out_new = r.add(keys.to(device))
            assert out_local.tolist() == local, kind
            assert out_new.tolist() == new, kind
        assert r.num_nodes == count
        probe = torch.arange(num_nodes, device=device)
        assert r.lookup(probe).tolist() == [
            ref.get(v, -1) for v in range(num_nodes)
        ], kind
        r.close()
    assert (rels['dense'].buf == -1).all()
