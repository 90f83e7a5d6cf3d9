"""Reduced copies of PyG 2.8.0.post1's example scripts' training loops, with
the loader swapped for ours (the swap) and with the model wrapped in
:class:`BottomLayerOffload` as well (the wrapper): models and loaders are
built as the examples build them, on small synthetic stand-ins of their
datasets, for a few steps. Every run must train (finite losses, updated
parameters); the wrapper either offloads (the first layer is message
passing over a non-temporal loader) or says why it passes through, with
one warning."""
import copy
import gc
import multiprocessing as mp
import warnings

import pytest
import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from multiproc import run_workers
from torch.nn import ReLU
from torch_geometric.data import Data, HeteroData
from torch_geometric.nn import (
    GraphSAGE,
    HeteroConv,
    Linear,
    SAGEConv,
    Sequential,
    to_hetero,
)
from torch_geometric.nn.models import SGFormer
from torch_geometric.utils import to_undirected, trim_to_layer

from pyg_orch import HybridLinkNeighborLoader, HybridNeighborLoader
from pyg_orch.offload import BottomLayerOffload, OffloadOptions

STEPS = 3
OFFLOADS = ('measure', 'fixed')  # stats()['decision']['mode'] offloading.


# Stand-ins of the examples' datasets ########################################


def reddit_like(num_nodes=240, num_features=16, num_classes=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, num_classes, (num_nodes, ), generator=gen)
    x = torch.randn(num_nodes, num_features, generator=gen)
    x[:, :num_classes] += 2 * F.one_hot(y, num_classes)  # Learnable.
    dst = (torch.rand(num_nodes * 8, generator=gen)**2 * num_nodes).long()
    src = torch.randint(0, num_nodes, (num_nodes * 8, ), generator=gen)
    edge_index = to_undirected(torch.stack([src, dst]), num_nodes=num_nodes)
    train_mask = torch.rand(num_nodes, generator=gen) < 0.6
    return Data(x=x, y=y, edge_index=edge_index, train_mask=train_mask,
                val_mask=~train_mask, test_mask=~train_mask)


def mag_like(seed=0):
    # OGB_MAG with metapath2vec features, made undirected (merge=True).
    gen = torch.Generator().manual_seed(seed)
    data = HeteroData()
    num = {'paper': 160, 'author': 120, 'field_of_study': 40,
           'institution': 20}
    for t, n in num.items():
        data[t].x = torch.randn(n, 16, generator=gen)
    data['paper'].y = torch.randint(0, 4, (num['paper'], ), generator=gen)
    data['paper'].x[:, :4] += 2 * F.one_hot(data['paper'].y, 4)
    data['paper'].train_mask = torch.rand(num['paper'], generator=gen) < .6
    data['paper'].val_mask = ~data['paper'].train_mask

    def edges(src, dst, m):
        return torch.stack([torch.randint(0, num[src], (m, ), generator=gen),
                            torch.randint(0, num[dst], (m, ), generator=gen)])

    data['author', 'affiliated_with', 'institution'].edge_index = edges(
        'author', 'institution', 150)
    data['author', 'writes', 'paper'].edge_index = edges(
        'author', 'paper', 500)
    data['paper', 'cites', 'paper'].edge_index = edges('paper', 'paper', 600)
    data['paper', 'has_topic', 'field_of_study'].edge_index = edges(
        'paper', 'field_of_study', 300)
    return T.ToUndirected(merge=True)(data)


def movielens_like(seed=0):
    # MovieLens: users without features (an identity matrix), movies with
    # text embeddings, ratings with time stamps.
    gen = torch.Generator().manual_seed(seed)
    data = HeteroData()
    num_users, num_movies, num_ratings = 50, 80, 800
    data['user'].num_nodes = num_users
    data['movie'].x = torch.randn(num_movies, 16, generator=gen)
    data['user', 'rates', 'movie'].edge_index = torch.stack([
        torch.randint(0, num_users, (num_ratings, ), generator=gen),
        torch.randint(0, num_movies, (num_ratings, ), generator=gen)])
    data['user', 'rates', 'movie'].edge_label = torch.randint(
        0, 6, (num_ratings, ), generator=gen)
    data['user', 'rates', 'movie'].time = torch.randint(
        0, 1000, (num_ratings, ), generator=gen)
    return data


