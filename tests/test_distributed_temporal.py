"""Temporal sampling across ranks (pyg_orch.distributed): node-level and
edge-level times, 'uniform' and 'last', each rank holding one part; with
full fan-out (or 'last') the batches equal the single-machine sampler's."""
import pytest
import torch
from conftest import (
    assert_same_sample,
    one_part,
    temporal_graph,
    temporal_hetero_graph,
)
from multiproc import run_workers

from pyg_orch.distributed import load_partition, partition_graph
from pyg_orch.sampling.collective import DistributedNeighborSampler
from pyg_orch.sampling.multi_hop import sample_multi_hop
from pyg_orch.topology.graph import GraphTopology

NUM_NODES = 80


def seeds_of(rank, step):
    gen = torch.Generator().manual_seed(10 * rank + step)
    return torch.randint(0, NUM_NODES, (7, ), generator=gen)


def times_of(rank, step):
    gen = torch.Generator().manual_seed(1000 + 10 * rank + step)
    return torch.randint(5, 30, (7, ), generator=gen)


def _worker(rank, world_size, out_dir, fanouts, options, given_time,
            shift=0):
    part = load_partition(out_dir, rank)
    sampler = DistributedNeighborSampler(
        part, fanouts, generator=torch.Generator().manual_seed(rank),
        **options)
    out = []
    for step in range(3):
        time = times_of(rank, step) + shift if given_time else None
        o = sampler.sample_from_nodes(seeds_of(rank, step), time)
        out.append((o.node, o.row, o.col, o.edge, o.batch,
                    o.num_sampled_nodes, o.num_sampled_edges,
                    o.metadata[1], sampler.stats.remote_requests))
    return out


@pytest.mark.parametrize('level,strategy,fanouts,weighted,times', [
    ('node', 'uniform', [-1, -1], False, 'int'),
    ('edge', 'uniform', [-1, -1], False, 'int'),
    ('node', 'last', [2, 2], False, 'int'),
    ('edge', 'last', [3, 2], False, 'int'),
    ('node', 'uniform', [-1, -1], True, 'int'),
    # Floating-point times in the partition (seed times too), and integer
    # times bounded by floating-point seed times:
    ('node', 'uniform', [-1, -1], False, 'float'),
    ('node', 'last', [2, 2], False, 'float'),
    ('edge', 'last', [3, 2], False, 'float'),
    ('edge', 'uniform', [-1, -1], False, 'float_seeds')])
def test_temporal_equals_single_machine(tmp_path, level, strategy, fanouts,
                                        weighted, times):
    data = temporal_graph()
    if times == 'float':
        data.time = data.time.to(torch.float32) + 0.5
        data.edge_time = data.edge_time.to(torch.float32) + 0.5
    shift = 0 if times == 'int' else 0.25
    time_attr = 'time' if level == 'node' else 'edge_time'
    weight_attr = 'edge_weight' if weighted else None
    given_time = level == 'edge'  # Edge-level times need seed times.
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    results = run_workers(
        _worker, 2, args=(str(info.out_dir), fanouts,
                          {'time_attr': time_attr, 'weight_attr': weight_attr,
                           'temporal_strategy': strategy}, given_time, shift),
        timeout=60)
    topo = GraphTopology.from_data(data, time_attr=time_attr,
                                   weight_attr=weight_attr)
    src_all, dst_all = data.edge_index
    remote = filtered = 0
    for rank, steps in enumerate(results):
        for step, out in enumerate(steps):
            node, row, col, edge, batch, nsn, nse, seed_time, rr = out
            seeds = seeds_of(rank, step)
            want_time = times_of(rank, step) + shift if given_time else \
                data.time[seeds]
            assert seed_time.dtype == want_time.dtype
            assert torch.equal(seed_time, want_time)
            ref = sample_multi_hop(topo, {None: fanouts}, {None: seeds},
                                   disjoint=True,
                                   seed_time={None: want_time},
                                   temporal_strategy=strategy)
            assert_same_sample(out, ref)  # Order included.
            # Nothing later than the subgraph's seed time:
            t = data.time[src_all[edge]] if level == 'node' else \
                data.edge_time[edge]
            assert bool((t <= want_time[batch[col]]).all())
            if weighted:
                assert bool((data.edge_weight[edge] > 0).all())
            # Some in-edges really were left out by time:
            indeg = torch.bincount(dst_all, minlength=NUM_NODES)
            filtered += int(indeg[node[:seeds.numel()]].sum()) - nse[0]
            remote += rr
    assert remote > 0 and filtered > 0


