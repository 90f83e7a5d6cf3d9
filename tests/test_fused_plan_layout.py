"""The fused GPU sampler's buffer layout, checked without a GPU: Triton
compiles a kernel variant per 16-byte alignment class of its pointer
arguments, so a batch size that shifted a hop's buffers (an epoch's last,
shorter batch) compiled kernels again in the middle of training."""
import pytest
import torch

from pyg_orch.core.buffers import DenseBufferPool
from pyg_orch.sampling.triton.fused_sampler import FusedPlan
from pyg_orch.topology.csc import CSCTopology

from conftest import random_graph


def _plan(batch_size, fanouts, num_nodes=50_000):
    data = random_graph(200, 2000, 0)
    topo = CSCTopology.from_edge_index(data.edge_index, 200, 200)
    pool = DenseBufferPool()
    cpu = torch.device('cpu')
    map_buf = pool.get('map', num_nodes, cpu)
    claim_buf = pool.get('claim', num_nodes, cpu, fill=0)
    return FusedPlan(topo, num_nodes, fanouts, batch_size, False, None,
                     map_buf, claim_buf, cpu)


def _aligned(t):
    return t.data_ptr() % 16 == 0


@pytest.mark.parametrize('batch_size', [1, 7, 907, 1000, 1024])
@pytest.mark.parametrize('fanouts', [[15, 10, 5], [3, 0, 7], [1]])
def test_every_hop_buffer_is_16_byte_aligned(batch_size, fanouts):
    plan = _plan(batch_size, fanouts)
    for h, buf in enumerate(plan.out):
        size = plan.caps[h] * fanouts[h]
        for name, t in buf.items():
            assert t.numel() == size, name
            assert _aligned(t), (h, name)
    assert all(_aligned(t) for t in plan.edges.values())
    # Slots between hops are empty and stay out of the edge counts:
    offsets = plan.hop_offsets.tolist()
    assert offsets[-1] == plan.flat['src'].numel()
    for h, buf in enumerate(plan.out):
        pad = plan.flat['src'][offsets[h] + buf['src'].numel():offsets[h + 1]]
        assert pad.numel() < 16 and bool((pad == -1).all())


@pytest.mark.parametrize('num_seeds', [1, 7, 907])
def test_every_hetero_hop_buffer_is_16_byte_aligned(num_seeds):
    from pyg_orch.sampling.triton.hetero_fused import (HeteroCSC,
                                                       HeteroFusedPlan)
    from pyg_orch.topology.graph import GraphTopology
    from conftest import random_hetero_graph
    topo = GraphTopology.from_data(random_hetero_graph(0))
    csc = HeteroCSC(topo)
    num_neighbors = {et: [5, 3, 2] for et in topo.edge_types}
    seed_type = topo.node_types[0]
    cpu = torch.device('cpu')
    pool = DenseBufferPool()
    n = csc.total_nodes
    plan = HeteroFusedPlan(csc, num_neighbors, {seed_type: num_seeds}, False,
                           None, pool.get('map', n, cpu),
                           pool.get('claim', n, cpu, fill=2**31 - 1), cpu)
    sized = [hop for hop in plan.hops if hop['size'] > 0]
    assert len(sized) >= 2
    for h, hop in enumerate(sized):
        for name, t in hop['buf'].items():
            assert t.numel() == hop['size'] and _aligned(t), (h, name)
    # The slots between hops are empty:
    used = torch.zeros(plan.total_slots, dtype=torch.bool)
    for hop in plan.hops:
        used[hop['start']:hop['start'] + hop['size']] = True
    assert bool((plan.flat['src'][~used] == -1).all())
