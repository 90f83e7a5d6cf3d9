"""Sampling modes across ranks (pyg_orch.distributed): disjoint subgraphs,
sampling with replacement and drop_last, each rank holding one part,
checked against the single-machine sampler and loader."""
import pytest
import torch
from conftest import (
    assert_same_sample,
    one_part,
    random_graph,
    small_paper_graph,
    small_paper_partition,
)
from multiproc import run_workers

from pyg_orch.distributed import load_partition, partition_graph
from pyg_orch.sampling.collective import DistributedNeighborSampler
from pyg_orch.sampling.multi_hop import sample_multi_hop
from pyg_orch.topology.graph import GraphTopology

NUM_NODES = 120


def graph():
    return random_graph(NUM_NODES, 500, seed=3, num_features=4,
                       num_classes=3, train_ratio=0.5, edge_dim=2)


def seeds_of(rank, step):
    gen = torch.Generator().manual_seed(100 * rank + step)
    seeds = torch.randint(0, NUM_NODES, (6, ), generator=gen)
    return torch.cat([seeds, seeds[:1]])  # A seed twice.


def _sampler_worker(rank, world_size, out_dir, fanouts, options):
    part = load_partition(out_dir, rank)
    sampler = DistributedNeighborSampler(
        part, fanouts, generator=torch.Generator().manual_seed(rank),
        **options)
    out = []
    for step in range(3):
        o = sampler.sample_from_nodes(seeds_of(rank, step))
        out.append((o.node, o.row, o.col, o.edge, o.batch,
                    o.num_sampled_nodes, o.num_sampled_edges,
                    sampler.stats.remote_requests))
    return out


def sample_on_two_ranks(data, out_dir, fanouts, options):
    r"""Three batches per rank of :obj:`data` split into 2 random parts,
    sampled by :func:`_sampler_worker` with :obj:`options`."""
    info = partition_graph(data, 2, out_dir, 'random', progress=False)
    return run_workers(_sampler_worker, 2,
                       args=(str(info.out_dir), fanouts, options),
                       timeout=60)


def test_disjoint_full_fanout_equals_single_machine(tmp_path):
    data = graph()
    fanouts = [-1, -1]
    results = sample_on_two_ranks(data, tmp_path / 'p', fanouts,
                                  {'disjoint': True})
    topo = GraphTopology.from_data(data)
    repeated = remote = 0
    for rank, steps in enumerate(results):
        for step, out in enumerate(steps):
            node, row, col, edge, batch, nsn, nse, rr = out
            seeds = seeds_of(rank, step)
            # The same batch, order included, with the seed of every node:
            assert_same_sample(out, sample_multi_hop(
                topo, {None: fanouts}, {None: seeds}, disjoint=True))
            # One subgraph per seed: (seed index, vertex) pairs are unique,
            # vertices alone are not.
            pairs = batch * NUM_NODES + node
            assert pairs.unique().numel() == pairs.numel()
            repeated += node.numel() - node.unique().numel()
            assert torch.equal(batch[:seeds.numel()],
                               torch.arange(seeds.numel()))
            # Edges stay within their subgraph:
            assert torch.equal(batch[row], batch[col])
            remote += rr
    assert repeated > 0 and remote > 0


def test_replace_draws_k_per_vertex(tmp_path):
    data = graph()
    fanouts = [3, 2]
    results = sample_on_two_ranks(data, tmp_path / 'p', fanouts,
                                  {'replace': True})
    src, dst = data.edge_index
    indeg = torch.bincount(dst, minlength=data.num_nodes)
    repeated_edges = 0
    for rank, steps in enumerate(results):
        for step, (node, row, col, edge, batch, nsn, nse, _) in \
                enumerate(steps):
            assert batch is None
            seeds = seeds_of(rank, step)
            assert torch.equal(node[:seeds.numel()], seeds)
            rest = node[seeds.numel():]
            assert rest.unique().numel() == rest.numel()
            # Every edge exists, with its edge id:
            assert torch.equal(src[edge], node[row])
            assert torch.equal(dst[edge], node[col])
            offset = 0
            for hop, k in enumerate(fanouts):
                lo = sum(nsn[:hop])
                c = col[offset:offset + nse[hop]]
                got = torch.bincount(c - lo, minlength=nsn[hop])
                frontier = node[lo:lo + nsn[hop]]
                # Exactly k draws per frontier vertex with in-edges, also
                # where it has fewer than k:
                want = torch.where(indeg[frontier] > 0, k, 0)
                assert torch.equal(got, want)
                offset += nse[hop]
            repeated_edges += edge.numel() - edge.unique().numel()
    assert repeated_edges > 0  # Some edge was drawn twice.


