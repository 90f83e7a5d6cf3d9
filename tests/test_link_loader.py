"""HybridLinkNeighborLoader: parity with PyG's own
:class:`~torch_geometric.loader.LinkNeighborLoader` (tests marked
:obj:`parity`, which need torch-sparse), and the invariants of link-level
batches and of negative sampling on the sampler's device without it.

PyG's loader with torch-sparse samples neither disjoint nor temporal
subgraphs (that needs pyg-lib): disjoint batches are compared with PyG's
batches of one label edge each, and temporal batches with the time
constraint itself."""
import math
import warnings

import pytest
import torch
from torch_geometric.sampler import NegativeSampling

from pyg_orch import (
    CacheOptions,
    HybridLinkNeighborLoader,
    HybridNeighborLoader,
)
from pyg_orch.sampling.negative import sample_negatives

from conftest import (
    CITES,
    WRITES,
    batch_keys,
    edge_triples,
    paper_hetero_graph,
    random_graph,
    temporal_graph,
    temporal_hetero_graph,
    B_TO_A,
)

pytestmark = [
    pytest.mark.filterwarnings('ignore::UserWarning'),
    pytest.mark.filterwarnings('ignore::DeprecationWarning'),
]

NEG_MODES = [None, 'binary', 'binary_labels', 'triplet']


def make_graph(n=300, e=2400, seed=0, sort=False):
    return random_graph(n, e, seed, num_features=4, num_classes=3,
                        edge_dim=2, sort=sort)


def make_hetero(seed=0, sort=False):
    return paper_hetero_graph(seed, num_papers=150, num_authors=100,
                              num_institutions=30, num_features=4, sort=sort)


def _pyg(data, num_neighbors, **kwargs):
    from torch_geometric.loader import LinkNeighborLoader
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return list(LinkNeighborLoader(data, num_neighbors, **kwargs))


def _ours(data, num_neighbors, **kwargs):
    kwargs.setdefault('device', 'cpu')
    return HybridLinkNeighborLoader(data, num_neighbors, **kwargs)


def _neg_kwargs(mode, num_labels, amount=2):
    if mode is None:
        return {}
    if mode == 'binary_labels':
        labels = torch.arange(num_labels) % 3  # Starts at 0: shifted by 1.
        return dict(neg_sampling=NegativeSampling('binary', amount),
                    edge_label=labels)
    return dict(neg_sampling=NegativeSampling(mode, amount))





def _check_homo_batch(data, batch, label_index, mode, amount=2,
                      labels=None, directional=True):
    r"""The semantics of one homogeneous batch, through :obj:`n_id`."""
    n_id = batch.n_id
    pos = label_index[:, batch.input_id]
    num_pos = pos.size(1)
    assert torch.equal(batch.x, data.x[n_id])
    if directional:  # (Bidirectional edges keep one of two edge ids.)
        assert torch.equal(n_id[batch.edge_index],
                           data.edge_index[:, batch.e_id])
    if mode == 'triplet':
        assert 'edge_label_index' not in batch
        assert torch.equal(n_id[batch.src_index], pos[0])
        assert torch.equal(n_id[batch.dst_pos_index], pos[1])
        shape = (num_pos, ) if amount == 1 else (num_pos, amount)
        assert batch.dst_neg_index.shape == shape
        return
    global_label = n_id[batch.edge_label_index]
    assert torch.equal(global_label[:, :num_pos], pos)
    if mode is None:
        assert global_label.size(1) == num_pos
        assert 'edge_label' not in batch
        return
    num_neg = math.ceil(num_pos * amount)
    assert global_label.size(1) == num_pos + num_neg
    assert batch.edge_label.size(0) == num_pos + num_neg
    assert (batch.edge_label[num_pos:] == 0).all()
    if mode == 'binary':
        assert batch.edge_label.dtype == torch.float
        assert (batch.edge_label[:num_pos] == 1).all()
    else:
        assert batch.edge_label.dtype == torch.long
        assert torch.equal(batch.edge_label[:num_pos],
                           labels[batch.input_id] + 1)


# Parity with PyG's LinkNeighborLoader ########################################


