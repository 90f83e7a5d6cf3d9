"""Heterogeneous graphs and remote (FeatureStore, GraphStore) backends."""
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import HeteroData
from torch_geometric.nn import SAGEConv, to_hetero
from torch_geometric.testing import MyFeatureStore, MyGraphStore
from torch_geometric.utils import degree

from pyg_orch import HybridNeighborLoader

from conftest import (
    AFFILIATED,
    CITES,
    EMPLOYS,
    REV_WRITES,
    WRITES,
    paper_hetero_graph,
    random_graph,
)


@pytest.fixture(scope='module')
def hetero():
    return paper_hetero_graph()


def check_hetero_batch(data: HeteroData, batch: HeteroData, seeds, fanout,
                       input_type: str = 'paper', from_mask: bool = False):
    r"""Checks a batch against :obj:`data`: slicing, hop order, edges and
    fan-out. :obj:`fanout` maps every edge type to its list of fan-outs.
    :obj:`input_id` holds positions in :obj:`seeds`, or, as in PyG, the node
    ids themselves when the seeds were given as a boolean mask."""
    num_hops = len(next(iter(fanout.values())))
    assert set(batch.node_types) == set(data.node_types)
    assert set(batch.edge_types) == set(data.edge_types)

    # Seeds first, and `input_id` pointing into the seed list:
    store = batch[input_type]
    bs = store.batch_size
    assert bs == store.input_id.numel()
    if from_mask:
        assert torch.equal(store.n_id[:bs], store.input_id)
    else:
        assert torch.equal(store.n_id[:bs], seeds[store.input_id])
    assert bool(torch.isin(store.n_id[:bs], seeds).all())
    for node_type in data.node_types:
        if node_type != input_type:
            assert 'batch_size' not in batch[node_type]
            assert 'input_id' not in batch[node_type]

    cum = {}
    for node_type in data.node_types:
        store = batch[node_type]
        n_id = store.n_id
        assert n_id.dtype == torch.long
        assert n_id.unique().numel() == n_id.numel()
        assert torch.equal(store.x, data[node_type].x[n_id])
        if 'y' in data[node_type]:
            assert torch.equal(store.y, data[node_type].y[n_id])
        nsn = list(store.num_sampled_nodes)
        assert len(nsn) == num_hops + 1
        assert sum(nsn) == n_id.numel()
        if node_type != input_type:
            assert nsn[0] == 0
        cum[node_type] = torch.tensor([0] + nsn).cumsum(0).tolist()

    for edge_type in data.edge_types:
        src_t, _, dst_t = edge_type
        store = batch[edge_type]
        ei, e_id = store.edge_index, store.e_id
        assert e_id.numel() == ei.size(1)
        assert e_id.unique().numel() == e_id.numel()
        nse = list(store.num_sampled_edges)
        assert len(nse) == num_hops
        assert sum(nse) == ei.size(1)
        if ei.size(1) == 0:
            assert all(n == 0 for n in nse)
            continue
        # Every sampled edge exists in the graph, under its edge id:
        glob = torch.stack(
            [batch[src_t].n_id[ei[0]], batch[dst_t].n_id[ei[1]]])
        assert torch.equal(glob, data[edge_type].edge_index[:, e_id])
        if 'edge_attr' in data[edge_type]:
            assert torch.equal(store.edge_attr,
                               data[edge_type].edge_attr[e_id])
        # Hop order: hop-h edges point into the nodes added at hop h, and
        # every destination gets min(in-degree, fan-out) distinct edges.
        full_deg = degree(data[edge_type].edge_index[1],
                          data[dst_t].num_nodes).long()
        offset = 0
        for hop in range(num_hops):
            col = ei[1, offset:offset + nse[hop]]
            row = ei[0, offset:offset + nse[hop]]
            offset += nse[hop]
            lo, hi = cum[dst_t][hop], cum[dst_t][hop + 1]
            assert bool(((col >= lo) & (col < hi)).all())
            assert bool((row < cum[src_t][hop + 2]).all())
            k = fanout[edge_type][hop]
            dst_deg = full_deg[batch[dst_t].n_id[lo:hi]]
            want = dst_deg if k < 0 else dst_deg.clamp(max=k)
            got = torch.bincount(col - lo, minlength=hi - lo)
            assert torch.equal(got, want), (edge_type, hop)


