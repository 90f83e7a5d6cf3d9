"""The CPU side of :class:`pyg_orch.offload.BottomLayerOffload`: the
subgraphs the workers build, how work is split into items, and the worker
threads' settings."""
import pytest
import torch
from torch_geometric.nn import (
    GATConv,
    GCNConv,
    GINConv,
    GraphConv,
    GraphSAGE,
    MessagePassing,
    SAGEConv,
)

from pyg_orch.offload import (
    BottomLayerOffload,
    default_intra_op_threads,
    default_num_threads,
)
from pyg_orch.offload import OffloadOptions
from pyg_orch.offload.bottom_layer import BottomLayerComputer
from pyg_orch.offload.super_batch import EmbeddingPipeline
from pyg_orch.offload.tables import default_chunk_size, split_chunks
from pyg_orch.offload.workers import WorkerPool, process_intra_op_threads
from pyg_orch.topology.csc import CSCTopology

from conftest import tiny_graph, tiny_loader

# No offload thread outlives a test; one intra-op thread (conftest):
pytestmark = pytest.mark.usefixtures('no_thread_leaks', 'one_intra_op_thread')


def _computer(layer, data, num_neighbors=3, **kwargs):
    n = data.num_nodes
    csc = CSCTopology.from_edge_index(data.edge_index, n, n)
    return BottomLayerComputer(layer, data.x, csc, num_neighbors, seed=0,
                               **kwargs)


@pytest.mark.parametrize('conv', [
    lambda: SAGEConv(8, 6),
    lambda: GATConv(8, 6, heads=2),
    lambda: GCNConv(8, 6),
])
def test_subgraph_without_dedup_gives_same_outputs(conv):
    # Degree-free layers skip deduplication (one source row per sampled
    # edge); the targets' outputs must not change. Degree-normalized ones
    # (GCNConv) deduplicate by default.
    data = tiny_graph()
    torch.manual_seed(0)
    layer = conv()
    nodes = torch.tensor([0, 1, 2, 5, 9, 20, 33])
    fast = _computer(layer, data, dedup=False)
    exact = _computer(layer, data, dedup=True)
    assert _computer(layer, data).dedup == isinstance(layer, GCNConv)

    gen = torch.Generator().manual_seed(3)
    ids, edge_index = fast.subgraph(nodes, gen)
    # Targets first, then one row per sampled edge:
    assert torch.equal(ids[:nodes.numel()], nodes)
    assert ids.numel() == nodes.numel() + edge_index.size(1)
    assert torch.equal(edge_index[0], torch.arange(nodes.numel(),
                                                   ids.numel()))
    gen = torch.Generator().manual_seed(3)
    ids2, edge_index2 = exact.subgraph(nodes, gen)
    assert ids2.unique().numel() == ids2.numel()  # One row per vertex.
    # The same sampled edges, as global (source, target) pairs:
    pairs = set(zip(ids[edge_index[0]].tolist(),
                    ids[edge_index[1]].tolist()))
    pairs2 = set(zip(ids2[edge_index2[0]].tolist(),
                     ids2[edge_index2[1]].tolist()))
    assert pairs == pairs2

    if isinstance(layer, GCNConv):
        return  # Sources' in-degrees differ: the point of deduplicating.
    for computer in (fast, exact):
        computer.calibrate(nodes)
    with torch.no_grad():
        torch.manual_seed(0)
        a = fast.compute(fast.template, nodes)
        b = exact.compute(exact.template, nodes)
    # Both computers' generators are seeded alike per thread:
    assert a.shape == (nodes.numel(), b.size(1))
    assert torch.allclose(a, b, atol=1e-5)


class DoubledMessages(MessagePassing):
    # Weight-free aggregation whose messages are not the neighbors' rows.
    def __init__(self):
        super().__init__(aggr='mean')
        self.lin = torch.nn.Linear(8, 6)

    def forward(self, x, edge_index):
        return self.lin(self.propagate(edge_index, x=x))

    def message(self, x_j):
        return 2 * x_j