@pytest.mark.parity
@pytest.mark.parametrize('mode', NEG_MODES)
def test_parity_homo_batches(mode):
    data = make_graph()
    label_index = data.edge_index[:, 5:205]
    kwargs = dict(edge_label_index=label_index, batch_size=48,
                  **_neg_kwargs(mode, 200))
    ref = _pyg(data, [4, 3], **kwargs)
    ours = list(_ours(data, [4, 3], seed=0, **kwargs))
    assert len(ref) == len(ours) == 5
    labels = kwargs.get('edge_label')
    for a, b in zip(ref, ours):
        assert batch_keys(a) == batch_keys(b)
        assert torch.equal(a.input_id, b.input_id)
        for batch in (a, b):
            _check_homo_batch(data, batch, label_index, mode, labels=labels)
        if mode == 'triplet':
            assert a.dst_neg_index.shape == b.dst_neg_index.shape
            assert a.src_index.dtype == b.src_index.dtype
        elif mode is not None:
            assert a.edge_label.dtype == b.edge_label.dtype
            assert a.edge_label.shape == b.edge_label.shape
            assert a.edge_label_index.shape == b.edge_label_index.shape
            assert torch.equal(a.edge_label, b.edge_label)


@pytest.mark.parity
@pytest.mark.parametrize('subgraph_type',
                         ['directional', 'bidirectional', 'induced'])
def test_parity_homo_full_fanout_same_sets(subgraph_type):
    data = make_graph()
    label_index = data.edge_index[:, ::40]
    kwargs = dict(edge_label_index=label_index, batch_size=20,
                  subgraph_type=subgraph_type)
    ref = _pyg(data, [-1, -1], **kwargs)
    ours = list(_ours(data, [-1, -1], **kwargs))
    assert len(ref) == len(ours) == 3
    for a, b in zip(ref, ours):
        # Seeds: the sorted unique endpoints, first in both.
        num_seeds = label_index[:, a.input_id].unique().numel()
        assert torch.equal(a.n_id[:num_seeds], b.n_id[:num_seeds])
        assert torch.equal(a.edge_label_index, b.edge_label_index)
        assert torch.equal(a.n_id.sort()[0], b.n_id.sort()[0])
        if subgraph_type == 'bidirectional':
            assert a.num_edges == b.num_edges
        else:
            assert edge_triples(a) == edge_triples(b)


@pytest.mark.parity
def test_parity_homo_full_fanout_identical_when_sorted():
    data = make_graph(sort=True)
    label_index = data.edge_index[:, ::40]
    kwargs = dict(edge_label_index=label_index, batch_size=20,
                  is_sorted=True)
    ref = _pyg(data, [-1, -1], **kwargs)
    ours = list(_ours(data, [-1, -1], **kwargs))
    for a, b in zip(ref, ours):
        assert torch.equal(a.n_id, b.n_id)
        assert torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.e_id, b.e_id)
        assert torch.equal(a.edge_attr, b.edge_attr)
        assert torch.equal(a.edge_label_index, b.edge_label_index)
        assert torch.equal(a.input_id, b.input_id)


def _check_hetero_batch(data, batch, edge_type, label_index, mode,
                        amount=2):
    src_t, dst_t = edge_type[0], edge_type[-1]
    store = batch[edge_type]
    pos = label_index[:, store.input_id]
    num_pos = pos.size(1)
    for t in batch.node_types:
        assert torch.equal(batch[t].x, data[t].x[batch[t].n_id])
    for et in batch.edge_types:
        s, d = batch[et[0]].n_id, batch[et[-1]].n_id
        ei = batch[et].edge_index
        assert torch.equal(torch.stack([s[ei[0]], d[ei[1]]]),
                           data[et].edge_index[:, batch[et].e_id])
    src_n_id, dst_n_id = batch[src_t].n_id, batch[dst_t].n_id
    if mode == 'triplet':
        assert torch.equal(src_n_id[batch[src_t].src_index], pos[0])
        assert torch.equal(dst_n_id[batch[dst_t].dst_pos_index], pos[1])
        neg = batch[dst_t].dst_neg_index
        assert neg.shape == ((num_pos, ) if amount == 1 else
                             (num_pos, amount))
        assert int(neg.max()) < dst_n_id.numel()
        return
    eli = store.edge_label_index
    assert torch.equal(src_n_id[eli[0, :num_pos]], pos[0])
    assert torch.equal(dst_n_id[eli[1, :num_pos]], pos[1])
    if mode is None:
        assert eli.size(1) == num_pos
        return
    assert eli.size(1) == num_pos + math.ceil(num_pos * amount)
    assert (store.edge_label[num_pos:] == 0).all()


@pytest.mark.parity
@pytest.mark.parametrize('edge_type', [WRITES, CITES],
                         ids=['two_types', 'one_type'])