@pytest.mark.parametrize('as_tuple', [True, False], ids=['mask', 'type'])
def test_hetero_batch_structure(hetero, as_tuple):
    mask = hetero['paper'].train_mask
    if as_tuple:
        input_nodes = ('paper', mask)
        seeds = mask.nonzero().view(-1)
    else:
        input_nodes = 'paper'
        seeds = torch.arange(hetero['paper'].num_nodes)
    fanout = [4, 3]
    loader = HybridNeighborLoader(hetero, num_neighbors=fanout,
                                  input_nodes=input_nodes, batch_size=64,
                                  device='cpu', seed=0)
    seen = []
    for batch in loader:
        check_hetero_batch(hetero, batch, seeds,
                           {et: fanout
                            for et in hetero.edge_types}, from_mask=as_tuple)
        seen.append(batch['paper'].n_id[:batch['paper'].batch_size])
    assert torch.equal(torch.cat(seen), seeds)
    # Institutions are two hops away from papers (paper <- author <-
    # institution), so they show up in the last hop only:
    assert batch['institution'].num_sampled_nodes[1] == 0
    assert batch['institution'].num_sampled_nodes[2] > 0


def test_hetero_full_fanout(hetero):
    loader = HybridNeighborLoader(hetero, num_neighbors=[-1, -1],
                                  input_nodes=('paper', torch.arange(50)),
                                  batch_size=50, device='cpu')
    batch = next(iter(loader))
    check_hetero_batch(hetero, batch, torch.arange(50),
                       {et: [-1, -1]
                        for et in hetero.edge_types})


def test_hetero_per_edge_type_num_neighbors(hetero):
    fanout = {
        WRITES: [3, 2],
        REV_WRITES: [2, 1],
        CITES: [5, 0],
        EMPLOYS: [0, 0],
        AFFILIATED: [1, 1],
    }
    loader = HybridNeighborLoader(hetero, num_neighbors=fanout,
                                  input_nodes=('paper',
                                               hetero['paper'].train_mask),
                                  batch_size=64, device='cpu', seed=1)
    seeds = hetero['paper'].train_mask.nonzero().view(-1)
    for batch in loader:
        check_hetero_batch(hetero, batch, seeds, fanout, from_mask=True)
        assert batch[EMPLOYS].num_edges == 0
        assert list(batch[EMPLOYS].num_sampled_edges) == [0, 0]
        assert list(batch[CITES].num_sampled_edges)[1] == 0
        # Nothing leads to institutions any more:
        assert batch['institution'].num_nodes == 0
        assert batch['institution'].x.shape == (
            0, hetero['institution'].num_features)
        assert batch[WRITES].num_sampled_edges[0] > 0

    # Edge types given as 'src__rel__dst' strings are accepted too (fresh
    # loaders: the first one's generator has moved on):
    loader1 = HybridNeighborLoader(
        hetero, num_neighbors=fanout,
        input_nodes=('paper', hetero['paper'].train_mask), batch_size=64,
        device='cpu', seed=1)
    loader2 = HybridNeighborLoader(
        hetero, num_neighbors={'__'.join(k): v
                               for k, v in fanout.items()},
        input_nodes=('paper', hetero['paper'].train_mask), batch_size=64,
        device='cpu', seed=1)
    b1, b2 = next(iter(loader1)), next(iter(loader2))
    for node_type in hetero.node_types:
        assert torch.equal(b1[node_type].n_id, b2[node_type].n_id)


class _SAGE(torch.nn.Module):
    def __init__(self, hidden: int, out: int):
        super().__init__()
        self.conv1 = SAGEConv((-1, -1), hidden)
        self.conv2 = SAGEConv((-1, -1), out)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def test_hetero_training_loss_decreases(hetero):
    torch.manual_seed(0)
    num_classes = int(hetero['paper'].y.max()) + 1
    model = to_hetero(_SAGE(32, num_classes), hetero.metadata(), aggr='sum')
    train_loader = HybridNeighborLoader(
        hetero, num_neighbors=[5, 5],
        input_nodes=('paper', hetero['paper'].train_mask), batch_size=32,
        shuffle=True, device='cpu', seed=0)
    eval_loader = HybridNeighborLoader(
        hetero, num_neighbors=[-1, -1],
        input_nodes=('paper', hetero['paper'].train_mask), batch_size=512,
        device='cpu')

    def eval_loss() -> float:
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for batch in eval_loader:
                bs = batch['paper'].batch_size
                out = model(batch.x_dict, batch.edge_index_dict)['paper']
                total += float(
                    F.cross_entropy(out[:bs], batch['paper'].y[:bs],
                                    reduction='sum'))
                count += bs
        return total / count

    before = eval_loss()  # Also initializes the lazy parameters.
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model.train()
    steps = 0
    for _ in range(2):
        for batch in train_loader:
            bs = batch['paper'].batch_size
            optimizer.zero_grad()
            out = model(batch.x_dict, batch.edge_index_dict)['paper'][:bs]
            loss = F.cross_entropy(out, batch['paper'].y[:bs])
            loss.backward()
            optimizer.step()
            steps += 1
    after = eval_loss()
    assert steps >= 10
    assert after < 0.7 * before, (before, after)


