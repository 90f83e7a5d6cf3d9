"""Structural invariants of the mini-batches of :class:`HybridNeighborLoader`,
checked on seeded random graphs, on the skewed MUSAE graphs (when
``../shared/datasets/musae`` is present) and on a star with a million
leaves."""
import functools

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from pyg_orch import (
    HybridNeighborLoader,
    HybridNeighborSampler,
    PlacementOptions,
)
from pyg_orch.sampling.neighbors import FLOYD_MAX_FANOUT

from conftest import hub_graph, musae_graph, random_hetero_graph

# Fan-outs: plain, all neighbors, an empty hop, and one above
# FLOYD_MAX_FANOUT (the sort path) on graphs whose hubs have more neighbors.
FANOUTS = [[5, 3], [-1, 2], [0, 4], [FLOYD_MAX_FANOUT + 8, 2]]
FANOUT_IDS = ['5-3', 'all-2', '0-4', 'big-2']

# The vectorized PyTorch path (on CUDA the loader would otherwise pick fused
# kernels, which draw other random numbers). `backend` is one of the
# loader's keyword arguments, not in its signature.
TORCH_PATH = {'backend': 'torch'}


# Graphs ######################################################################


def star_graph(num_leaves: int) -> Data:
    r"""Leaves point to the hub 0, and the hub points back to the leaves."""
    leaves = torch.arange(1, num_leaves + 1)
    hub = torch.zeros_like(leaves)
    edge_index = torch.cat([torch.stack([leaves, hub]),
                            torch.stack([hub, leaves])], dim=1)
    return Data(edge_index=edge_index, num_nodes=num_leaves + 1)


# Checks ######################################################################

_GRAPH_INFO = {}


def graph_info(data: Data):
    r"""In-degree of every node, cached per graph."""
    key = id(data.edge_index)
    info = _GRAPH_INFO.get(key)
    if info is None or info[0] is not data.edge_index:
        indeg = torch.bincount(data.edge_index[1].long(),
                               minlength=data.num_nodes)
        info = _GRAPH_INFO[key] = (data.edge_index, indeg)
    return info[1]


_GRAPH_KEYS = {}


def graph_keys(data: Data) -> torch.Tensor:
    r"""Sorted :obj:`src * num_nodes + dst` of all edges, cached per
    graph."""
    key = id(data.edge_index)
    info = _GRAPH_KEYS.get(key)
    if info is None or info[0] is not data.edge_index:
        ei = data.edge_index.long()
        keys = torch.sort(ei[0] * data.num_nodes + ei[1]).values
        info = _GRAPH_KEYS[key] = (data.edge_index, keys)
    return info[1]


def expected_count(deg: torch.Tensor, k: int, replace: bool) -> torch.Tensor:
    if k < 0:
        return deg
    if replace:
        return torch.where(deg > 0, k, 0)
    return deg.clamp(max=k)


def all_distinct(values: torch.Tensor, bound: int) -> bool:
    r"""Whether the entries of :obj:`values` (in :obj:`[0, bound)`) are
    distinct; by counting where :obj:`bound` is small, else by sorting."""
    if values.numel() <= 1:
        return True
    if bound <= 4 * values.numel() + 4_000_000:
        return int(torch.bincount(values, minlength=bound).max()) <= 1
    v = torch.sort(values).values
    return bool((v[1:] != v[:-1]).all())


def check_first_appearance(row: torch.Tensor, lo: int, hi: int, n: int):
    r"""The local ids :obj:`lo, ..., hi - 1` are exactly the entries of
    :obj:`row` that are :obj:`>= lo`, in order of first appearance."""
    new = row[row >= lo]
    assert ((new >= lo) & (new < hi)).all()
    first = torch.full((n, ), row.numel(), dtype=torch.long)
    first.scatter_reduce_(0, new, torch.arange(new.numel()), 'amin')
    first = first[lo:hi]
    assert (first < row.numel()).all(), 'a new node without an edge'
    assert (first[1:] > first[:-1]).all(), \
        'new nodes not in order of first appearance'