@pytest.mark.parametrize('mode', [None, 'binary', 'triplet'])
def test_parity_hetero_batches(edge_type, mode):
    data = make_hetero()
    label_index = data[edge_type].edge_index[:, :120]
    kwargs = dict(edge_label_index=(edge_type, label_index), batch_size=32,
                  **_neg_kwargs(mode, 120))
    ref = _pyg(data, [3, 2], **kwargs)
    ours = list(_ours(data, [3, 2], seed=0, **kwargs))
    assert len(ref) == len(ours) == 4
    for a, b in zip(ref, ours):
        assert set(a.node_types) == set(b.node_types)
        assert set(a.edge_types) == set(b.edge_types)
        for key in a.node_types + a.edge_types:
            assert batch_keys(a[key]) == batch_keys(b[key]), key
        assert torch.equal(a[edge_type].input_id, b[edge_type].input_id)
        for batch in (a, b):
            _check_hetero_batch(data, batch, edge_type, label_index, mode)


@pytest.mark.parity
@pytest.mark.parametrize('edge_type', [WRITES, CITES],
                         ids=['two_types', 'one_type'])
def test_parity_hetero_full_fanout_same_sets(edge_type):
    data = make_hetero()
    label_index = data[edge_type].edge_index[:, ::10]
    kwargs = dict(edge_label_index=(edge_type, label_index), batch_size=25)
    ref = _pyg(data, [-1, -1], **kwargs)
    ours = list(_ours(data, [-1, -1], **kwargs))
    assert len(ref) == len(ours)
    for a, b in zip(ref, ours):
        assert torch.equal(a[edge_type].edge_label_index,
                           b[edge_type].edge_label_index)
        for t in data.node_types:
            assert torch.equal(a[t].n_id.sort()[0], b[t].n_id.sort()[0]), t
        for et in data.edge_types:
            assert edge_triples(a, et) == edge_triples(b, et), et


def _subgraph_sets(batch, i, edge_type=None):
    r"""Global nodes and (src, dst, e_id) edges of disjoint subgraph i."""
    if edge_type is None:
        keep = batch.batch == i
        nodes = set(batch.n_id[keep].tolist())
        dst_keep = keep[batch.edge_index[1]]
        ei = batch.edge_index[:, dst_keep]
        edges = set(zip(batch.n_id[ei[0]].tolist(),
                        batch.n_id[ei[1]].tolist(),
                        batch.e_id[dst_keep].tolist()))
        return nodes, edges
    nodes, edges = {}, {}
    for t in batch.node_types:
        nodes[t] = set(batch[t].n_id[batch[t].batch == i].tolist())
    for et in batch.edge_types:
        store = batch[et]
        dst_keep = batch[et[-1]].batch[store.edge_index[1]] == i
        ei = store.edge_index[:, dst_keep]
        edges[et] = set(zip(batch[et[0]].n_id[ei[0]].tolist(),
                            batch[et[-1]].n_id[ei[1]].tolist(),
                            store.e_id[dst_keep].tolist()))
    return nodes, edges


@pytest.mark.parity
def test_parity_disjoint_homo_per_label_edge():
    # Every disjoint subgraph equals PyG's batch of its label edge alone.
    data = make_graph()
    label_index = data.edge_index[:, ::150]
    ours = list(_ours(data, [-1, -1], edge_label_index=label_index,
                      batch_size=8, disjoint=True))
    ref = _pyg(data, [-1, -1], edge_label_index=label_index, batch_size=1)
    for b in ours:
        assert torch.equal(b.edge_label_index,
                           torch.arange(2 * b.input_id.numel()).view(2, -1))
        assert torch.equal(b.n_id[b.edge_label_index],
                           label_index[:, b.input_id])
        for i, k in enumerate(b.input_id.tolist()):
            a = ref[k]
            nodes, edges = _subgraph_sets(b, i)
            assert nodes == set(a.n_id.tolist())
            assert edges == set(edge_triples(a))


@pytest.mark.parity
@pytest.mark.parametrize('edge_type', [WRITES, CITES],
                         ids=['two_types', 'one_type'])
def test_parity_disjoint_hetero_per_label_edge(edge_type):
    data = make_hetero()
    label_index = data[edge_type].edge_index[:, ::60]
    ours = list(_ours(data, [-1, -1],
                      edge_label_index=(edge_type, label_index),
                      batch_size=5, disjoint=True))
    ref = _pyg(data, [-1, -1], edge_label_index=(edge_type, label_index),
               batch_size=1)
    for b in ours:
        for i, k in enumerate(b[edge_type].input_id.tolist()):
            a = ref[k]
            nodes, edges = _subgraph_sets(b, i, edge_type)
            for t in data.node_types:
                want = set(a[t].n_id.tolist()) if t in a.node_types else set()
                assert nodes.get(t, set()) == want, t
            for et in data.edge_types:
                want = set(edge_triples(a, et)) if et in a.edge_types \
                    else set()
                assert edges.get(et, set()) == want, et


