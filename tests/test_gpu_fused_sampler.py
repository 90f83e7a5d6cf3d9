"""The fused Triton sampling path against the vectorized PyTorch path. Runs on
a GPU, or on the CPU under Triton's interpreter (``TRITON_INTERPRET=1``)."""
import math
import os
from itertools import combinations

import pytest
import torch
from torch_geometric.data import Data

from pyg_orch import PlacementOptions
from pyg_orch.sampling.triton.fused_sampler import fused_sample_multi_hop
from pyg_orch.sampling.triton.fused_sampler import triton_available
from pyg_orch.sampling.multi_hop import sample_multi_hop
from pyg_orch.core.buffers import DenseBufferPool
from pyg_orch.topology.graph import GraphTopology

from conftest import random_graph

if not triton_available():
    pytest.skip('needs Triton', allow_module_level=True)
if torch.cuda.is_available():
    DEVICE = torch.device('cuda')
elif os.environ.get('TRITON_INTERPRET') == '1':
    DEVICE = torch.device('cpu')
else:
    pytest.skip('needs a CUDA device (or TRITON_INTERPRET=1)',
                allow_module_level=True)

FIELDS = ('node', 'row', 'col', 'edge')


def run_fused(topo, fanouts, seeds, replace=False, seed=0, hot=None):
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    return fused_sample_multi_hop(topo.csc[None], topo.num_nodes[None],
                                  fanouts, seeds.to(DEVICE), replace, gen,
                                  DenseBufferPool(), DEVICE, hot)


def check_edges(data, out):
    node, row, col, e = (getattr(out, f)[None].cpu() for f in FIELDS)
    src, dst = data.edge_index
    assert torch.equal(src[e], node[row])
    assert torch.equal(dst[e], node[col])


@pytest.mark.parametrize('index_dtype', [torch.int32, torch.int64])
def test_matches_torch_path_for_full_fanout(index_dtype):
    data = random_graph()
    topo = GraphTopology.from_data(data, device=DEVICE)
    for t in topo.csc.values():
        t.row, t.colptr = t.row.to(index_dtype), t.colptr.to(index_dtype)
    seeds = torch.tensor([5, 7, 5, 100, 3, 399])
    max_deg = int(torch.bincount(data.edge_index[1]).max())
    fanouts = [max_deg + 1, max_deg + 1]  # No randomness left.
    fused = run_fused(topo, fanouts, seeds)
    ref = sample_multi_hop(topo, {None: fanouts}, {None: seeds.to(DEVICE)},
                           buffers=DenseBufferPool())
    for f in FIELDS:
        assert torch.equal(getattr(fused, f)[None], getattr(ref, f)[None])
    assert fused.num_sampled_nodes == ref.num_sampled_nodes
    assert fused.num_sampled_edges == ref.num_sampled_edges


def test_matches_torch_path_over_many_slot_blocks():
    # Thousands of slots per hop: new nodes are ranked across many blocks
    # of slots (block counts, then a scan within each block), and duplicate
    # seeds keep their places.
    data = random_graph(3000, 24000, seed=4)
    topo = GraphTopology.from_data(data, device=DEVICE)
    seeds = torch.cat([torch.randperm(3000)[:200], torch.tensor([7, 7, 9])])
    max_deg = int(torch.bincount(data.edge_index[1]).max())
    fanouts = [max_deg, max_deg, 2 * max_deg]  # No randomness left.
    fused = run_fused(topo, fanouts, seeds)
    ref = sample_multi_hop(topo, {None: fanouts}, {None: seeds.to(DEVICE)},
                           buffers=DenseBufferPool())
    assert fused.node[None].numel() > 2000
    for f in FIELDS:
        assert torch.equal(getattr(fused, f)[None], getattr(ref, f)[None])
    assert fused.num_sampled_nodes == ref.num_sampled_nodes
    assert fused.num_sampled_edges == ref.num_sampled_edges


@pytest.mark.parametrize('replace', [False, True])
@pytest.mark.parametrize('fanouts', [[3, 2], [5, 0, 2], [0, 4], [1, 1]])
def test_invariants(replace, fanouts):
    data = random_graph()
    topo = GraphTopology.from_data(data, device=DEVICE)
    seeds = torch.randperm(400)[:32]
    out = run_fused(topo, fanouts, seeds, replace)
    check_edges(data, out)
    node = out.node[None].cpu()
    assert torch.equal(node[:32], seeds)
    assert node.unique().numel() == node.numel()
    assert sum(out.num_sampled_nodes[None]) == node.numel()
    assert sum(out.num_sampled_edges[None]) == out.row[None].numel()
    deg = torch.bincount(data.edge_index[1], minlength=400)
    col, e = out.col[None].cpu(), out.edge[None].cpu()
    count = torch.bincount(col, minlength=node.numel())
    ptr = [0]
    for n in out.num_sampled_nodes[None]:
        ptr.append(ptr[-1] + n)
    for h, k in enumerate(fanouts):
        frontier = torch.arange(ptr[h], ptr[h + 1])
        d = deg[node[frontier]]
        expected = torch.where(d > 0, k, 0) if replace else d.clamp(max=k)
        assert torch.equal(count[frontier], expected)
    if not replace and e.numel() > 0:  # No neighbor twice per node:
        pairs = col * (e.max() + 1) + e
        assert pairs.unique().numel() == pairs.numel()


