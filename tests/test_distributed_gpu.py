"""Sampling across machines over NCCL: two processes, one GPU each, each
acting as a machine holding one part; the exchanges move CUDA tensors and
batches land on the GPU. With full fan-out the batches must equal the
single-process loader's. Runs where two CUDA devices are available
(``nvidia-h200-x2``); ``tests/test_distributed_sampling.py`` checks the
same logic with gloo on CPU processes."""
import pytest
import torch
from conftest import random_graph
from multiproc import check_hetero_folder_loader, run_workers

from pyg_orch.distributed import load_partition, partition_graph
from pyg_orch.multigpu import MULTICAST_OFF_ENV

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.device_count() < 2,
        reason='needs 2 CUDA devices'),
]

FANOUTS = [-1, -1]


def graph():
    return random_graph(400, 3000, seed=5, num_features=8, num_classes=3,
                        train_ratio=0.5, edge_dim=2)


def _nccl_loader(rank, world_size, out_dir, policy, via_hybrid):
    from pyg_orch import HybridNeighborLoader
    from pyg_orch.distributed import DistributedNeighborLoader
    from pyg_orch.distributed.collective import comm_device
    torch.cuda.set_device(rank)
    device = torch.device('cuda', rank)
    assert comm_device() == device
    data = graph()
    part = load_partition(out_dir, rank)
    seeds = part.node_ids[:40 if rank == 0 else 25]
    kw = dict(batch_size=8, input_nodes=seeds, device=device, even='pad',
              cache_size=60, cache_policy=policy)
    if via_hybrid:
        loader = HybridNeighborLoader(out_dir, FANOUTS, **kw)
    else:
        loader = DistributedNeighborLoader(out_dir, FANOUTS, **kw)
    ref = iter(HybridNeighborLoader(data, FANOUTS, batch_size=8,
                                    input_nodes=seeds, device='cpu'))
    checked, remote, cached = 0, 0, 0
    for epoch in range(2):
        for batch in loader:
            if batch.batch_size == 0:
                continue
            for key in ('x', 'y', 'edge_index', 'n_id', 'e_id',
                        'edge_attr'):
                assert batch[key].device == device, key
            if epoch == 0:
                b = next(ref)
                assert batch.batch_size == b.batch_size
                for key in ('n_id', 'e_id', 'edge_index', 'x', 'y',
                            'edge_attr'):
                    assert torch.equal(batch[key].cpu(), b[key]), key
                checked += 1
            else:  # Rows served by the cache on the GPU are right too.
                assert torch.equal(batch.x.cpu(), data.x[batch.n_id.cpu()])
        stats = loader.batch_stats
        remote += sum(s['remote_rows'] for s in stats)
        cached += sum(s['cached_rows'] for s in stats)
    torch.cuda.synchronize()
    return checked, remote, cached


@pytest.mark.parametrize('policy,via_hybrid', [('static', False),
                                               ('lru', True)])
def test_nccl_loader_equals_single_process(tmp_path, policy, via_hybrid):
    data = graph()
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    out = run_workers(_nccl_loader, 2,
                      args=(str(info.out_dir), policy, via_hybrid),
                      backend='nccl', start_method='spawn',
                      env=MULTICAST_OFF_ENV, timeout=300)
    for rank, (checked, remote, cached) in enumerate(out):
        assert checked == (5 if rank == 0 else 4)
        assert remote > 0 and cached > 0


def _nccl_hetero(rank, world_size, out_dir):
    torch.cuda.set_device(rank)
    _, count = check_hetero_folder_loader(
        out_dir, rank, torch.device('cuda', rank), FANOUTS, cache_size=30)
    torch.cuda.synchronize()
    return count


def test_nccl_hetero_loader_equals_single_process(tmp_path):
    from conftest import paper_hetero_graph
    data = paper_hetero_graph(num_papers=150, num_authors=100,
                              num_features=4)
    info = partition_graph(data, 2, tmp_path / 'h', 'random',
                           progress=False)
    out = run_workers(_nccl_hetero, 2, args=(str(info.out_dir), ),
                      backend='nccl', start_method='spawn',
                      env=MULTICAST_OFF_ENV, timeout=300)
    assert all(n > 0 for n in out)