# Invariants (no PyG sampler needed) ##########################################


@pytest.mark.parametrize('mode', NEG_MODES)
@pytest.mark.parametrize('disjoint', [False, True])
def test_homo_batch_semantics(mode, disjoint):
    data = make_graph()
    label_index = data.edge_index[:, 100:300]
    kwargs = _neg_kwargs(mode, 200, amount=3 if mode == 'triplet' else 1.5)
    loader = _ours(data, [3, 2], edge_label_index=label_index,
                   batch_size=64, seed=1, disjoint=disjoint, **kwargs)
    seen = []
    for batch in loader:
        amount = 3 if mode == 'triplet' else 1.5
        _check_homo_batch(data, batch, label_index, mode, amount=amount,
                          labels=kwargs.get('edge_label'))
        seen.append(batch.input_id)
        if disjoint:
            assert int(batch.batch.max()) < batch.input_id.numel()
        n = data.num_nodes
        assert int(batch.n_id.min()) >= 0 and int(batch.n_id.max()) < n
    assert torch.equal(torch.cat(seen), torch.arange(200))


@pytest.mark.parametrize('mode', [None, 'binary', 'triplet'])
@pytest.mark.parametrize('disjoint', [False, True])
@pytest.mark.parametrize('edge_type', [WRITES, CITES],
                         ids=['two_types', 'one_type'])
def test_hetero_batch_semantics(mode, disjoint, edge_type):
    data = make_hetero()
    label_index = data[edge_type].edge_index[:, :90]
    loader = _ours(data, [3, 2], edge_label_index=(edge_type, label_index),
                   batch_size=40, seed=0, disjoint=disjoint,
                   **_neg_kwargs(mode, 90))
    seen = []
    for batch in loader:
        _check_hetero_batch(data, batch, edge_type, label_index, mode)
        seen.append(batch[edge_type].input_id)
    assert torch.equal(torch.cat(seen), torch.arange(90))


def test_every_positive_once_per_epoch_shuffled():
    data = make_graph()
    loader = _ours(data, [2], batch_size=100, shuffle=True, seed=3,
                   neg_sampling='binary')
    for _ in range(2):
        ids, pos = [], []
        for batch in loader:
            k = batch.input_id.numel()
            ids.append(batch.input_id)
            pos.append(batch.n_id[batch.edge_label_index[:, :k]])
            assert int(batch.edge_label.sum()) == k
            assert batch.edge_label.numel() == 2 * k
        ids = torch.cat(ids)
        assert torch.equal(ids.sort()[0], torch.arange(data.num_edges))
        assert not torch.equal(ids, torch.arange(data.num_edges))
        assert torch.equal(torch.cat(pos, dim=1), data.edge_index[:, ids])


def _flat(batches):
    out = []
    for b in batches:
        for key in ('n_id', 'e_id', 'input_id', 'edge_label_index',
                    'edge_label', 'dst_neg_index'):
            if key in b:
                out.append(b[key])
    return out


@pytest.mark.parametrize('mode', ['binary', 'triplet'])
def test_reproducible_with_seed(mode):
    data = make_graph()
    kwargs = dict(edge_label_index=data.edge_index[:, :300], batch_size=64,
                  shuffle=True, neg_sampling=mode)
    first = _flat(_ours(data, [3, 2], seed=7, **kwargs))
    torch.manual_seed(123)  # The global RNG does not matter.
    again = _flat(_ours(data, [3, 2], seed=7, **kwargs))
    other = _flat(_ours(data, [3, 2], seed=8, **kwargs))
    assert len(first) == len(again)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(
        a.shape == b.shape and torch.equal(a, b)
        for a, b in zip(first, other))


def test_negatives_drawn_with_the_sampler_generator():
    # Negatives come from the sampler's generator, not the global RNG.
    data = make_graph()
    loader = _ours(data, [0], edge_label_index=data.edge_index[:, :40],
                   batch_size=40, neg_sampling=NegativeSampling('binary', 4),
                   seed=5)
    gen = loader.link_sampler.generator
    state = gen.get_state()
    a = next(iter(loader)).n_id
    gen.set_state(state)
    torch.manual_seed(0)
    b = next(iter(loader)).n_id
    assert torch.equal(a, b)
    assert not torch.equal(gen.get_state(), state)