def _loader_worker(rank, world_size, out_dir, seeds, times):
    from pyg_orch import HybridNeighborLoader
    loader = HybridNeighborLoader(out_dir, [-1, -1], batch_size=4,
                                  input_nodes=seeds, input_time=times,
                                  time_attr='time', device='cpu')
    return [(b.n_id, b.batch, b.edge_index, b.e_id, b.x, b.seed_time,
             b.batch_size) for b in loader]


@pytest.mark.parametrize('floating', [False, True])
def test_loader_input_time_equals_hybrid_loader(tmp_path, floating):
    from pyg_orch import HybridNeighborLoader
    data = temporal_graph()
    # The seeds of all ranks with their times; each rank keeps its own:
    seeds = torch.arange(0, NUM_NODES, 5)
    times = torch.randint(5, 30, (seeds.numel(), ),
                          generator=torch.Generator().manual_seed(3))
    if floating:
        data.time = data.time.to(torch.float32) + 0.5
        times = times.to(torch.float64) + 0.25
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    results = run_workers(_loader_worker, 2,
                          args=(str(info.out_dir), seeds, times), timeout=60)
    for rank, batches in enumerate(results):
        mine = load_partition(info.out_dir, rank).node_part[seeds] == rank
        ref = list(HybridNeighborLoader(
            data, [-1, -1], batch_size=4, input_nodes=seeds[mine],
            input_time=times[mine], time_attr='time', device='cpu'))
        ours = [b for b in batches if b[6] > 0]
        assert len(ours) == len(ref) > 0
        for (n_id, batch, edge_index, e_id, x, seed_time, bs), b in zip(
                ours, ref):
            assert bs == b.batch_size
            assert torch.equal(n_id, b.n_id)
            assert torch.equal(batch, b.batch)
            assert torch.equal(edge_index, b.edge_index)
            assert torch.equal(e_id, b.e_id)
            assert seed_time.dtype == b.seed_time.dtype == times.dtype
            assert torch.equal(seed_time, b.seed_time)
            assert torch.equal(x, data.x[n_id])


def test_loader_input_time_nan(tmp_path):
    from pyg_orch import HybridNeighborLoader
    data = temporal_graph()
    info = partition_graph(data, 1, tmp_path / 'p', 'random',
                           progress=False)
    times = torch.full((NUM_NODES, ), 20.0)
    times[3] = float('nan')
    with pytest.raises(ValueError, match="'input_time' holds NaN"):
        HybridNeighborLoader(str(info.out_dir), [2], batch_size=4,
                             input_nodes=torch.arange(NUM_NODES),
                             input_time=times, time_attr='time',
                             device='cpu')


def _hetero_worker(rank, world_size, out_dir):
    part = load_partition(out_dir, rank)
    sampler = DistributedNeighborSampler(part, [-1, -1], time_attr='time')
    seeds = torch.arange(rank, 60, 4)
    o = sampler.sample_from_nodes(('a', seeds))
    return seeds, o.node, o.batch, o.row, o.col, o.edge


@pytest.mark.parametrize('all_types,floating', [(True, False),
                                                 (False, False),
                                                 (True, True)])
def test_hetero_node_level_equals_single_machine(tmp_path, all_types,
                                                 floating):
    from pyg_orch import HybridNeighborLoader
    data = temporal_hetero_graph()
    if floating:  # Float32 on one node type, float64 on the others.
        for t in data.node_types:
            data[t].time = data[t].time.to(
                torch.float32 if t == 'a' else torch.float64) + 0.5
    if not all_types:  # As in PyG: node type 'c' is not filtered by time.
        del data['c'].time
    info = partition_graph(data, 2, tmp_path / 'h', 'random',
                           progress=False)
    results = run_workers(_hetero_worker, 2, args=(str(info.out_dir), ),
                          timeout=60)
    for seeds, node, batch, row, col, edge in results:
        (ref, ) = list(HybridNeighborLoader(
            data, [-1, -1], batch_size=seeds.numel(),
            input_nodes=('a', seeds), time_attr='time', device='cpu'))
        for t in data.node_types:
            assert torch.equal(node[t], ref[t].n_id), t
            assert torch.equal(batch[t], ref[t].batch), t
        for et in data.edge_types:
            assert torch.equal(edge[et], ref[et].e_id), et
            assert torch.equal(torch.stack([row[et], col[et]]),
                               ref[et].edge_index), et


