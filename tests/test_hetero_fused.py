"""The fused Triton sampling path on heterogeneous graphs against the
vectorized PyTorch path. The kernels run on a GPU, or on the CPU under
Triton's interpreter (``TRITON_INTERPRET=1``); the backend choice is checked
everywhere."""
import os

import pytest
import torch
from torch_geometric.data import HeteroData

from pyg_orch import PlacementOptions
from pyg_orch.sampling.interface import BackendConfig
from pyg_orch.core.triton_util import triton_available
from pyg_orch.sampling.backends import choose_backend
from pyg_orch.sampling.multi_hop import sample_multi_hop
from pyg_orch.core.buffers import DenseBufferPool
from pyg_orch.topology.graph import GraphTopology

from conftest import random_hetero_graph

if torch.cuda.is_available() and triton_available():
    DEVICE = torch.device('cuda')
elif os.environ.get('TRITON_INTERPRET') == '1' and triton_available():
    DEVICE = torch.device('cpu')
else:
    DEVICE = None
needs_kernels = pytest.mark.skipif(
    DEVICE is None, reason='needs Triton and a CUDA device (or '
    'TRITON_INTERPRET=1)')

FIELDS = ('node', 'row', 'col', 'edge')
A_B, B_A, C_A = ('a', 'to', 'b'), ('b', 'to', 'a'), ('c', 'in', 'a')
A_C, B_B = ('a', 'has', 'c'), ('b', 'self', 'b')
# Node type 'd' has no edges at all; B_B has none either.
SIZES = {'a': 40, 'b': 30, 'c': 20, 'd': 10}
EDGES = {A_B: 60, B_A: 50, C_A: 40, A_C: 30, B_B: 0}


def small_graph(seed: int = 0) -> HeteroData:
    return random_hetero_graph(seed, SIZES, EDGES)


def full_fanout(hops: int = 2):
    r"""The small graph on :obj:`DEVICE` and, per edge type, fan-outs that
    take every neighbor (no randomness left) for :obj:`hops` hops."""
    data = small_graph()
    topo = GraphTopology.from_data(data, device=DEVICE)
    k = max_degree(data)
    return data, topo, {et: [k] * hops for et in topo.edge_types}


def max_degree(data: HeteroData) -> int:
    return max((int(torch.bincount(s.edge_index[1]).max())
                for s in data.edge_stores if s.edge_index.numel() > 0),
               default=0)


def run_fused(topo, num_neighbors, seeds, replace=False, seed=0, hot=None):
    from pyg_orch.sampling.triton.hetero_fused import fused_sample_hetero
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    return fused_sample_hetero(topo, num_neighbors,
                               {t: s.to(DEVICE) for t, s in seeds.items()},
                               replace, gen, DenseBufferPool(), DEVICE, hot)


def run_torch(topo, num_neighbors, seeds, hot=None):
    return sample_multi_hop(topo, num_neighbors,
                            {t: s.to(DEVICE) for t, s in seeds.items()},
                            buffers=DenseBufferPool(), prune_last_hop=hot)


def assert_equal(fused, ref):
    for f in FIELDS:
        a, b = getattr(fused, f), getattr(ref, f)
        assert set(a) == set(b), f
        for k in b:
            assert torch.equal(a[k], b[k]), (f, k)
    assert fused.num_sampled_nodes == ref.num_sampled_nodes
    assert fused.num_sampled_edges == ref.num_sampled_edges


SEEDS = [
    {'a': torch.tensor([5, 7, 5, 1, 3, 39])},  # A duplicate seed.
    {'b': torch.tensor([1, 2, 29]), 'c': torch.tensor([0, 19])},
    {'d': torch.tensor([0, 3])},  # Never expanded: no edges into 'd'.
]


@needs_kernels
@pytest.mark.parametrize('seeds', SEEDS)
def test_full_fanout_matches_torch_path(seeds):
    data = small_graph()
    topo = GraphTopology.from_data(data, device=DEVICE)
    k = max_degree(data)  # No randomness left.
    num_neighbors = {et: [k, k, k] for et in topo.edge_types}
    assert_equal(run_fused(topo, num_neighbors, seeds),
                 run_torch(topo, num_neighbors, seeds))