@pytest.mark.parametrize('mode', ['binary', 'triplet'])
def test_weighted_negatives(mode):
    data = make_graph()
    n = data.num_nodes
    dst_weight = torch.zeros(n)
    dst_weight[:10] = torch.arange(1, 11, dtype=torch.float)
    src_weight = torch.zeros(n)
    src_weight[-5:] = 1.0
    neg = NegativeSampling(mode, 3, src_weight=src_weight,
                           dst_weight=dst_weight)
    loader = _ours(data, [2], edge_label_index=data.edge_index[:, :200],
                   batch_size=50, neg_sampling=neg, seed=0)
    counts = torch.zeros(n)
    for batch in loader:
        k = batch.input_id.numel()
        if mode == 'binary':
            src, dst = batch.n_id[batch.edge_label_index[:, k:]]
            assert (src >= n - 5).all()
        else:
            dst = batch.n_id[batch.dst_neg_index].view(-1)
        assert (dst < 10).all()
        counts += torch.bincount(dst, minlength=n).float()
    # Proportional to the weights (node 9 ten times as likely as node 0):
    assert counts[9] > 3 * counts[0]


def test_sample_negatives_uniform_and_amount():
    gen = torch.Generator().manual_seed(0)
    seed = torch.zeros(1000, dtype=torch.long)
    out = sample_negatives(seed, NegativeSampling('binary', 2.5), 50,
                           generator=gen)
    assert out.numel() == 2500
    counts = torch.bincount(out, minlength=50).float()
    assert counts.min() > 20 and counts.max() < 80  # Mean 50.


def test_sample_negatives_temporal():
    gen = torch.Generator().manual_seed(0)
    node_time = torch.arange(100)
    seed_time = torch.tensor([5, 50, 99, 0] * 50)
    seed = torch.zeros(seed_time.numel(), dtype=torch.long)
    out = sample_negatives(seed, NegativeSampling('binary', 2), 100,
                           seed_time=seed_time, node_time=node_time,
                           generator=gen).view(2, -1)
    assert (node_time[out] <= seed_time).all()
    # Time 0 allows only node 0 (the earliest node, also the fallback):
    assert (out[:, 3::4] == 0).all()
    # Time 50 leaves half the nodes: drawn among them.
    assert out[:, 1::4].unique().numel() > 20


@pytest.mark.parametrize('level', ['node', 'edge'])
@pytest.mark.parametrize('mode', [None, 'binary', 'triplet'])
def test_temporal_never_later_than_label_time(level, mode):
    data = temporal_graph()
    time_attr = 'time' if level == 'node' else 'edge_time'
    gen = torch.Generator().manual_seed(0)
    label_index = data.edge_index[:, :120]
    label_time = torch.randint(5, 30, (120, ), generator=gen)
    loader = _ours(data, [3, 3], edge_label_index=label_index,
                   edge_label_time=label_time, time_attr=time_attr,
                   batch_size=30, seed=0, **_neg_kwargs(mode, 120))
    for batch in loader:
        seed_time = label_time[batch.input_id]
        node_seed_time = seed_time[batch.batch]  # Disjoint subgraphs.
        # The seeds (label edges' endpoints) come first and are not
        # filtered, as in PyG; sampled neighbors are never later:
        num_seeds = batch.num_sampled_nodes[0]
        if level == 'node':
            later = data.time[batch.n_id] > node_seed_time
            assert not later[num_seeds:].any()
            if mode is not None:  # Negatives are not later either.
                k = seed_time.numel()
                if mode == 'binary':
                    neg = batch.n_id[batch.edge_label_index[:, k:]]
                    neg_time = batch.edge_label_time[k:]
                else:  # Row j holds the negatives of label edge j:
                    neg = batch.n_id[batch.dst_neg_index]
                    neg_time = seed_time.view(-1, 1)
                assert (data.time[neg] <= neg_time).all()
        else:
            dst_time = node_seed_time[batch.edge_index[1]]
            assert (data.edge_time[batch.e_id] <= dst_time).all()
        if mode == 'triplet':
            assert torch.equal(batch.seed_time, seed_time)
        else:
            k = seed_time.numel()
            assert torch.equal(batch.edge_label_time[:k], seed_time)
            assert torch.equal(batch.edge_label_time[k:],
                               seed_time.repeat(2)[:batch.edge_label_time
                                                   .numel() - k])