def _loader_worker(rank, world_size, out_dir, options):
    from pyg_orch import HybridNeighborLoader
    part = load_partition(out_dir, rank)
    seeds = part.node_ids[:22 if rank == 0 else 7]
    loader = HybridNeighborLoader(out_dir, [-1, -1], batch_size=5,
                                  input_nodes=seeds, disjoint=True,
                                  drop_last=True, even='pad', device='cpu',
                                  **options)
    return len(loader), [(b.n_id, b.batch, b.edge_index, b.e_id, b.x,
                          b.batch_size) for b in loader]


@pytest.mark.parametrize('weighted', [False, True])
def test_loader_disjoint_drop_last_equals_hybrid_loader(tmp_path, weighted):
    from pyg_orch import HybridNeighborLoader
    data = weighted_graph() if weighted else graph()
    options = {'weight_attr': 'w'} if weighted else {}
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    results = run_workers(_loader_worker, 2,
                          args=(str(info.out_dir), options), timeout=60)
    for rank, (length, batches) in enumerate(results):
        # 22 seeds: 4 full batches (2 seeds dropped); 7 seeds: 1, padded
        # to 4 empty-ended batches to even the ranks out:
        assert length == len(batches) == 4
        seeds = load_partition(info.out_dir, rank).node_ids[
            :22 if rank == 0 else 7]
        ref = list(HybridNeighborLoader(data, [-1, -1], batch_size=5,
                                        input_nodes=seeds, disjoint=True,
                                        drop_last=True, device='cpu',
                                        **options))
        ours = [b for b in batches if b[5] > 0]
        assert len(ours) == len(ref) == (4 if rank == 0 else 1)
        for (n_id, batch, edge_index, e_id, x, bs), b in zip(ours, ref):
            assert bs == b.batch_size == 5
            assert torch.equal(n_id, b.n_id)
            assert torch.equal(batch, b.batch)
            assert torch.equal(edge_index, b.edge_index)
            assert torch.equal(e_id, b.e_id)
            assert torch.equal(x, data.x[n_id])
            if weighted:
                assert bool((data.w[e_id] > 0).all())


HETERO_SEEDS = {0: torch.arange(0, 40, 3), 1: torch.arange(100, 130, 2)}


def _hetero_worker(rank, world_size, out_dir):
    part = load_partition(out_dir, rank)
    sampler = DistributedNeighborSampler(part, [-1, -1], disjoint=True)
    o = sampler.sample_from_nodes(('paper', HETERO_SEEDS[rank]))
    return o.node, o.batch, o.row, o.col, o.edge


def test_hetero_disjoint_equals_single_machine(tmp_path):
    from pyg_orch import HybridNeighborLoader
    data = small_paper_graph()
    info = small_paper_partition(tmp_path / 'h', 'random')
    results = run_workers(_hetero_worker, 2, args=(str(info.out_dir), ),
                          timeout=60)
    for rank, (node, batch, row, col, edge) in enumerate(results):
        seeds = HETERO_SEEDS[rank]
        (ref, ) = list(HybridNeighborLoader(
            data, [-1, -1], batch_size=seeds.numel(),
            input_nodes=('paper', seeds), disjoint=True, device='cpu'))
        for t in data.node_types:
            assert torch.equal(node[t], ref[t].n_id), t
            assert torch.equal(batch[t], ref[t].batch), t
        for et in data.edge_types:
            assert torch.equal(torch.stack([row[et], col[et]]),
                               ref[et].edge_index), et
            assert torch.equal(edge[et], ref[et].e_id), et


