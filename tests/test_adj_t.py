"""Graphs given as :obj:`adj_t` (:class:`~torch_geometric.transforms.
ToSparseTensor`): sampled as their :obj:`edge_index` twins, with the
sampled :obj:`adj_t` in each batch (same type and layout, transposed), and
edge-level attributes that batches cannot slice refused by name.

Twins: the same graph with :obj:`edge_index` sorted as
:class:`~torch_geometric.transforms.ToSparseTensor` sorts it (by
destination, then source), so that edge ids (positions) agree and a seeded
loader draws the same batches from both."""
import warnings

import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.data import Data, HeteroData
from torch_geometric.utils import coalesce, sort_edge_index

from pyg_orch import (
    CacheOptions,
    HybridLinkNeighborLoader,
    HybridNeighborLoader,
    PlacementOptions,
)
from pyg_orch.topology.graph import GraphTopology

from conftest import (
    CITES,
    HAS_TORCH_SPARSE,
    paper_hetero_graph,
)

pytestmark = [
    pytest.mark.filterwarnings('ignore::UserWarning'),
    pytest.mark.filterwarnings('ignore::DeprecationWarning'),
]

#: `None` makes a torch_sparse.SparseTensor (skipped without torch_sparse).
LAYOUTS = [
    pytest.param(None, id='SparseTensor', marks=pytest.mark.skipif(
        not HAS_TORCH_SPARSE, reason='needs torch_sparse')),
    pytest.param(torch.sparse_csr, id='csr'),
]
ALL_LAYOUTS = LAYOUTS + [pytest.param(torch.sparse_coo, id='coo')]


def twin_graph(num_nodes=120, num_edges=700, seed=0) -> Data:
    # No duplicate edges: torch.sparse conversion would merge them.
    gen = torch.Generator().manual_seed(seed)
    edge_index = coalesce(torch.randint(0, num_nodes, (2, num_edges),
                                        generator=gen), num_nodes=num_nodes)
    edge_index = sort_edge_index(edge_index, num_nodes=num_nodes,
                                 sort_by_row=False)
    e = edge_index.size(1)
    return Data(edge_index=edge_index, num_nodes=num_nodes,
                x=torch.randn(num_nodes, 5, generator=gen),
                y=torch.randint(0, 3, (num_nodes, ), generator=gen),
                edge_attr=torch.randn(e, 2, generator=gen),
                edge_weight=torch.rand(e, generator=gen))


def to_adj_t(data, layout):
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return T.ToSparseTensor(layout=layout)(data.clone())


def adj_t_triples(adj_t, src_n_id, dst_n_id) -> list:
    r"""(global src, global dst, value) of every entry of :obj:`adj_t`."""
    if isinstance(adj_t, torch.Tensor):
        coo = adj_t.to_sparse_coo().coalesce()
        (dst, src), value = coo.indices(), coo.values()
    else:
        dst, src, value = adj_t.coo()
        if value is None:
            value = torch.ones(dst.numel())
    return sorted(zip(src_n_id[src].tolist(), dst_n_id[dst].tolist(),
                      value.tolist()))


def edge_triples(edge_index, value, src_n_id, dst_n_id) -> list:
    return sorted(zip(src_n_id[edge_index[0]].tolist(),
                      dst_n_id[edge_index[1]].tolist(), value.tolist()))


def check_adj_t_batch(a, b, layout):
    r""":obj:`a` from the adj_t graph equals :obj:`b` from its twin."""
    assert 'edge_index' not in a and 'adj_t' in a
    if layout is None:
        assert not isinstance(a.adj_t, torch.Tensor)  # A SparseTensor.
    else:
        assert a.adj_t.layout == layout
    assert torch.equal(a.n_id, b.n_id)
    assert torch.equal(a.e_id, b.e_id)
    assert torch.equal(a.x, b.x) and torch.equal(a.edge_attr, b.edge_attr)
    n = a.n_id.numel()
    assert (a.adj_t.size(0), a.adj_t.size(1)) == (n, n)
    assert adj_t_triples(a.adj_t, a.n_id, a.n_id) == edge_triples(
        b.edge_index, b.edge_weight, b.n_id, b.n_id)


# Homogeneous #################################################################