def test_temporal_full_fanout_first_hop_exact():
    # With node times and all neighbors, the edges into every label edge's
    # endpoints are exactly those from nodes not later than its time.
    data = temporal_graph()
    label_index = data.edge_index[:, :40]
    label_time = torch.full((40, ), 15)
    loader = _ours(data, [-1], edge_label_index=label_index,
                   edge_label_time=label_time, time_attr='time',
                   batch_size=10)
    src, dst = data.edge_index
    for batch in loader:
        for i, k in enumerate(batch.input_id.tolist()):
            got = set(_subgraph_sets(batch, i)[1])
            want = set()
            for v in label_index[:, k].unique().tolist():
                hit = (dst == v) & (data.time[src] <= 15)
                want |= set(zip(src[hit].tolist(), dst[hit].tolist(),
                                hit.nonzero().view(-1).tolist()))
            assert got == want


def test_temporal_hetero():
    data = temporal_hetero_graph()
    label_index = data[B_TO_A].edge_index[:, :60]
    label_time = torch.randint(5, 30, (60, ),
                               generator=torch.Generator().manual_seed(1))
    loader = _ours(data, [2, 2], edge_label_index=(B_TO_A, label_index),
                   edge_label_time=label_time, time_attr='time',
                   batch_size=20, neg_sampling='binary', seed=0)
    for batch in loader:
        seed_time = label_time[batch[B_TO_A].input_id]
        for t in batch.node_types:
            store = batch[t]
            later = data[t].time[store.n_id] > seed_time[store.batch]
            assert not later[store.num_sampled_nodes[0]:].any()
        k = seed_time.numel()
        eli = batch[B_TO_A].edge_label_index
        assert (data['b'].time[batch['b'].n_id[eli[0, k:]]] <=
                batch[B_TO_A].edge_label_time[k:]).all()


def test_prefetch_transform_and_stats():
    data = make_graph()
    kwargs = dict(edge_label_index=data.edge_index[:, :200], batch_size=50,
                  neg_sampling='binary', seed=2)
    plain = _flat(_ours(data, [3], **kwargs))
    calls = []
    loader = _ours(data, [3], prefetch=2,
                   transform=lambda b: calls.append(1) or b, **kwargs)
    assert all(torch.equal(a, b) for a, b in zip(plain, _flat(loader)))
    assert len(calls) == 4
    stats = loader.stats()
    assert loader.timer.num_batches == 4
    assert stats['stages']['sample']['calls'] == 4
    assert stats['stages']['gather']['calls'] == 4
    assert loader.topology is not None


def test_shares_topology_with_node_loader():
    data = make_graph()
    nodes = HybridNeighborLoader(data, [3], batch_size=10, device='cpu')
    links = _ours(data, [3], batch_size=10, topology=nodes.topology)
    assert links.topology is nodes.topology
    assert next(iter(links)).edge_label_index.size(1) == 10


def test_bidirectional_and_neg_sampling_ratio():
    data = make_graph()
    loader = _ours(data, [3, 2], edge_label_index=data.edge_index[:, :90],
                   batch_size=30, subgraph_type='bidirectional',
                   neg_sampling_ratio=1.0, seed=0)
    for batch in loader:
        assert batch.edge_label.numel() == 60
        _check_homo_batch(data, batch, data.edge_index[:, :90], 'binary',
                          amount=1.0, directional=False)


def test_call_samples_given_edges():
    data = make_graph()
    loader = _ours(data, [2], neg_sampling='triplet', seed=0)
    batch = loader(torch.tensor([3, 1, 4]))
    assert torch.equal(batch.input_id, torch.tensor([3, 1, 4]))
    assert torch.equal(batch.n_id[batch.src_index],
                       data.edge_index[0, [3, 1, 4]])


@pytest.mark.parametrize('mode', ['binary', 'triplet'])
def test_batches_on_device(device, mode):
    data = make_graph()
    loader = _ours(data, [3, 2], edge_label_index=data.edge_index[:, :64],
                   batch_size=32, neg_sampling=mode, device=device, seed=0)
    for batch in loader:
        assert batch.n_id.device.type == device.type
        assert batch.x.device.type == device.type
        key = 'edge_label_index' if mode == 'binary' else 'dst_neg_index'
        assert batch[key].device.type == device.type
        _check_homo_batch(data.to(device), batch,
                          data.edge_index[:, :64].to(device), mode,
                          amount=1)


# Look-ahead ##################################################################


def _tensors(batch) -> dict:
    # Every tensor of a (heterogeneous) batch, keyed by store and name.
    return {(getattr(store, '_key', None), key): value.cpu()
            for store in batch.stores for key, value in store.items()
            if isinstance(value, torch.Tensor)}


def _assert_same_batches(a, b):
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        tx, ty = _tensors(x), _tensors(y)
        assert tx.keys() == ty.keys()
        for key in tx:
            assert torch.equal(tx[key], ty[key]), key


