"""Exactness of :class:`pyg_orch.offload.BottomLayerOffload` where the docs
call it exact (:obj:`max_staleness=0`, full fan-out,
:obj:`full_neighbors=True`): on graphs with self-loops and duplicate edges,
for models deeper than the loader's hops, and in evaluation mode through a
loader with persistent worker processes."""
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import (
    GAT,
    GIN,
    EdgeConv,
    GATConv,
    GATv2Conv,
    GCNConv,
    GINConv,
    GraphConv,
    GraphSAGE,
    ResGatedGraphConv,
    SAGEConv,
    TransformerConv,
)

from pyg_orch import HybridNeighborLoader
from pyg_orch.offload import BottomLayerOffload, OffloadOptions
from pyg_orch.offload.aggregate_split import (
    OUTPUT,
    aggregation_copy,
    call_layer,
)
from pyg_orch.offload.bottom_layer import BottomLayerComputer
from pyg_orch.topology.csc import CSCTopology

from conftest import random_graph, step_matches_unpruned

pytestmark = pytest.mark.usefixtures('no_thread_leaks', 'one_intra_op_thread')

NUM_FEATURES = 12


def looped_graph(seed: int = 0) -> Data:
    r"""A random multigraph with self-loops (on every third vertex, some
    twice) and duplicate edges."""
    data = random_graph(300, 2400, seed, num_features=NUM_FEATURES,
                        num_classes=4, train_ratio=0.3)
    loops = torch.arange(0, 300, 3).repeat(2, 1)
    edge_index = data.edge_index
    data.edge_index = torch.cat(
        [edge_index, loops, loops[:, :20], edge_index[:, :100]], 1)
    return data


def _has_loops_and_duplicates(edge_index) -> bool:
    loops = bool((edge_index[0] == edge_index[1]).any())
    pairs = edge_index[0] * 10**6 + edge_index[1]
    return loops and pairs.unique().numel() < pairs.numel()


# The CPU side against the layer itself ######################################

CONVS = {
    'sage': lambda: SAGEConv(NUM_FEATURES, 8),
    'gin': lambda: GINConv(torch.nn.Linear(NUM_FEATURES, 8)),
    'graph': lambda: GraphConv(NUM_FEATURES, 8),
    'gat': lambda: GATConv(NUM_FEATURES, 4, heads=2),
    'gatv2': lambda: GATv2Conv(NUM_FEATURES, 4, heads=2),
    'transformer': lambda: TransformerConv(NUM_FEATURES, 8),
    'resgated': lambda: ResGatedGraphConv(NUM_FEATURES, 8),
    'edge': lambda: EdgeConv(torch.nn.Linear(2 * NUM_FEATURES, 8)),
    'gcn': lambda: GCNConv(NUM_FEATURES, 8),
}


@pytest.mark.parametrize('split', ['output', 'auto'])
@pytest.mark.parametrize('name', list(CONVS))
def test_cpu_rows_treat_self_loops_as_the_layer(name, split):
    # All in-neighbors: the CPU's rows of the vertices (those with
    # self-loops and duplicate in-edges included) are the layer's own
    # output, or its aggregation, on the whole graph.
    data = looped_graph()
    assert _has_loops_and_duplicates(data.edge_index)
    n = data.num_nodes
    torch.manual_seed(0)
    layer = CONVS[name]().eval()
    csc = CSCTopology.from_edge_index(data.edge_index, n, n)
    computer = BottomLayerComputer(layer, data.x, csc, -1, seed=0)
    # Degree-normalized layers (GCNConv) also read their neighbors' own
    # in-edges: only the whole graph gives them all.
    nodes = torch.arange(n) if computer.dedup else torch.arange(0, n, 2)
    kind = computer.choose_split(nodes, split)
    computer.calibrate(nodes)
    with torch.no_grad():
        expected = call_layer(layer if kind == OUTPUT else aggregation_copy(
            layer, kind), data.x, data.edge_index)[nodes]
        out = computer.compute(computer.template, nodes)
    assert out.shape == expected.shape
    assert torch.allclose(out, expected, atol=1e-5), \
        (kind, computer.cpu_aggregation, (out - expected).abs().max())


# The offloaded model against the plain one ##################################

MODELS = {'sage': GraphSAGE, 'gin': GIN, 'gat': GAT}