@pytest.mark.parametrize('layout', ALL_LAYOUTS)
@pytest.mark.parametrize('num_neighbors', [[-1, -1], [3, 2]])
def test_homo_batches_equal_edge_index_twin(layout, num_neighbors):
    data = twin_graph()
    adj = to_adj_t(data, layout)
    assert 'edge_weight' not in adj  # Moved into adj_t's values.
    kwargs = dict(batch_size=16, seed=0, shuffle=True, device='cpu')
    ours = list(HybridNeighborLoader(adj, num_neighbors, **kwargs))
    twins = list(HybridNeighborLoader(data, num_neighbors, **kwargs))
    assert len(ours) == len(twins) == 8
    for a, b in zip(ours, twins):
        check_adj_t_batch(a, b, layout)


def test_torch_csc_adj_t_edge_ids_follow_its_storage():
    data = twin_graph()
    csr = to_adj_t(data, torch.sparse_csr)
    csc = csr.clone()
    csc.adj_t = csr.adj_t.to_sparse_csc()
    # Edge ids are positions in the CSC storage (sorted by source): the
    # attributes beside it must be in that order too.
    perm = torch.sort(data.edge_index[0] * 1000 + data.edge_index[1])[1]
    csc.edge_attr = data.edge_attr[perm]
    topo = GraphTopology.from_data(csc).csc[None]
    assert torch.equal(topo.colptr, GraphTopology.from_data(
        data).csc[None].colptr.to(topo.colptr.dtype))
    batch = next(iter(HybridNeighborLoader(csc, [-1, -1], batch_size=10,
                                           device='cpu')))
    ref = next(iter(HybridNeighborLoader(data, [-1, -1], batch_size=10,
                                         device='cpu')))
    assert batch.adj_t.layout == torch.sparse_csc
    assert torch.equal(batch.edge_attr, data.edge_attr[perm][batch.e_id])
    assert adj_t_triples(batch.adj_t, batch.n_id, batch.n_id) == \
        edge_triples(ref.edge_index, ref.edge_weight, ref.n_id, ref.n_id)


def test_adj_t_batches_in_worker_processes():
    data = twin_graph(seed=1)
    adj = to_adj_t(data, torch.sparse_csr)
    kwargs = dict(batch_size=40, seed=0, device='cpu', num_workers=1)
    # Full fan-out: worker processes draw from streams of their own.
    ours = list(HybridNeighborLoader(adj, [-1, -1], **kwargs))
    twins = list(HybridNeighborLoader(data, [-1, -1], **kwargs))
    for a, b in zip(ours, twins):
        check_adj_t_batch(a, b, torch.sparse_csr)


@pytest.mark.parametrize('level', ['node', 'edge'])
def test_temporal_adj_t_batches_equal_edge_index_twin(level):
    data = twin_graph(seed=6)
    gen = torch.Generator().manual_seed(0)
    n = data.num_nodes if level == 'node' else data.num_edges
    data.time = torch.randint(0, 50, (n, ), generator=gen)
    adj = to_adj_t(data, torch.sparse_csr)
    kwargs = dict(input_nodes=torch.arange(40), batch_size=20, seed=0,
                  time_attr='time', input_time=torch.full((40, ), 40),
                  device='cpu')
    for a, b in zip(HybridNeighborLoader(adj, [3, 2], **kwargs),
                    HybridNeighborLoader(data, [3, 2], **kwargs)):
        check_adj_t_batch(a, b, torch.sparse_csr)
        if level == 'edge':
            assert torch.equal(a.time, data.time[a.e_id])


def test_sage_reads_the_sampled_adj_t():
    from torch_geometric.nn import GraphSAGE
    torch.manual_seed(0)
    data = twin_graph(seed=2)
    del data.edge_weight  # SAGEConv aggregates without weights.
    adj = to_adj_t(data, torch.sparse_csr)
    model = GraphSAGE(5, 8, num_layers=2, out_channels=3).eval()
    kwargs = dict(input_nodes=torch.arange(60), batch_size=30, seed=0,
                  device='cpu')
    for a, b in zip(HybridNeighborLoader(adj, [5, 5], **kwargs),
                    HybridNeighborLoader(data, [5, 5], **kwargs)):
        out = model(a.x, a.adj_t)[:a.batch_size]
        ref = model(b.x, b.edge_index)[:b.batch_size]
        assert torch.allclose(out, ref, atol=1e-5)
        # The adjacency counts: without it the model is an MLP.
        empty = torch.empty(2, 0, dtype=torch.long)
        mlp = model(b.x, empty)[:b.batch_size]
        assert not torch.allclose(out, mlp, atol=1e-3)


# Heterogeneous ###############################################################