def check_batch(data: Data, batch: Data, num_neighbors, replace: bool,
                input_nodes: torch.Tensor, disjoint: bool = False,
                check_membership: bool = True):
    r"""All invariants of a directional mini-batch of a homogeneous graph;
    :obj:`input_nodes` are the seeds as indices (duplicates allowed).
    :obj:`check_membership=False` skips the (costly, and implied by the
    :obj:`e_id` check) search of every edge among all graph edges."""
    batch = batch.to('cpu')
    indeg = graph_info(data)
    n_nodes = data.num_nodes
    n_id, e_id, ei = batch.n_id, batch.e_id, batch.edge_index
    bs = batch.batch_size
    n, num_e = n_id.numel(), e_id.numel()
    num_hops = len(num_neighbors)
    assert batch.num_nodes == n
    assert ei.shape == (2, num_e)
    assert n_id.dtype == e_id.dtype == ei.dtype == torch.long

    # Seeds first, in input order:
    assert batch.input_id.numel() == bs
    assert torch.equal(n_id[:bs], input_nodes[batch.input_id])

    # Counts per hop:
    nsn, nse = list(batch.num_sampled_nodes), list(batch.num_sampled_edges)
    assert len(nsn) == num_hops + 1 and len(nse) == num_hops
    assert nsn[0] == bs
    assert sum(nsn) == n and sum(nse) == num_e

    # Every edge is an edge of the graph, and `e_id` names it:
    src, dst = n_id[ei[0]], n_id[ei[1]]
    assert torch.equal(data.edge_index[:, e_id].long(),
                       torch.stack([src, dst]))
    if check_membership:
        keys, query = graph_keys(data), src * n_nodes + dst
        idx = torch.searchsorted(keys, query).clamp_(max=keys.numel() - 1)
        assert torch.equal(keys[idx], query), 'an edge not in the graph'

    # Edges ordered by hop: hop i goes from nodes up to hop i + 1 to hop-i
    # nodes, and hop i + 1 holds the new sources of hop i, in order of first
    # appearance:
    no = np.cumsum([0] + nsn).tolist()
    eo = np.cumsum([0] + nse).tolist()
    for i, k in enumerate(num_neighbors):
        row, col = ei[0, eo[i]:eo[i + 1]], ei[1, eo[i]:eo[i + 1]]
        eid = e_id[eo[i]:eo[i + 1]]
        assert ((col >= no[i]) & (col < no[i + 1])).all(), f'hop {i}'
        assert ((row >= 0) & (row < no[i + 2])).all(), f'hop {i}'
        check_first_appearance(row, no[i + 1], no[i + 2], n)
        if k == 0:
            assert nse[i] == 0 and nsn[i + 1] == 0

        # Sampled count per destination node:
        count = torch.bincount(col - no[i], minlength=nsn[i])
        deg = indeg[n_id[no[i]:no[i + 1]]]
        assert torch.equal(count, expected_count(deg, k, replace)), \
            f'hop {i}: wrong number of sampled neighbors'
        if not replace or k < 0:  # No edge twice for one destination:
            num_edges = max(data.num_edges, 1)
            pair = (col - no[i]) * num_edges + eid
            assert all_distinct(pair, nsn[i] * num_edges), f'hop {i}'

    # Node ids:
    if disjoint:
        b = batch.batch
        assert b is not None and b.shape == (n, )
        assert torch.equal(b[:bs], torch.arange(bs))
        # Every edge stays inside one subgraph; with the first-appearance
        # check above, every non-seed node of subgraph `b` was reached from
        # an earlier node of subgraph `b`: each subgraph is a tree of
        # discovery rooted at its seed.
        assert torch.equal(b[ei[0]], b[ei[1]])
        assert all_distinct(b * n_nodes + n_id, bs * n_nodes), \
            'node twice in one subgraph'
    else:
        # Only duplicate seeds repeat:
        assert batch.get('batch') is None
        assert all_distinct(n_id[bs:], n_nodes)
        is_seed = torch.zeros(n_nodes, dtype=torch.bool)
        is_seed[n_id[:bs]] = True
        assert not is_seed[n_id[bs:]].any()

    # Attributes:
    for key in ('x', 'y'):
        if key in data:
            assert torch.equal(batch[key], data[key][n_id]), key
    if 'edge_attr' in data:
        assert torch.equal(batch.edge_attr, data.edge_attr[e_id])