@pytest.mark.parametrize('mode', ['binary', 'triplet', None])
def test_lookahead_same_batches(device, mode):
    data = make_graph()
    kw = dict(edge_label_index=data.edge_index[:, :300], batch_size=64,
              shuffle=True, neg_sampling=mode, seed=3, device=device)
    plain = _ours(data, [3, 2], lookahead=False, **kw)
    ahead = _ours(data, [3, 2], lookahead=True, **kw)
    assert ahead.lookahead and not plain.lookahead
    for _ in range(2):  # Two epochs: shuffling draws stay in step.
        _assert_same_batches(list(plain), list(ahead))
    stages = ahead.stats()['stages']
    assert stages['wait']['calls'] == 10
    assert stages['gather']['calls'] == 10


@pytest.mark.parametrize('edge_type', [WRITES, CITES],
                         ids=['two_types', 'one_type'])
def test_lookahead_same_batches_hetero(device, edge_type):
    data = make_hetero()
    kw = dict(edge_label_index=(edge_type, data[edge_type].edge_index[:, :90]),
              batch_size=32, shuffle=True, neg_sampling='binary', seed=4,
              device=device)
    plain = list(_ours(data, [3, 2], lookahead=False, **kw))
    _assert_same_batches(plain, list(_ours(data, [3, 2], lookahead=True,
                                           **kw)))


def test_lookahead_default_on_cuda_only(device):
    data = make_graph()
    kw = dict(edge_label_index=data.edge_index[:, :64], batch_size=32,
              device=device)
    assert _ours(data, [3], **kw).lookahead == (device.type == 'cuda')
    # Not with a prefetch thread, which it excludes:
    assert not _ours(data, [3], prefetch=1, **kw).lookahead
    if device.type == 'cuda':  # Worker processes sample on the CPU only.
        with pytest.raises(ValueError, match='num_workers'):
            _ours(data, [3], num_workers=1, **kw)
    else:
        assert not _ours(data, [3], num_workers=1, **kw).lookahead


def test_lookahead_with_feature_store_and_break():
    from pyg_orch.features.tiered import TieredFeatureStore

    data = make_graph()
    store = TieredFeatureStore(data.x, 'cpu', gpu_memory_budget=40 * 4 * 4,
                               hotness=torch.rand(data.num_nodes),
                               method='cpu')
    kw = dict(edge_label_index=data.edge_index[:, :200], batch_size=50,
              neg_sampling='binary', seed=2,
              cache=CacheOptions(store=store))
    loader = _ours(data, [3], lookahead=True, **kw)
    first = []
    for batch in loader:
        first.append(batch)
        if len(first) == 2:
            break
    again = list(loader)  # The batch left in flight is dropped.
    assert len(again) == 4
    ids = torch.cat([b.input_id for b in again])
    assert torch.equal(ids, torch.arange(200))  # Not shuffled.
    for b in first + again:
        assert torch.equal(b.x, data.x[b.n_id])
    assert loader.stats()['features']['rows'] > 0


def test_lookahead_error_reaches_the_loop_at_its_batch():
    data = make_graph()

    def transform(batch):
        if int(batch.input_id[0]) >= 100:
            raise ValueError('bad link batch')
        return batch

    loader = _ours(data, [3], edge_label_index=data.edge_index[:, :200],
                   batch_size=50, lookahead=True, transform=transform)
    it = iter(loader)
    next(it), next(it)
    with pytest.raises(ValueError, match='bad link batch'):
        next(it)


# BottomLayerOffload with a link loader #######################################


@pytest.mark.usefixtures('no_thread_leaks', 'one_intra_op_thread')
@pytest.mark.parametrize('neg_sampling,lookahead', [(None, False),
                                                     ('binary', False),
                                                     ('binary', True)])
