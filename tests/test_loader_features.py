"""Loader features of :class:`HybridNeighborLoader` beyond plain sampling:
transforms, seeding, workers, shared topologies, stats and PyG's
:class:`LinkNeighborLoader` driven by :class:`HybridNeighborSampler`."""
import copy

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import LinkNeighborLoader
from torch_geometric.sampler import SamplerOutput
from torch_geometric.utils import degree

from pyg_orch import GraphTopology, HybridNeighborLoader, HybridNeighborSampler

from conftest import random_graph

N, E = 600, 4000


@pytest.fixture
def graph():
    # Function scope: some tests modify the graph in place.
    return random_graph(N, E, num_features=8, num_classes=5, edge_dim=3,
                        explicit_num_nodes=False)


def check_batch(data: Data, batch: Data):
    assert batch.n_id.unique().numel() == batch.n_id.numel()
    assert torch.equal(batch.x, data.x[batch.n_id])
    assert torch.equal(batch.y, data.y[batch.n_id])
    assert torch.equal(batch.n_id[batch.edge_index],
                       data.edge_index[:, batch.e_id])
    assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])


def _same_batches(a, b) -> bool:
    if len(a) != len(b):
        return False
    return all(
        torch.equal(x.n_id, y.n_id) and torch.equal(x.edge_index, y.edge_index)
        and torch.equal(x.e_id, y.e_id) for x, y in zip(a, b))


def _seeds(batches) -> torch.Tensor:
    return torch.cat([b.n_id[:b.batch_size] for b in batches])


# Transforms ##################################################################


def test_transform_applied_to_every_batch(graph):
    calls = []

    def transform(batch):
        assert isinstance(batch, Data) and 'n_id' in batch
        calls.append(batch.batch_size)
        batch.tag = torch.full((batch.num_nodes, ), len(calls))
        batch.x = batch.x * 2
        return batch

    loader = HybridNeighborLoader(graph, [4, 2], batch_size=100,
                                  transform=transform, device='cpu', seed=0)
    batches = list(loader)
    assert len(batches) == len(loader) == 6
    assert calls == [100] * 6
    for i, batch in enumerate(batches):
        assert torch.equal(batch.tag, torch.full((batch.num_nodes, ), i + 1))
        assert torch.equal(batch.x, 2 * graph.x[batch.n_id])


def test_transform_sampler_output(graph):
    calls = []

    def drop_second_hop(out):
        assert isinstance(out, SamplerOutput)
        calls.append(out.node.numel())
        out = copy.copy(out)
        k = out.num_sampled_edges[0]
        out.row, out.col, out.edge = out.row[:k], out.col[:k], out.edge[:k]
        out.num_sampled_edges = out.num_sampled_edges[:1]
        return out

    loader = HybridNeighborLoader(graph, [4, 2], batch_size=200,
                                  transform_sampler_output=drop_second_hop,
                                  device='cpu', seed=0)
    batches = list(loader)
    assert len(calls) == len(batches) == 3
    for batch in batches:
        check_batch(graph, batch)
        # Only the edges into the seeds are left:
        assert int(batch.edge_index[1].max()) < batch.batch_size
        assert batch.num_edges == batch.num_sampled_edges[0]
        assert batch.num_nodes == sum(batch.num_sampled_nodes)


# Shuffling and seeding #######################################################


def _epochs(data, seed, num_epochs=2, **kwargs):
    loader = HybridNeighborLoader(data, [4, 3], batch_size=150, shuffle=True,
                                  device='cpu', seed=seed, **kwargs)
    return [list(loader) for _ in range(num_epochs)]


def test_shuffle_with_seed_is_reproducible(graph):
    a = _epochs(graph, seed=7)
    b = _epochs(graph, seed=7)
    for epoch_a, epoch_b in zip(a, b):
        assert _same_batches(epoch_a, epoch_b)
        for batch in epoch_a:
            check_batch(graph, batch)
    # Every epoch visits every node once, in a new order:
    for epoch in a:
        assert torch.equal(_seeds(epoch).sort()[0], torch.arange(N))
    assert not torch.equal(_seeds(a[0]), _seeds(a[1]))
    # Another seed, other batches:
    c = _epochs(graph, seed=8, num_epochs=1)
    assert not torch.equal(_seeds(a[0]), _seeds(c[0]))