def make_seeds(data: Data, seed: int, num: int, unique: bool) -> torch.Tensor:
    r"""Random seeds plus the top in-degree node, a node without in-edges and
    (unless unique) duplicates."""
    indeg = graph_info(data)
    g = torch.Generator().manual_seed(seed)
    hub = int(indeg.argmax())
    leaf = int((indeg == 0).nonzero()[0]) if (indeg == 0).any() else None
    if unique:
        perm = torch.randperm(data.num_nodes, generator=g)
        perm = perm[(perm != hub) & (perm != (leaf if leaf is not None
                                                     else -1))]
        extra = [hub] + ([leaf] if leaf is not None else [])
        return torch.cat([torch.tensor(extra), perm[:num - len(extra)]])
    rand = torch.randint(0, data.num_nodes, (num, ), generator=g)
    extra = [hub, hub, rand[0].item()] + ([leaf] if leaf is not None else [])
    return torch.cat([torch.tensor(extra), rand])


# Random graphs ###############################################################


@pytest.mark.parametrize('dtype', [torch.int64, torch.int32],
                         ids=['int64', 'int32'])
@pytest.mark.parametrize('replace', [False, True], ids=['norep', 'rep'])
@pytest.mark.parametrize('num_neighbors', FANOUTS, ids=FANOUT_IDS)
def test_random_graph_invariants(device, dtype, replace, num_neighbors):
    data = hub_graph(1, dtype=dtype)
    for unique in (True, False):
        seeds = make_seeds(data, 2, 50, unique=unique)
        loader = HybridNeighborLoader(data, num_neighbors, input_nodes=seeds,
                                      replace=replace, batch_size=16,
                                      device=device, seed=3)
        batches = list(loader)
        assert len(batches) == len(loader) == (seeds.numel() + 15) // 16
        for batch in batches:
            assert batch.n_id.device.type == device.type
            check_batch(data, batch, num_neighbors, replace, seeds)


@pytest.mark.parametrize('replace', [False, True], ids=['norep', 'rep'])
def test_random_graph_shuffled_mask_input(device, replace):
    data = hub_graph(4)
    mask = torch.zeros(data.num_nodes, dtype=torch.bool)
    mask[::3] = True
    seeds = mask.nonzero().view(-1)
    loader = HybridNeighborLoader(data, [4, 4, 2], input_nodes=mask,
                                  replace=replace, batch_size=20,
                                  shuffle=True, device=device, seed=5)
    seen = []
    for batch in loader:
        # As in PyG, `input_id` of a mask input holds the node ids:
        check_batch(data, batch, [4, 4, 2], replace,
                    torch.arange(data.num_nodes))
        seen.append(batch.input_id.cpu())
    # Every seed exactly once per epoch:
    assert torch.equal(torch.cat(seen).sort().values, seeds)


@pytest.mark.parametrize('replace', [False, True], ids=['norep', 'rep'])
@pytest.mark.parametrize('num_neighbors', FANOUTS, ids=FANOUT_IDS)
def test_random_graph_disjoint(device, replace, num_neighbors):
    data = hub_graph(6)
    seeds = make_seeds(data, 7, 40, unique=False)
    loader = HybridNeighborLoader(data, num_neighbors, input_nodes=seeds,
                                  replace=replace, disjoint=True,
                                  batch_size=16, device=device, seed=8)
    for batch in loader:
        check_batch(data, batch, num_neighbors, replace, seeds,
                    disjoint=True)