# Remote backends #############################################################


class _FeatureStore(MyFeatureStore):
    r""":class:`MyFeatureStore` with the identity index: vectorized gather
    instead of a Python loop."""
    def _get_tensor(self, attr):
        index, tensor = self.store.get(self.key(attr), (None, None))
        if tensor is None:
            raise KeyError(f"Could not find tensor for '{attr}'")
        if attr.index is None or (isinstance(attr.index, slice)
                                  and attr.index == slice(None)):
            return tensor
        return tensor[attr.index]


@pytest.mark.parametrize('store_cls', [MyFeatureStore, _FeatureStore],
                         ids=['pyg', 'fast'])
def test_remote_homogeneous(store_cls):
    data = random_graph(400, 3000, num_features=8, num_classes=4,
                        explicit_num_nodes=False)
    n = data.num_nodes
    feature_store, graph_store = store_cls(), MyGraphStore()
    feature_store.put_tensor(data.x, group_name=None, attr_name='x',
                             index=None)
    feature_store.put_tensor(data.y, group_name=None, attr_name='y',
                             index=None)
    graph_store.put_edge_index(tuple(data.edge_index), edge_type=None,
                               layout='coo', size=(n, n))

    seeds = torch.arange(0, n, 3)
    loader = HybridNeighborLoader((feature_store, graph_store),
                                  num_neighbors=[5, 3], input_nodes=seeds,
                                  batch_size=40, device='cpu', seed=0)
    batches = list(loader)
    # `MyFeatureStore` gathers with a Python loop: one batch is enough there.
    if store_cls is MyFeatureStore:
        batches = batches[:1]
    deg = degree(data.edge_index[1], n).long()
    for batch in batches:
        bs = batch.batch_size
        assert torch.equal(batch.n_id[:bs], seeds[batch.input_id])
        assert batch.n_id.unique().numel() == batch.n_id.numel()
        assert torch.equal(batch.x, data.x[batch.n_id])
        assert torch.equal(batch.y, data.y[batch.n_id])
        glob = batch.n_id[batch.edge_index]
        assert torch.equal(glob, data.edge_index[:, batch.e_id])
        # Seeds get min(in-degree, 5) in-edges in the first hop:
        hop1 = batch.edge_index[1, :batch.num_sampled_edges[0]]
        assert torch.equal(torch.bincount(hop1, minlength=bs),
                           deg[batch.n_id[:bs]].clamp(max=5))

    # Full fan-out: the same node and edge sets as the in-memory graph (the
    # graph store's CSC may order the neighbors differently).
    kwargs = dict(num_neighbors=[-1, -1], input_nodes=seeds[:20],
                  batch_size=20, device='cpu')
    remote = next(iter(HybridNeighborLoader((feature_store, graph_store),
                                            **kwargs)))
    ref = next(iter(HybridNeighborLoader(data, **kwargs)))
    assert torch.equal(remote.n_id[:20], ref.n_id[:20])
    assert torch.equal(remote.n_id.sort()[0], ref.n_id.sort()[0])
    assert torch.equal(remote.e_id.sort()[0], ref.e_id.sort()[0])
    assert list(remote.num_sampled_nodes) == list(ref.num_sampled_nodes)


