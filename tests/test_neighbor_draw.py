"""The Triton neighbor draw (pyg_orch.sampling.triton.neighbor_draw) against
the PyTorch reference (pyg_orch.sampling.neighbors.sample_neighbors), and the
'triton_draw' backend that uses it: equal where the draw is determined (all
neighbors fit, or the most recent ones), valid and uniform where it is
random."""
import pytest
import torch
from conftest import random_graph, same_subgraphs, temporal_graph
from torch_geometric.data import Data

from pyg_orch import HybridNeighborLoader, PlacementOptions
from pyg_orch.core.triton_util import triton_available
from pyg_orch.sampling.neighbors import sample_neighbors
from pyg_orch.topology.graph import GraphTopology

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not triton_available(),
                                 reason='needs Triton')]


def _csc(seed: int = 0, num_nodes: int = 300, num_edges: int = 6000,
         time: bool = False):
    gen = torch.Generator().manual_seed(seed)
    data = Data(edge_index=torch.randint(0, num_nodes, (2, num_edges),
                                         generator=gen), num_nodes=num_nodes)
    kwargs = {}
    if time:
        data.edge_time = torch.randint(0, 50, (num_edges, ), generator=gen)
        kwargs['time_attr'] = 'edge_time'
    topo = GraphTopology.from_data(data, device='cuda', **kwargs)
    return topo.csc[None], num_nodes


def _draw(*args, **kwargs):
    from pyg_orch.sampling.triton.neighbor_draw import draw_neighbors
    out = draw_neighbors(*args, **kwargs)
    assert out is not None
    return out


def _bounds(csc, nodes, time_bound=None, last_k=None):
    start = csc.colptr[nodes].long()
    end = csc.colptr[nodes + 1].long()
    if time_bound is not None:
        for i in range(nodes.numel()):  # Plain Python: the reference.
            s, e = int(start[i]), int(end[i])
            t = csc.time[s:e].tolist()
            end[i] = s + sum(1 for x in t if x <= int(time_bound[i]))
        if last_k is not None:
            start = torch.maximum(start, end - last_k)
    return start, end


@pytest.mark.parametrize('temporal', [False, True])
def test_draw_equals_reference_where_determined(temporal):
    csc, n = _csc(1, time=temporal)
    gen = torch.Generator().manual_seed(0)
    nodes = torch.randint(0, n, (500, ), generator=gen).cuda()
    max_deg = int((csc.colptr[1:] - csc.colptr[:-1]).max())
    assert max_deg <= 64
    kw = {}
    if temporal:
        kw = dict(time=csc.time, time_bound=torch.randint(
            0, 50, (500, ), generator=gen).cuda())
    for k in (max_deg, 64):  # Every (eligible) neighbor, in CSC order.
        ref = sample_neighbors(csc.colptr, nodes, k, **kw)
        got = _draw(csc.colptr, nodes, k, **kw)
        assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])
    if temporal:  # The most recent ones: determined for any fan-out.
        for k in (1, 3, 7):
            ref = sample_neighbors(csc.colptr, nodes, k, **kw,
                                   temporal_strategy='last')
            got = _draw(csc.colptr, nodes, k, **kw, temporal_strategy='last')
            assert torch.equal(got[0], ref[0])
            assert torch.equal(got[1], ref[1])


@pytest.mark.parametrize('replace', [False, True])
@pytest.mark.parametrize('temporal', [False, True])
def test_random_draws_are_valid(replace, temporal):
    csc, n = _csc(2, time=temporal)
    gen = torch.Generator().manual_seed(1)
    nodes = torch.randint(0, n, (700, ), generator=gen).cuda()
    bound = torch.randint(0, 50, (700, ), generator=gen).cuda() \
        if temporal else None
    k = 5
    pos, dst = _draw(csc.colptr, nodes, k, replace,
                     torch.Generator(device='cuda').manual_seed(3),
                     time=csc.time if temporal else None, time_bound=bound)
    start, end = _bounds(csc, nodes, bound)
    deg = end - start
    want = torch.where(deg > 0, k, 0) if replace else deg.clamp(max=k)
    assert torch.equal(torch.bincount(dst, minlength=700), want)
    assert bool((dst[1:] >= dst[:-1]).all())  # Grouped by node, in order.
    assert bool((pos >= start[dst]).all() and (pos < end[dst]).all())
    if not replace:  # Distinct positions per node.
        key = dst * csc.row.numel() + pos
        assert torch.unique(key).numel() == key.numel()