def test_seed_without_shuffle_reproduces_draws(graph):
    kwargs = dict(batch_size=150, device='cpu', seed=3)
    a = list(HybridNeighborLoader(graph, [4, 3], **kwargs))
    b = list(HybridNeighborLoader(graph, [4, 3], **kwargs))
    assert _same_batches(a, b)
    assert torch.equal(_seeds(a), torch.arange(N))


@pytest.mark.parametrize('drop_last', [False, True])
def test_drop_last(graph, drop_last):
    loader = HybridNeighborLoader(graph, [2], batch_size=64,
                                  input_nodes=torch.arange(250),
                                  drop_last=drop_last, device='cpu', seed=0)
    sizes = [b.batch_size for b in loader]
    if drop_last:
        assert sizes == [64, 64, 64]
        assert len(loader) == 3
    else:
        assert sizes == [64, 64, 64, 58]
        assert len(loader) == 4


# Workers #####################################################################


# filter_per_worker=False once yielded no batches with workers (PyG's
# DataLoaderIterator was dropped and its __del__ shut the workers down).
@pytest.mark.parametrize('filter_per_worker', [None, True, False])
def test_num_workers(graph, filter_per_worker):
    seeds = torch.arange(0, N, 2)
    kwargs = dict(input_nodes=seeds, batch_size=100, device='cpu')
    ref = list(HybridNeighborLoader(graph, [-1, -1], **kwargs))
    loader = HybridNeighborLoader(graph, [-1, -1], num_workers=2,
                                  persistent_workers=False,
                                  filter_per_worker=filter_per_worker,
                                  **kwargs)
    batches = list(loader)
    assert len(batches) == len(ref) == 3
    assert torch.equal(_seeds(batches).sort()[0], seeds)
    # Full fan-out is deterministic: the very same batches.
    assert _same_batches(batches, ref)
    for batch in batches:
        check_batch(graph, batch)


def test_num_workers_finite_fanout_same_seeds(graph):
    seeds = torch.arange(0, N, 2)
    kwargs = dict(input_nodes=seeds, batch_size=100, device='cpu', seed=1)
    ref = list(HybridNeighborLoader(graph, [3, 2], **kwargs))
    batches = list(
        HybridNeighborLoader(graph, [3, 2], num_workers=2,
                             persistent_workers=False, **kwargs))
    assert len(batches) == len(ref)
    assert torch.equal(_seeds(batches), _seeds(ref))
    deg = degree(graph.edge_index[1], N).long()
    for batch in batches:
        check_batch(graph, batch)
        hop1 = batch.edge_index[1, :batch.num_sampled_edges[0]]
        assert torch.equal(torch.bincount(hop1, minlength=batch.batch_size),
                           deg[batch.n_id[:batch.batch_size]].clamp(max=3))


def test_filter_per_worker_in_main_process(graph):
    kwargs = dict(batch_size=150, device='cpu', seed=5)
    a = HybridNeighborLoader(graph, [4, 3], filter_per_worker=True, **kwargs)
    b = HybridNeighborLoader(graph, [4, 3], filter_per_worker=False, **kwargs)
    assert a.filter_per_worker is True and b.filter_per_worker is False
    batches_a, batches_b = list(a), list(b)
    assert _same_batches(batches_a, batches_b)
    for batch in batches_a:
        check_batch(graph, batch)


# Shared topology #############################################################


def _csc_ptrs(topology: GraphTopology):
    csc = topology.csc[None]
    return (csc.colptr.data_ptr(), csc.row.data_ptr(),
            None if csc.edge_id is None else csc.edge_id.data_ptr())


def test_topology_tensors_shared_between_loaders(graph):
    a = HybridNeighborLoader(graph, [4, 3], batch_size=100, device='cpu')
    b = HybridNeighborLoader(graph, [2], batch_size=10, device='cpu',
                             input_nodes=torch.arange(50))
    assert _csc_ptrs(a.topology) == _csc_ptrs(b.topology)

    topology = GraphTopology.from_data(graph)
    c = HybridNeighborLoader(graph, [4, 3], batch_size=100, device='cpu',
                             topology=topology)
    d = HybridNeighborLoader(graph, [4, 3], batch_size=100, device='cpu',
                             topology=c.topology)
    assert _csc_ptrs(c.topology) == _csc_ptrs(topology)
    assert _csc_ptrs(d.topology) == _csc_ptrs(topology)
    check_batch(graph, next(iter(d)))