def taobao_like(seed=0):
    gen = torch.Generator().manual_seed(seed)
    data = HeteroData()
    num_users, num_items, m = 60, 80, 600
    data['user'].num_nodes = num_users
    data['item'].num_nodes = num_items
    data['user', 'to', 'item'].edge_index = torch.stack([
        torch.randint(0, num_users, (m, ), generator=gen),
        torch.randint(0, num_items, (m, ), generator=gen)])
    return data


# Helpers #####################################################################


def flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.fixture(autouse=True)
def _tiny_graphs(one_intra_op_thread):
    yield  # One intra-op thread: the stand-ins are tiny.


@pytest.fixture(autouse=True)
def caught():
    r"""Every warning of a test (training included)."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter('always')
        yield record


def wrap(model, loader, record):
    r"""Wraps :obj:`model` as a user would (no argument but the loader);
    :obj:`record` collects the warnings."""
    return BottomLayerOffload(model, loader), record


def check_trained(losses, before, model):
    assert len(losses) >= 2
    assert all(torch.isfinite(torch.tensor(losses)))
    assert not torch.equal(before, flat(model))


def check_decision(off, record, offloads: bool, why: str = ''):
    decision = off.stats()['decision']
    passes = [w for w in record if 'does not offload' in str(w.message)]
    if offloads:
        assert decision['mode'] in OFFLOADS, decision
        assert passes == []
    else:
        assert decision['mode'] == 'pass_through', decision
        assert why in decision['reason']
        assert len(passes) == 1 and why in str(passes[0].message)
    off.close()


def train_steps(step, loader, steps=STEPS):
    losses = []
    for batch in loader:
        losses.append(step(batch))
        if len(losses) == steps:
            break
    return losses


# reddit.py, hierarchical_sampling.py, ogbn_train.py #########################


class RedditSAGE(torch.nn.Module):  # reddit.py's SAGE.
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.convs = torch.nn.ModuleList()
        self.convs.append(SAGEConv(in_channels, hidden_channels))
        self.convs.append(SAGEConv(hidden_channels, out_channels))

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu_()
                x = F.dropout(x, p=0.5, training=self.training)
        return x


def node_step(model, optimizer, forward):
    def step(batch):
        optimizer.zero_grad()
        out = forward(model, batch)[:batch.batch_size]
        loss = F.cross_entropy(out, batch.y[:batch.batch_size].view(-1))
        loss.backward()
        optimizer.step()
        return float(loss)
    return step


@pytest.mark.parametrize('wrapped', [False, True])
def test_reddit(wrapped, caught):
    torch.manual_seed(0)
    data = reddit_like()
    kwargs = {'batch_size': 32, 'num_workers': 1, 'persistent_workers': True}
    loader = HybridNeighborLoader(data, input_nodes=data.train_mask,
                                  num_neighbors=[25, 10], shuffle=True,
                                  **kwargs)
    model = RedditSAGE(data.num_features, 32, 4)
    if wrapped:
        model, record = wrap(model, loader, caught)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    before = flat(model)
    model.train()
    losses = train_steps(node_step(
        model, optimizer, lambda m, b: m(b.x, b.edge_index)), loader)
    check_trained(losses, before, model)
    if wrapped:
        check_decision(model, record, offloads=True)


@pytest.mark.parametrize('wrapped', [False, True])
@pytest.mark.parametrize('trim', [False, True])
def test_hierarchical_sampling(wrapped, trim, caught):
    torch.manual_seed(0)
    data = reddit_like()
    loader = HybridNeighborLoader(data, input_nodes=data.train_mask,
                                  num_neighbors=[20, 10, 5], shuffle=True,
                                  batch_size=16)
    model = GraphSAGE(data.num_features, hidden_channels=32, out_channels=4,
                      num_layers=3)
    if wrapped:
        model, record = wrap(model, loader, caught)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def forward(m, batch):
        if not trim:
            return m(batch.x, batch.edge_index)
        return m(batch.x, batch.edge_index,
                 num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                 num_sampled_edges_per_hop=batch.num_sampled_edges)

    before = flat(model)
    model.train()
    losses = train_steps(node_step(model, optimizer, forward), loader)
    check_trained(losses, before, model)
    if wrapped:
        check_decision(model, record, offloads=True)


@pytest.mark.parametrize('wrapped', [False, True])
@pytest.mark.parametrize('name', ['sage', 'sgformer'])
def test_ogbn_train(wrapped, name, caught):
    torch.manual_seed(123)
    data = reddit_like(num_features=12)
    data.edge_index = to_undirected(data.edge_index, reduce='mean')
    train_idx = data.train_mask.nonzero().view(-1)
    loader = HybridNeighborLoader(
        data, input_nodes=train_idx, num_neighbors=[3] * 3, batch_size=16,
        shuffle=True, num_workers=0, persistent_workers=False,
        disjoint=name == 'sgformer')  # Fan-out 10 in the example.
    if name == 'sage':
        model = GraphSAGE(in_channels=12, hidden_channels=32, num_layers=3,
                          out_channels=4, dropout=0.5)
    else:
        model = SGFormer(in_channels=12, hidden_channels=32, out_channels=4,
                         trans_num_heads=1, trans_dropout=0.5,
                         gnn_num_layers=3, gnn_dropout=0.5)
    model.reset_parameters()
    if wrapped:
        model, record = wrap(model, loader, caught)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)

    def forward(m, batch):
        if name == 'sgformer':
            return m(batch.x, batch.edge_index, batch.batch)
        return m(batch.x, batch.edge_index)

    before = flat(model)
    model.train()
    losses = train_steps(node_step(model, optimizer, forward), loader)
    check_trained(losses, before, model)
    if wrapped:  # SGFormer: a Linear layer runs before its first GCNConv.
        check_decision(model, record, offloads=name == 'sage',
                       why='does not read')


# graph_sage_unsup.py #########################################################


@pytest.mark.parametrize('wrapped', [False, True])
def test_graph_sage_unsup(wrapped, caught):
    torch.manual_seed(0)
    data = reddit_like()
    loader = HybridLinkNeighborLoader(data, batch_size=64, shuffle=True,
                                      neg_sampling_ratio=1.0,
                                      num_neighbors=[10, 10])
    model = GraphSAGE(data.num_node_features, hidden_channels=32,
                      num_layers=2)
    if wrapped:
        model, record = wrap(model, loader, caught)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def step(batch):
        optimizer.zero_grad()
        h = model(batch.x, batch.edge_index)
        pred = (h[batch.edge_label_index[0]] *
                h[batch.edge_label_index[1]]).sum(dim=-1)
        loss = F.binary_cross_entropy_with_logits(pred, batch.edge_label)
        loss.backward()
        optimizer.step()
        return float(loss)

    before = flat(model)
    model.train()
    losses = train_steps(step, loader)
    check_trained(losses, before, model)
    if wrapped:
        check_decision(model, record, offloads=True)


# hetero/to_hetero_mag.py, hetero/hierarchical_sage.py #######################


def hetero_node_step(model, optimizer, forward):
    def step(batch):
        optimizer.zero_grad()
        batch_size = batch['paper'].batch_size
        out = forward(model, batch)[:batch_size]
        loss = F.cross_entropy(out, batch['paper'].y[:batch_size])
        loss.backward()
        optimizer.step()
        return float(loss)
    return step


@pytest.mark.parametrize('wrapped', [False, True])
def test_to_hetero_mag(wrapped, caught):
    torch.manual_seed(0)
    data = mag_like()
    kwargs = {'batch_size': 32, 'num_workers': 0}
    train_loader = HybridNeighborLoader(
        data, num_neighbors=[10] * 2, shuffle=True,
        input_nodes=('paper', data['paper'].train_mask), **kwargs)
    model = Sequential('x, edge_index', [
        (SAGEConv((-1, -1), 32), 'x, edge_index -> x'),
        ReLU(inplace=True),
        (SAGEConv((-1, -1), 32), 'x, edge_index -> x'),
        ReLU(inplace=True),
        (Linear(-1, 4), 'x -> x'),
    ])
    model = to_hetero(model, data.metadata(), aggr='sum')
    if wrapped:  # Before the example's init_params(): lazy parameters.
        model, record = wrap(model, train_loader, caught)
        assert model.stats()['decision']['mode'] == 'pending'

    @torch.no_grad()
    def init_params():
        batch = next(iter(train_loader))
        model(batch.x_dict, batch.edge_index_dict)

    init_params()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    before = flat(model)
    model.train()
    losses = train_steps(hetero_node_step(
        model, optimizer,
        lambda m, b: m(b.x_dict, b.edge_index_dict)['paper']), train_loader)
    check_trained(losses, before, model)
    if wrapped:
        assert model.stats()['offloaded_forwards'] > 0 or \
            model.stats()['decision']['mode'] == 'measure'
        check_decision(model, record, offloads=True)


class HierarchicalHeteroGraphSage(torch.nn.Module):
    def __init__(self, edge_types, hidden_channels, out_channels,
                 num_layers):
        super().__init__()
        self.convs = torch.nn.ModuleList()
        for _ in range(num_layers):
            conv = HeteroConv(
                {
                    edge_type: SAGEConv((-1, -1), hidden_channels)
                    for edge_type in edge_types
                }, aggr='sum')
            self.convs.append(conv)
        self.lin = Linear(hidden_channels, out_channels)

    def forward(self, x_dict, edge_index_dict, num_sampled_edges_dict,
                num_sampled_nodes_dict):
        for i, conv in enumerate(self.convs):
            x_dict, edge_index_dict, _ = trim_to_layer(
                layer=i,
                num_sampled_nodes_per_hop=num_sampled_nodes_dict,
                num_sampled_edges_per_hop=num_sampled_edges_dict,
                x=x_dict,
                edge_index=edge_index_dict,
            )
            x_dict = conv(x_dict, edge_index_dict)
            x_dict = {key: x.relu() for key, x in x_dict.items()}
        return self.lin(x_dict['paper'])


def _hierarchical_sage(wrapped, sparse, caught):
    torch.manual_seed(0)
    transforms = [T.ToUndirected(merge=True)]
    if sparse:
        transforms.append(T.ToSparseTensor())
    data = T.Compose(transforms)(mag_like())
    model = HierarchicalHeteroGraphSage(data.edge_types, hidden_channels=32,
                                        out_channels=4, num_layers=2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)  # Lazy.
    train_loader = HybridNeighborLoader(
        data, num_neighbors=[10] * 2, shuffle=True,
        input_nodes=('paper', data['paper'].train_mask), batch_size=32,
        num_workers=0)
    if wrapped:
        model, record = wrap(model, train_loader, caught)

    def forward(m, batch):
        return m(batch.x_dict,
                 batch.adj_t_dict if sparse else batch.edge_index_dict,
                 num_sampled_nodes_dict=batch.num_sampled_nodes_dict,
                 num_sampled_edges_dict=batch.num_sampled_edges_dict)

    model.train()
    losses = train_steps(hetero_node_step(model, optimizer, forward),
                         train_loader)
    assert all(torch.isfinite(torch.tensor(losses)))
    before = flat(model)
    losses = train_steps(hetero_node_step(model, optimizer, forward),
                         train_loader, 2)
    check_trained(losses, before, model)
    if wrapped:
        check_decision(model, record, offloads=True)


@pytest.mark.parametrize('wrapped', [False, True])
def test_hierarchical_sage(wrapped, caught):
    _hierarchical_sage(wrapped, False, caught)


@pytest.mark.parity
@pytest.mark.parametrize('wrapped', [False, True])
def test_hierarchical_sage_sparse_tensor(wrapped, caught):
    # `--use-sparse-tensor`: PyG's `trim_to_layer` slices `SparseTensor`
    # only (not `torch.sparse` CSR, which `T.ToSparseTensor()` makes
    # without torch-sparse), so this runs in the parity run.
    pytest.importorskip('torch_sparse')
    _hierarchical_sage(wrapped, True, caught)


# hetero/temporal_link_pred.py, hetero/recommender_system.py ##################


class GNNEncoder(torch.nn.Module):
    def __init__(self, hidden_channels, out_channels):
        super().__init__()
        self.conv1 = SAGEConv((-1, -1), hidden_channels)
        self.conv2 = SAGEConv((-1, -1), out_channels)

    def forward(self, x, edge_index):
        x = self.conv1(x, edge_index).relu()
        return self.conv2(x, edge_index)


class EdgeDecoder(torch.nn.Module):
    def __init__(self, hidden_channels):
        super().__init__()
        self.lin1 = torch.nn.Linear(2 * hidden_channels, hidden_channels)
        self.lin2 = torch.nn.Linear(hidden_channels, 1)

    def forward(self, z_dict, edge_label_index):
        row, col = edge_label_index
        z = torch.cat([z_dict['user'][row], z_dict['movie'][col]], dim=-1)
        return self.lin2(self.lin1(z).relu()).view(-1)


class LinkModel(torch.nn.Module):
    def __init__(self, encoder, decoder, metadata):
        super().__init__()
        self.encoder = to_hetero(encoder, metadata, aggr='sum')
        self.decoder = decoder

    def forward(self, x_dict, edge_index_dict, edge_label_index):
        z_dict = self.encoder(x_dict, edge_index_dict)
        return self.decoder(z_dict, edge_label_index)


class InnerProductDecoder(torch.nn.Module):
    def forward(self, x_dict, edge_label_index):
        x_src = x_dict['user'][edge_label_index[0]]
        x_dst = x_dict['movie'][edge_label_index[1]]
        return (x_src * x_dst).sum(dim=-1)


def _movielens(recommender: bool):
    data = movielens_like()
    data['user'].x = torch.eye(data['user'].num_nodes)
    del data['user'].num_nodes
    if recommender:
        store = data['user', 'movie']
        mask = store.edge_label >= 3
        store.edge_index = store.edge_index[:, mask]
        store.time = store.time[mask]
        del store.edge_label
    data = T.ToUndirected()(data)
    if not recommender:
        del data['movie', 'rev_rates', 'user'].edge_label
    return data


@pytest.mark.parametrize('wrapped', [False, True])
def test_temporal_link_pred(wrapped, caught):
    torch.manual_seed(0)
    data = _movielens(recommender=False)
    perm = torch.argsort(data['user', 'movie'].time)
    train_idx = perm[:int(0.8 * perm.size(0))]
    edge_index = data['user', 'movie'].edge_index
    train_loader = HybridLinkNeighborLoader(
        data=data, num_neighbors=[20, 10], batch_size=64, time_attr='time',
        temporal_strategy='last', num_workers=0,
        edge_label_index=(('user', 'movie'), edge_index[:, train_idx]),
        edge_label=data['user', 'movie'].edge_label[train_idx],
        edge_label_time=data['user', 'movie'].time[train_idx] - 1,
        shuffle=True)
    model = LinkModel(GNNEncoder(16, 16), EdgeDecoder(16), data.metadata())
    if wrapped:
        model, record = wrap(model, train_loader, caught)
    with torch.no_grad():  # Materializes the lazy parameters.
        batch = next(iter(train_loader))
        model(batch.x_dict, batch.edge_index_dict,
              batch['user', 'movie'].edge_label_index)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def step(batch):
        optimizer.zero_grad()
        pred = model(batch.x_dict, batch.edge_index_dict,
                     batch['user', 'movie'].edge_label_index)
        target = batch['user', 'movie'].edge_label.float()
        loss = F.mse_loss(pred, target)
        loss.backward()
        optimizer.step()
        return float(loss)

    before = flat(model)
    model.train()
    check_trained(train_steps(step, train_loader), before, model)
    if wrapped:
        check_decision(model, record, offloads=False, why='temporal')


@pytest.mark.parametrize('wrapped', [False, True])
def test_recommender_system(wrapped, caught):
    torch.manual_seed(0)
    data = _movielens(recommender=True)
    edge_label_index = data['user', 'movie'].edge_index
    time = data['user', 'movie'].time
    train_index = time.argsort()[:int(0.8 * time.numel())]
    train_loader = HybridLinkNeighborLoader(
        data=data, num_neighbors=[5, 5, 5], batch_size=64,
        time_attr='time', num_workers=0, temporal_strategy='last',
        edge_label_index=(('user', 'movie'),
                          edge_label_index[:, train_index]),
        edge_label_time=time[train_index] - 1,
        neg_sampling=dict(mode='binary', amount=2), shuffle=True)

    class GNN(torch.nn.Module):
        def __init__(self, hidden_channels):
            super().__init__()
            self.conv1 = SAGEConv((-1, -1), hidden_channels)
            self.conv2 = SAGEConv((-1, -1), hidden_channels)
            self.conv3 = SAGEConv((-1, -1), hidden_channels)

        def forward(self, x, edge_index):
            x = self.conv1(x, edge_index).relu()
            x = self.conv2(x, edge_index).relu()
            return self.conv3(x, edge_index)

    model = LinkModel(GNN(16), InnerProductDecoder(), data.metadata())
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)  # Lazy.
    if wrapped:
        model, record = wrap(model, train_loader, caught)

    def step(batch):
        optimizer.zero_grad()
        out = model(batch.x_dict, batch.edge_index_dict,
                    batch['user', 'movie'].edge_label_index)
        loss = F.binary_cross_entropy_with_logits(
            out, batch['user', 'movie'].edge_label)
        loss.backward()
        optimizer.step()
        return float(loss)

    model.train()
    losses = train_steps(step, train_loader, 1)
    before = flat(model)
    losses += train_steps(step, train_loader, 2)
    check_trained(losses, before, model)
    if wrapped:
        check_decision(model, record, offloads=False, why='temporal')


# hetero/bipartite_sage_unsup.py ##############################################


class ItemGNNEncoder(torch.nn.Module):
    def __init__(self, hidden_channels, out_channels):
        super().__init__()
        self.conv1 = SAGEConv(-1, hidden_channels)
        self.conv2 = SAGEConv(hidden_channels, hidden_channels)
        self.lin = torch.nn.Linear(hidden_channels, out_channels)

    def forward(self, x, edge_index):
        x = self.conv1(x, edge_index).relu()
        x = self.conv2(x, edge_index).relu()
        return self.lin(x)


class UserGNNEncoder(torch.nn.Module):
    def __init__(self, hidden_channels, out_channels):
        super().__init__()
        self.conv1 = SAGEConv((-1, -1), hidden_channels)
        self.conv2 = SAGEConv((-1, -1), hidden_channels)
        self.conv3 = SAGEConv((-1, -1), hidden_channels)
        self.lin = torch.nn.Linear(hidden_channels, out_channels)

    def forward(self, x_dict, edge_index_dict):
        item_x = self.conv1(x_dict['item'],
                            edge_index_dict[('item', 'to', 'item')]).relu()
        user_x = self.conv2((x_dict['item'], x_dict['user']),
                            edge_index_dict[('item', 'rev_to',
                                             'user')]).relu()
        user_x = self.conv3((item_x, user_x),
                            edge_index_dict[('item', 'rev_to',
                                             'user')]).relu()
        return self.lin(user_x)


class BipartiteModel(torch.nn.Module):
    def __init__(self, num_users, num_items, hidden_channels, out_channels):
        super().__init__()
        self.user_emb = torch.nn.Embedding(num_users, hidden_channels)
        self.item_emb = torch.nn.Embedding(num_items, hidden_channels)
        self.item_encoder = ItemGNNEncoder(hidden_channels, out_channels)
        self.user_encoder = UserGNNEncoder(hidden_channels, out_channels)

    def forward(self, x_dict, edge_index_dict, edge_label_index):
        z_dict = {}
        x_dict['user'] = self.user_emb(x_dict['user'])
        x_dict['item'] = self.item_emb(x_dict['item'])
        z_dict['item'] = self.item_encoder(
            x_dict['item'], edge_index_dict[('item', 'to', 'item')])
        z_dict['user'] = self.user_encoder(x_dict, edge_index_dict)
        row, col = edge_label_index
        return (z_dict['user'][row] * z_dict['item'][col]).sum(dim=-1)


@pytest.mark.parametrize('wrapped', [False, True])
def test_bipartite_sage_unsup(wrapped, caught):
    torch.manual_seed(0)
    data = taobao_like()
    data['user'].x = torch.arange(0, data['user'].num_nodes)
    data['item'].x = torch.arange(0, data['item'].num_nodes)
    data = T.ToUndirected()(data)
    train_data, _, _ = T.RandomLinkSplit(
        num_val=0.1, num_test=0.1, neg_sampling_ratio=1.0,
        add_negative_train_samples=False,
        edge_types=[('user', 'to', 'item')],
        rev_edge_types=[('item', 'rev_to', 'user')])(data)
    # Items bought by the same users (co-purchase), as the example adds:
    ei = data['user', 'item'].edge_index
    mat = torch.zeros(data['user'].num_nodes, data['item'].num_nodes)
    mat[ei[0], ei[1]] = 1
    comat = (mat.t() @ mat).fill_diagonal_(0) >= 1
    train_data['item', 'item'].edge_index = comat.nonzero().t()
    train_loader = HybridLinkNeighborLoader(
        data=train_data, num_neighbors=[8, 4],
        edge_label_index=('user', 'to', 'item'), neg_sampling='binary',
        batch_size=64, shuffle=True, num_workers=0, drop_last=True)
    model = BipartiteModel(data['user'].num_nodes, data['item'].num_nodes,
                           hidden_channels=16, out_channels=16)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)  # Lazy.
    if wrapped:
        model, record = wrap(model, train_loader, caught)

    def step(batch):
        optimizer.zero_grad()
        pred = model(batch.x_dict, batch.edge_index_dict,
                     batch['user', 'item'].edge_label_index)
        loss = F.binary_cross_entropy_with_logits(
            pred, batch['user', 'item'].edge_label)
        loss.backward()
        optimizer.step()
        return float(loss)

    model.train()
    losses = train_steps(step, train_loader, 1)
    before = flat(model)
    losses += train_steps(step, train_loader, 2)
    check_trained(losses, before, model)
    if wrapped:  # Embeddings run before the first convolutions:
        check_decision(model, record, offloads=False, why='raw')


# multi_gpu/distributed_sampling.py (gloo, CPU) ##############################


def _distributed_sampling(rank, world_size, wrapped, num_workers):
    from math import ceil

    from torch.nn.parallel import DistributedDataParallel
    data = reddit_like()
    train_idx = data.train_mask.nonzero(as_tuple=False).view(-1)
    train_idx = train_idx.split(ceil(train_idx.size(0) / world_size))[rank]
    kwargs = dict(data=data, batch_size=16, num_neighbors=[25, 10],
                  drop_last=True, num_workers=num_workers,
                  persistent_workers=num_workers > 0)
    train_loader = HybridNeighborLoader(input_nodes=train_idx, shuffle=True,
                                        **kwargs)
    torch.manual_seed(12345)
    model = RedditSAGE(data.num_features, 32, 4)
    if wrapped:
        model = BottomLayerOffload(model, train_loader)
    model = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
    before = flat(model)
    losses = []
    for epoch in range(1, 3):
        model.train()
        for batch in train_loader:
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(float(loss))
            if len(losses) == 2 * epoch:
                break
    check_trained(losses, before, model)
    decision = model.module.stats()['decision'] if wrapped else None
    # At the end of the example's run(), nothing keeps the loader (and its
    # persistent worker processes) alive: they shut down cleanly.
    del model, optimizer, train_loader, batch
    gc.collect()
    return losses, decision, [p.name for p in mp.active_children()
                              if p.is_alive()]


def _distributed_sampling_warned(rank, world_size, *args):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter('always')
        out = _distributed_sampling(rank, world_size, *args)
    return out + ([str(w.message) for w in record
                   if 'does not offload' in str(w.message)], )


@pytest.mark.parametrize('wrapped', [False, True])
def test_distributed_sampling(wrapped, caught):
    out = run_workers(_distributed_sampling_warned, 2, args=(wrapped, 1),
                      timeout=120)
    for losses, decision, children, passes in out:
        assert len(losses) == 4
        assert children == []
        if wrapped:
            assert decision['mode'] in OFFLOADS and passes == []


def test_copies_of_pending_wrappers_are_plain_models():
    # A pending wrapper (lazy parameters) copies to the plain model too.
    data = mag_like()
    loader = HybridNeighborLoader(data, [4, 2], batch_size=16,
                                  input_nodes=('paper', None))
    model = to_hetero(GraphSAGE((-1, -1), 8, 2, 4), data.metadata())
    off = BottomLayerOffload(model, loader)
    assert off.stats()['decision']['mode'] == 'pending'
    copied = copy.deepcopy(off)
    assert not isinstance(copied, BottomLayerOffload)
    assert isinstance(copied, torch.fx.GraphModule)
    off.close()


class HandWrittenHetero(torch.nn.Module):
    # Modules named after nothing: found from what the first batch does.
    def __init__(self):
        super().__init__()
        self.cites = SAGEConv((-1, -1), 16)
        self.writes = SAGEConv((-1, -1), 16)
        self.top = SAGEConv((-1, -1), 16)
        self.lin = Linear(16, 4)

    def forward(self, x_dict, edge_index_dict):
        paper = self.cites(x_dict['paper'],
                           edge_index_dict['paper', 'cites', 'paper'])
        paper = paper + self.writes(
            (x_dict['author'], x_dict['paper']),
            edge_index_dict['author', 'writes', 'paper'])
        paper = self.top(paper.relu(),
                         edge_index_dict['paper', 'cites', 'paper'])
        return self.lin(paper.relu())


def test_hand_written_hetero_model_is_offloaded(caught):
    torch.manual_seed(0)
    data = mag_like()
    loader = HybridNeighborLoader(
        data, num_neighbors=[5, 5], shuffle=True, batch_size=32,
        input_nodes=('paper', data['paper'].train_mask))
    model = HandWrittenHetero()
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.2))
    assert off.stats()['decision']['mode'] == 'pending'
    optimizer = torch.optim.Adam(off.parameters(), lr=0.01)  # Lazy.
    off.train()
    step = hetero_node_step(off, optimizer,
                            lambda m, b: m(b.x_dict, b.edge_index_dict))
    losses = train_steps(step, loader, 1)
    assert set(off.runtime.convs) == {('paper', 'cites', 'paper'),
                                      ('author', 'writes', 'paper')}
    assert off.runtime.convs['paper', 'cites', 'paper'] is model.cites
    before = flat(model)
    losses += train_steps(step, loader, 3)
    check_trained(losses, before, model)
    stats = off.stats()
    assert stats['offloaded_forwards'] > 0 and stats['hot_rows_replaced'] > 0
    check_decision(off, caught, offloads=True)