@pytest.mark.parametrize('replace', [False, True])
def test_draws_are_uniform(replace):
    # One node of degree 10, drawn 20,000 times with fan-out 3: every
    # neighbor about 30% of the times (its standard deviation: 0.3%).
    edge_index = torch.stack([torch.arange(10), torch.zeros(10).long()])
    topo = GraphTopology.from_data(Data(edge_index=edge_index, num_nodes=10),
                                   device='cuda')
    csc = topo.csc[None]
    nodes = torch.zeros(20000, dtype=torch.long, device='cuda')
    pos, _ = _draw(csc.colptr, nodes, 3, replace,
                   torch.Generator(device='cuda').manual_seed(0))
    share = torch.bincount(pos, minlength=10).double() / 20000
    assert torch.allclose(share, torch.full_like(share, 0.3), atol=0.02)


def test_draw_declines_what_it_does_not_take():
    from pyg_orch.sampling.triton.neighbor_draw import draw_neighbors
    csc, n = _csc(3)
    nodes = torch.arange(10, device='cuda')
    assert draw_neighbors(csc.colptr, nodes, -1) is None  # All neighbors.
    assert draw_neighbors(csc.colptr, nodes, 65) is None
    assert draw_neighbors(csc.colptr.cpu(), nodes.cpu(), 3) is None
    assert draw_neighbors(csc.colptr, nodes, 3,
                          weight=torch.ones(csc.row.numel(),
                                            device='cuda')) is None
    pos, dst = draw_neighbors(csc.colptr, nodes, 0)
    assert pos.numel() == dst.numel() == 0


@pytest.mark.parametrize('mode', ['disjoint', 'node-last', 'edge-last',
                                  'induced'])
def test_loader_triton_draw_equals_torch_backend(mode):
    # Determined draws (every neighbor, or the most recent ones), so both
    # backends give the same batches.
    data = temporal_graph(4, num_nodes=120, num_edges=900) \
        if mode not in ('disjoint', 'induced') else random_graph(120, 900, 4)
    max_deg = int(torch.bincount(data.edge_index[1]).max())
    kwargs = dict(disjoint=True) if mode == 'disjoint' else \
        dict(subgraph_type='induced') if mode == 'induced' else \
        dict(time_attr='time' if mode == 'node-last' else 'edge_time',
             temporal_strategy='last')
    fanout = [max_deg, max_deg] if mode in ('disjoint', 'induced') \
        else [3, 2]
    if mode == 'edge-last':
        kwargs['input_time'] = torch.full((data.num_nodes, ), 20)
    loaders = [HybridNeighborLoader(data, fanout, batch_size=16,
                                    device='cuda', seed=0,
                                    placement=PlacementOptions(backend=b),
                                    **kwargs)
               for b in ('triton_draw', 'torch')]
    assert loaders[0].node_sampler.backend == 'triton_draw'
    assert max_deg <= 64  # Drawn by the kernel, not handed back.
    assert same_subgraphs(*loaders) > 0


def test_auto_backend_takes_the_draw_kernel_for_disjoint():
    data = temporal_graph(5)
    loader = HybridNeighborLoader(data, [4, 3], batch_size=16,
                                  device='cuda', time_attr='time')
    assert loader.node_sampler.backend == 'triton_draw'
    host = HybridNeighborLoader(data, [4, 3], batch_size=16, device='cuda',
                                time_attr='time',
                                placement=PlacementOptions(topology='host'))
    assert host.node_sampler.backend == 'torch'  # Sampled on the CPU.
    weighted = HybridNeighborLoader(data, [4, 3], batch_size=16,
                                    device='cuda', weight_attr='edge_weight')
    assert weighted.node_sampler.backend == 'torch'
    for batch in loader:  # Valid temporal batches.
        n_id, seed = batch.n_id.cpu(), batch.n_id[batch.batch].cpu()
        assert bool((data.time[n_id] <= data.time[seed]).all())


@pytest.mark.parametrize('num_keys', [300, 20000])  # 20,000: the table grows.
def test_hash_relabeler_equals_sort_relabeler(num_keys):
    from pyg_orch.sampling.triton.hash_relabel import HashRelabeler
    from pyg_orch.sampling.relabel import SortRelabeler
    gen = torch.Generator().manual_seed(num_keys)
    space = 3 * num_keys
    seeds = torch.randint(0, space, (num_keys // 10, ), generator=gen)
    hops = [torch.randint(0, space, (num_keys, ), generator=gen)
            for _ in range(3)]
    relabelers = [HashRelabeler(torch.device('cuda')),
                  SortRelabeler(torch.device('cuda'))]
    for r in relabelers:
        r.init(seeds.cuda())
    for keys in hops + [hops[0][:0]]:
        (a_local, a_new), (b_local, b_new) = [r.add(keys.cuda())
                                              for r in relabelers]
        assert torch.equal(a_local, b_local) and torch.equal(a_new, b_new)
        assert relabelers[0].num_nodes == relabelers[1].num_nodes
    probe = torch.randint(0, 2 * space, (1000, ), generator=gen).cuda()
    assert torch.equal(relabelers[0].lookup(probe),
                       relabelers[1].lookup(probe))