def test_disjoint_subgraphs_match_single_seed_sampling(device):
    # With all neighbors, sampling is deterministic: the subgraph of seed
    # `b` in a disjoint batch is the batch of seed `b` alone.
    data = hub_graph(9, num_nodes=80, num_edges=240)
    seeds = torch.tensor([3, 0, 3, 79, 17])
    kw = dict(num_neighbors=[-1, -1], device=device)
    batch = next(iter(HybridNeighborLoader(data, input_nodes=seeds,
                                           batch_size=5, disjoint=True,
                                           **kw))).to('cpu')
    for b, s in enumerate(seeds.tolist()):
        single = next(iter(HybridNeighborLoader(
            data, input_nodes=torch.tensor([s]), batch_size=1,
            **kw))).to('cpu')
        mask = batch.batch == b
        assert torch.equal(batch.n_id[mask], single.n_id)
        emask = mask[batch.edge_index[1]]
        assert torch.equal(batch.e_id[emask].sort().values,
                           single.e_id.sort().values)


def test_random_graph_induced(device):
    data = hub_graph(10)
    seeds = make_seeds(data, 11, 40, unique=True)
    loader = HybridNeighborLoader(data, [3, 2], input_nodes=seeds,
                                  subgraph_type='induced', batch_size=16,
                                  device=device, seed=12)
    ei = data.edge_index
    for batch in loader:
        batch = batch.to('cpu')
        n_id, e_id = batch.n_id, batch.e_id
        assert torch.equal(n_id[:batch.batch_size],
                           seeds[batch.input_id])
        assert n_id.unique().numel() == n_id.numel()
        assert sum(batch.num_sampled_nodes) == n_id.numel()
        assert torch.equal(data.edge_index[:, e_id],
                           n_id[batch.edge_index])
        sampled = torch.zeros(data.num_nodes, dtype=torch.bool)
        sampled[n_id] = True
        among = (sampled[ei[0]] & sampled[ei[1]]).nonzero().view(-1)
        # Every graph edge among the sampled nodes, each once:
        assert torch.equal(e_id.sort().values, among)
        assert torch.equal(batch.edge_attr, data.edge_attr[e_id])
        assert torch.equal(batch.x, data.x[n_id])


def test_induced_keeps_nodes_of_directional(device):
    data = hub_graph(13)
    seeds = make_seeds(data, 14, 30, unique=True)
    # Same backend for both (the fused GPU kernels do no induced sampling):
    kw = dict(num_neighbors=[4, 3], input_nodes=seeds, batch_size=30,
              device=device, seed=15,
              placement=PlacementOptions(backend='torch'))
    d = next(iter(HybridNeighborLoader(data, **kw)))
    i = next(iter(HybridNeighborLoader(data, subgraph_type='induced', **kw)))
    assert torch.equal(d.n_id, i.n_id)
    assert list(d.num_sampled_nodes) == list(i.num_sampled_nodes)
    # The induced subgraph contains the sampled edges:
    assert torch.isin(d.e_id, i.e_id).all()


@pytest.mark.parametrize('replace', [False, True], ids=['norep', 'rep'])
def test_random_graph_bidirectional(device, replace):
    data = hub_graph(16)
    seeds = make_seeds(data, 17, 40, unique=True)
    kw = dict(num_neighbors=[5, 3], input_nodes=seeds, batch_size=16,
              replace=replace, device=device, seed=18)
    directional = list(HybridNeighborLoader(data, **kw))
    bidirectional = list(
        HybridNeighborLoader(data, subgraph_type='bidirectional', **kw))
    assert len(directional) == len(bidirectional)
    for d, b in zip(directional, bidirectional):
        d, b = d.to('cpu'), b.to('cpu')
        assert torch.equal(d.n_id, b.n_id)
        n = b.num_nodes
        row, col = b.edge_index
        pairs = row * n + col
        # Every edge's reverse is present, and no edge twice:
        assert torch.isin(col * n + row, pairs).all()
        assert pairs.unique().numel() == pairs.numel()
        # The edges are those sampled, and their reverses:
        drow, dcol = d.edge_index
        want = torch.cat([drow * n + dcol, dcol * n + drow]).unique()
        assert torch.equal(pairs.sort().values, want)
        # `e_id` names the edge of the graph or its reverse:
        g_src, g_dst = data.edge_index[:, b.e_id]
        src, dst = b.n_id[row], b.n_id[col]
        assert (((g_src == src) & (g_dst == dst)) |
                ((g_src == dst) & (g_dst == src))).all()
        assert torch.equal(b.x, data.x[b.n_id])