def hetero_twin(seed=0) -> HeteroData:
    data = paper_hetero_graph(seed, num_papers=80, num_authors=60,
                              num_institutions=10, num_features=4)
    for store in data.edge_stores:
        n = max(data[store._key[0]].num_nodes, data[store._key[-1]].num_nodes)
        keys = ['edge_attr'] if 'edge_attr' in store else []
        ei, attrs = coalesce(store.edge_index, [store[k] for k in keys],
                             num_nodes=n)
        ei, attrs = sort_edge_index(ei, attrs, num_nodes=n,
                                    sort_by_row=False)
        store.edge_index = ei
        for k, v in zip(keys, attrs):
            store[k] = v
    data[CITES].edge_weight = torch.rand(data[CITES].num_edges)
    return data


@pytest.mark.parametrize('layout', LAYOUTS)
@pytest.mark.parametrize('num_neighbors', [[-1, -1], [3, 2]])
def test_hetero_batches_equal_edge_index_twin(layout, num_neighbors):
    data = hetero_twin()
    adj = to_adj_t(data, layout)
    kwargs = dict(input_nodes=('paper', data['paper'].train_mask),
                  batch_size=24, seed=0, device='cpu')
    ours = list(HybridNeighborLoader(adj, num_neighbors, **kwargs))
    twins = list(HybridNeighborLoader(data, num_neighbors, **kwargs))
    assert len(ours) == len(twins) > 1
    for a, b in zip(ours, twins):
        for t in data.node_types:
            assert torch.equal(a[t].n_id, b[t].n_id)
            assert torch.equal(a[t].x, b[t].x)
        for et in data.edge_types:
            sa, sb = a[et], b[et]
            assert 'edge_index' not in sa
            assert torch.equal(sa.e_id, sb.e_id)
            src, dst = a[et[0]].n_id, a[et[-1]].n_id
            assert (sa.adj_t.size(0), sa.adj_t.size(1)) == (dst.numel(),
                                                            src.numel())
            weight = sb.edge_weight if 'edge_weight' in sb else \
                torch.ones(sb.e_id.numel())
            if layout is None and 'edge_weight' not in sb:
                assert sa.adj_t.storage.value() is None
            assert adj_t_triples(sa.adj_t, src, dst) == edge_triples(
                sb.edge_index, weight, b[et[0]].n_id, b[et[-1]].n_id)
        assert torch.equal(a[CITES].edge_attr, b[CITES].edge_attr)


@pytest.mark.parametrize('layout', LAYOUTS)
def test_hetero_link_loader_with_adj_t(layout):
    data = hetero_twin(seed=3)
    adj = to_adj_t(data, layout)
    label = (CITES, data[CITES].edge_index[:, :60])
    kwargs = dict(edge_label_index=label, neg_sampling='binary',
                  batch_size=30, seed=0, device='cpu')
    for a, b in zip(HybridLinkNeighborLoader(adj, [3, 2], **kwargs),
                    HybridLinkNeighborLoader(data, [3, 2], **kwargs)):
        assert torch.equal(a[CITES].edge_label_index,
                           b[CITES].edge_label_index)
        assert torch.equal(a[CITES].edge_label, b[CITES].edge_label)
        src = dst = a['paper'].n_id
        assert torch.equal(src, b['paper'].n_id)
        assert adj_t_triples(a[CITES].adj_t, src, dst) == edge_triples(
            b[CITES].edge_index, b[CITES].edge_weight, src, dst)


@pytest.mark.parametrize('layout', LAYOUTS)
def test_homo_link_loader_with_adj_t(layout):
    data = twin_graph(seed=4)
    adj = to_adj_t(data, layout)
    kwargs = dict(neg_sampling='binary', batch_size=256, seed=0,
                  shuffle=True, device='cpu')
    ours = list(HybridLinkNeighborLoader(adj, [3, 2], **kwargs))
    twins = list(HybridLinkNeighborLoader(data, [3, 2], **kwargs))
    assert len(ours) == len(twins) > 1
    for a, b in zip(ours, twins):
        # Label edges default to all edges, in adj_t's storage order.
        assert torch.equal(a.edge_label_index, b.edge_label_index)
        assert torch.equal(a.edge_label, b.edge_label)
        check_adj_t_batch(a, b, layout)


# PyG #########################################################################