@needs_kernels
@pytest.mark.parametrize('seeds', SEEDS)
def test_all_neighbors_match_torch_path(seeds):
    # -1: the edge type's largest in-degree without replacement, which
    # takes every neighbor in list order, as the PyTorch path does (no
    # randomness left: -1 or 0 everywhere).
    data = small_graph(3)
    topo = GraphTopology.from_data(data, device=DEVICE)
    num_neighbors = {A_B: [-1, 0, -1], B_A: [-1, -1, 0], C_A: [0, -1, -1],
                     A_C: [-1, 0, -1], B_B: [-1, -1, -1]}
    out = run_fused(topo, num_neighbors, seeds)
    assert_equal(out, run_torch(topo, num_neighbors, seeds))
    first = run_torch(topo, {et: v[:1] for et, v in num_neighbors.items()},
                      seeds)
    for et in (A_B, B_A, A_C):  # Hop 0 in full: every in-edge of a seed.
        dst = seeds.get(et[-1], torch.zeros(0, dtype=torch.long))
        deg = torch.bincount(data[et].edge_index[1],
                             minlength=SIZES[et[-1]])
        want = deg[dst].sum()  # Seeds given twice are expanded twice.
        assert out.num_sampled_edges[et][0] == int(want) == \
            first.num_sampled_edges[et][0]


@needs_kernels
def test_edge_index_of_every_edge_type_is_a_view():
    # Each edge type's rows and columns lie back to back in the batch's one
    # copy of its edges, so its edge_index needs no further copy.
    from pyg_orch.loader.assemble import stack_edges
    _, topo, num_neighbors = full_fanout()
    out = run_fused(topo, num_neighbors, SEEDS[0])
    ref = run_torch(topo, num_neighbors, SEEDS[0])
    storages = set()
    for et, row in out.row.items():
        col = out.col[et]
        edge_index = stack_edges(row, col)
        assert torch.equal(edge_index, torch.stack([ref.row[et],
                                                    ref.col[et]]))
        if row.numel() > 0:
            assert edge_index.data_ptr() == row.data_ptr()
            assert edge_index.is_contiguous()
            storages.add(row.untyped_storage().data_ptr())
    assert len(storages) == 1  # One copy of the batch's edges.


@needs_kernels
def test_all_neighbors_with_replacement_is_refused():
    data = small_graph()
    topo = GraphTopology.from_data(data, device=DEVICE)
    with pytest.raises(ValueError, match="'num_neighbors'.*-1"):
        run_fused(topo, {et: [-1] for et in topo.edge_types},
                  {'a': torch.tensor([1])}, replace=True)


@needs_kernels
def test_per_type_fanouts_match_torch_path():
    data = small_graph(1)
    topo = GraphTopology.from_data(data, device=DEVICE)
    k = max_degree(data)
    num_neighbors = {A_B: [k, 0], B_A: [0, k], C_A: [k, k], A_C: [0, 0],
                     B_B: [k, k]}
    seeds = {'a': torch.arange(0, 40, 3), 'b': torch.tensor([4, 8])}
    assert_equal(run_fused(topo, num_neighbors, seeds),
                 run_torch(topo, num_neighbors, seeds))


@needs_kernels
def test_pruned_last_hop_matches_torch_path():
    _, topo, num_neighbors = full_fanout()
    hot = {'a': (torch.arange(40) % 3 == 0).to(DEVICE),
           'b': (torch.arange(30) % 2 == 0).to(DEVICE)}
    seeds = {'a': torch.tensor([1, 2, 4, 5])}
    assert_equal(run_fused(topo, num_neighbors, seeds, hot=hot),
                 run_torch(topo, num_neighbors, seeds, hot=hot))


@needs_kernels
@pytest.mark.parametrize('replace', [False, True])
def test_invariants(replace):
    data = small_graph(2)
    topo = GraphTopology.from_data(data, device=DEVICE)
    num_neighbors = {A_B: [2, 1], B_A: [3, 2], C_A: [1, 2], A_C: [2, 0],
                     B_B: [4, 4]}
    seeds = {'a': torch.randperm(40)[:12], 'c': torch.tensor([3, 0])}
    out = run_fused(topo, num_neighbors, seeds, replace, seed=7)
    node = {t: v.cpu() for t, v in out.node.items()}
    for t, v in node.items():  # Seeds first, no node twice per type.
        assert v.unique().numel() == v.numel()
        s = seeds.get(t, torch.zeros(0, dtype=torch.long))
        assert torch.equal(v[:s.numel()], s)
        assert sum(out.num_sampled_nodes[t]) == v.numel()
    ptr = {t: torch.tensor([0] + out.num_sampled_nodes[t]).cumsum(0)
           for t in node}
    for et in topo.edge_types:
        src_t, dst_t = et[0], et[-1]
        row, col, e = (getattr(out, f)[et].cpu() for f in FIELDS[1:])
        assert sum(out.num_sampled_edges[et]) == row.numel()
        src, dst = data[et].edge_index
        assert torch.equal(src[e], node[src_t][row])  # Edges exist.
        assert torch.equal(dst[e], node[dst_t][col])
        deg = torch.bincount(dst, minlength=SIZES[dst_t])
        count = torch.bincount(col, minlength=node[dst_t].numel())
        edge_ptr = [0] + torch.tensor(out.num_sampled_edges[et]).cumsum(
            0).tolist()
        for h, k in enumerate(num_neighbors[et]):
            # Hop h expands the nodes of type dst_t new in hop h:
            frontier = torch.arange(int(ptr[dst_t][h]),
                                    int(ptr[dst_t][h + 1]))
            d = deg[node[dst_t][frontier]]
            expected = torch.where(d > 0, k, 0) if replace else d.clamp(
                max=k)
            hop_col = col[edge_ptr[h]:edge_ptr[h + 1]]
            assert bool((hop_col >= ptr[dst_t][h]).all())
            assert bool((hop_col < ptr[dst_t][h + 1]).all())
            assert torch.equal(count[frontier], expected)
        if not replace and e.numel() > 0:  # No neighbor twice per node.
            pairs = col * (e.max() + 1) + e
            assert pairs.unique().numel() == pairs.numel()
    assert node['d'].numel() == 0 and out.row[B_B].numel() == 0