def test_is_sorted_input(device):
    data = hub_graph(19)
    perm = torch.argsort(data.edge_index[1], stable=True)
    data.edge_index = data.edge_index[:, perm]
    data.edge_attr = data.edge_attr[perm]
    seeds = make_seeds(data, 20, 40, unique=False)
    loader = HybridNeighborLoader(data, [5, 3], input_nodes=seeds,
                                  is_sorted=True, batch_size=16,
                                  device=device, seed=21)
    for batch in loader:
        check_batch(data, batch, [5, 3], False, seeds)


# Heterogeneous graphs ########################################################


@pytest.mark.parametrize('replace', [False, True], ids=['norep', 'rep'])
def test_hetero_invariants(device, replace):
    data = random_hetero_graph(22)
    num_neighbors = {
        ('author', 'writes', 'paper'): [3, 2],
        ('paper', 'cites', 'paper'): [-1, 0],
        ('inst', 'employs', 'author'): [1, 2],
        ('paper', 'written_by', 'author'): [2, 5],
    }
    seeds = torch.tensor([0, 5, 5, 119, 7, 80, 1])
    loader = HybridNeighborLoader(data, num_neighbors,
                                  input_nodes=('paper', seeds),
                                  replace=replace, batch_size=4,
                                  device=device, seed=23)
    for batch in loader:
        batch = batch.to('cpu')
        bs = batch['paper'].batch_size
        assert torch.equal(batch['paper'].n_id[:bs],
                           seeds[batch['paper'].input_id])
        no = {t: np.cumsum([0] + list(batch[t].num_sampled_nodes)).tolist()
              for t in data.node_types}
        for t in data.node_types:
            assert no[t][-1] == batch[t].num_nodes
        for et in data.edge_types:
            src_t, _, dst_t = et
            store = batch[et]
            nse = list(store.num_sampled_edges)
            assert sum(nse) == store.e_id.numel()
            src = batch[src_t].n_id[store.edge_index[0]]
            dst = batch[dst_t].n_id[store.edge_index[1]]
            assert torch.equal(data[et].edge_index[:, store.e_id],
                               torch.stack([src, dst]))
            assert torch.equal(store.edge_attr,
                               data[et].edge_attr[store.e_id])
            indeg = torch.bincount(data[et].edge_index[1],
                                   minlength=data[dst_t].num_nodes)
            eo = np.cumsum([0] + nse).tolist()
            for i, k in enumerate(num_neighbors[et]):
                row = store.edge_index[0, eo[i]:eo[i + 1]]
                col = store.edge_index[1, eo[i]:eo[i + 1]]
                lo, hi = no[dst_t][i], no[dst_t][i + 1]
                assert ((col >= lo) & (col < hi)).all()
                assert (row < no[src_t][i + 2]).all()
                count = torch.bincount(col - lo, minlength=hi - lo)
                want = expected_count(indeg[batch[dst_t].n_id[lo:hi]], k,
                                      replace)
                assert torch.equal(count, want), (et, i)
        for t in data.node_types:
            assert torch.equal(batch[t].x, data[t].x[batch[t].n_id])


# Real skewed graphs ##########################################################


@pytest.mark.parametrize('replace,dtype', [(False, torch.int64),
                                           (True, torch.int32)],
                         ids=['norep-int64', 'rep-int32'])
