"""Temporal (node-level and edge-level time) and weighted neighbor sampling:
the time constraint per subgraph, the 'uniform' and 'last' strategies,
exact parity of the time filter with hand-computed eligible sets,
chi-square tests of weighted draws against the (successive) sampling
probabilities. (Argument validation: test_bad_input.py.)"""
import itertools
from collections import Counter, defaultdict

import pytest
import torch
from torch_geometric.data import Data, HeteroData

from pyg_orch import HybridNeighborLoader, PlacementOptions
from pyg_orch.sampling.neighbors import sample_neighbors, segment_upper_bound
from pyg_orch.topology.csc import CSCTopology

from conftest import (
    B_TO_A,
    C_TO_B,
    TEMPORAL_SIZES,
    same_subgraphs,
    temporal_graph,
    temporal_hetero_graph,
)

# 0.999 quantiles of the chi-square distribution (scipy is not installed),
# indexed by the degrees of freedom:
CHI2_999 = {
    1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515, 6: 22.458,
    7: 24.322, 8: 26.124, 9: 27.877, 10: 29.588,
}

NUM_DRAWS = 20_000


def cpu(x):
    return x.cpu() if isinstance(x, torch.Tensor) else x


# Checks ######################################################################

def seed_times_of(batch, own_time, input_time):
    r"""Time bound of every subgraph of :obj:`batch`: :obj:`input_time` of
    the seed if given, else the seed node's own time."""
    if input_time is not None:
        return input_time[cpu(batch.input_id)]
    return own_time[cpu(batch.n_id)[:batch.batch_size]]


def check_disjoint_homo(batch):
    assert 'batch' in batch
    b = cpu(batch.batch)
    row, col = cpu(batch.edge_index)
    assert torch.equal(b[row], b[col])
    assert torch.equal(b[:batch.batch_size], torch.arange(batch.batch_size))


def check_disjoint_hetero(batch, seed_type):
    for t in batch.node_types:
        assert 'batch' in batch[t]
    for et in batch.edge_types:
        row, col = cpu(batch[et].edge_index)
        assert torch.equal(
            cpu(batch[et[0]].batch)[row],
            cpu(batch[et[-1]].batch)[col])
    bs = batch[seed_type].batch_size
    assert torch.equal(cpu(batch[seed_type].batch)[:bs], torch.arange(bs))


def chi2_stat(counts, probs) -> float:
    counts = torch.as_tensor(counts, dtype=torch.float64)
    probs = torch.as_tensor(probs, dtype=torch.float64)
    expected = counts.sum() * probs
    return float(((counts - expected)**2 / expected).sum())


def successive_set_probs(weights, k):
    r"""Probability of every :obj:`k`-subset under successive sampling
    proportional to :obj:`weights` (draw one among the remaining items,
    repeat), by enumerating the orders."""
    items = [i for i, w in enumerate(weights) if w > 0]
    total = float(sum(weights))
    out = defaultdict(float)
    for order in itertools.permutations(items, k):
        p, left = 1.0, total
        for i in order:
            p *= weights[i] / left
            left -= weights[i]
        out[frozenset(order)] += p
    return dict(out)


def gen_on(device, seed=12345):
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


# segment_upper_bound #########################################################

def test_segment_upper_bound_matches_bisect(device):
    import bisect
    gen = torch.Generator().manual_seed(0)
    deg = torch.randint(0, 12, (50, ), generator=gen)
    deg[::7] = 0
    colptr = torch.zeros(51, dtype=torch.long)
    colptr[1:] = deg.cumsum(0)
    values = torch.randint(0, 10, (int(colptr[-1]), ), generator=gen)
    for i in range(50):  # Sorted within every segment.
        s, e = int(colptr[i]), int(colptr[i + 1])
        values[s:e] = values[s:e].sort()[0]
    bound = torch.randint(-1, 11, (50, ), generator=gen)
    out = segment_upper_bound(values.to(device), colptr[:-1].to(device),
                              colptr[1:].to(device), bound.to(device))
    expected = [
        bisect.bisect_right(values.tolist(), int(bound[i]), int(colptr[i]),
                            int(colptr[i + 1])) for i in range(50)
    ]
    assert cpu(out).tolist() == expected


# Node-level temporal sampling ################################################

@pytest.mark.parametrize('strategy', ['uniform', 'last'])
@pytest.mark.parametrize('time_dtype', [torch.int64, torch.float32])
def test_node_temporal_homo(device, strategy, time_dtype):
    data = temporal_graph(time_dtype=time_dtype)
    loader = HybridNeighborLoader(data, [4, 3], time_attr='time',
                                  temporal_strategy=strategy, batch_size=16,
                                  shuffle=True, device=device, seed=1)
    num_edges = 0
    for batch in loader:
        check_disjoint_homo(batch)
        n_id = cpu(batch.n_id)
        bound = seed_times_of(batch, data.time, None)
        assert torch.all(data.time[n_id] <= bound[cpu(batch.batch)])
        row, _ = cpu(batch.edge_index)
        num_edges += row.numel()
    assert num_edges > 100  # Not vacuous.


@pytest.mark.parametrize('strategy', ['uniform', 'last'])
def test_node_temporal_homo_input_time(device, strategy):
    data = temporal_graph()
    seeds = torch.arange(0, 80, 2)
    # Bounds smaller than the seeds' own times (and 5 duplicate seeds with
    # a late bound):
    seeds = torch.cat([seeds, seeds[:5]])
    input_time = data.time[seeds] - 4
    input_time[-5:] = 29
    loader = HybridNeighborLoader(data, [5, 5], time_attr='time',
                                  input_nodes=seeds, input_time=input_time,
                                  temporal_strategy=strategy, batch_size=9,
                                  device=device)
    seen_late = 0
    for batch in loader:
        check_disjoint_homo(batch)
        bs = batch.batch_size
        bound = seed_times_of(batch, data.time, input_time)
        assert torch.equal(cpu(batch.seed_time), bound)
        n_id, b = cpu(batch.n_id), cpu(batch.batch)
        # Seeds are kept whatever their time; every other node obeys the
        # seed time of its subgraph:
        assert torch.all(data.time[n_id[bs:]] <= bound[b[bs:]])
        # ... which is `input_time`, not the seed's own time:
        own = data.time[n_id[:bs]]
        seen_late += int((own > bound).sum())
    assert seen_late > 0


def test_node_temporal_homo_input_time_is_used(device):
    r"""The same seeds with their own times, and with input_time = own
    time - 10: the second run never reaches the nodes the first one may."""
    data = temporal_graph(num_edges=1500)
    seeds = torch.arange(80)
    input_time = data.time[seeds] - 10
    kw = dict(time_attr='time', input_nodes=seeds, batch_size=80,
              device=device)
    own = next(iter(HybridNeighborLoader(data, [-1], **kw)))
    given = next(iter(HybridNeighborLoader(data, [-1], input_time=input_time,
                                           **kw)))
    bound_own = data.time[seeds]
    nb = cpu(own.batch)[80:]
    t_own = data.time[cpu(own.n_id)[80:]]
    assert torch.all(t_own <= bound_own[nb])
    assert bool((t_own > input_time[nb]).any())  # Would violate input_time.
    gb = cpu(given.batch)[80:]
    assert torch.all(data.time[cpu(given.n_id)[80:]] <= input_time[gb])


