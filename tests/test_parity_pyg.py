"""Parity with PyG's own :class:`~torch_geometric.loader.NeighborLoader`
(torch-sparse backend). Run with the baseline site on the path:

    PYTHONPATH=.cache/baseline-site python -m pytest tests/test_parity_pyg.py

torch-sparse batches carry no :obj:`num_sampled_nodes` /
:obj:`num_sampled_edges`, and PyG sorts the CSC with an unstable sort, so the
node order only matches when :obj:`edge_index` is stably pre-sorted by
destination and :obj:`is_sorted=True`. For heterogeneous graphs torch-sparse
visits the edge types in the iteration order of a :obj:`c10::Dict`, not in
:obj:`data.edge_types` order, so only node and edge sets are compared there.
"""
import warnings

import pytest
import torch

from pyg_orch import HybridNeighborLoader

from conftest import (
    PYG_MISSING_KEYS,
    batch_keys,
    edge_triples,
    paper_hetero_graph,
    random_graph,
)

pytestmark = [
    pytest.mark.parity,
    pytest.mark.filterwarnings('ignore::UserWarning'),
    pytest.mark.filterwarnings('ignore::DeprecationWarning'),
]

SUBGRAPH_TYPES = ['directional', 'bidirectional', 'induced']


def _pyg_loader(data, num_neighbors, **kwargs):
    from torch_geometric.loader import NeighborLoader
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # "... without 'pyg-lib' ..."
        return NeighborLoader(data, num_neighbors, **kwargs)


def _ours(data, num_neighbors, **kwargs):
    return HybridNeighborLoader(data, num_neighbors, device='cpu', **kwargs)


def make_graph(n=500, e=4000, seed=0, sort=False):
    return random_graph(n, e, seed, num_features=6, num_classes=4,
                        train_ratio=0.3, edge_dim=2, sort=sort,
                        explicit_num_nodes=False)


def make_hetero(seed=0, sort=False):
    return paper_hetero_graph(seed, num_papers=200, num_authors=150,
                              num_institutions=60, num_features=4,
                              sort=sort)





# Homogeneous #################################################################


@pytest.mark.parametrize('input_nodes', ['mask', 'index', 'none'])
def test_homo_keys_and_semantics(input_nodes):
    data = make_graph()
    if input_nodes == 'mask':
        nodes, seeds = data.train_mask, data.train_mask.nonzero().view(-1)
    elif input_nodes == 'index':
        nodes = seeds = torch.randperm(data.num_nodes)[:120]
    else:
        nodes, seeds = None, torch.arange(data.num_nodes)
    kwargs = dict(input_nodes=nodes, batch_size=50)
    ref = list(_pyg_loader(data, [5, 3], **kwargs))
    ours = list(_ours(data, [5, 3], seed=0, **kwargs))
    assert len(ours) == len(ref)
    for a, b in zip(ref, ours):
        assert batch_keys(a) == batch_keys(b)
        assert PYG_MISSING_KEYS <= set(b.keys())
        assert a.batch_size == b.batch_size
        assert torch.equal(a.input_id, b.input_id)
        bs = b.batch_size
        assert torch.equal(a.n_id[:bs], b.n_id[:bs])
        for batch in (a, b):
            n_id, e_id = batch.n_id, batch.e_id
            assert torch.equal(batch.x, data.x[n_id])
            assert torch.equal(batch.y, data.y[n_id])
            assert torch.equal(batch.train_mask, data.train_mask[n_id])
            assert torch.equal(batch.edge_attr, data.edge_attr[e_id])
            assert torch.equal(n_id[batch.edge_index],
                               data.edge_index[:, e_id])
            assert batch.x.dtype == data.x.dtype
            assert batch.edge_index.dtype == torch.long
    # Same seeds (and `input_id`s) overall:
    assert torch.equal(torch.cat([b.n_id[:b.batch_size] for b in ours]),
                       seeds)