@pytest.mark.parametrize('num_neighbors', FANOUTS, ids=FANOUT_IDS)
@pytest.mark.parametrize('name', ['facebook', 'github'])
def test_musae_invariants(device, name, num_neighbors, replace, dtype):
    data = musae_graph(name, dtype)
    seeds = make_seeds(data, 24, 192, unique=True)
    loader = HybridNeighborLoader(data, num_neighbors, input_nodes=seeds,
                                  replace=replace, batch_size=96,
                                  device=device, seed=25)
    for batch in loader:
        check_batch(data, batch, num_neighbors, replace, seeds)


@pytest.mark.parametrize('name', ['facebook', 'github'])
def test_musae_disjoint(device, name):
    data = musae_graph(name)
    seeds = make_seeds(data, 26, 64, unique=False)
    loader = HybridNeighborLoader(data, [6, 3], input_nodes=seeds,
                                  disjoint=True, batch_size=64,
                                  device=device, seed=27)
    for batch in loader:
        check_batch(data, batch, [6, 3], False, seeds, disjoint=True)


# A hub with a million neighbors ##############################################


@functools.lru_cache(maxsize=None)
def _star():
    return star_graph(1_000_000)


@pytest.mark.parametrize('num_neighbors', [[10, 3], [-1, 1]],
                         ids=['10', 'all'])
def test_million_neighbor_hub(device, num_neighbors):
    data = _star()
    seeds = torch.tensor([0, 5])
    loader = HybridNeighborLoader(data, num_neighbors, input_nodes=seeds,
                                  batch_size=2, device=device, seed=28)
    batch = next(iter(loader))
    check_batch(data, batch, num_neighbors, False, seeds,
                check_membership=False)
    batch = batch.to('cpu')
    k = num_neighbors[0]
    hop0 = batch.e_id[:batch.num_sampled_edges[0]]
    hub_edges = hop0[batch.edge_index[1, :hop0.numel()] == 0]
    if k < 0:
        assert batch.num_nodes == 1_000_001
        assert torch.equal(hub_edges.sort().values, torch.arange(1_000_000))
    else:
        assert hub_edges.numel() == k
        # The picks are spread over the million neighbors, not the first k:
        assert int(hub_edges.max()) > 1000


# Randomness ##################################################################


def _epoch(loader):
    return [(b.n_id.cpu(), b.e_id.cpu(), b.edge_index.cpu(),
             b.input_id.cpu()) for b in loader]


def _same(a, b) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and torch.equal(x, y)
        for ba, bb in zip(a, b) for x, y in zip(ba, bb))


@pytest.mark.parametrize('replace', [False, True], ids=['norep', 'rep'])
def test_seed_reproducible(device, replace):
    data = hub_graph(29)
    kw = dict(num_neighbors=[FLOYD_MAX_FANOUT + 1, 3], batch_size=64,
              shuffle=True, replace=replace, device=device)
    a = _epoch(HybridNeighborLoader(data, seed=7, **kw))
    b = _epoch(HybridNeighborLoader(data, seed=7, **kw))
    c = _epoch(HybridNeighborLoader(data, seed=8, **kw))
    assert _same(a, b)
    assert not _same(a, c)
    # Sampling alone (no shuffling) also depends on the seed:
    kw['shuffle'] = False
    d = _epoch(HybridNeighborLoader(data, seed=7, **kw))
    e = _epoch(HybridNeighborLoader(data, seed=8, **kw))
    assert all(torch.equal(x[3], y[3]) for x, y in zip(d, e))
    assert not _same(d, e)


def test_seed_generator_reproducible(device):
    data = hub_graph(30)
    seeds = torch.arange(data.num_nodes)
    outs = []
    for s in (1, 1, 2):
        gen = torch.Generator(device=device).manual_seed(s)
        sampler = HybridNeighborSampler(data, [5, 3], device=device,
                                        seed=gen)
        loader = HybridNeighborLoader(data, [5, 3], input_nodes=seeds,
                                      batch_size=50,
                                      neighbor_sampler=sampler,
                                      device=device)
        outs.append(_epoch(loader))
    assert _same(outs[0], outs[1])
    assert not _same(outs[0], outs[2])