def _error_worker(rank, world_size, out_dir, time_attr):
    part = load_partition(out_dir, rank)
    try:
        DistributedNeighborSampler(part, [2], time_attr=time_attr)
    except (ValueError, NotImplementedError) as e:
        return type(e).__name__, str(e)
    return None


def test_times_not_one_number_per_node_fail_every_rank(tmp_path):
    data = temporal_graph()
    data.ptime = torch.stack([data.time, data.time], dim=1)  # Two per node.
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    errors = run_workers(_error_worker, 2, args=(str(info.out_dir), 'ptime'),
                         timeout=60)
    assert all(e is not None and e[0] == 'ValueError'
               and 'one timestamp' in e[1] for e in errors)


def test_temporal_errors(tmp_path):
    data = temporal_graph()
    part = one_part(data, tmp_path / 'p')
    with pytest.raises(ValueError, match='neither a node-level'):
        DistributedNeighborSampler(part, [2], time_attr='nope')
    with pytest.raises(ValueError, match="'temporal_strategy'"):
        DistributedNeighborSampler(part, [2], time_attr='time',
                                   temporal_strategy='recent')
    with pytest.raises(NotImplementedError, match='not split'):
        DistributedNeighborSampler(part, [2], time_attr='time',
                                   topology={None: part.csc})
    edge_level = DistributedNeighborSampler(part, [2], time_attr='edge_time')
    with pytest.raises(ValueError, match='Seed time needs to be specified'):
        edge_level.sample_from_nodes(torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="'seed_time' must hold"):
        edge_level.sample_from_nodes(torch.tensor([0, 1]),
                                     torch.tensor([3]))
    with pytest.raises(ValueError, match="'seed_time' is for temporal"):
        DistributedNeighborSampler(part, [2]).sample_from_nodes(
            torch.tensor([0]), torch.tensor([3]))
    # Temporal subgraphs are disjoint, as in PyG:
    node_level = DistributedNeighborSampler(part, [-1], time_attr='time')
    assert node_level.disjoint and node_level.is_temporal
    out = node_level.sample_from_nodes(torch.tensor([4, 4]))
    assert out.batch is not None and out.batch[:2].tolist() == [0, 1]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_cuda_temporal_one_part(tmp_path):
    # One part sampled on the GPU equals the CPU sampler (node-level and
    # edge-level times, 'uniform' at full fan-out and 'last').
    data = temporal_graph()
    part = one_part(data, tmp_path / 'p')
    cuda = torch.device('cuda', torch.cuda.current_device())
    seeds, times = seeds_of(0, 0), times_of(0, 0)
    for time_attr, strategy, fanouts in (('time', 'uniform', [-1, -1]),
                                         ('edge_time', 'uniform', [-1, -1]),
                                         ('time', 'last', [2, 2])):
        outs = [DistributedNeighborSampler(
            part, fanouts, device=device, time_attr=time_attr,
            temporal_strategy=strategy).sample_from_nodes(seeds, times)
            for device in ('cuda', 'cpu')]
        for key in ('node', 'row', 'col', 'edge', 'batch'):
            a, b = getattr(outs[0], key), getattr(outs[1], key)
            assert a.device == cuda
            assert torch.equal(a.cpu(), b), (time_attr, strategy, key)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
@pytest.mark.parametrize('level', ['node', 'edge'])
def test_cuda_float_times_one_part(tmp_path, level):
    # One part sampled on the GPU with floating-point times: the CPU
    # sampler's batches ('uniform' at full fan-out, and 'last').
    data = temporal_graph()
    data.time = data.time.to(torch.float32) + 0.5
    data.edge_time = data.edge_time.to(torch.float64) + 0.5
    part = one_part(data, tmp_path / 'p')
    seeds = seeds_of(0, 0)
    time = times_of(0, 0) + 0.25 if level == 'edge' else None
    attr = 'time' if level == 'node' else 'edge_time'
    for strategy, fanouts in (('uniform', [-1, -1]), ('last', [2, 2])):
        outs = [DistributedNeighborSampler(
            part, fanouts, device=device, time_attr=attr,
            temporal_strategy=strategy).sample_from_nodes(seeds, time)
            for device in ('cuda', 'cpu')]
        gpu, cpu = outs
        for key in ('node', 'row', 'col', 'edge', 'batch'):
            a, b = getattr(gpu, key), getattr(cpu, key)
            assert a.is_cuda and torch.equal(a.cpu(), b), (strategy, key)
        assert gpu.metadata[1].dtype == cpu.metadata[1].dtype
        assert torch.equal(gpu.metadata[1].cpu(), cpu.metadata[1])
        assert cpu.edge.numel() > 0