@pytest.mark.parametrize('subgraph_type', SUBGRAPH_TYPES)
def test_homo_full_fanout_same_sets(subgraph_type):
    data = make_graph()  # Unsorted: the order may differ, the sets must not.
    kwargs = dict(input_nodes=torch.arange(0, 500, 7), batch_size=24,
                  subgraph_type=subgraph_type)
    ref = list(_pyg_loader(data, [-1, -1], **kwargs))
    ours = list(_ours(data, [-1, -1], **kwargs))
    assert len(ref) == len(ours) == 3
    for a, b in zip(ref, ours):
        assert batch_keys(a) == batch_keys(b)
        bs = a.batch_size
        assert b.batch_size == bs
        assert torch.equal(a.n_id[:bs], b.n_id[:bs])
        assert torch.equal(a.n_id.sort()[0], b.n_id.sort()[0])
        assert a.num_edges == b.num_edges
        # Bidirectional batches merge each edge with its reverse and keep one
        # of the duplicates' ids, which depends on the CSC order:
        with_eid = subgraph_type != 'bidirectional'
        assert edge_triples(a, with_eid=with_eid) == \
            edge_triples(b, with_eid=with_eid)


@pytest.mark.parametrize('subgraph_type', SUBGRAPH_TYPES)
def test_homo_full_fanout_identical_when_sorted(subgraph_type):
    data = make_graph(sort=True)
    kwargs = dict(input_nodes=torch.arange(0, 500, 7), batch_size=24,
                  subgraph_type=subgraph_type, is_sorted=True)
    ref = list(_pyg_loader(data, [-1, -1], **kwargs))
    ours = list(_ours(data, [-1, -1], **kwargs))
    assert len(ref) == len(ours) == 3
    for a, b in zip(ref, ours):
        assert torch.equal(a.n_id, b.n_id)
        assert torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.e_id, b.e_id)
        assert torch.equal(a.x, b.x)
        assert torch.equal(a.edge_attr, b.edge_attr)
        assert torch.equal(a.input_id, b.input_id)


def test_homo_full_fanout_identical_on_cora(cora):
    perm = torch.sort(cora.edge_index[1], stable=True)[1]
    data = cora.clone()
    data.edge_index = cora.edge_index[:, perm]
    kwargs = dict(input_nodes=data.test_mask, batch_size=256, is_sorted=True)
    ref = list(_pyg_loader(data, [-1, -1], **kwargs))
    ours = list(_ours(data, [-1, -1], **kwargs))
    assert len(ref) == len(ours) == 4
    for a, b in zip(ref, ours):
        assert batch_keys(a) == batch_keys(b)
        assert torch.equal(a.n_id, b.n_id)
        assert torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.e_id, b.e_id)
        assert torch.equal(a.input_id, b.input_id)


def _hop_counts(batch):
    r"""Nodes added at hop 1 and hop 2 and the edges into the seeds, from a
    directional batch in hop order (works without `num_sampled_nodes`)."""
    bs = batch.batch_size
    row, col = batch.edge_index
    hop1_src = row[col < bs]
    n1 = hop1_src[hop1_src >= bs].unique().numel()
    return n1, batch.num_nodes - bs - n1, hop1_src.numel(), batch.num_edges


@pytest.mark.parametrize('replace', [False, True])
def test_homo_finite_fanout_distribution(replace):
    data = make_graph(n=3000, e=30000, seed=1)
    kwargs = dict(input_nodes=torch.arange(0, 3000, 2), batch_size=100,
                  replace=replace)
    torch.manual_seed(0)
    ref = [_hop_counts(b) for b in _pyg_loader(data, [8, 4], **kwargs)]
    ours_batches = list(_ours(data, [8, 4], seed=0, **kwargs))
    ours = [_hop_counts(b) for b in ours_batches]
    assert len(ref) == len(ours) == 15
    for b, counts in zip(ours_batches, ours):
        assert list(b.num_sampled_nodes) == [100, counts[0], counts[1]]
        assert b.num_sampled_edges[0] == counts[2]
    ref_mean = torch.tensor(ref, dtype=torch.float).mean(0)
    our_mean = torch.tensor(ours, dtype=torch.float).mean(0)
    rel = ((our_mean - ref_mean).abs() / ref_mean).tolist()
    assert max(rel) < 0.03, (ref_mean.tolist(), our_mean.tolist())
    if not replace:
        # Edges into the seeds do not depend on the draws: min(deg, 8) each.
        assert [r[2] for r in ref] == [o[2] for o in ours]


# Heterogeneous ###############################################################