@pytest.mark.parametrize('strategy', ['uniform', 'last'])
@pytest.mark.parametrize('explicit', [False, True])
def test_node_temporal_hetero(device, strategy, explicit):
    data = temporal_hetero_graph()
    seeds = torch.arange(TEMPORAL_SIZES['a'])
    input_time = data['a'].time[seeds] - 3 if explicit else None
    loader = HybridNeighborLoader(data, [4, 3], time_attr='time',
                                  input_nodes=('a', seeds),
                                  input_time=input_time,
                                  temporal_strategy=strategy, batch_size=12,
                                  device=device)
    num_nodes = Counter()
    for batch in loader:
        check_disjoint_hetero(batch, 'a')
        bs = batch['a'].batch_size
        if explicit:
            bound = input_time[cpu(batch['a'].input_id)]
        else:
            bound = data['a'].time[cpu(batch['a'].n_id)[:bs]]
        for t in data.node_types:
            n_id, b = cpu(batch[t].n_id), cpu(batch[t].batch)
            start = bs if t == 'a' else 0  # Seeds are kept.
            assert torch.all(data[t].time[n_id[start:]] <= bound[b[start:]])
            num_nodes[t] += n_id.numel() - start
    assert all(num_nodes[t] > 0 for t in data.node_types)


# Edge-level temporal sampling ################################################

@pytest.mark.parametrize('strategy', ['uniform', 'last'])
def test_edge_temporal_homo(device, strategy):
    data = temporal_graph()
    gen = torch.Generator().manual_seed(3)
    seeds = torch.randperm(80, generator=gen)[:50]
    input_time = torch.randint(0, 30, (50, ), generator=gen)
    loader = HybridNeighborLoader(data, [4, 3], time_attr='edge_time',
                                  input_nodes=seeds, input_time=input_time,
                                  temporal_strategy=strategy, batch_size=8,
                                  device=device)
    num_edges = 0
    for batch in loader:
        check_disjoint_homo(batch)
        bound = input_time[cpu(batch.input_id)]
        e_id = cpu(batch.e_id)
        _, col = cpu(batch.edge_index)
        sub = cpu(batch.batch)[col]  # Subgraph of an edge: of its dst.
        assert torch.all(data.edge_time[e_id] <= bound[sub])
        num_edges += e_id.numel()
    assert num_edges > 50


@pytest.mark.parametrize('strategy', ['uniform', 'last'])
def test_edge_temporal_hetero(device, strategy):
    data = temporal_hetero_graph()
    gen = torch.Generator().manual_seed(4)
    seeds = torch.arange(TEMPORAL_SIZES['a'])
    input_time = torch.randint(0, 30, (seeds.numel(), ), generator=gen)
    loader = HybridNeighborLoader(data, [4, 3], time_attr='edge_time',
                                  input_nodes=('a', seeds),
                                  input_time=input_time,
                                  temporal_strategy=strategy, batch_size=16,
                                  device=device)
    num_edges = Counter()
    for batch in loader:
        check_disjoint_hetero(batch, 'a')
        bound = input_time[cpu(batch['a'].input_id)]
        for et in data.edge_types:
            e_id = cpu(batch[et].e_id)
            col = cpu(batch[et].edge_index)[1]
            sub = cpu(batch[et[-1]].batch)[col]
            assert torch.all(data[et].edge_time[e_id] <= bound[sub])
            num_edges[et] += e_id.numel()
    assert all(num_edges[et] > 0 for et in data.edge_types)


# 'last' and 'uniform' on a hand-made graph ###################################

def star_graph(node_level: bool, seed: int = 0) -> Data:
    r"""Node 0 has 6 in-neighbors 1..6 (edges in a shuffled order); neighbor
    (or edge from) :obj:`i` has time :obj:`i`; node 0 has time 4."""
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(6, generator=gen)
    src = torch.arange(1, 7)[perm]
    data = Data(num_nodes=7, edge_index=torch.stack(
        [src, torch.zeros(6, dtype=torch.long)]))
    data.time = torch.tensor([4, 1, 2, 3, 4, 5, 6])
    if not node_level:
        data.time = torch.tensor([100, 0, 0, 0, 0, 0, 0])  # Irrelevant.
        data.edge_time = src.clone()
    return data


def neighbor_times(batch, data, node_level: bool):
    r"""Times of the sampled neighbors of every subgraph (one hop)."""
    row, col = cpu(batch.edge_index)
    sub = cpu(batch.batch)[col]
    if node_level:
        t = data.time[cpu(batch.n_id)[row]]
    else:
        t = data.edge_time[cpu(batch.e_id)]
    out = [[] for _ in range(batch.batch_size)]
    for s, v in zip(sub.tolist(), t.tolist()):
        out[s].append(v)
    return [sorted(v) for v in out]


@pytest.mark.parametrize('node_level', [True, False])
def test_last_takes_most_recent(device, node_level):
    data = star_graph(node_level)
    attr = 'time' if node_level else 'edge_time'
    # (input time, k) -> the sampled neighbor times:
    cases = [(4, 2, [3, 4]), (5, 2, [4, 5]), (2, 2, [1, 2]), (4, 1, [4]),
             (4, 4, [1, 2, 3, 4]), (4, 10, [1, 2, 3, 4]), (0, 2, []),
             (6, 3, [4, 5, 6]), (100, -1, [1, 2, 3, 4, 5, 6])]
    for t, k, expected in cases:
        loader = HybridNeighborLoader(
            data, [k], time_attr=attr, temporal_strategy='last',
            input_nodes=torch.zeros(5, dtype=torch.long),
            input_time=torch.full((5, ), t), batch_size=5, device=device)
        for _ in range(3):
            batch = next(iter(loader))
            assert neighbor_times(batch, data, node_level) == \
                [expected] * 5, (t, k)
    if node_level:  # Without input_time: the seed's own time (4).
        loader = HybridNeighborLoader(data, [2], time_attr='time',
                                      temporal_strategy='last',
                                      input_nodes=torch.tensor([0]),
                                      batch_size=1, device=device)
        assert neighbor_times(next(iter(loader)), data, True) == [[3, 4]]


