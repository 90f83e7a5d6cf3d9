"""Graph fingerprints (:mod:`pyg_orch.topology.fingerprint`): what they tell
apart, that topologies record them, and that a loader refuses a
:obj:`topology=` built from another graph instead of sampling edges that are
not its graph's."""
import pytest
import torch
from torch_geometric.data import Data

from conftest import random_graph, random_hetero_graph
from pyg_orch import HybridLinkNeighborLoader, HybridNeighborLoader
from pyg_orch.topology.csc import CSCTopology
from pyg_orch.topology.fingerprint import (
    FINGERPRINT_SAMPLE,
    csc_fingerprint,
    differing_ranks,
    edge_index_fingerprint,
    graph_fingerprint,
)
from pyg_orch.topology.graph import GraphTopology
from pyg_orch.partition import storage


def test_partition_folders_use_the_same_function():
    assert storage.graph_fingerprint is graph_fingerprint


def test_what_a_fingerprint_tells_apart():
    data = random_graph(200, 10 * FINGERPRINT_SAMPLE, 0)
    fp = graph_fingerprint(data)
    assert graph_fingerprint(data.clone()) == fp
    assert edge_index_fingerprint(data.edge_index, 200) == fp
    assert graph_fingerprint(data.edge_index, 200) == fp
    # Another graph of the same sizes, one more vertex, one edge fewer:
    assert graph_fingerprint(random_graph(200, 10 * FINGERPRINT_SAMPLE,
                                          1)) != fp
    assert graph_fingerprint(data.edge_index, 201) != fp
    assert graph_fingerprint(data.edge_index[:, :-1], 200) != fp
    # A sampled column changed (the first and the last always are):
    for col in (0, data.num_edges - 1):
        ei = data.edge_index.clone()
        ei[0, col] = (ei[0, col] + 1) % 200
        assert graph_fingerprint(ei, 200) != fp
    # Bipartite counts are part of it:
    assert edge_index_fingerprint(data.edge_index, 200, 300) != fp
    # Heterogeneous graphs, and a graph without edges:
    hetero = random_hetero_graph(0)
    assert graph_fingerprint(hetero) == graph_fingerprint(hetero.clone())
    assert graph_fingerprint(hetero) != graph_fingerprint(
        random_hetero_graph(1))
    assert graph_fingerprint(Data(num_nodes=5)) != graph_fingerprint(
        Data(num_nodes=6))
    with pytest.raises(ValueError, match="'num_nodes' is needed"):
        graph_fingerprint(data.edge_index)


def test_csc_fingerprint():
    data = random_graph(100, 800, 0, sort=True)
    a = CSCTopology.from_edge_index(data.edge_index, 100, 100, is_sorted=True)
    wrapped = CSCTopology.from_csc(a.colptr, a.row, None, 100)
    assert wrapped.fingerprint is None
    assert wrapped.content_fingerprint() == csc_fingerprint(
        a.colptr, a.row, 100)
    row = a.row.clone()
    row[-1] = (row[-1] + 1) % 100
    assert CSCTopology.from_csc(a.colptr, row, None,
                                100).content_fingerprint() != \
        wrapped.content_fingerprint()


def test_topologies_record_their_graph():
    data = random_graph(100, 800, 0)
    topo = GraphTopology.from_data(data)
    assert topo.fingerprint == graph_fingerprint(data)
    assert topo.csc[None].fingerprint == graph_fingerprint(data)
    assert topo.to('cpu').fingerprint == topo.fingerprint
    assert topo.content_fingerprint() == topo.fingerprint
    hetero = random_hetero_graph(0)
    assert GraphTopology.from_data(hetero).fingerprint == graph_fingerprint(
        hetero)


def _same_sizes(seed):
    return random_graph(120, 900, seed, num_features=4)


def test_topology_of_another_graph_is_refused():
    data, other = _same_sizes(0), _same_sizes(1)
    foreign = GraphTopology.from_data(other)
    with pytest.raises(ValueError, match=r"'topology' was built from "
                       r"another graph .*" + graph_fingerprint(data)):
        HybridNeighborLoader(data, [3, 2], topology=foreign, batch_size=16)
    with pytest.raises(ValueError, match="'topology' was built from"):
        HybridLinkNeighborLoader(data, [3, 2], topology=foreign,
                                 edge_label_index=data.edge_index[:, :50],
                                 batch_size=16)
    # One edge changed, same counts:
    changed = data.clone()
    changed.edge_index = data.edge_index.clone()
    changed.edge_index[1, 0] = (changed.edge_index[1, 0] + 1) % 120
    with pytest.raises(ValueError, match="'topology' was built from"):
        HybridNeighborLoader(changed, [3], batch_size=16,
                             topology=GraphTopology.from_data(data))
    hetero = random_hetero_graph(0)
    with pytest.raises(ValueError, match="'topology' was built from"):
        HybridNeighborLoader(hetero, [3], batch_size=16,
                             input_nodes=('paper', None),
                             topology=GraphTopology.from_data(
                                 random_hetero_graph(1)))


def test_topology_of_the_same_graph_samples_its_edges():
    data = _same_sizes(0)
    topo = GraphTopology.from_data(data.clone())
    loader = HybridNeighborLoader(data, [3, 2], topology=topo, batch_size=16,
                                  seed=0)
    for batch in loader:
        edges = batch.n_id[batch.edge_index]
        assert torch.equal(edges, data.edge_index[:, batch.e_id])


def test_differing_ranks():
    assert differing_ranks(['a', 'a']) == []
    assert differing_ranks(['a', 'b']) == [1]
    assert differing_ranks(['b', 'a', 'a']) == [0]
    assert differing_ranks(['a', 'a', 'b', 'c']) == [2, 3]