@pytest.mark.parametrize('conv,dedup,mode', [
    (lambda: SAGEConv(8, 6), None, 'mean'),
    (lambda: SAGEConv(8, 6, aggr='sum'), None, 'sum'),
    (lambda: GINConv(torch.nn.Linear(8, 6)), None, 'sum'),
    (lambda: GraphConv(8, 6, aggr='max'), None, 'max'),
    (lambda: GCNConv(8, 6, normalize=False, bias=False), False, 'sum'),
    # Deduplicated subgraphs (degree-normalized layers) are not bagged:
    (lambda: GCNConv(8, 6, normalize=False, bias=False), True, None),
    (lambda: SAGEConv(8, 6, aggr=['mean', 'max']), None, None),
    (DoubledMessages, None, None),
])
def test_bag_aggregation_matches_the_layer(conv, dedup, mode):
    # Where the aggregation is a mean, sum or max of the neighbors' rows,
    # the CPU side computes it with embedding_bag: the same rows as the
    # layer's aggregation for the same neighbor samples, including vertices
    # with fewer neighbors than the fan-out and with none.
    data = tiny_graph()
    torch.manual_seed(0)
    layer = conv()
    nodes = torch.arange(data.num_nodes).flip(0)  # Low degrees first.
    deg = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
    assert int((deg == 0).sum()) > 0 and int((deg == 1).sum()) > 0
    kwargs = {} if dedup is None else {'dedup': dedup}
    fast = _computer(layer, data, **kwargs)
    slow = _computer(layer, data, **kwargs)
    kind = fast.choose_split(nodes)
    assert kind != 'output'
    assert fast.bag_mode == mode
    slow.choose_split(nodes)
    slow.bag_mode = None  # The layer's own aggregation.
    a = fast.compute(fast.template, nodes)
    b = slow.compute(slow.template, nodes)
    assert a.shape == b.shape and a.size(0) == nodes.numel()
    assert torch.allclose(a, b, atol=1e-6)
    assert bool((a[deg[nodes] == 0] == 0).all())


def test_hot_neighbors_get_placeholder_in_edges():
    # With dedup and an in-edge mask, a sampled neighbor in the mask that is
    # not a target gets min(degree, fan-out) in-edges from row 0, as a hot
    # vertex has in a mini-batch; targets and other neighbors do not change.
    data = tiny_graph()
    torch.manual_seed(0)
    computer = _computer(GCNConv(8, 6), data, num_neighbors=3)
    assert computer.dedup
    nodes = torch.tensor([0, 1, 2, 5, 9, 20, 33])
    gen = torch.Generator().manual_seed(3)
    ids, plain = computer.subgraph(nodes, gen)
    mask = torch.zeros(data.num_nodes, dtype=torch.bool)
    mask[ids[nodes.numel()::2]] = True  # Every other neighbor row.
    mask[nodes] = True
    computer.in_edge_mask = mask
    gen = torch.Generator().manual_seed(3)
    ids2, edge_index = computer.subgraph(nodes, gen)
    assert torch.equal(ids, ids2)
    assert torch.equal(edge_index[:, :plain.size(1)], plain)
    extra = edge_index[:, plain.size(1):]
    assert bool((extra[0] == 0).all())
    csc = computer.csc
    deg = (csc.colptr[1:] - csc.colptr[:-1]).clamp(max=3)
    count = torch.bincount(extra[1], minlength=ids.numel())
    n = nodes.numel()
    assert bool((count[:n] == 0).all())
    expected = torch.where(mask[ids[n:]], deg[ids[n:]], 0)
    assert torch.equal(count[n:], expected) and int(expected.sum()) > 0


def test_default_chunk_size_by_bytes():
    data = tiny_graph(num_features=100)
    layer = SAGEConv(100, 4)
    # 8 MB of gathered rows: (1 + 5) rows of 400 bytes per vertex.
    assert default_chunk_size(_computer(layer, data, 5)) == \
        8 * 2**20 // (6 * 400)
    wide = tiny_graph(num_features=600)
    computer = _computer(SAGEConv(600, 4), wide, 5)
    assert default_chunk_size(computer) == 8 * 2**20 // (6 * 2400)
    # embedding_bag gathers no neighbor rows: 8 MB of output rows.
    computer.choose_split(torch.arange(wide.num_nodes), 'aggregate')
    assert computer.cpu_aggregation == 'embedding_bag'
    assert default_chunk_size(computer) == 8 * 2**20 // 2400
    # Bounded on both sides:
    assert default_chunk_size(_computer(layer, tiny_graph(num_features=2),
                                        5)) == 16384
    huge = tiny_graph(num_features=20000, num_nodes=20, num_edges=40)
    assert default_chunk_size(_computer(SAGEConv(20000, 4), huge, 5)) == 256


