"""Worker threads and prefetch on a partition folder with sampling and
features on a GPU: each thread queues its kernels on a CUDA stream of its
own and exchanges over gloo. Two processes, each acting as a machine; with
gloo both may share one GPU, with NCCL (the loop's group; the threads still
use gloo) they need two. With full fan-out the batches must be the
single-process loader's; with a finite fan-out, prefetch keeps the batches
of the loader without it and two loaders with the same workers agree.
``tests/test_distributed_loader.py`` checks the same on the CPU."""
import pytest
import torch
from conftest import random_graph
from multiproc import check_hetero_folder_loader, run_workers

from pyg_orch import CacheOptions
from pyg_orch.distributed import load_partition, partition_graph
from pyg_orch.multigpu import MULTICAST_OFF_ENV

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA'),
]

FANOUTS = [-1, -1]
KEYS = ('n_id', 'e_id', 'edge_index', 'x', 'y', 'edge_attr')


def graph():
    return random_graph(400, 3000, seed=5, num_features=8, num_classes=3,
                        train_ratio=0.5, edge_dim=2)


def _fields(loader):
    # One epoch's batches, every field on the CPU.
    return [{k: b[k].cpu() for k in KEYS} | {'batch_size': b.batch_size}
            for b in loader]


def _same(ours, ref):
    assert len(ours) == len(ref) > 3
    for a, b in zip(ours, ref):
        assert a['batch_size'] == b['batch_size']
        for key in KEYS:
            assert torch.equal(a[key], b[key]), key


def _threads_worker(rank, world_size, out_dir, hetero_dir):
    from pyg_orch import HybridNeighborLoader
    index = rank % torch.cuda.device_count()
    torch.cuda.set_device(index)
    device = torch.device('cuda', index)
    data = graph()
    part = load_partition(out_dir, rank)
    seeds = part.node_ids[:40 if rank == 0 else 25]
    kw = dict(batch_size=4, input_nodes=seeds, even='pad', device=device,
              sampling_device=device, feature_device=device, shuffle=True,
              seed=3)
    single = HybridNeighborLoader(data, FANOUTS, batch_size=4,
                                  input_nodes=seeds, device='cpu')
    out = {}

    # Full fan-out, 2 workers, a static cache: the batches of the loader
    # without workers, over two epochs (the second reads the filled cache)
    # and after a loop that broke early (on every rank).
    workers = HybridNeighborLoader(out_dir, FANOUTS, num_workers=2,
                                   cache_size=60, **kw)
    plain = HybridNeighborLoader(out_dir, FANOUTS, cache_size=60, **kw)
    for _ in range(2):
        ours = [b for b in workers]
        assert all(b.x.device == device for b in ours)
        _same(_fields(ours), _fields(plain))
    assert sum(s['cached_rows'] for s in workers.batch_stats) > 0
    assert sum(s['remote_rows'] for s in workers.batch_stats) > 0
    for loader in (workers, plain):
        for i, _ in enumerate(loader):
            if i == 1:
                break
    _same(_fields(workers), _fields(plain))
    # Two workers share one LRU cache on the GPU (kernels of its lookups
    # and admissions in lock order across the threads' streams):
    lru = dict(cache=CacheOptions(policy='lru'), cache_size=40)
    shared = HybridNeighborLoader(out_dir, FANOUTS, num_workers=2, **kw,
                                  **lru)
    alone = HybridNeighborLoader(out_dir, FANOUTS, **kw, **lru)
    for _ in range(3):
        _same(_fields(shared), _fields(alone))
    assert sum(s['cached_rows'] for s in shared.batch_stats) > 0
    # A cache ranked by degree (nothing pre-sampled), filled on the GPU:
    by_degree = HybridNeighborLoader(out_dir, FANOUTS, num_workers=2,
                                     cache=CacheOptions(ranking='degree'),
                                     cache_size=40,
                                     **kw)
    # (A loader made alike shuffles alike in its first epoch.)
    _same(_fields(by_degree), _fields(HybridNeighborLoader(out_dir, FANOUTS,
                                                           **kw)))
    assert sum(s['cached_rows'] for s in by_degree.batch_stats) > 0
    assert by_degree.partition_batches.gather.cache_slot.is_cuda
    # Against the one-process loader (unshuffled):
    unshuffled = HybridNeighborLoader(out_dir, FANOUTS, num_workers=3,
                                      **{**kw, 'shuffle': False})
    _same([f for f in _fields(unshuffled) if f['batch_size'] > 0],
          _fields(single))

    # Sampling on the GPU, features on the CPU, batches on the CPU.
    cpu_side = HybridNeighborLoader(out_dir, FANOUTS, num_workers=2,
                                    **{**kw, 'device': 'cpu',
                                       'feature_device': 'cpu'})
    batches = list(cpu_side)
    assert all(b.x.device.type == 'cpu' for b in batches)
    # (A loader made alike shuffles alike in its first epoch.)
    _same(_fields(batches), _fields(HybridNeighborLoader(out_dir, FANOUTS,
                                                         **kw)))

    # A finite fan-out: prefetch (one thread, the sampler's generator)
    # keeps the batches of the loader without it, also with an LRU cache
    # that every batch changes; two loaders with 2 workers agree.
    ahead = HybridNeighborLoader(out_dir, [3, 2], prefetch=2, **kw, **lru)
    plain = HybridNeighborLoader(out_dir, [3, 2], **kw, **lru)
    for _ in range(2):
        _same(_fields(ahead), _fields(plain))
        assert ahead.batch_stats == plain.batch_stats
    a, b = (HybridNeighborLoader(out_dir, [3, 2], num_workers=2, **kw)
            for _ in range(2))
    fa, fb = _fields(a), _fields(b)
    _same(fa, fb)
    for f in fa:  # Every edge joins two nodes of the batch.
        if f['batch_size'] > 0:
            assert int(f['edge_index'].max()) < f['n_id'].numel()
            assert torch.equal(f['x'], data.x[f['n_id']])

    # A heterogeneous folder, 2 workers on the GPU:
    _, num = check_hetero_folder_loader(
        hetero_dir, rank, device, FANOUTS, num_workers=2, cache_size=30,
        sampling_device=device, feature_device=device)
    out['hetero'] = num
    torch.cuda.synchronize()
    return out


@pytest.mark.parametrize('backend', ['gloo', 'nccl'])
def test_threads_with_gpu_sampling_and_features(tmp_path, backend):
    if backend == 'nccl' and torch.cuda.device_count() < 2:
        pytest.skip('NCCL needs a GPU per process: 2 CUDA devices')
    from conftest import small_paper_partition
    info = partition_graph(graph(), 2, tmp_path / 'p', 'random',
                           progress=False)
    hetero = small_paper_partition(tmp_path / 'h')
    out = run_workers(_threads_worker, 2,
                      args=(str(info.out_dir), str(hetero.out_dir)),
                      backend=backend, start_method='spawn',
                      env=MULTICAST_OFF_ENV, timeout=600)
    for res in out:
        assert res['hetero'] > 0