@pytest.mark.parametrize('node_level', [True, False])
def test_uniform_draws_among_eligible(device, node_level):
    data = star_graph(node_level)
    attr = 'time' if node_level else 'edge_time'
    n = 3000
    loader = HybridNeighborLoader(
        data, [2], time_attr=attr, temporal_strategy='uniform',
        input_nodes=torch.zeros(n, dtype=torch.long),
        input_time=torch.full((n, ), 4), batch_size=n, device=device,
        seed=7)
    times = neighbor_times(next(iter(loader)), data, node_level)
    pairs = Counter(tuple(t) for t in times)
    assert all(len(t) == 2 and t[0] < t[1] for t in times)
    assert set(itertools.chain(*pairs)) == {1, 2, 3, 4}
    assert set(pairs) == set(itertools.combinations([1, 2, 3, 4], 2))
    stat = chi2_stat([pairs[p] for p in sorted(pairs)], [1 / 6] * 6)
    assert stat < CHI2_999[5], pairs


def test_uniform_direct_with_time(device):
    data = star_graph(True)
    topo = CSCTopology.from_edge_index(data.edge_index, 7, 7,
                                       src_node_time=data.time, device=device)
    nodes = torch.zeros(NUM_DRAWS, dtype=torch.long, device=device)
    bound = torch.full((NUM_DRAWS, ), 4, device=device)
    pos, dst = sample_neighbors(topo.colptr, nodes, 1, generator=gen_on(
        device), time=topo.time, time_bound=bound)
    assert pos.numel() == NUM_DRAWS
    t = cpu(topo.time[pos])
    counts = torch.bincount(t, minlength=7)
    assert counts[[0, 5, 6]].sum() == 0
    assert chi2_stat(counts[1:5], [0.25] * 4) < CHI2_999[3]
    # With replacement, k=3: 3 independent uniform draws among times 1..4.
    pos, dst = sample_neighbors(topo.colptr, nodes[:5000], 3, replace=True,
                                generator=gen_on(device), time=topo.time,
                                time_bound=bound[:5000])
    assert pos.numel() == 15000
    counts = torch.bincount(cpu(topo.time[pos]), minlength=7)
    assert counts[[0, 5, 6]].sum() == 0
    assert chi2_stat(counts[1:5], [0.25] * 4) < CHI2_999[3]


# Parity with hand-computed eligible sets (full fan-out) ######################

def expected_subgraph(edges, seed_type, seed, bound, hops, eligible):
    r"""PyG's disjoint temporal sampling with fan-out -1, as plain Python:
    returns the node set per node type and the edge id set per edge type
    of the subgraph of one seed. :obj:`edges[et]` = (src list, dst list)."""
    in_edges = {}
    for et, (src, dst) in edges.items():
        d = defaultdict(list)
        for e, v in enumerate(dst):
            d[v].append(e)
        in_edges[et] = d
    visited = defaultdict(set)
    visited[seed_type].add(seed)
    frontier = {seed_type: [seed]}
    out_edges = defaultdict(set)
    for _ in range(hops):
        new = defaultdict(list)
        for et, (src, _) in edges.items():
            s_t, d_t = (None, None) if et is None else (et[0], et[-1])
            for v in frontier.get(d_t, []):
                for e in in_edges[et][v]:
                    if not eligible(et, e, bound):
                        continue
                    out_edges[et].add(e)
                    u = src[e]
                    if u not in visited[s_t]:
                        visited[s_t].add(u)
                        new[s_t].append(u)
        frontier = new
    return visited, out_edges


def actual_subgraphs(batch, hetero):
    r"""Node set per node type and edge id set per edge type of every
    subgraph of a disjoint batch (checking that local ids map to the edges'
    global endpoints)."""
    bs = batch['a'].batch_size if hetero else batch.batch_size
    nodes = [defaultdict(set) for _ in range(bs)]
    edges = [defaultdict(set) for _ in range(bs)]
    stores = {t: batch[t] for t in batch.node_types} if hetero else \
        {None: batch}
    estores = {t: batch[t] for t in batch.edge_types} if hetero else \
        {None: batch}
    for t, s in stores.items():
        for n, b in zip(cpu(s.n_id).tolist(), cpu(s.batch).tolist()):
            nodes[b][t].add(n)
    for et, s in estores.items():
        dst_t = None if et is None else et[-1]
        row, col = cpu(s.edge_index)
        b = cpu(stores[dst_t].batch)[col]
        for e, bb in zip(cpu(s.e_id).tolist(), b.tolist()):
            assert e not in edges[bb][et]  # No edge twice per subgraph.
            edges[bb][et].add(e)
    return nodes, edges


@pytest.mark.parametrize('level', ['node', 'edge'])
@pytest.mark.parametrize('hops', [1, 2])
@pytest.mark.parametrize('float_input_time', [False, True])
def test_full_fanout_parity_homo(device, level, hops, float_input_time):
    data = temporal_graph(seed=5, num_nodes=40, num_edges=240)
    gen = torch.Generator().manual_seed(6)
    seeds = torch.cat([torch.arange(40), torch.tensor([3, 3, 7])])
    if float_input_time:
        input_time = torch.randint(0, 30, (seeds.numel(), ),
                                   generator=gen).float() + 0.5
    elif level == 'node':
        input_time = None  # The seeds' own times.
    else:
        input_time = torch.randint(0, 30, (seeds.numel(), ), generator=gen)
    attr = 'time' if level == 'node' else 'edge_time'
    loader = HybridNeighborLoader(data, [-1] * hops, time_attr=attr,
                                  input_nodes=seeds, input_time=input_time,
                                  batch_size=43, device=device)
    batch = next(iter(loader))
    row, col = cpu(batch.edge_index)
    n_id, e_id = cpu(batch.n_id), cpu(batch.e_id)
    assert torch.equal(n_id[row], data.edge_index[0, e_id])
    assert torch.equal(n_id[col], data.edge_index[1, e_id])
    nodes, edges = actual_subgraphs(batch, hetero=False)

    src, dst = data.edge_index.tolist()
    bounds = data.time[seeds] if input_time is None else input_time
    if level == 'node':
        def eligible(et, e, bound):
            return float(data.time[src[e]]) <= float(bound)
    else:
        def eligible(et, e, bound):
            return float(data.edge_time[e]) <= float(bound)
    for i, s in enumerate(seeds.tolist()):
        exp_nodes, exp_edges = expected_subgraph({None: (src, dst)}, None, s,
                                                 bounds[i], hops, eligible)
        assert nodes[i][None] == exp_nodes[None], i
        assert edges[i][None] == exp_edges[None], i


@pytest.mark.parametrize('level', ['node', 'edge'])
def test_full_fanout_parity_hetero(device, level):
    data = temporal_hetero_graph(seed=8, num_edges=120)
    gen = torch.Generator().manual_seed(9)
    seeds = torch.arange(TEMPORAL_SIZES['a'])
    input_time = None if level == 'node' else torch.randint(
        0, 30, (seeds.numel(), ), generator=gen)
    attr = 'time' if level == 'node' else 'edge_time'
    loader = HybridNeighborLoader(data, [-1, -1], time_attr=attr,
                                  input_nodes=('a', seeds),
                                  input_time=input_time, batch_size=60,
                                  device=device)
    batch = next(iter(loader))
    nodes, edges = actual_subgraphs(batch, hetero=True)
    elist = {et: data[et].edge_index.tolist() for et in data.edge_types}
    bounds = data['a'].time[seeds] if input_time is None else input_time
    if level == 'node':
        def eligible(et, e, bound):
            return int(data[et[0]].time[elist[et][0][e]]) <= int(bound)
    else:
        def eligible(et, e, bound):
            return int(data[et].edge_time[e]) <= int(bound)
    for i, s in enumerate(seeds.tolist()):
        exp_nodes, exp_edges = expected_subgraph(elist, 'a', s, bounds[i], 2,
                                                 eligible)
        for t in data.node_types:
            assert nodes[i][t] == exp_nodes[t], (i, t)
        for et in data.edge_types:
            assert edges[i][et] == exp_edges[et], (i, et)