@needs_kernels
def test_plans_are_reused_and_leave_buffers_clean():
    from pyg_orch.sampling.triton.hetero_fused import HeteroFusedSampler
    data = small_graph()
    topo = GraphTopology.from_data(data, device=DEVICE)
    k = max_degree(data)
    num_neighbors = {et: [k, 2] for et in topo.edge_types}
    sampler, buffers = HeteroFusedSampler(use_graphs=False), DenseBufferPool()
    seeds = {'a': torch.tensor([3, 4, 9]).to(DEVICE)}
    outs = []
    for step in range(2):  # The same plan twice: equal batches.
        gen = torch.Generator(device=DEVICE).manual_seed(5)
        outs.append(sampler(topo, num_neighbors, seeds, False, gen, buffers,
                            DEVICE))
    assert len(sampler._local.plans) == 1
    assert_equal(outs[0], outs[1])
    for buf in buffers._local.bufs.values():
        assert bool((buf == buf[0]).all())  # Back to its fill value.


def _config(data, device, **kwargs) -> BackendConfig:
    topo = GraphTopology.from_data(data)
    num_neighbors = kwargs.pop('num_neighbors',
                               {et: [3, 2] for et in topo.edge_types})
    return BackendConfig(topology=topo, num_neighbors=num_neighbors,
                         device=torch.device(device), **kwargs)


@pytest.mark.skipif(not triton_available(), reason='needs Triton')
def test_auto_backend_choice_for_hetero():
    # Decided from the configuration alone: no CUDA device needed.
    data = small_graph()
    assert choose_backend('auto', _config(data, 'cuda')) == 'triton'
    assert choose_backend('auto', _config(data, 'cpu')) == 'torch'
    # What the fused kernels do not take goes to the PyTorch path (here
    # with the topology in host memory, which it samples on the CPU; see
    # test_neighbor_draw.py for 'triton_draw' with a topology on the GPU).
    assert choose_backend('auto', _config(data, 'cuda',
                                          disjoint=True)) == 'torch'
    assert choose_backend('auto', _config(data, 'cuda',
                                          induced=True)) == 'torch'
    assert choose_backend('auto', _config(data, 'cuda',
                                          relabel='sort')) == 'torch'
    # All neighbors (-1): fused without replacement where in-degrees are
    # small, else the PyTorch path.
    full = {et: [-1, 2] for et in data.edge_types}
    assert choose_backend('auto', _config(data, 'cuda',
                                          num_neighbors=full)) == 'triton'
    assert choose_backend('auto', _config(data, 'cuda', num_neighbors=full,
                                          replace=True)) == 'torch'
    hub = small_graph()
    hub[A_B].edge_index = torch.stack([torch.arange(40).repeat(2),
                                       torch.zeros(80, dtype=torch.long)])
    assert choose_backend('auto', _config(hub, 'cuda',
                                          num_neighbors=full)) == 'torch'
    # In-degree 80 is fine where that edge type is not sampled in full:
    part = {**full, A_B: [2, 2]}
    assert choose_backend('auto', _config(hub, 'cuda',
                                          num_neighbors=part)) == 'triton'
    with pytest.raises(ValueError, match="backend='triton' needs"):
        choose_backend('triton', _config(data, 'cuda', disjoint=True))


@pytest.mark.gpu
@pytest.mark.skipif(not triton_available(), reason='needs Triton')
def test_loader_uses_fused_backend_on_cuda():
    from pyg_orch import HybridNeighborLoader
    data = small_graph()
    for placement in ('device', 'host'):
        loader = HybridNeighborLoader(data, [3, 2], batch_size=8,
                                      input_nodes='a', device='cuda', seed=0,
                                      placement=PlacementOptions(
                                          topology=placement))
        assert loader.node_sampler.backend == 'triton'
        seen = 0
        for batch in loader:
            seen += batch['a'].batch_size
            for t in data.node_types:
                n_id = batch[t].n_id.cpu()
                assert torch.equal(batch[t].x.cpu(), data[t].x[n_id])
            for et in data.edge_types:
                store = batch[et]
                src, dst = data[et].edge_index[:, store.e_id.cpu()]
                ei = store.edge_index.cpu()
                assert torch.equal(src, batch[et[0]].n_id.cpu()[ei[0]])
                assert torch.equal(dst, batch[et[-1]].n_id.cpu()[ei[1]])
        assert seen == SIZES['a']