# Weighted sampling ###########################################################

def weighted_graph():
    data = graph()
    gen = torch.Generator().manual_seed(5)
    w = torch.rand(data.num_edges, generator=gen) * 3
    w[torch.rand(data.num_edges, generator=gen) < 0.3] = 0.0
    data.w = w
    return data


def test_weighted_full_fanout_equals_single_machine(tmp_path):
    data = weighted_graph()
    fanouts = [-1, -1]
    results = sample_on_two_ranks(data, tmp_path / 'p', fanouts,
                                  {'weight_attr': 'w'})
    topo = GraphTopology.from_data(data, weight_attr='w')
    for rank, steps in enumerate(results):
        for step, out in enumerate(steps):
            assert_same_sample(out, sample_multi_hop(
                topo, {None: fanouts}, {None: seeds_of(rank, step)}))
            edge = out[3]
            # Zero-weight edges are never drawn:
            assert bool((data.w[edge] > 0).all())


def test_weighted_fanout_invariants(tmp_path):
    data = weighted_graph()
    fanouts = [2, 2]
    src, dst = data.edge_index
    positive = torch.bincount(dst[data.w > 0], minlength=data.num_nodes)
    for replace in (False, True):
        results = sample_on_two_ranks(
            data, tmp_path / str(replace), fanouts,
            {'weight_attr': 'w', 'replace': replace})
        for rank, steps in enumerate(results):
            for node, row, col, edge, _, nsn, nse, _ in steps:
                assert torch.equal(src[edge], node[row])
                assert torch.equal(dst[edge], node[col])
                assert bool((data.w[edge] > 0).all())
                offset = 0
                for hop, k in enumerate(fanouts):
                    lo = sum(nsn[:hop])
                    got = torch.bincount(
                        col[offset:offset + nse[hop]] - lo,
                        minlength=nsn[hop])
                    pos = positive[node[lo:lo + nsn[hop]]]
                    want = torch.where(pos > 0, k, 0) if replace else \
                        pos.clamp(max=k)
                    assert torch.equal(got, want)
                    offset += nse[hop]


def _bad_weight_worker(rank, world_size, out_dir):
    part = load_partition(out_dir, rank)
    try:
        DistributedNeighborSampler(part, [2], weight_attr='w')
    except ValueError as e:
        return str(e)
    return None


def test_negative_weight_on_one_part_fails_every_rank(tmp_path):
    data = weighted_graph()
    data.w[int(data.edge_index[1].argmax())] = -1.0  # One edge, one part.
    info = partition_graph(data, 2, tmp_path / 'p', 'contiguous',
                           progress=False)
    errors = run_workers(_bad_weight_worker, 2, args=(str(info.out_dir), ),
                         timeout=60)
    assert all(e is not None and 'negative weights' in e for e in errors)


def _hetero_weight_worker(rank, world_size, out_dir):
    part = load_partition(out_dir, rank)
    sampler = DistributedNeighborSampler(part, [-1, -1], weight_attr='w')
    o = sampler.sample_from_nodes(('paper', HETERO_SEEDS[rank]))
    return o.node, o.row, o.col, o.edge


