"""Sharding across two GPUs of one machine (symmetric memory, NCCL, the
fused Triton kernels reading peers' shards): batches and rows must equal
the one-GPU results. Runs where two CUDA devices and Triton are available
(``nvidia-h200-x2``); ``tests/test_sharding.py`` checks the same logic on CPU
processes."""
import warnings

import pytest
import torch

from conftest import random_graph, same_subgraphs
from multiproc import run_workers
from pyg_orch import CacheOptions, PlacementOptions
from pyg_orch.core.triton_util import triton_available
from pyg_orch.multigpu import MULTICAST_OFF_ENV

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.device_count() < 2
        or not triton_available(), reason='needs 2 CUDA devices and Triton'),
]

def _loaders(rank, world_size, features):
    from pyg_orch import HybridNeighborLoader

    torch.cuda.set_device(rank)
    device = torch.device('cuda', rank)
    data = random_graph(20000, 300000, 4, num_features=32)
    kw = dict(num_neighbors=[10, 5], batch_size=256, shuffle=True, seed=3,
              device=device, cache=CacheOptions(cache_ratio=0.2))
    if features == 'gpu':
        data.x = data.x.to(device)
    plain = HybridNeighborLoader(
        data, placement=PlacementOptions(topology='device'), **kw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        sharded = HybridNeighborLoader(
            data, placement=PlacementOptions(topology='sharded'), **kw)
    # Peer buffers are made without torch's warnings (torch 2.11 warns
    # that enable_symm_mem_for_group is no longer needed).
    symm = [f'{w.filename}: {w.message}' for w in caught
            if 'symm' in str(w.message) or 'symmetric' in w.filename
            or 'peer_memory' in w.filename]
    assert not symm, symm
    assert sharded.topology.is_sharded
    assert plain._sampler.backend == sharded._sampler.backend == 'triton'
    n = 0
    for a, b in zip(plain, sharded):
        assert torch.equal(a.n_id, b.n_id)
        assert torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.e_id, b.e_id)
        assert torch.equal(b.x, data.x[b.n_id.to(data.x.device)].to(device))
        n += 1
    stats = sharded.stats()
    return n, stats['topology_reads'], stats['features']


def _mode_loaders(rank, world_size, mode):
    # Temporal and weighted sampling (the PyTorch path) over lists, times
    # and weights split across the two GPUs. Both loaders take the PyTorch
    # path: 'auto' would give the unsharded temporal topology the
    # 'triton_draw' backend, whose draws differ.
    from pyg_orch import HybridNeighborLoader

    torch.cuda.set_device(rank)
    device = torch.device('cuda', rank)
    data = random_graph(20000, 300000, 4, num_features=32)
    gen = torch.Generator().manual_seed(9)
    kw = dict(num_neighbors=[10, 5], batch_size=256, shuffle=True, seed=3,
              device=device)
    if mode == 'time':
        data.time = torch.randint(0, 100, (20000, ), generator=gen)
        kw.update(time_attr='time')
    else:
        data.w = torch.rand(300000, generator=gen)
        kw.update(weight_attr='w', replace=mode == 'weight_replace')
    plain = HybridNeighborLoader(data, placement=PlacementOptions(
        topology='device', backend='torch'), **kw)
    sharded = HybridNeighborLoader(data, placement=PlacementOptions(
        topology='sharded', backend='torch'), **kw)
    return same_subgraphs(plain, sharded), sharded.stats()['topology_reads']


@pytest.mark.parametrize('mode', ['time', 'weight', 'weight_replace'])
def test_two_gpu_sharded_temporal_and_weighted(mode):
    out = run_workers(_mode_loaders, 2, args=(mode, ), backend='nccl',
                      start_method='spawn', env=MULTICAST_OFF_ENV,
                      timeout=300)
    for n, reads in out:
        assert n > 0 and reads['peer'] > 0