def test_is_sorted_temporal_same_result(device):
    r""":obj:`is_sorted=True` on edges sorted by (destination, time) gives the
    same full-fan-out subgraphs as :obj:`is_sorted=False`."""
    data = temporal_graph(seed=11, num_nodes=40, num_edges=240)
    key = data.edge_index[1] * 100 + data.time[data.edge_index[0]]
    perm = key.argsort()
    sorted_data = Data(num_nodes=40, edge_index=data.edge_index[:, perm],
                       time=data.time)
    out = []
    for d, is_sorted in ((data, False), (sorted_data, True)):
        loader = HybridNeighborLoader(d, [-1, -1], time_attr='time',
                                      is_sorted=is_sorted, batch_size=40,
                                      device=device)
        batch = next(iter(loader))
        e_id = cpu(batch.e_id)
        glob = d.edge_index[:, e_id]
        sub = cpu(batch.batch)[cpu(batch.edge_index)[1]]
        out.append(sorted(zip(sub.tolist(), glob[0].tolist(),
                              glob[1].tolist())))
    assert out[0] == out[1]


# Weighted sampling: chi-square tests #########################################

WEIGHT_CASES = [
    [1.0, 2.0, 3.0, 4.0, 0.0],
    [5.0, 0.0, 0.5, 3.5, 10.0, 1.0],
]


def weighted_csc(weights_per_node, device):
    r"""A CSC layout (with a leading empty node 0) whose node :obj:`i + 1`
    has the neighbor weights :obj:`weights_per_node[i]`."""
    deg = [0] + [len(w) for w in weights_per_node]
    colptr = torch.tensor([0] + list(itertools.accumulate(deg)))
    weight = torch.tensor([x for w in weights_per_node for x in w],
                          dtype=torch.float32)
    topo = CSCTopology(colptr.to(device), torch.zeros_like(weight).long().to(
        device), None, 1, weight=weight.to(device))
    return topo


def local_counts(pos, dst, topo, nodes, num_nodes):
    r"""Per destination node id, a Counter of the local positions drawn."""
    start = cpu(topo.colptr)[cpu(nodes)[cpu(dst)]]
    local = cpu(pos) - start
    assert torch.all(local >= 0)
    out = [Counter() for _ in range(num_nodes)]
    for v, l in zip(cpu(nodes)[cpu(dst)].tolist(), local.tolist()):
        out[v][l] += 1
    return out


def interleaved_nodes(n_per_node, num_nodes, device):
    # Nodes 1..num_nodes-1 alternating, plus the empty node 0 here and there.
    nodes = torch.arange(1, num_nodes).repeat(n_per_node)
    nodes[::97] = 0
    return nodes.to(device)


@pytest.mark.parametrize('replace', [False, True])
def test_weighted_k1_frequencies(device, replace):
    topo = weighted_csc(WEIGHT_CASES, device)
    nodes = interleaved_nodes(NUM_DRAWS, 3, device)
    pos, dst = sample_neighbors(topo.colptr, nodes, 1, replace=replace,
                                generator=gen_on(device), weight=topo.weight,
                                weight_cumsum=topo.weight_cumsum)
    counts = local_counts(pos, dst, topo, nodes, 3)
    assert sum(counts[0].values()) == 0  # The empty node.
    for i, w in enumerate(WEIGHT_CASES):
        c = counts[i + 1]
        # Exactly one draw per occurrence of the node:
        assert sum(c.values()) == int((cpu(nodes) == i + 1).sum())
        support = [j for j, x in enumerate(w) if x > 0]
        assert set(c) == set(support)  # Zero weights never.
        probs = [w[j] / sum(w) for j in support]
        stat = chi2_stat([c[j] for j in support], probs)
        assert stat < CHI2_999[len(support) - 1], (w, c)