def test_hetero_weighted_equals_single_machine(tmp_path):
    from pyg_orch import HybridNeighborLoader
    data = small_paper_graph()
    cites = ('paper', 'cites', 'paper')
    n = data[cites].num_edges
    w = torch.ones(n)
    w[::3] = 0.0  # Only 'cites' is weighted; other types are uniform.
    data[cites].w = w
    info = partition_graph(data, 2, tmp_path / 'h', 'random',
                           progress=False)
    results = run_workers(_hetero_weight_worker, 2,
                          args=(str(info.out_dir), ), timeout=60)
    for rank, (node, row, col, edge) in enumerate(results):
        seeds = HETERO_SEEDS[rank]
        (ref, ) = list(HybridNeighborLoader(
            data, [-1, -1], batch_size=seeds.numel(),
            input_nodes=('paper', seeds), weight_attr='w', device='cpu'))
        for t in data.node_types:
            assert torch.equal(node[t], ref[t].n_id), t
        for et in data.edge_types:
            assert torch.equal(edge[et], ref[et].e_id), et
            assert torch.equal(torch.stack([row[et], col[et]]),
                               ref[et].edge_index), et
        assert bool((w[edge[cites]] > 0).all())
        assert edge[cites].numel() > 0


def test_weight_attr_errors(tmp_path):
    data = weighted_graph()
    part = one_part(data, tmp_path / 'p')
    with pytest.raises(ValueError, match="'weight_attr' must be the name"):
        DistributedNeighborSampler(part, [2], weight_attr=3)
    with pytest.raises(ValueError, match="not an edge attribute"):
        DistributedNeighborSampler(part, [2], weight_attr='nope')
    with pytest.raises(NotImplementedError, match="not split"):
        DistributedNeighborSampler(part, [2], topology={None: part.csc},
                                   weight_attr='w')
    # One part alone (no process group) samples by weight too:
    out = DistributedNeighborSampler(part, [-1], weight_attr='w') \
        .sample_from_nodes(torch.arange(NUM_NODES))
    assert bool((data.w[out.edge] > 0).all())
    assert out.edge.numel() == int((data.w > 0).sum())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_cuda_modes_one_part(tmp_path):
    # One part on the GPU: disjoint, weighted, induced and bidirectional
    # batches at full fan-out equal the CPU sampler's; with replacement,
    # k draws per vertex.
    data = weighted_graph()
    part = one_part(data, tmp_path / 'p')
    cuda = torch.device('cuda', torch.cuda.current_device())
    seeds = seeds_of(0, 0)
    for options in ({'disjoint': True}, {'weight_attr': 'w'},
                    {'weight_attr': 'w', 'disjoint': True},
                    {'subgraph_type': 'induced'},
                    {'subgraph_type': 'bidirectional'}):
        gpu = DistributedNeighborSampler(part, [-1, -1], device='cuda',
                                         **options).sample_from_nodes(seeds)
        cpu = DistributedNeighborSampler(part, [-1, -1],
                                         **options).sample_from_nodes(seeds)
        for key in ('node', 'row', 'col', 'edge', 'batch'):
            a, b = getattr(gpu, key), getattr(cpu, key)
            assert (a is None) == (b is None) == (
                key == 'batch' and 'disjoint' not in options), key
            if a is None:
                continue
            assert a.device == cuda
            if key == 'edge' and 'subgraph_type' in options and \
                    options['subgraph_type'] == 'bidirectional':
                # PyG's conversion keeps one of the ids of an edge and its
                # reverse, which one depends on the device's sort: check
                # that each joins the edge's endpoints, either way.
                s_, d_ = data.edge_index[:, a.cpu()]
                u, v = cpu.node[cpu.row], cpu.node[cpu.col]
                assert bool((((s_ == u) & (d_ == v))
                             | ((s_ == v) & (d_ == u))).all())
                continue
            assert torch.equal(a.cpu(), b), (options, key)
    src, dst = data.edge_index
    out = DistributedNeighborSampler(
        part, [3], device='cuda', replace=True, weight_attr='w',
        generator=torch.Generator(device=cuda).manual_seed(0)
    ).sample_from_nodes(seeds)
    edge = out.edge.cpu()
    assert bool((data.w[edge] > 0).all())
    positive = torch.bincount(dst[data.w > 0], minlength=data.num_nodes)
    got = torch.bincount(out.col.cpu(), minlength=seeds.numel())
    assert torch.equal(got, torch.where(positive[seeds] > 0, 3, 0))