@pytest.mark.parity
@pytest.mark.parametrize('hetero', [False, True])
def test_parity_with_pyg_neighbor_loader(hetero):
    from torch_geometric.loader import NeighborLoader
    data = hetero_twin(seed=5) if hetero else twin_graph(seed=5)
    adj = to_adj_t(data, None)
    if hetero:
        nodes = ('paper', torch.arange(30))
    else:
        nodes = torch.arange(30)
    kwargs = dict(input_nodes=nodes, batch_size=10)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        ref = list(NeighborLoader(adj, [-1, -1], **kwargs))
    ours = list(HybridNeighborLoader(adj, [-1, -1], device='cpu', **kwargs))
    assert len(ref) == len(ours) == 3
    for r, o in zip(ref, ours):
        if not hetero:
            assert set(o.keys()) - {'num_sampled_nodes',
                                    'num_sampled_edges'} == set(r.keys())
            assert type(o.adj_t) is type(r.adj_t)
            assert o.adj_t.sparse_sizes() == r.adj_t.sparse_sizes()
            assert adj_t_triples(o.adj_t, o.n_id, o.n_id) == \
                adj_t_triples(r.adj_t, r.n_id, r.n_id)
            assert set(o.e_id.tolist()) == set(r.e_id.tolist())
            continue
        for t in data.node_types:
            assert set(o[t].n_id.tolist()) == set(r[t].n_id.tolist())
        for et in data.edge_types:
            if 'adj_t' not in r[et]:
                continue
            ro, rr = o[et].adj_t, r[et].adj_t
            assert ro.sparse_sizes() == rr.sparse_sizes()
            assert (ro.storage.value() is None) == (rr.storage.value() is
                                                   None)
            assert adj_t_triples(ro, o[et[0]].n_id, o[et[-1]].n_id) == \
                adj_t_triples(rr, r[et[0]].n_id, r[et[-1]].n_id)


# No edges (PyG's test_hetero_link_neighbor_loader_no_edges) ##################


def test_hetero_link_loader_no_edges():
    gen = torch.Generator().manual_seed(0)
    label = torch.randint(0, 100, (2, 100), generator=gen)
    loader = HybridLinkNeighborLoader(
        HeteroData(paper=dict(num_nodes=100)), num_neighbors=[],
        edge_label_index=(('paper', 'paper'), label), batch_size=20,
        device='cpu')
    batches = list(loader)
    assert len(batches) == 5
    for i, batch in enumerate(batches):
        assert isinstance(batch, HeteroData)
        store = batch['paper', 'to', 'paper']
        assert torch.equal(store.input_id, torch.arange(20 * i, 20 * i + 20))
        assert store.edge_label_index.size(1) == 20
        assert batch['paper'].num_nodes == \
            store.edge_label_index.unique().numel()
        # Local indices into the batch's nodes:
        assert torch.equal(batch['paper'].n_id[store.edge_label_index],
                           label[:, 20 * i:20 * i + 20])


def test_label_edges_of_unknown_node_types_are_refused():
    with pytest.raises(ValueError, match="names the edge type"):
        HybridLinkNeighborLoader(
            HeteroData(paper=dict(num_nodes=10)), num_neighbors=[],
            edge_label_index=(('paper', 'to', 'author'),
                              torch.zeros(2, 3, dtype=torch.long)),
            device='cpu')


# What batches cannot slice ###################################################


def test_other_sparse_matrices_are_refused_by_name():
    data = twin_graph()
    data.adj2 = to_adj_t(data, torch.sparse_csr).adj_t
    with pytest.raises(ValueError, match=r"data\.adj2 is a sparse matrix"):
        HybridNeighborLoader(data, [2], device='cpu')
    hetero = hetero_twin()
    hetero[CITES].extra = to_adj_t(twin_graph(80, 300),
                                   torch.sparse_csr).adj_t
    with pytest.raises(ValueError, match=r"'cites', 'paper'\)\]\.extra"):
        HybridNeighborLoader(hetero, [2], input_nodes='paper', device='cpu')


def test_non_transposed_adj_is_not_sampled_yet():
    data = twin_graph(num_nodes=20, num_edges=50)
    data.adj = to_adj_t(data, torch.sparse_csr).adj_t
    del data.edge_index
    with pytest.raises(NotImplementedError, match=r"data\.adj: a "
                       r"non-transposed sparse adjacency"):
        GraphTopology.from_data(data)
    with pytest.raises(ValueError, match=r"data\.adj is a sparse matrix"):
        HybridNeighborLoader(data, [2], device='cpu')


def test_edge_level_lists_are_refused_by_name():
    data = twin_graph()
    data.edge_names = [f'e{i}' for i in range(data.num_edges)]
    with pytest.raises(ValueError, match=r"data\.edge_names is a list with "
                       r"one entry per edge"):
        HybridLinkNeighborLoader(data, [2], device='cpu')