def test_weighted_with_replacement_k3(device):
    topo = weighted_csc(WEIGHT_CASES, device)
    nodes = interleaved_nodes(NUM_DRAWS // 3, 3, device)
    pos, dst = sample_neighbors(topo.colptr, nodes, 3, replace=True,
                                generator=gen_on(device), weight=topo.weight,
                                weight_cumsum=topo.weight_cumsum)
    # Exactly k draws per non-empty node, grouped per node:
    per = torch.bincount(cpu(dst), minlength=nodes.numel())
    assert torch.equal(per, torch.where(cpu(nodes) > 0, 3, 0))
    counts = local_counts(pos, dst, topo, nodes, 3)
    for i, w in enumerate(WEIGHT_CASES):
        c = counts[i + 1]
        support = [j for j, x in enumerate(w) if x > 0]
        assert set(c) == set(support)
        stat = chi2_stat([c[j] for j in support],
                         [w[j] / sum(w) for j in support])
        assert stat < CHI2_999[len(support) - 1], (w, c)
    # Draws are independent: the number of distinct neighbors among the 3
    # draws of the first weight case follows the multinomial law.
    w = torch.tensor(WEIGHT_CASES[0]) / sum(WEIGHT_CASES[0])
    exp = Counter()
    for a, b, c in itertools.product(range(5), repeat=3):
        exp[len({a, b, c})] += float(w[a] * w[b] * w[c])
    local = (cpu(pos) - cpu(topo.colptr)[cpu(nodes)[cpu(dst)]]).view(-1, 3)
    first = cpu(nodes)[cpu(dst)].view(-1, 3)[:, 0] == 1
    distinct = Counter(len(set(r)) for r in local[first].tolist())
    stat = chi2_stat([distinct[d] for d in (1, 2, 3)],
                     [exp[d] for d in (1, 2, 3)])
    assert stat < CHI2_999[2], (distinct, exp)


@pytest.mark.parametrize('k', [2, 3])
def test_weighted_successive_sampling(device, k):
    topo = weighted_csc(WEIGHT_CASES, device)
    nodes = interleaved_nodes(NUM_DRAWS, 3, device)
    pos, dst = sample_neighbors(topo.colptr, nodes, k, replace=False,
                                generator=gen_on(device), weight=topo.weight)
    start = cpu(topo.colptr)[cpu(nodes)[cpu(dst)]]
    local = cpu(pos) - start
    node_of = cpu(nodes)[cpu(dst)]
    per = torch.bincount(cpu(dst), minlength=nodes.numel())
    assert torch.equal(per, torch.where(cpu(nodes) > 0, k, 0))
    for i, w in enumerate(WEIGHT_CASES):
        rows = local[node_of == i + 1].view(-1, k).tolist()
        sets = Counter(frozenset(r) for r in rows)
        assert all(len(r) == k for r in sets)  # No neighbor twice.
        probs = successive_set_probs(w, k)
        assert set(sets) <= set(probs)  # Zero weights never.
        keys = sorted(probs, key=sorted)
        # Merge cells with a small expectation into one:
        n = len(rows)
        big = [s for s in keys if n * probs[s] >= 20]
        small = [s for s in keys if n * probs[s] < 20]
        obs = [sets[s] for s in big]
        exp = [probs[s] for s in big]
        if small:
            obs.append(sum(sets[s] for s in small))
            exp.append(sum(probs[s] for s in small))
        stat = chi2_stat(obs, exp)
        assert stat < CHI2_999[len(obs) - 1], (w, k, stat)


def test_successive_pair_formula():
    r"""The enumeration above agrees with the closed form for pairs."""
    w = WEIGHT_CASES[0]
    W = sum(w)
    probs = successive_set_probs(w, 2)
    for i, j in itertools.combinations(range(4), 2):
        p = w[i] / W * w[j] / (W - w[i]) + w[j] / W * w[i] / (W - w[j])
        assert abs(probs[frozenset((i, j))] - p) < 1e-12
    assert abs(sum(probs.values()) - 1) < 1e-12


@pytest.mark.parametrize('replace', [False, True])
@pytest.mark.parametrize('k', [-1, 4, 5, 6, 50])
def test_weighted_zero_weights_never(device, replace, k):
    cases = WEIGHT_CASES + [[0.0, 0.0, 0.0], [0.0, 2.0, 0.0]]
    topo = weighted_csc(cases, device)
    nodes = torch.tensor([0, 1, 2, 3, 4, 1, 3, 2] * 50, device=device)
    pos, dst = sample_neighbors(topo.colptr, nodes, k, replace=replace,
                                generator=gen_on(device), weight=topo.weight,
                                weight_cumsum=topo.weight_cumsum)
    assert torch.all(cpu(topo.weight)[cpu(pos)] > 0)
    node_of = cpu(nodes)[cpu(dst)]
    assert not bool(((node_of == 0) | (node_of == 3)).any())
    num_pos = {1: 4, 2: 5, 4: 1}
    for v, m in num_pos.items():
        occ = int((cpu(nodes) == v).sum())
        got = int((node_of == v).sum())
        if replace and k >= 0:
            assert got == occ * k
        else:
            assert got == occ * (m if k < 0 else min(k, m))
    if not replace or k < 0:  # All positive-weight neighbors, once each.
        local = cpu(pos) - cpu(topo.colptr)[node_of]
        for v, m in num_pos.items():
            if k < 0 or k >= m:
                rows = local[node_of == v].view(-1, m)
                support = [j for j, x in enumerate(cases[v - 1]) if x > 0]
                for r in rows.tolist():
                    assert sorted(r) == support


def test_weighted_with_time(device):
    r"""Temporal and weighted together: eligible and positive-weight."""
    data = temporal_graph(seed=2, num_nodes=30, num_edges=300)
    topo = CSCTopology.from_edge_index(
        data.edge_index, 30, 30, src_node_time=data.time,
        edge_weight=data.edge_weight, device=device)
    nodes = torch.arange(30, device=device).repeat(20)
    bound = torch.randint(0, 30, (nodes.numel(), ), device=device)
    for k, replace in ((-1, False), (3, False), (3, True)):
        pos, dst = sample_neighbors(
            topo.colptr, nodes, k, replace=replace, generator=gen_on(device),
            time=topo.time, time_bound=bound, weight=topo.weight,
            weight_cumsum=topo.weight_cumsum)
        assert torch.all(cpu(topo.weight[pos]) > 0)
        assert torch.all(cpu(topo.time[pos]) <= cpu(bound[dst]))
        if k < 0:
            eid = cpu(topo.edge_id[pos]).long().tolist()
            got = defaultdict(set)
            for i, e in zip(cpu(dst).tolist(), eid):
                got[i].add(e)
            src, dst_ = data.edge_index.tolist()
            t_src = data.time[data.edge_index[0]].tolist()
            w = data.edge_weight.tolist()
            for i, (v, t) in enumerate(zip(cpu(nodes).tolist(),
                                           cpu(bound).tolist())):
                exp = {
                    e for e in range(300)
                    if dst_[e] == v and t_src[e] <= t and w[e] > 0
                }
                assert got[i] == exp


# Weighted sampling through the loader ########################################

def test_weighted_loader_star_frequencies(device):
    r"""Weights are carried into CSC order (edges given shuffled)."""
    gen = torch.Generator().manual_seed(0)
    w = torch.tensor([1.0, 2.0, 3.0, 4.0, 0.0])
    perm = torch.randperm(5, generator=gen)
    data = Data(num_nodes=6, edge_index=torch.stack(
        [torch.arange(1, 6)[perm], torch.zeros(5, dtype=torch.long)]),
        edge_weight=w[perm])
    n = NUM_DRAWS // 2
    loader = HybridNeighborLoader(data, [1], weight_attr='edge_weight',
                                  input_nodes=torch.zeros(n, dtype=torch.long),
                                  disjoint=True, batch_size=n, device=device,
                                  seed=3)
    batch = next(iter(loader))
    src = data.edge_index[0, cpu(batch.e_id)]
    counts = torch.bincount(src - 1, minlength=5)
    assert int(counts.sum()) == n and int(counts[4]) == 0
    assert chi2_stat(counts[:4], w[:4] / w.sum()) < CHI2_999[3]


@pytest.mark.parametrize('replace', [False, True])
def test_weighted_loader_homo(device, replace):
    data = temporal_graph(seed=4, num_nodes=300, num_edges=3000)
    loader = HybridNeighborLoader(data, [5, 3], weight_attr='edge_weight',
                                  replace=replace, batch_size=64,
                                  shuffle=True, device=device, seed=0)
    in_weight = torch.zeros(300).index_add_(0, data.edge_index[1],
                                            data.edge_weight)
    total = 0
    for batch in loader:
        e_id = cpu(batch.e_id)
        assert torch.all(data.edge_weight[e_id] > 0)
        row, col = cpu(batch.edge_index)
        n_id = cpu(batch.n_id)
        assert torch.equal(n_id[row], data.edge_index[0, e_id])
        assert torch.equal(n_id[col], data.edge_index[1, e_id])
        seeds = n_id[:batch.batch_size]
        num_pos = int((in_weight[seeds] > 0).sum())
        if replace:
            assert int(batch.num_sampled_edges[0]) == 5 * num_pos
        else:
            pos_deg = torch.zeros(300, dtype=torch.long).index_add_(
                0, data.edge_index[1], (data.edge_weight > 0).long())
            assert int(batch.num_sampled_edges[0]) == int(
                pos_deg[seeds].clamp(max=5).sum())
        total += e_id.numel()
    assert total > 0


@pytest.mark.parametrize('replace', [False, True])
def test_weighted_loader_hetero(device, replace):
    data = temporal_hetero_graph(seed=5)
    loader = HybridNeighborLoader(data, [4, 3], weight_attr='edge_weight',
                                  input_nodes='a', replace=replace,
                                  batch_size=16, device=device, seed=0)
    count = Counter()
    for batch in loader:
        for et in data.edge_types:
            e_id = cpu(batch[et].e_id)
            assert torch.all(data[et].edge_weight[e_id] > 0), et
            count[et] += e_id.numel()
    assert all(count[et] > 0 for et in data.edge_types)


def test_weighted_temporal_loader(device):
    data = temporal_graph(seed=6)
    loader = HybridNeighborLoader(data, [4, 3], weight_attr='edge_weight',
                                  time_attr='time', batch_size=16,
                                  device=device)
    for batch in loader:
        assert torch.all(data.edge_weight[cpu(batch.e_id)] > 0)
        bound = data.time[cpu(batch.n_id)[:batch.batch_size]]
        assert torch.all(data.time[cpu(batch.n_id)] <=
                         bound[cpu(batch.batch)])


# Edge cases ##################################################################

def test_temporal_induced_is_rejected_or_disjoint():
    data = temporal_graph()
    try:
        loader = HybridNeighborLoader(data, [2, 2], time_attr='time',
                                      subgraph_type='induced', batch_size=8,
                                      device='cpu')
        batch = next(iter(loader))
    except ValueError as e:
        assert 'induced' in str(e)
        return
    check_disjoint_homo(batch)  # Every edge within one subgraph.


def test_weighted_replace_tiny_after_huge():
    colptr = torch.tensor([0, 1, 3])
    w = torch.tensor([1e17, 1.0, 1.0], dtype=torch.float64)
    nodes = torch.ones(5, dtype=torch.long)
    pos, _ = sample_neighbors(colptr, nodes, 2, replace=False, weight=w)
    assert pos.numel() == 10
    topo = CSCTopology(colptr, torch.tensor([0, 1, 2]), None, 3, weight=w)
    pos, _ = sample_neighbors(colptr, nodes, 2, replace=True, weight=w,
                              weight_cumsum=topo.weight_cumsum)
    assert pos.numel() == 10
    assert set(pos.tolist()) == {1, 2}


@pytest.mark.gpu
def test_cuda_loader_default_prefetch():
    loader = HybridNeighborLoader(temporal_graph(), [2], time_attr='time',
                                  batch_size=8, device='cuda')
    next(iter(loader))


@pytest.mark.gpu
def test_cuda_edge_temporal_with_feature_store():
    data = temporal_graph()
    loader = HybridNeighborLoader(data, [2], time_attr='edge_time',
                                  input_time=torch.full((80, ), 10),
                                  batch_size=8, device='cuda', prefetch=0)
    batch = next(iter(loader))
    assert torch.all(data.edge_time[cpu(batch.e_id)] <= 10)


@pytest.mark.gpu
@pytest.mark.parametrize('mode', ['time', 'edge_time', 'weight',
                                  'weight_replace'])
def test_cuda_sharded_topology_samples_like_device_topology(mode):
    # topology_placement='sharded' without a process group: one shard on
    # the GPU, its times and weights read through ShardedValues (by the
    # PyTorch path: the same draws as the device topology's there).
    data = temporal_graph()
    kw = dict(num_neighbors=[3, 2], batch_size=8, device='cuda', seed=5)
    if mode == 'time':
        kw.update(time_attr='time')
    elif mode == 'edge_time':
        kw.update(time_attr='edge_time', temporal_strategy='last',
                  input_time=torch.full((data.num_nodes, ), 10))
    else:
        kw.update(weight_attr='edge_weight',
                  replace=mode == 'weight_replace')
    plain = HybridNeighborLoader(data, placement=PlacementOptions(
        topology='device', backend='torch'), **kw)
    sharded = HybridNeighborLoader(data, placement=PlacementOptions(
        topology='sharded', backend='torch'), **kw)
    csc = sharded.topology.csc[None]
    values = csc.weight if mode.startswith('weight') else csc.time
    assert type(values).__name__ == 'ShardedValues'
    assert same_subgraphs(plain, sharded) > 1


# time_attr on some node or edge types of a HeteroData (as PyG) ##############
#
# PyG (pyg-lib) filters an edge type by time when its source node type has a
# time (node-level) or the edge type itself has one (edge-level); the other
# edge types are sampled without a time filter, still in disjoint subgraphs.

def _drop(data, key, attr):
    del data[key][attr]
    return data


PARTIAL_CASES = {
    # Node-level time missing on 'c' (a source of C_TO_A and C_TO_B):
    'node-c': ('time', lambda d: _drop(d, 'c', 'time')),
    # ... on 'b' and 'c': only A_TO_B and A_TO_C are filtered:
    'node-bc': ('time', lambda d: _drop(_drop(d, 'b', 'time'), 'c', 'time')),
    # ... only on 'b', not on the seed type (which then needs input_time):
    'node-b-only': ('time', lambda d: _drop(_drop(d, 'a', 'time'), 'c',
                                            'time')),
    # Edge-level time missing on two edge types:
    'edge': ('edge_time', lambda d: _drop(_drop(d, B_TO_A, 'edge_time'),
                                          C_TO_B, 'edge_time')),
}


def partial_time_graph(case, seed=8, num_edges=120):
    attr, drop = PARTIAL_CASES[case]
    return attr, drop(temporal_hetero_graph(seed=seed, num_edges=num_edges))


def partial_eligible(data, attr):
    r"""The brute-force rule: is edge :obj:`e` of :obj:`et` allowed under
    the time bound of its subgraph?"""
    elist = {et: data[et].edge_index.tolist() for et in data.edge_types}

    def eligible(et, e, bound):
        if attr == 'time':
            if 'time' not in data[et[0]]:
                return True
            return int(data[et[0]].time[elist[et][0][e]]) <= int(bound)
        if 'edge_time' not in data[et]:
            return True
        return int(data[et].edge_time[e]) <= int(bound)

    return elist, eligible


@pytest.mark.parametrize('case', list(PARTIAL_CASES))
def test_partial_time_full_fanout_parity(device, case):
    attr, data = partial_time_graph(case)
    seeds = torch.arange(TEMPORAL_SIZES['a'])
    gen = torch.Generator().manual_seed(9)
    own = attr == 'time' and 'time' in data['a']
    input_time = None if own else torch.randint(
        0, 30, (seeds.numel(), ), generator=gen)
    loader = HybridNeighborLoader(data, [-1, -1], time_attr=attr,
                                  input_nodes=('a', seeds),
                                  input_time=input_time, batch_size=60,
                                  device=device)
    batch = next(iter(loader))
    check_disjoint_hetero(batch, 'a')
    nodes, edges = actual_subgraphs(batch, hetero=True)
    elist, eligible = partial_eligible(data, attr)
    bounds = input_time if input_time is not None else data['a'].time[seeds]
    unfiltered = 0
    for i, s in enumerate(seeds.tolist()):
        exp_nodes, exp_edges = expected_subgraph(elist, 'a', s, bounds[i], 2,
                                                 eligible)
        for t in data.node_types:
            assert nodes[i][t] == exp_nodes[t], (i, t)
        for et in data.edge_types:
            assert edges[i][et] == exp_edges[et], (i, et)
        unfiltered += sum(len(edges[i][et]) for et in data.edge_types
                          if (attr == 'time' and 'time' not in data[et[0]])
                          or (attr == 'edge_time'
                              and 'edge_time' not in data[et]))
    assert unfiltered > 0  # Edge types without time were sampled.


@pytest.mark.parametrize('strategy', ['uniform', 'last'])
@pytest.mark.parametrize('case', list(PARTIAL_CASES))
def test_partial_time_sampled_edges_allowed(device, case, strategy):
    r"""With a small fan-out, every sampled edge is allowed, and every
    destination gets min(fan-out, #allowed in-edges) of them per hop (the
    most recent ones for 'last')."""
    attr, data = partial_time_graph(case, seed=3, num_edges=300)
    seeds = torch.arange(TEMPORAL_SIZES['a'])
    gen = torch.Generator().manual_seed(2)
    own = attr == 'time' and 'time' in data['a']
    input_time = None if own else torch.randint(
        0, 30, (seeds.numel(), ), generator=gen)
    loader = HybridNeighborLoader(data, [3, 2], time_attr=attr,
                                  input_nodes=('a', seeds),
                                  input_time=input_time, batch_size=12,
                                  temporal_strategy=strategy, device=device,
                                  seed=0)
    elist, eligible = partial_eligible(data, attr)
    all_bounds = input_time if input_time is not None else \
        data['a'].time[seeds]
    for batch in loader:
        check_disjoint_hetero(batch, 'a')
        bounds = all_bounds[cpu(batch['a'].input_id)]
        for et in data.edge_types:
            store = batch[et]
            e_id = cpu(store.e_id).tolist()
            col = cpu(store.edge_index[1])
            sub = cpu(batch[et[-1]].batch)[col].tolist()
            assert all(eligible(et, e, bounds[b])
                       for e, b in zip(e_id, sub)), et
            # Per destination (local node), min(fan-out of its hop, number
            # of allowed in-edges) sampled in-edges:
            got = Counter(col.tolist())
            dst_store = batch[et[-1]]
            hop_sizes = list(dst_store.num_sampled_nodes)
            local = 0
            for hop, size in enumerate(hop_sizes):
                fanout = [3, 2, 0][hop]
                for _ in range(size):
                    v = int(cpu(dst_store.n_id)[local])
                    b = int(cpu(dst_store.batch)[local])
                    allowed = [e for e, d in enumerate(elist[et][1])
                               if d == v and eligible(et, e, bounds[b])]
                    assert got.get(local, 0) == min(len(allowed), fanout)
                    local += 1


def test_node_time_on_seed_type_only_is_temporal():
    r"""Node-level time only on a node type that is no source: no edge is
    filtered, but sampling is still temporal (disjoint subgraphs, seed
    times), as in PyG."""
    data = temporal_hetero_graph(seed=1, num_edges=100)
    for t in ('a', 'b', 'c'):
        del data[t].time
    data['d'].x = torch.randn(5, 4)
    data['d'].time = torch.arange(5)
    data['d', 'sees', 'a'].edge_index = torch.tensor([[0, 1], [0, 1]])
    data['a', 'seen_by', 'd'].edge_index = torch.tensor([[0, 1, 2, 3],
                                                         [0, 1, 0, 4]])
    loader = HybridNeighborLoader(data, [-1, -1], time_attr='time',
                                  input_nodes='d', batch_size=5,
                                  device='cpu')
    assert loader.node_sampler.is_temporal and loader.node_sampler.disjoint
    batch = next(iter(loader))
    check_disjoint_hetero(batch, 'd')
    # Nothing filtered: seed 0 reaches 'a' nodes 0 and 2 (whatever their
    # or its time), and their in-neighbors of every type:
    a_of_seed0 = batch['a'].n_id[batch['a'].batch == 0]
    assert set(a_of_seed0.tolist()) == {0, 2}
    assert batch['b'].n_id.numel() > 0


# Temporal sampling with (FeatureStore, GraphStore) inputs ####################
#
# PyG reads the times of remote backends from the feature store: tensors named
# `time_attr`, node-level for node types (in homogeneous graphs: when named
# 'time'), edge-level for edge types (group names that are edge type tuples).

def to_stores(data, attrs=('x', ), time_attr=None, edge_level=False,
              sort=False):
    r"""A (MyFeatureStore, MyGraphStore) pair holding :obj:`data`: its node
    attributes :obj:`attrs`, the times :obj:`time_attr` (of nodes, or of
    edges with :obj:`edge_level`) and its edges as COO, in the same order
    (:obj:`sort`: sorted by destination and time, :obj:`is_sorted=True`, as
    PyG requires for temporal sampling; the edge times follow)."""
    from torch_geometric.testing import MyFeatureStore, MyGraphStore
    fs, gs = MyFeatureStore(), MyGraphStore()
    hetero = isinstance(data, HeteroData)
    node_stores = {t: data[t] for t in data.node_types} if hetero else \
        {None: data}
    edge_stores = {t: data[t] for t in data.edge_types} if hetero else \
        {None: data}
    for t, store in node_stores.items():
        for a in attrs:
            fs.put_tensor(store[a], group_name=t, attr_name=a, index=None)
        if time_attr is not None and not edge_level and time_attr in store:
            fs.put_tensor(store[time_attr], group_name=t,
                          attr_name=time_attr, index=None)
    for et, store in edge_stores.items():
        src_t, dst_t = (None, None) if et is None else (et[0], et[-1])
        n_src, n_dst = node_stores[src_t].num_nodes, \
            node_stores[dst_t].num_nodes
        edge_index = store.edge_index
        perm = torch.arange(edge_index.size(1))
        if sort:
            if edge_level:
                key = store[time_attr]
            else:
                key = node_stores[src_t][time_attr][edge_index[0]]
            perm = torch.sort(key, stable=True)[1]
            perm = perm[torch.sort(edge_index[1, perm], stable=True)[1]]
            store.edge_index = edge_index = edge_index[:, perm]
        if edge_level and time_attr in store:
            store[time_attr] = store[time_attr][perm]
            fs.put_tensor(store[time_attr], group_name=et,
                          attr_name=time_attr, index=None)
        gs.put_edge_index((edge_index[0], edge_index[1]), edge_type=et,
                          layout='coo', size=(n_src, n_dst), is_sorted=sort)
    return fs, gs


def same_batches(a, b, hetero):
    stores = [(t, a[t], b[t]) for t in a.node_types] if hetero else \
        [(None, a, b)]
    for t, x, y in stores:
        assert torch.equal(x.n_id, y.n_id), t
        assert torch.equal(x.batch, y.batch), t
        assert torch.equal(x.x, y.x), t
    estores = [(t, a[t], b[t]) for t in a.edge_types] if hetero else \
        [(None, a, b)]
    for t, x, y in estores:
        assert torch.equal(x.edge_index, y.edge_index), t
        assert torch.equal(x.e_id, y.e_id), t


@pytest.mark.parametrize('sort', [False, True])
@pytest.mark.parametrize('strategy', ['uniform', 'last'])
@pytest.mark.parametrize('level', ['node', 'edge'])
def test_remote_temporal_homo_same_batches(level, strategy, sort):
    data = temporal_graph(num_nodes=60, num_edges=400)
    attr = 'time' if level == 'node' else 'edge_time'
    stores = to_stores(data, time_attr=attr, edge_level=level == 'edge',
                       sort=sort)
    gen = torch.Generator().manual_seed(0)
    seeds = torch.randperm(60, generator=gen)[:30]
    input_time = None if level == 'node' else torch.randint(
        0, 30, (30, ), generator=gen)
    kwargs = dict(num_neighbors=[3, 2], time_attr=attr, input_nodes=seeds,
                  input_time=input_time, temporal_strategy=strategy,
                  batch_size=10, device='cpu', seed=7)
    remote = list(HybridNeighborLoader(stores, **kwargs))
    local = list(HybridNeighborLoader(data, **kwargs))
    assert len(remote) == len(local) == 3
    for r, d in zip(remote, local):
        same_batches(r, d, hetero=False)
        bound = d.seed_time if level == 'edge' else \
            data.time[d.n_id[:d.batch_size]]
        if level == 'node':
            assert torch.all(data.time[r.n_id] <= bound[r.batch])
        else:
            sub = r.batch[r.edge_index[1]]
            assert torch.all(data.edge_time[r.e_id] <= bound[sub])


@pytest.mark.parametrize('case', ['node', 'node-c', 'edge', 'edge-partial'])
def test_remote_temporal_hetero_same_batches(case):
    data = temporal_hetero_graph(seed=2, num_edges=200)
    attr = 'time' if case.startswith('node') else 'edge_time'
    if case == 'node-c':
        del data['c'].time
    if case == 'edge-partial':
        del data[B_TO_A].edge_time
    stores = to_stores(data, time_attr=attr, edge_level=attr == 'edge_time',
                       sort=case == 'node')
    seeds = torch.arange(TEMPORAL_SIZES['a'])
    gen = torch.Generator().manual_seed(1)
    input_time = None if attr == 'time' else torch.randint(
        0, 30, (seeds.numel(), ), generator=gen)
    kwargs = dict(num_neighbors=[3, 2], time_attr=attr,
                  input_nodes=('a', seeds), input_time=input_time,
                  batch_size=16, device='cpu', seed=3)
    remote = list(HybridNeighborLoader(stores, **kwargs))
    local = list(HybridNeighborLoader(data, **kwargs))
    assert len(remote) == len(local) == 4
    for r, d in zip(remote, local):
        same_batches(r, d, hetero=True)


def test_remote_temporal_karate_like():
    r"""PyG's `test_temporal_custom_neighbor_loader_on_karate`: node times
    in the feature store, edges sorted by (destination, source time), full
    fan-out: neighbors are never later than the seed."""
    data = temporal_graph(seed=4, num_nodes=34, num_edges=156)
    data.time = torch.arange(34, 0, -1)
    hetero = HeteroData()
    hetero['v'].x = data.x
    hetero['v'].time = data.time
    hetero['v', 'to', 'v'].edge_index = data.edge_index
    stores = to_stores(hetero, time_attr='time', sort=True)
    kwargs = dict(num_neighbors=[-1, -1], input_nodes='v', time_attr='time',
                  batch_size=34, device='cpu')
    ref = next(iter(HybridNeighborLoader(hetero, **kwargs)))
    out = next(iter(HybridNeighborLoader(stores, **kwargs)))
    assert torch.equal(ref['v'].n_id, out['v'].n_id)
    assert torch.equal(ref['v'].batch, out['v'].batch)
    bound = data.time[out['v'].n_id[:34]]
    assert torch.all(data.time[out['v'].n_id] <= bound[out['v'].batch])


def test_remote_edge_temporal_sample_from_edges():
    r"""Link-level sampling on a remote backend with node times uses the
    node times of both endpoints (PyG's `edge_sample`)."""
    from torch_geometric.sampler import EdgeSamplerInput

    from pyg_orch import HybridNeighborSampler
    data = temporal_graph(num_nodes=40, num_edges=300)
    stores = to_stores(data, time_attr='time')
    inputs = EdgeSamplerInput(input_id=torch.arange(6),
                              row=data.edge_index[0, :6],
                              col=data.edge_index[1, :6])
    outs = [
        HybridNeighborSampler(d, [2], time_attr='time', device='cpu',
                              seed=5).sample_from_edges(inputs)
        for d in (stores, data)
    ]
    assert torch.equal(outs[0].node, outs[1].node)
    assert torch.equal(outs[0].edge, outs[1].edge)


def test_remote_temporal_errors():
    data = temporal_graph(num_nodes=30, num_edges=100)
    stores = to_stores(data)  # No times in the feature store.
    with pytest.raises(ValueError, match='did not find any temporal data'):
        HybridNeighborLoader(stores, [2], time_attr='time', device='cpu')
    hetero = temporal_hetero_graph(num_edges=50)
    fs, gs = to_stores(hetero, time_attr='time')
    fs.put_tensor(hetero[B_TO_A].edge_time, group_name=B_TO_A,
                  attr_name='time', index=None)
    with pytest.raises(ValueError, match='for both node-level and '
                       'edge-level types'):
        HybridNeighborLoader((fs, gs), [2], time_attr='time',
                             input_nodes='a', device='cpu')
    fs, gs = to_stores(hetero, time_attr='time')
    fs.put_tensor(torch.zeros(3), group_name='a', attr_name='time',
                  index=None)  # Of the wrong length.
    with pytest.raises(ValueError, match='time_attr'):
        HybridNeighborLoader((fs, gs), [2], time_attr='time',
                             input_nodes='a', device='cpu')
    # A node time of the wrong length:
    fs, gs = to_stores(data)
    fs.put_tensor(torch.zeros(7), group_name=None, attr_name='time',
                  index=None)
    with pytest.raises(ValueError, match='time_attr'):
        HybridNeighborLoader((fs, gs), [2], time_attr='time', device='cpu')


def test_remote_weighted_not_implemented():
    stores = to_stores(temporal_graph(num_nodes=30, num_edges=100))
    with pytest.raises(NotImplementedError, match="'weight_attr' argument "
                       "not yet supported"):
        HybridNeighborLoader(stores, [2], weight_attr='edge_weight',
                             device='cpu')