def _input_id_worker(rank, world_size, out_dir, seeds):
    from pyg_orch import HybridNeighborLoader
    from pyg_orch.distributed import open_stores
    loader = HybridNeighborLoader(out_dir, [2, 2], batch_size=4,
                                  input_nodes=seeds, shuffle=True,
                                  even='pad', device='cpu')
    epochs = [[(b.input_id, b.n_id[:b.batch_size]) for b in loader]
              for _ in range(2)]
    # Given this rank's seeds directly: positions among them, as in PyG.
    own = load_partition(out_dir, rank).node_ids[:5]
    direct = [(b.input_id, b.n_id[:b.batch_size]) for b in
              HybridNeighborLoader(open_stores(out_dir), [2], batch_size=2,
                                   input_nodes=own, even='pad',
                                   device='cpu')]
    return epochs, own, direct


def test_input_id_indexes_the_seeds_of_all_ranks(tmp_path):
    data = graph()
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    seeds = torch.randperm(NUM_NODES,
                           generator=torch.Generator().manual_seed(0))[:30]
    results = run_workers(_input_id_worker, 2,
                          args=(str(info.out_dir), seeds), timeout=60)
    for epoch in range(2):
        seen = []
        for epochs, _, _ in results:
            for input_id, batch_seeds in epochs[epoch]:
                assert torch.equal(seeds[input_id], batch_seeds)
                seen.append(input_id)
        # Every seed of every rank exactly once per epoch:
        assert torch.equal(torch.cat(seen).sort().values,
                           torch.arange(seeds.numel()))
    for _, own, direct in results:
        ids = torch.cat([i for i, _ in direct])
        assert torch.equal(ids, torch.arange(own.numel()))
        assert torch.equal(torch.cat([s for _, s in direct]), own)


# Induced and bidirectional subgraphs #########################################

def _subgraph_worker(rank, world_size, out_dir, fanouts, subgraph_type):
    from pyg_orch import HybridNeighborLoader
    part = load_partition(out_dir, rank)
    seeds = part.node_ids[:12]
    loader = HybridNeighborLoader(out_dir, fanouts, batch_size=6,
                                  input_nodes=seeds, device='cpu',
                                  subgraph_type=subgraph_type, seed=rank)
    return seeds, [(b.n_id, b.edge_index, b.e_id, b.edge_attr,
                    getattr(b, 'num_sampled_nodes', None),
                    getattr(b, 'num_sampled_edges', None)) for b in loader]


@pytest.mark.parametrize('subgraph_type', ['induced', 'bidirectional'])
def test_subgraph_type_full_fanout_equals_hybrid_loader(tmp_path,
                                                        subgraph_type):
    from pyg_orch import HybridNeighborLoader
    data = graph()
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    results = run_workers(_subgraph_worker, 2,
                          args=(str(info.out_dir), [-1, -1], subgraph_type),
                          timeout=60)
    for seeds, batches in results:
        ref = list(HybridNeighborLoader(data, [-1, -1], batch_size=6,
                                        input_nodes=seeds, device='cpu',
                                        subgraph_type=subgraph_type))
        assert len(batches) == len(ref) == 2
        for (n_id, edge_index, e_id, edge_attr, nsn, nse), b in zip(
                batches, ref):
            assert torch.equal(n_id, b.n_id)
            assert torch.equal(edge_index, b.edge_index)
            assert torch.equal(e_id, b.e_id)
            # Each edge's attributes, also where the batch holds it
            # reversed:
            assert torch.equal(edge_attr, data.edge_attr[e_id])
            assert nsn == getattr(b, 'num_sampled_nodes', None)
            assert nse == getattr(b, 'num_sampled_edges', None)
            if subgraph_type == 'induced':
                assert nse is None and nsn is not None