def _loaders(data, num_hops: int = 2, **kwargs):
    def make():
        return HybridNeighborLoader(data, [-1] * num_hops, batch_size=32,
                                    input_nodes=data.train_mask,
                                    device='cpu', **kwargs)

    return make(), make()


@pytest.mark.parametrize('split', ['output', 'auto'])
@pytest.mark.parametrize('name', list(MODELS))
def test_exact_on_a_graph_with_self_loops(name, split):
    data = looped_graph()
    loader, ref_loader = _loaders(data)
    torch.manual_seed(0)
    model = MODELS[name](NUM_FEATURES, 16, 2, 4)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.3, max_staleness=0, full_neighbors=True, split=split))
    optimizer = torch.optim.Adam(off.parameters(), lr=0.01)
    pruned = 0
    for batch, ref in zip(loader, ref_loader):
        pruned += int(batch.num_nodes < ref.num_nodes)
        step_matches_unpruned(off, model, optimizer, batch, ref)
    assert pruned > 0 and off.stats()['hot_rows_replaced'] > 0
    off.close()


def test_model_deeper_than_the_loader_passes_through():
    # Plain PyG runs a 3-layer model over 2-hop batches (the third layer
    # propagates over the sampled edges again), so offload must not break
    # it: it leaves the model alone, says why once, and the outputs are the
    # plain model's on unpruned batches.
    data = looped_graph()
    loader, ref_loader = _loaders(data)
    torch.manual_seed(0)
    model = GraphSAGE(NUM_FEATURES, 16, 3, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        off = BottomLayerOffload(model, loader, options=OffloadOptions(
            hot_ratio=0.3, max_staleness=0, full_neighbors=True))
        optimizer = torch.optim.Adam(off.parameters(), lr=0.01)
        off.train()
        for batch, ref in zip(loader, ref_loader):
            assert batch.num_nodes == ref.num_nodes
            step_matches_unpruned(off, model, optimizer, batch, ref)
    ours = [w for w in caught if 'BottomLayerOffload' in str(w.message)]
    assert len(ours) == 1
    message = str(ours[0].message)
    assert '3 message-passing layers' in message and '2 hops' in message
    stats = off.stats()
    assert stats['decision']['mode'] == 'fixed'
    assert stats['decision']['reason'].startswith(message[len(
        'BottomLayerOffload: '):])
    assert stats['num_hot'] == 0 and stats['hot_rows_replaced'] == 0
    assert stats['offloaded_forwards'] == 0
    off.close()
    # As many hops as layers: offloaded (the check above can fail).
    loader, _ = _loaders(data, num_hops=3)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        off = BottomLayerOffload(model, loader, options=OffloadOptions(
            hot_ratio=0.3, max_staleness=0, full_neighbors=True))
    assert off.stats()['num_hot'] > 0
    off.close()


# Evaluation through a loader with persistent workers ########################


def _train_epoch(off, loader, optimizer) -> None:
    off.train()
    for batch in loader:
        optimizer.zero_grad()
        out = off(batch.x, batch.edge_index)[:batch.batch_size]
        F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        optimizer.step()


def test_eval_with_persistent_workers_sees_full_batches():
    data = looped_graph()
    loader, ref_loader = _loaders(data, num_workers=1,
                                  persistent_workers=True)
    torch.manual_seed(0)
    model = GraphSAGE(NUM_FEATURES, 16, 2, 4)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.3, max_staleness=0, full_neighbors=True))
    optimizer = torch.optim.SGD(off.parameters(), lr=0.1)
    for epoch in range(2):
        _train_epoch(off, loader, optimizer)
        replaced = off.stats()['hot_rows_replaced']
        assert replaced > 0  # The workers pruned in training mode.
        off.eval()
        num = 0
        with torch.no_grad():
            for batch, ref in zip(loader, ref_loader):
                assert torch.equal(batch.n_id, ref.n_id)
                assert torch.equal(batch.edge_index, ref.edge_index)
                out = off(batch.x, batch.edge_index)
                assert torch.equal(out, model(ref.x, ref.edge_index))
                num += 1
        assert num == len(ref_loader)
        assert off.stats()['hot_rows_replaced'] == replaced
    # Training again prunes again:
    off.train()
    batch, ref = next(iter(loader)), next(iter(ref_loader))
    assert batch.num_nodes < ref.num_nodes
    off.close()