def test_hetero_keys_and_semantics():
    data = make_hetero()
    mask = torch.rand(200, generator=torch.Generator().manual_seed(2)) < 0.5
    kwargs = dict(input_nodes=('paper', mask), batch_size=40)
    ref = list(_pyg_loader(data, [4, 3], **kwargs))
    ours = list(_ours(data, [4, 3], seed=0, **kwargs))
    assert len(ref) == len(ours)
    for a, b in zip(ref, ours):
        assert set(a.node_types) == set(b.node_types)
        assert set(a.edge_types) == set(b.edge_types)
        for key in a.node_types + a.edge_types:
            assert batch_keys(a[key]) == batch_keys(b[key]), key
        assert a['paper'].batch_size == b['paper'].batch_size
        assert torch.equal(a['paper'].input_id, b['paper'].input_id)
        bs = a['paper'].batch_size
        assert torch.equal(a['paper'].n_id[:bs], b['paper'].n_id[:bs])
        for batch in (a, b):
            for node_type in data.node_types:
                n_id = batch[node_type].n_id
                assert torch.equal(batch[node_type].x, data[node_type].x[n_id])
            assert torch.equal(batch['paper'].y, data['paper'].y[
                batch['paper'].n_id])
            et = ('paper', 'cites', 'paper')
            assert torch.equal(batch[et].edge_attr,
                               data[et].edge_attr[batch[et].e_id])


@pytest.mark.parametrize('sort', [False, True], ids=['unsorted', 'sorted'])
@pytest.mark.parametrize('subgraph_type', SUBGRAPH_TYPES)
def test_hetero_full_fanout_same_sets(subgraph_type, sort):
    data = make_hetero(sort=sort)
    kwargs = dict(input_nodes=('paper', torch.arange(0, 200, 3)),
                  batch_size=30, subgraph_type=subgraph_type, is_sorted=sort)
    ref = list(_pyg_loader(data, [-1, -1], **kwargs))
    ours = list(_ours(data, [-1, -1], **kwargs))
    assert len(ref) == len(ours) == 3
    for a, b in zip(ref, ours):
        bs = a['paper'].batch_size
        assert torch.equal(a['paper'].n_id[:bs], b['paper'].n_id[:bs])
        for node_type in data.node_types:
            assert batch_keys(a[node_type]) == batch_keys(b[node_type])
            assert torch.equal(a[node_type].n_id.sort()[0],
                               b[node_type].n_id.sort()[0]), node_type
        for edge_type in data.edge_types:
            assert batch_keys(a[edge_type]) == batch_keys(b[edge_type])
            # PyG drops `e_id` for heterogeneous bidirectional batches:
            with_eid = 'e_id' in a[edge_type]
            assert edge_triples(a, edge_type, with_eid) == \
                edge_triples(b, edge_type, with_eid), edge_type


def test_hetero_finite_fanout_distribution():
    data = make_hetero(seed=3)
    kwargs = dict(input_nodes='paper', batch_size=20)
    fanout = {et: [3, 2] for et in data.edge_types}
    fanout['institution', 'employs', 'author'] = [2, 2]
    torch.manual_seed(0)
    ref_loader = _pyg_loader(data, fanout, **kwargs)
    our_loader = _ours(data, fanout, seed=0, **kwargs)
    ref = [b for _ in range(2) for b in ref_loader]  # Two epochs.
    ours = [b for _ in range(2) for b in our_loader]
    assert len(ref) == len(ours) == 20

    def mean_counts(batches):
        counts = {t: 0.0 for t in data.node_types}
        counts.update({et: 0.0 for et in data.edge_types})
        for batch in batches:
            for key in counts:
                store = batch[key]
                counts[key] += (store.num_nodes if isinstance(key, str) else
                                store.num_edges) / len(batches)
        return counts

    ref_mean, our_mean = mean_counts(ref), mean_counts(ours)
    # Institutions are two hops away, so no 'affiliated_with' edges either:
    assert ref_mean['author', 'affiliated_with', 'institution'] == 0
    assert ref_mean['institution'] > 0
    for key, value in ref_mean.items():
        if value == 0:
            assert our_mean[key] == 0, key
            continue
        assert abs(our_mean[key] - value) / value < 0.05, (key, value,
                                                           our_mean[key])