def test_remote_heterogeneous(hetero):
    feature_store, graph_store = _FeatureStore(), MyGraphStore()
    for node_type in hetero.node_types:
        feature_store.put_tensor(hetero[node_type].x, group_name=node_type,
                                 attr_name='x', index=None)
    feature_store.put_tensor(hetero['paper'].y, group_name='paper',
                             attr_name='y', index=None)
    for edge_type in hetero.edge_types:
        src_t, _, dst_t = edge_type
        size = (hetero[src_t].num_nodes, hetero[dst_t].num_nodes)
        graph_store.put_edge_index(tuple(hetero[edge_type].edge_index),
                                   edge_type=edge_type, layout='coo',
                                   size=size)
    seeds = hetero['paper'].train_mask.nonzero().view(-1)
    loader = HybridNeighborLoader((feature_store, graph_store),
                                  num_neighbors=[4, 3],
                                  input_nodes=('paper', seeds),
                                  batch_size=64, device='cpu', seed=0)
    fanout = {et: [4, 3] for et in hetero.edge_types}
    # Only 'x' and 'y' were put into the feature store:
    ref = hetero.clone()
    del ref[CITES].edge_attr
    del ref['paper'].train_mask
    count = 0
    for batch in loader:
        assert 'edge_attr' not in batch[CITES]
        check_hetero_batch(ref, batch, seeds, fanout)
        count += batch['paper'].batch_size
    assert count == seeds.numel()


# num_neighbors as a NumNeighbors with a default ##############################

NUM_NEIGHBORS_CASES = [
    ({WRITES: [3, 2]}, [1, 1]),
    ({WRITES: [3, 2], CITES: [0, -1]}, [-1, 0]),
    ({'paper__cites__paper': [2, 2]}, [1, 1]),  # PyG's string form.
    ({}, [2, 1]),
    ([2, 1], None),
    ({et: [2] for et in (WRITES, REV_WRITES, CITES, EMPLOYS, AFFILIATED)},
     [5, 5]),  # The default unused: its hop count does not matter.
]


@pytest.mark.parametrize('values,default', NUM_NEIGHBORS_CASES)
def test_num_neighbors_default_as_pyg(hetero, values, default):
    from torch_geometric.sampler import NumNeighbors

    from pyg_orch.sampling.arguments import parse_num_neighbors
    ours = parse_num_neighbors(NumNeighbors(values, default),
                               hetero.edge_types)
    expected = NumNeighbors(values, default).get_values(hetero.edge_types)
    assert ours == expected
    assert list(ours) == hetero.edge_types


def test_num_neighbors_default_same_batches(hetero):
    from torch_geometric.sampler import NumNeighbors
    values, default = {WRITES: [3, 2], CITES: [0, 4]}, [2, 1]
    explicit = {et: values.get(et, default) for et in hetero.edge_types}
    kwargs = dict(input_nodes='paper', batch_size=50, device='cpu', seed=4)
    with_default = HybridNeighborLoader(hetero,
                                        NumNeighbors(values, default),
                                        **kwargs)
    assert with_default.node_sampler.num_neighbors == explicit
    batches = list(HybridNeighborLoader(hetero, explicit, **kwargs))
    for a, b in zip(with_default, batches):
        for t in hetero.node_types:
            assert torch.equal(a[t].n_id, b[t].n_id)
        for et in hetero.edge_types:
            assert torch.equal(a[et].edge_index, b[et].edge_index)
            assert torch.equal(a[et].e_id, b[et].e_id)
        check_hetero_batch(hetero, a, torch.arange(hetero['paper'].num_nodes),
                           explicit)


@pytest.mark.parity
@pytest.mark.filterwarnings('ignore::UserWarning')
def test_num_neighbors_default_parity(hetero):
    r"""PyG's own loader with the same :obj:`NumNeighbors`: full or no
    fan-outs, so the node and edge sets are deterministic."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.sampler import NumNeighbors

    def make():  # `NumNeighbors` caches its values: one per loader.
        return NumNeighbors({WRITES: [-1, 0], CITES: [0, -1]}, [-1, -1])

    kwargs = dict(input_nodes=('paper', torch.arange(0, 300, 7)),
                  batch_size=15)
    ref = list(NeighborLoader(hetero, make(), **kwargs))
    ours = list(HybridNeighborLoader(hetero, make(), device='cpu', **kwargs))
    assert len(ref) == len(ours) == 3
    for a, b in zip(ref, ours):
        for t in hetero.node_types:
            assert torch.equal(a[t].n_id.sort()[0], b[t].n_id.sort()[0]), t
        for et in hetero.edge_types:
            src_a = a[et[0]].n_id[a[et].edge_index[0]]
            dst_a = a[et[-1]].n_id[a[et].edge_index[1]]
            src_b = b[et[0]].n_id[b[et].edge_index[0]]
            dst_b = b[et[-1]].n_id[b[et].edge_index[1]]
            assert sorted(zip(src_a.tolist(), dst_a.tolist(),
                              a[et].e_id.tolist())) == \
                sorted(zip(src_b.tolist(), dst_b.tolist(),
                           b[et].e_id.tolist())), et