def test_numpy_edge_attributes_are_sliced():
    data = twin_graph()
    data.edge_np = data.edge_attr.numpy().copy()
    batch = next(iter(HybridNeighborLoader(data, [3], batch_size=8,
                                           device='cpu')))
    assert isinstance(batch.edge_np, torch.Tensor)
    assert torch.equal(batch.edge_np, data.edge_attr[batch.e_id])


def test_bad_adj_t_is_refused():
    data = twin_graph(num_nodes=20, num_edges=50)
    bad = to_adj_t(data, torch.sparse_csr)
    bad.adj_t = torch.sparse_csr_tensor(
        bad.adj_t.crow_indices()[:-1], bad.adj_t.col_indices()[:0],
        bad.adj_t.values()[:0], (19, 20))
    with pytest.raises(ValueError, match=r"data\.adj_t' must have shape "
                       r"\[num_dst_nodes, num_src_nodes\] = \[20, 20\]"):
        HybridNeighborLoader(bad, [2], device='cpu')
    dense = data.clone()
    del dense.edge_index
    dense.adj_t = torch.zeros(20, 20)
    with pytest.raises(TypeError, match=r"data\.adj_t' must be a "
                       r"torch_sparse\.SparseTensor or a torch\.sparse"):
        HybridNeighborLoader(dense, [2], device='cpu')


# GPU #########################################################################


@pytest.mark.gpu
@pytest.mark.parametrize('backend', ['torch', 'triton'])
def test_adj_t_on_cuda(backend):
    data = twin_graph()
    adj = to_adj_t(data, torch.sparse_csr)
    kwargs = dict(batch_size=16, seed=0, device='cuda',
                  placement=PlacementOptions(backend=backend))
    # The fused homogeneous kernels take fan-outs in [0, 64], not -1.
    fanout = [-1, -1] if backend == 'torch' else [4, 3]
    for a, b in zip(HybridNeighborLoader(adj, fanout, **kwargs),
                    HybridNeighborLoader(data, fanout, **kwargs)):
        assert a.adj_t.device.type == 'cuda'
        assert torch.equal(a.n_id, b.n_id)
        assert adj_t_triples(a.adj_t.cpu(), a.n_id.cpu(), a.n_id.cpu()) == \
            edge_triples(b.edge_index.cpu(), b.edge_weight.cpu(),
                         b.n_id.cpu(), b.n_id.cpu())


@pytest.mark.gpu
def test_hetero_adj_t_on_cuda():
    # `CacheOptions(store='auto')`: a HeteroTieredFeatureStore serves `x`.
    data = hetero_twin()
    adj = to_adj_t(data, torch.sparse_csr)
    kwargs = dict(input_nodes=('paper', data['paper'].train_mask),
                  batch_size=24, seed=0, device='cuda')
    for a, b in zip(HybridNeighborLoader(adj, [3, 2], **kwargs),
                    HybridNeighborLoader(data, [3, 2], **kwargs)):
        for t in data.node_types:
            assert torch.equal(a[t].n_id, b[t].n_id)
            assert torch.equal(a[t].x, b[t].x)
        for et in data.edge_types:
            sa, sb = a[et], b[et]
            assert sa.adj_t.device.type == 'cuda'
            src, dst = b[et[0]].n_id.cpu(), b[et[-1]].n_id.cpu()
            weight = sb.edge_weight.cpu() if 'edge_weight' in sb else \
                torch.ones(sb.e_id.numel())
            assert adj_t_triples(sa.adj_t.cpu(), src, dst) == edge_triples(
                sb.edge_index.cpu(), weight, src, dst)


def test_topology_of_another_adj_t_graph_is_refused():
    # The fingerprint reads adj_t's edges, so a topology built from another
    # adj_t graph with the same counts is refused as for edge_index graphs.
    torch.manual_seed(0)
    a = Data(x=torch.randn(30, 4), edge_index=torch.randint(0, 30, (2, 90)))
    b = a.clone()
    b.edge_index = torch.randint(0, 30, (2, 90))
    a, b = T.ToSparseTensor(layout=torch.sparse_csr)(a), \
        T.ToSparseTensor(layout=torch.sparse_csr)(b)
    loader = HybridNeighborLoader(a, num_neighbors=[2], batch_size=8)
    with pytest.raises(ValueError, match='another graph'):
        HybridNeighborLoader(b, num_neighbors=[2], batch_size=8,
                             topology=loader.topology)
    HybridNeighborLoader(a, num_neighbors=[2], batch_size=8,
                         topology=loader.topology)