def test_uniform_subsets():
    # Star: node 0 has 6 in-neighbors; every 3-subset equally likely.
    n = 2000
    src = torch.arange(1, 7).repeat(n)
    dst = torch.arange(n).repeat_interleave(6)
    data = Data(edge_index=torch.stack([src + n, dst]), num_nodes=n + 7)
    topo = GraphTopology.from_data(data, device=DEVICE)
    counts = {}
    for rep in range(10):
        out = run_fused(topo, [3], torch.arange(n), seed=rep)
        e = out.edge[None].cpu().view(n, 3) % 6
        for row in e.sort(dim=1)[0].tolist():
            counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    subsets = list(combinations(range(6), 3))
    assert set(counts) == set(subsets)
    expected = 10 * n / len(subsets)
    chi2 = sum((counts[s] - expected)**2 / expected for s in subsets)
    assert chi2 < 43.82  # 0.999 quantile of chi2(19).


def test_pruned_last_hop_matches_torch_path():
    data = random_graph()
    topo = GraphTopology.from_data(data, device=DEVICE)
    hot = torch.zeros(400, dtype=torch.bool)
    hot[::3] = True
    seeds = torch.tensor([1, 2, 4, 5])
    fanouts = [40, 40]
    fused = run_fused(topo, fanouts, seeds, hot=hot.to(DEVICE))
    ref = sample_multi_hop(topo, {None: fanouts}, {None: seeds.to(DEVICE)},
                           buffers=DenseBufferPool(),
                           prune_last_hop={None: hot.to(DEVICE)})
    for f in FIELDS:
        assert torch.equal(getattr(fused, f)[None], getattr(ref, f)[None])


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_pinned_host_topology_reads_zero_copy():
    data = random_graph()
    on_device = GraphTopology.from_data(data, device=DEVICE)
    on_host = GraphTopology.from_data(data).pin_memory()
    assert on_host.is_pinned
    seeds = torch.randperm(400)[:50]
    a = run_fused(on_device, [5, 3], seeds, seed=3)
    b = run_fused(on_host, [5, 3], seeds, seed=3)
    for f in FIELDS:  # Same Philox draws, same graph: same batch.
        assert torch.equal(getattr(a, f)[None], getattr(b, f)[None])


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_loader_uses_fused_backend():
    from pyg_orch import HybridNeighborLoader
    data = random_graph()
    data.x = torch.randn(400, 8)
    for placement in ('device', 'host'):
        loader = HybridNeighborLoader(data, [4, 3], batch_size=64,
                                      device='cuda', seed=0,
                                      placement=PlacementOptions(
                                          topology=placement))
        assert loader.node_sampler.backend == 'triton'
        batches = list(loader)
        assert sum(b.batch_size for b in batches) == 400
        for b in batches:
            assert b.x.is_cuda
            assert torch.equal(b.x.cpu(), data.x[b.n_id.cpu()])
            src, dst = data.edge_index[:, b.e_id.cpu()]
            assert torch.equal(src, b.n_id.cpu()[b.edge_index[0].cpu()])
            assert torch.equal(dst, b.n_id.cpu()[b.edge_index[1].cpu()])
    assert not math.isnan(loader.stats()['stages']['sample']['total_s'])


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
@pytest.mark.parametrize('replace', [False, True])
def test_cuda_graph_replay_matches_eager(replace):
    from pyg_orch.sampling.triton.fused_sampler import FusedSampler
    data = random_graph()
    topo = GraphTopology.from_data(data, device=DEVICE)
    graphs, eager = FusedSampler(use_graphs=True), FusedSampler(False)
    for step in range(3):  # Capture once, replay twice.
        seeds = torch.randperm(400)[:64]
        outs = []
        for sampler in (graphs, eager):
            gen = torch.Generator(device=DEVICE).manual_seed(step)
            outs.append(
                sampler(topo.csc[None], 400, [4, 3], seeds, replace, gen,
                        DenseBufferPool(), DEVICE))
        for f in FIELDS:
            assert torch.equal(getattr(outs[0], f)[None],
                               getattr(outs[1], f)[None])
        check_edges(data, outs[0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_capture_survives_the_garbage_collector_freeing_a_graph(monkeypatch):
    # An old CUDA graph in a reference cycle (a dropped loader's), freed by
    # an automatic collection while a plan is captured, invalidated the
    # capture ('operation failed due to a previous error during capture').
    import gc
    from pyg_orch.sampling.triton.fused_sampler import FusedPlan, FusedSampler
    data = random_graph()
    topo = GraphTopology.from_data(data, device=DEVICE)
    seeds = torch.randperm(400)[:64]

    def draw(sampler):
        gen = torch.Generator(device=DEVICE).manual_seed(5)
        return sampler(topo.csc[None], 400, [4, 3], seeds, False, gen,
                       DenseBufferPool(), DEVICE)

    ref = draw(FusedSampler(use_graphs=False))
    x = torch.zeros(8, device=DEVICE)
    old = [torch.cuda.CUDAGraph()]
    with torch.cuda.graph(old[0]):
        x.add_(1)
    enqueue = FusedPlan.enqueue
    captured = []

    def enqueue_with_garbage(plan):
        if torch.cuda.is_current_stream_capturing():
            cycle = [old.pop()]
            cycle.append(cycle)
            del cycle  # Garbage: only a collection frees it...
            junk = [[] for _ in range(20_000)]  # ... and this starts one.
            captured.append(len(junk))
        enqueue(plan)

    monkeypatch.setattr(FusedPlan, 'enqueue', enqueue_with_garbage)
    threshold = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        out = draw(FusedSampler(use_graphs=True))
    finally:
        gc.set_threshold(*threshold)
    assert captured == [20_000]
    for f in FIELDS:
        assert torch.equal(getattr(out, f)[None], getattr(ref, f)[None])


@pytest.mark.parametrize('use_graphs', [False, True])
def test_launch_then_collect_matches_call(use_graphs):
    # Batches launched back to back share the plan's buffers: launching the
    # second collects the first before its buffers are overwritten.
    if use_graphs and DEVICE.type != 'cuda':
        pytest.skip('CUDA graphs need CUDA')
    from pyg_orch.sampling.triton.fused_sampler import FusedSampler
    data = random_graph()
    topo = GraphTopology.from_data(data, device=DEVICE)
    seeds = [torch.randperm(400)[:50] for _ in range(3)]
    args = (topo.csc[None], 400, [4, 3])

    def draw(sampler, launch):
        gen = torch.Generator(device=DEVICE).manual_seed(7)
        buffers = DenseBufferPool()
        if not launch:
            return [sampler(*args, s, False, gen, buffers, DEVICE)
                    for s in seeds]
        pending = [sampler.launch(*args, s, False, gen, buffers, DEVICE)
                   for s in seeds]
        return [p.result() for p in reversed(pending)][::-1]

    ref = draw(FusedSampler(use_graphs), launch=False)
    out = draw(FusedSampler(use_graphs), launch=True)
    for a, b in zip(ref, out):
        for f in FIELDS:
            assert torch.equal(getattr(a, f)[None], getattr(b, f)[None])
        check_edges(data, b)


@pytest.mark.parametrize('use_graphs', [False, True])
def test_new_pruning_mask_reuses_the_plan(use_graphs):
    # The hot set changes (offload's trial, growth): one plan (one CUDA
    # graph) for every mask, each batch pruned with the mask it was given.
    if use_graphs and DEVICE.type != 'cuda':
        pytest.skip('CUDA graphs need CUDA')
    from pyg_orch.sampling.triton.fused_sampler import FusedSampler
    data = random_graph()
    topo = GraphTopology.from_data(data, device=DEVICE)
    sampler = FusedSampler(use_graphs)
    buffers = DenseBufferPool()
    seeds = torch.tensor([1, 2, 4, 5])
    fanouts = [40, 40]
    for step, every in enumerate([3, 2, 5, 2]):
        hot = torch.zeros(400, dtype=torch.bool)
        hot[::every] = True
        gen = torch.Generator(device=DEVICE).manual_seed(step)
        out = sampler(topo.csc[None], 400, fanouts, seeds, False, gen,
                      buffers, DEVICE, hot.to(DEVICE))
        ref = sample_multi_hop(topo, {None: fanouts},
                               {None: seeds.to(DEVICE)},
                               buffers=DenseBufferPool(),
                               prune_last_hop={None: hot.to(DEVICE)})
        for f in FIELDS:
            assert torch.equal(getattr(out, f)[None], getattr(ref, f)[None])
    assert len(sampler._local.plans) == 1