def test_bottom_layer_offload_exact(neg_sampling, lookahead):
    # As for node loaders: max_staleness=0 and full neighbors give the
    # label edges' endpoints exactly the embeddings of the unpruned batch.
    import torch.nn.functional as F
    from torch_geometric.nn import GraphSAGE

    from conftest import tiny_graph
    from pyg_orch import BottomLayerOffload
    from pyg_orch.offload import OffloadOptions
    data = tiny_graph(num_nodes=1000, num_edges=3000)
    label_index = data.edge_index[:, :48]

    def make(lookahead):
        return _ours(data, [-1, -1], edge_label_index=label_index,
                     batch_size=16, neg_sampling=neg_sampling, seed=0,
                     lookahead=lookahead)

    loader, ref_loader = make(lookahead), make(False)
    torch.manual_seed(0)
    model = GraphSAGE(8, 16, 2, 8)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.1, max_staleness=0, full_neighbors=True))
    optimizer = torch.optim.Adam(off.parameters(), lr=0.01)
    pruned_any = False
    for batch, ref in zip(loader, ref_loader):
        num_seeds = batch.num_sampled_nodes[0]
        assert torch.equal(batch.n_id[:num_seeds], ref.n_id[:num_seeds])
        assert torch.equal(batch.edge_label_index, ref.edge_label_index)
        pruned_any |= batch.num_nodes < ref.num_nodes
        z = off(batch.x, batch.edge_index)[:num_seeds]
        expected = model(ref.x, ref.edge_index)[:num_seeds]
        assert torch.allclose(z, expected, atol=1e-5)
        src, dst = batch.edge_label_index
        pred = (z[src] * z[dst]).sum(-1)
        label = batch.edge_label if neg_sampling else torch.ones_like(pred)
        optimizer.zero_grad()
        F.binary_cross_entropy_with_logits(pred, label).backward()
        optimizer.step()
    assert pruned_any
    assert off.stats()['hot_rows_replaced'] > 0
    off.close()


@pytest.mark.usefixtures('no_thread_leaks', 'one_intra_op_thread')
@pytest.mark.parametrize('kind,neg_sampling', [('to_hetero', 'binary'),
                                               ('hetero_conv', None)])
def test_bottom_layer_offload_hetero_link_loader_exact(kind, neg_sampling):
    # A heterogeneous link loader: the hot set is ranked from both endpoint
    # types of the label edges, and with max_staleness=0 and full neighbors
    # the label edges' endpoints get exactly the embeddings of the unpruned
    # batch, during training.
    import copy

    import torch.nn.functional as F

    from pyg_orch import BottomLayerOffload
    from pyg_orch.offload import OffloadOptions
    from test_offload_hetero import hetero_graph, make_model
    data = hetero_graph()
    writes = ('a', 'writes', 'b')
    label_index = data[writes].edge_index[:, :64]

    def make(lookahead):
        return _ours(data, [-1, -1], edge_label_index=(writes, label_index),
                     batch_size=16, neg_sampling=neg_sampling, seed=0,
                     shuffle=True, lookahead=lookahead)

    loader, ref_loader = make(False), make(False)
    model = make_model(kind, data)
    ref_model = copy.deepcopy(model)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.2, max_staleness=0, full_neighbors=True))
    hot = off.hot_nodes
    assert set(hot) == {'a', 'b'} and hot['b'].numel() > 0
    optimizer = torch.optim.Adam(off.parameters(), lr=0.01)
    pruned_any = False
    for batch, ref in zip(loader, ref_loader):
        assert torch.equal(batch[writes].edge_label_index,
                           ref[writes].edge_label_index)
        pruned_any |= batch['a'].num_nodes + batch['b'].num_nodes < \
            ref['a'].num_nodes + ref['b'].num_nodes
        src, dst = batch[writes].edge_label_index
        out = off(batch.x_dict, batch.edge_index_dict)
        ref_model.load_state_dict(model.state_dict())
        with torch.no_grad():
            expected = ref_model(ref.x_dict, ref.edge_index_dict)
        z_a, z_b = out['a'][src], out['b'][dst]
        assert torch.allclose(z_a, expected['a'][src], atol=1e-5)
        assert torch.allclose(z_b, expected['b'][dst], atol=1e-5)
        pred = (z_a * z_b).sum(-1)
        label = batch[writes].edge_label if neg_sampling else \
            torch.ones_like(pred)
        optimizer.zero_grad()
        F.binary_cross_entropy_with_logits(pred, label).backward()
        optimizer.step()
    assert pruned_any
    stats = off.stats()
    assert stats['hot_rows_replaced'] > 0
    assert stats['offloaded_forwards'] == stats['training_forwards'] > 0
    off.close()


@pytest.mark.parametrize('filter_per_worker', [True, False])
def test_worker_processes(filter_per_worker):
    data = make_graph()
    loader = _ours(data, [3, 2], edge_label_index=data.edge_index[:, :200],
                   batch_size=100, neg_sampling='triplet', seed=0,
                   num_workers=1, filter_per_worker=filter_per_worker)
    seen = []
    for batch in loader:
        _check_homo_batch(data, batch, data.edge_index[:, :200], 'triplet',
                          amount=1)
        seen.append(batch.input_id)
    assert torch.equal(torch.cat(seen), torch.arange(200))