def test_induced_holds_every_edge_among_the_sampled_vertices(tmp_path):
    data = graph()
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    results = run_workers(_subgraph_worker, 2,
                          args=(str(info.out_dir), [2, 2], 'induced'),
                          timeout=60)
    src, dst = data.edge_index
    for _, batches in results:
        for n_id, edge_index, e_id, _, _, _ in batches:
            # The batch's vertices are distinct (no disjoint subgraphs):
            assert n_id.unique().numel() == n_id.numel()
            inside = torch.isin(src, n_id) & torch.isin(dst, n_id)
            assert torch.equal(e_id.sort().values,
                               inside.nonzero().view(-1))
            assert torch.equal(n_id[edge_index[0]], src[e_id])
            assert torch.equal(n_id[edge_index[1]], dst[e_id])


def test_subgraph_type_errors(tmp_path):
    part = one_part(graph(), tmp_path / 'p')
    with pytest.raises(ValueError, match="'subgraph_type' must be one of"):
        DistributedNeighborSampler(part, [2], subgraph_type='full')
    with pytest.raises(ValueError, match="'disjoint' sampling not supported"):
        DistributedNeighborSampler(part, [2], subgraph_type='induced',
                                   disjoint=True)


def _hetero_subgraph_worker(rank, world_size, out_dir, subgraph_type):
    from pyg_orch import HybridNeighborLoader
    seeds = HETERO_SEEDS[rank]
    loader = HybridNeighborLoader(
        out_dir, [-1, -1], batch_size=seeds.numel(),
        input_nodes=('paper', seeds), device='cpu',
        subgraph_type=subgraph_type)
    (b, ) = list(loader)
    cites = ('paper', 'cites', 'paper')
    return (loader.partition_batches.input_nodes, {t: b[t].n_id for t in b.node_types},
            {et: (b[et].edge_index, getattr(b[et], 'e_id', None))
             for et in b.edge_types},
            getattr(b[cites], 'edge_attr', None))


@pytest.mark.parametrize('subgraph_type', ['induced', 'bidirectional'])
def test_hetero_subgraph_type_equals_hybrid_loader(tmp_path, subgraph_type):
    from pyg_orch import HybridNeighborLoader
    data = small_paper_graph()
    info = small_paper_partition(tmp_path / 'h', 'random')
    results = run_workers(_hetero_subgraph_worker, 2,
                          args=(str(info.out_dir), subgraph_type),
                          timeout=60)
    cites = ('paper', 'cites', 'paper')
    for seeds, node, edges, cites_attr in results:
        # The part's own seeds among those given (the seeds of all ranks):
        assert 0 < seeds.numel()
        (ref, ) = list(HybridNeighborLoader(
            data, [-1, -1], batch_size=seeds.numel(),
            input_nodes=('paper', seeds), device='cpu',
            subgraph_type=subgraph_type))
        for t in data.node_types:
            assert torch.equal(node[t], ref[t].n_id), t
        for et in data.edge_types:
            assert torch.equal(edges[et][0], ref[et].edge_index), et
            if subgraph_type == 'induced':
                assert torch.equal(edges[et][1], ref[et].e_id), et
            else:  # As PyG: edge ids are dropped where reverses merged.
                assert edges[et][1] is None and 'e_id' not in ref[et]
        if subgraph_type == 'induced':
            assert torch.equal(cites_attr,
                               data[cites].edge_attr[edges[cites][1]])
        else:
            assert cites_attr is None and 'edge_attr' not in ref[cites]


def test_deprecated_directed_false_means_induced(tmp_path):
    from pyg_orch import HybridNeighborLoader
    info = partition_graph(graph(), 1, tmp_path / 'p', 'contiguous',
                           progress=False)
    with pytest.warns(UserWarning, match="'directed' argument is deprecated"):
        loader = HybridNeighborLoader(str(info.out_dir), [2], batch_size=4,
                                      directed=False, device='cpu')
    assert loader.node_sampler.subgraph_type.value == 'induced'
    batch = next(iter(loader))
    src, dst = graph().edge_index
    inside = torch.isin(src, batch.n_id) & torch.isin(dst, batch.n_id)
    assert torch.equal(batch.e_id.sort().values, inside.nonzero().view(-1))