@pytest.mark.parametrize('n,threads,size', [
    (10_000, 2, 3000),
    (1_000, 2, 3000),
    (1_000, 8, 3000),
    (100, 4, 3000),
    (7, 1, 2),
])
def test_split_covers_rows(n, threads, size):
    items = split_chunks(n, threads, size)
    assert items[0][0] == 0 and items[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(items[:-1], items[1:]))
    assert all(0 < hi - lo <= size for lo, hi in items)
    # Enough items for every thread, unless they would get under 256 rows:
    assert len(items) >= min(threads, max(n // 256, 1))
    assert split_chunks(0, threads, size) == []


def test_worker_intra_op_threads():
    pool = WorkerPool(2, idle_timeout=1.0, intra_op_threads=3)
    futures = [pool.submit(torch.get_num_threads) for _ in range(4)]
    assert [f.result(timeout=10) for f in futures] == [3] * 4
    pool.close()


def test_worker_intra_op_threads_stay_in_workers():
    # torch.set_num_threads in a worker also sets what every thread started
    # later begins with; the pool sets that back (here 1, the fixture's).
    before = process_intra_op_threads()
    pool = WorkerPool(2, idle_timeout=1.0, intra_op_threads=before + 2)
    futures = [pool.submit(torch.get_num_threads) for _ in range(4)]
    assert [f.result(timeout=10) for f in futures] == [before + 2] * 4
    assert process_intra_op_threads() == before
    assert torch.get_num_threads() == before
    pool.close()


def test_thread_defaults_and_validation(monkeypatch):
    for cores, workers, intra in [(1, 1, 1), (2, 1, 1), (4, 2, 1),
                                  (16, 2, 4), (64, 2, 16)]:
        monkeypatch.setattr('os.cpu_count', lambda: cores)
        assert default_num_threads() == workers
        assert default_intra_op_threads(workers) == intra
        assert default_intra_op_threads(8) == max(1, cores // 2 // 8)
    monkeypatch.undo()

    data = tiny_graph()
    loader = tiny_loader(data)
    model = GraphSAGE(8, 8, 2, 3)
    for name, bad in [('intra_op_threads', 0), ('intra_op_threads', 1.5),
                      ('chunk_size', 0), ('chunk_size', True),
                      ('num_threads', 0)]:
        with pytest.raises(ValueError, match=name):
            BottomLayerOffload(model, loader, options=OffloadOptions(
                **{name: bad}))
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        num_threads=2, intra_op_threads=2, chunk_size=5))
    stats = off.stats()
    assert stats['num_threads'] == 2 and stats['intra_op_threads'] == 2
    assert stats['chunk_size'] == 5
    pipeline = off.runtime.strategy
    assert isinstance(pipeline, EmbeddingPipeline)
    assert all(hi - lo <= 5 for lo, hi in pipeline.chunks)
    off.close()


def test_cpu_autocast_bfloat16():
    data = tiny_graph(num_features=64)
    torch.manual_seed(0)
    layer = SAGEConv(64, 32)
    nodes = torch.arange(0, 200, 7)
    exact = _computer(layer, data)
    fast = _computer(layer, data, autocast_dtype=torch.bfloat16)
    with torch.no_grad():
        a = exact.compute(exact.template, nodes)
        b = fast.compute(fast.template, nodes)
    assert b.dtype == torch.float32 and b.shape == a.shape
    assert not torch.equal(a, b)  # Rounded: autocast is in effect.
    # bfloat16 keeps 8 bits of mantissa:
    assert torch.allclose(a, b, rtol=0.05, atol=0.05 * a.abs().max())
    with pytest.raises(ValueError, match='autocast_dtype'):
        _computer(layer, data, autocast_dtype=torch.float16)
    loader = tiny_loader(tiny_graph())
    with pytest.raises(ValueError, match='cpu_autocast'):
        BottomLayerOffload(
            GraphSAGE(8, 8, 2, 3), loader, options=OffloadOptions(
                cpu_autocast=torch.float16))
    off = BottomLayerOffload(
        GraphSAGE(8, 8, 2, 3), loader, options=OffloadOptions(
            cpu_autocast=torch.bfloat16))
    assert off.stats()['cpu_autocast'] == 'bfloat16'
    off.close()