@pytest.mark.gpu
@pytest.mark.skipif(not triton_available(), reason='needs Triton')
@pytest.mark.parametrize('replace', [False, True])
def test_cuda_graph_replay_matches_eager(replace):
    from pyg_orch.sampling.triton.hetero_fused import HeteroFusedSampler
    data = small_graph()
    topo = GraphTopology.from_data(data, device='cuda')
    num_neighbors = {et: [3, 2] for et in topo.edge_types}
    graphs, eager = HeteroFusedSampler(True), HeteroFusedSampler(False)
    for step in range(3):  # Capture once, replay twice.
        seeds = {'a': torch.randperm(40)[:16].cuda()}
        outs = []
        for sampler in (graphs, eager):
            gen = torch.Generator(device='cuda').manual_seed(step)
            outs.append(sampler(topo, num_neighbors, seeds, replace, gen,
                                DenseBufferPool(), torch.device('cuda')))
        assert_equal(*outs)


@needs_kernels
def test_uniform_subsets_with_fanouts_below_the_hops_largest():
    # Every 'u' node has 6 in-neighbors of each edge type; fan-outs 3 and 1
    # in one launch (the kernel loops to the hop's largest fan-out).
    from itertools import combinations
    n = 500
    data = HeteroData()
    data['u'].num_nodes, data['v'].num_nodes, data['w'].num_nodes = n, 6, 6
    src, dst = torch.arange(6).repeat(n), torch.arange(n).repeat_interleave(6)
    data['v', 'a', 'u'].edge_index = torch.stack([src, dst])
    data['w', 'b', 'u'].edge_index = torch.stack([src, dst])
    topo = GraphTopology.from_data(data, device=DEVICE)
    num_neighbors = {('v', 'a', 'u'): [3], ('w', 'b', 'u'): [1]}
    subsets, singles, reps = {}, torch.zeros(6), 6
    for rep in range(reps):
        out = run_fused(topo, num_neighbors, {'u': torch.arange(n)},
                        seed=rep)
        e = out.edge[('v', 'a', 'u')].cpu().view(n, 3) % 6
        for row in e.sort(dim=1)[0].tolist():
            subsets[tuple(row)] = subsets.get(tuple(row), 0) + 1
        e = out.edge[('w', 'b', 'u')].cpu() % 6
        singles += torch.bincount(e, minlength=6)
    all_subsets = list(combinations(range(6), 3))
    assert set(subsets) == set(all_subsets)
    expected = reps * n / len(all_subsets)
    chi2 = sum((subsets[s] - expected)**2 / expected for s in all_subsets)
    assert chi2 < 43.82  # 0.999 quantile of chi2(19).
    expected = reps * n / 6
    chi2 = float(((singles - expected)**2 / expected).sum())
    assert chi2 < 20.52  # 0.999 quantile of chi2(5).


def test_hetero_batches_are_launched_without_waiting():
    # On an asynchronous backend (the fused path on a GPU) a heterogeneous
    # batch is queued by `launch_from_nodes` and read on `result()`, as a
    # homogeneous one; the output equals `sample_from_nodes`. A stub
    # backend stands in for the GPU here.
    from torch_geometric.sampler import NodeSamplerInput

    from pyg_orch import HybridNeighborSampler
    from pyg_orch.sampling.pending import PendingSample

    data = small_graph(3)
    fanouts = {et: [3, 2] for et in data.edge_types}

    class Deferred:
        def __init__(self, backend):
            self.backend, self.launched = backend, 0
            self.asynchronous = True

        def sample(self, request):
            return self.backend.sample(request)

        def launch(self, request):
            self.launched += 1
            return PendingSample(lambda: self.backend.sample(request))

    def sampler():
        s = HybridNeighborSampler(data, fanouts, seed=7)
        s._backend = Deferred(s._backend)
        return s

    a, b = sampler(), sampler()
    inputs = NodeSamplerInput(torch.arange(5), torch.tensor([0, 3, 5, 7, 9]),
                              input_type='a')
    pending = a.launch_from_nodes(inputs)
    assert not pending.done and a._backend.launched == 1
    got, want = pending.result(), b.sample_from_nodes(inputs)
    for field in FIELDS:
        assert getattr(got, field).keys() == getattr(want, field).keys()
        for key, value in getattr(want, field).items():
            assert torch.equal(getattr(got, field)[key], value), (field, key)
    assert got.metadata[0].tolist() == list(range(5))