def test_topology_object_shared_between_loaders(graph):
    a = HybridNeighborLoader(graph, [4, 3], batch_size=100, device='cpu')
    b = HybridNeighborLoader(graph, [2], batch_size=10, device='cpu')
    topology = GraphTopology.from_data(graph)
    c = HybridNeighborLoader(graph, [4, 3], batch_size=100, device='cpu',
                             topology=topology)
    assert c.topology is topology
    assert a.topology is b.topology


def test_inplace_edge_index_change_invalidates_topology(graph):
    seed = torch.tensor([0])
    kwargs = dict(input_nodes=seed, batch_size=1, device='cpu')
    a = HybridNeighborLoader(graph, [-1], **kwargs)
    before = next(iter(a))
    # Rewire every in-edge of node 0 to come from a node that is not a
    # neighbor of node 0 yet:
    into_0 = graph.edge_index[1] == 0
    assert int(into_0.sum()) > 0
    old = set(graph.edge_index[0, into_0].tolist())
    new_src = next(v for v in range(1, N) if v not in old)
    assert new_src not in before.n_id.tolist()
    graph.edge_index[0, into_0] = new_src  # In place.

    b = HybridNeighborLoader(graph, [-1], **kwargs)
    assert _csc_ptrs(b.topology) != _csc_ptrs(a.topology)
    after = next(iter(b))
    check_batch(graph, after)
    assert after.n_id.tolist() == [0, new_src]
    assert after.num_edges == int(into_0.sum())

    # Loaders built later on the modified graph share its new topology:
    c = HybridNeighborLoader(graph, [-1], **kwargs)
    assert _csc_ptrs(c.topology) == _csc_ptrs(b.topology)


# Stats #######################################################################


def test_stats_after_epoch(graph):
    loader = HybridNeighborLoader(graph, [4, 3], batch_size=150,
                                  device='cpu', seed=0)
    assert loader.stats()['stages'] == {}
    num_batches = sum(1 for _ in loader)
    stats = loader.stats()['stages']
    for key in ('sample', 'gather', 'transfer', 'wait'):
        assert key in stats
        assert stats[key]['total_s'] >= 0.0
        assert stats[key]['calls'] == num_batches == 4
        assert stats[key]['ms_per_batch'] >= 0.0
    assert loader.timer.num_batches == num_batches
    with loader.timer.stage('train'):
        pass
    assert loader.stats()['stages']['train']['calls'] == 1
    assert loader.stats()['features'] is None  # No feature store on CPU.
    assert loader.stats()['memory']['topology_bytes'] > 0
    loader.reset_stats()
    assert loader.stats()['stages'] == {}


# LinkNeighborLoader ##########################################################


@pytest.mark.parametrize('neg_sampling_ratio', [None, 1.0])
def test_link_neighbor_loader_with_hybrid_sampler(graph, neg_sampling_ratio):
    edge_label_index = graph.edge_index[:, :300]
    sampler = HybridNeighborSampler(graph, [5, 3], device='cpu', seed=0)
    loader = LinkNeighborLoader(graph, num_neighbors=[5, 3],
                                edge_label_index=edge_label_index,
                                neg_sampling_ratio=neg_sampling_ratio,
                                batch_size=64, neighbor_sampler=sampler)
    assert loader.link_sampler is sampler
    seen = []
    for batch in loader:
        check_batch(graph, batch)
        bs = batch.input_id.numel()
        eli = batch.edge_label_index
        assert eli.dim() == 2 and eli.size(0) == 2
        assert int(eli.min()) >= 0 and int(eli.max()) < batch.num_nodes
        # The positive label edges map back to the requested edges:
        assert torch.equal(batch.n_id[eli[:, :bs]],
                           edge_label_index[:, batch.input_id])
        # Their endpoints are the seeds of the sampling:
        num_seeds = batch.num_sampled_nodes[0]
        assert int(eli.max()) < num_seeds
        if neg_sampling_ratio is None:
            assert eli.size(1) == bs
            assert 'edge_label' not in batch
        else:
            assert eli.size(1) == 2 * bs
            assert torch.equal(
                batch.edge_label,
                torch.cat([torch.ones(bs), torch.zeros(bs)]))
        seen.append(batch.input_id)
    assert torch.equal(torch.cat(seen), torch.arange(300))