@pytest.mark.parametrize('features', ['gpu', 'host'])
def test_two_gpu_sharded_loader_equals_one_gpu_loader(features):
    out = run_workers(_loaders, 2, args=(features, ), backend='nccl', start_method='spawn',
                      env=MULTICAST_OFF_ENV, timeout=300)
    for n, reads, feats in out:
        assert n > 0
        assert reads['local'] > 0 and reads['peer'] > 0
        assert reads['replicated'] > 0
        if features == 'host':
            assert feats['peer_rows'] > 0 and feats['cache_rows'] > 0


def _pinned_in_place(rank, world_size, path):
    # One shared-memory file, mapped and registered by every rank: the
    # sharded store reads it in place (no second host copy) and serves the
    # same rows.
    from pyg_orch.multigpu import PeerGroup
    from pyg_orch.parallel.peer_memory import register_pinned
    from pyg_orch.features.sharded import ShardedFeatureStore

    torch.cuda.set_device(rank)
    x = torch.from_file(path, shared=True, size=5000 * 16,
                        dtype=torch.float32).view(5000, 16)
    register_pinned(x)
    store = ShardedFeatureStore(x, PeerGroup(device=torch.device('cuda',
                                                                 rank)),
                                hotness=torch.arange(5000.0),
                                gpu_memory_budget=500 * 16 * 4)
    gen = torch.Generator().manual_seed(rank)
    index = torch.randint(0, 5000, (2000, ), generator=gen)
    same = torch.equal(store.gather(index.cuda()).cpu(), x[index])
    stats = store.stats
    return (same, store.host.data_ptr() == x.data_ptr(), stats.host_rows,
            stats.peer_rows)


def test_two_gpu_sharded_store_reads_pinned_rows_in_place():
    import os
    import tempfile
    if not os.path.isdir('/dev/shm'):
        pytest.skip('needs /dev/shm (CUDA pins tmpfs files, not disk files)')
    folder = tempfile.mkdtemp(dir='/dev/shm')
    path = os.path.join(folder, 'x.bin')
    try:
        x = torch.from_file(path, shared=True, size=5000 * 16,
                            dtype=torch.float32)
        x.copy_(torch.randn(5000 * 16,
                            generator=torch.Generator().manual_seed(1)))
        out = run_workers(_pinned_in_place, 2, args=(path, ),
                          backend='nccl', start_method='spawn',
                          env=MULTICAST_OFF_ENV, timeout=300)
    finally:
        if os.path.exists(path):
            os.unlink(path)
        os.rmdir(folder)
    for same, in_place, host_rows, peer_rows in out:
        assert same and in_place
        assert host_rows > 0 and peer_rows > 0


def _grown_sharded(rank, world_size):
    # fit_gpu_cache() on a sharded loader: each GPU copies the rows of its
    # peer's shard and those cached nowhere; batches keep the right rows,
    # read on their own GPU.
    from pyg_orch import HybridNeighborLoader

    torch.cuda.set_device(rank)
    device = torch.device('cuda', rank)
    data = random_graph(20000, 300000, 4, num_features=32)
    loader = HybridNeighborLoader(
        data, num_neighbors=[10, 5], batch_size=256, shuffle=True, seed=3,
        device=device, cache=CacheOptions(cache_ratio=0.2),
        placement=PlacementOptions(topology='sharded'))
    for i, b in enumerate(loader):
        if i == 3:
            break
    before = loader.stats()['features']
    fit = loader.fit_gpu_cache()
    loader.reset_stats()
    same = all(torch.equal(b.x, data.x[b.n_id.cpu()].to(device))
               for b in loader)
    return same, fit.as_dict(), before, loader.stats()['features']


def test_two_gpu_sharded_cache_grows_copies_on_each_gpu():
    out = run_workers(_grown_sharded, 2, backend='nccl', start_method='spawn',
                      env=MULTICAST_OFF_ENV, timeout=300)
    for same, fit, before, after in out:
        assert same
        assert before['peer_rows'] > 0 and before['host_rows'] > 0
        # 20% of the rows over two GPUs: 2,000 here, then all 20,000.
        assert fit['grew'] and fit['rows_before'] == 2000
        assert fit['rows_after'] == fit['num_rows'] == 20000
        assert fit['bytes_added'] == 18000 * 32 * 4
        assert after['peer_rows'] == after['host_rows'] == 0
        assert after['hit_rate'] == 1.0
