"""Sampling across machines over NCCL: two processes, one GPU each, each
acting as a machine holding one part; the exchanges move CUDA tensors and
batches land on the GPU. With full fan-out the batches must equal the
single-process loader's, also where each rank samples on its GPU
(``sampling_device``; there, with a finite fan-out, valid batches, and with
gloo too), and where it also gathers features on its GPU
(``feature_device``, both cache policies, and a heterogeneous graph). Runs
where two CUDA devices are available
(``nvidia-h200-x2``); ``tests/test_distributed_sampling.py`` checks the
same logic with gloo on CPU processes."""
import pytest
import torch
from conftest import random_graph
from multiproc import check_hetero_folder_loader, run_workers

from pyg_orch import CacheOptions, PlacementOptions
from pyg_orch.distributed import load_partition, partition_graph
from pyg_orch.multigpu import MULTICAST_OFF_ENV

#: The neighbor lists split across the machine's processes.
SHARDED = PlacementOptions(topology='sharded')

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


KEYS = ('n_id', 'e_id', 'edge_index', 'x', 'y', 'edge_attr')


def assert_batches_equal(loader, ref, device):
    r"""The loader's non-empty batches (one epoch) are :obj:`ref`'s, on
    :obj:`device`; returns them."""
    ours = [b for b in loader if b.batch_size > 0]
    assert len(ours) == len(ref) > 0
    for batch, b in zip(ours, ref):
        assert batch.batch_size == b.batch_size
        for key in KEYS:
            assert batch[key].device == device, key
            assert torch.equal(batch[key].cpu(), b[key]), key
    return ours


def _nccl_loader(rank, world_size, out_dir, policy, via_hybrid):
    from pyg_orch import HybridNeighborLoader
    from pyg_orch.distributed import open_stores
    from pyg_orch.parallel.exchange import comm_device
    torch.cuda.set_device(rank)
    device = torch.device('cuda', rank)
    assert comm_device() == device
    data = graph()
    part = load_partition(out_dir, rank)
    seeds = part.node_ids[:40 if rank == 0 else 25]
    kw = dict(batch_size=8, input_nodes=seeds, device=device, even='pad')
    if via_hybrid:
        loader = HybridNeighborLoader(out_dir, FANOUTS, cache_size=60,
                                      cache=CacheOptions(policy=policy), **kw)
    else:  # The stores' spelling: this rank's seeds.
        loader = HybridNeighborLoader(
            open_stores(out_dir, device=device, cache_size=60,
                        policy=policy), FANOUTS, **kw)
    ref = list(HybridNeighborLoader(data, FANOUTS, batch_size=8,
                                    input_nodes=seeds, device='cpu'))
    checked = len(assert_batches_equal(loader, ref, device))
    remote = sum(s['remote_rows'] for s in loader.batch_stats)
    cached = sum(s['cached_rows'] for s in loader.batch_stats)
    for batch in loader:  # Rows served by the cache on the GPU are right.
        if batch.batch_size > 0:
            assert batch.x.device == device
            assert torch.equal(batch.x.cpu(), data.x[batch.n_id.cpu()])
    remote += sum(s['remote_rows'] for s in loader.batch_stats)
    cached += sum(s['cached_rows'] for s in loader.batch_stats)
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


def _nccl_hetero(rank, world_size, out_dir, gpu_sampling):
    torch.cuda.set_device(rank)
    device = torch.device('cuda', rank)
    kwargs = dict(sampling_device=device) if gpu_sampling else {}
    loader, count = check_hetero_folder_loader(
        out_dir, rank, device, FANOUTS, cache_size=30, **kwargs)
    assert loader.node_sampler.device == (device if gpu_sampling else
                                     torch.device('cpu'))
    torch.cuda.synchronize()
    return count


@pytest.mark.parametrize('gpu_sampling', [False, True])
def test_nccl_hetero_loader_equals_single_process(tmp_path, gpu_sampling):
    # Through HybridNeighborLoader, which forwards sampling_device.
    from conftest import small_paper_partition
    info = small_paper_partition(tmp_path / 'h')
    out = run_workers(_nccl_hetero, 2, args=(str(info.out_dir),
                                             gpu_sampling),
                      backend='nccl', start_method='spawn',
                      env=MULTICAST_OFF_ENV, timeout=300)
    assert all(n > 0 for n in out)


# Sampling on the GPU (sampling_device) #######################################



def check_sampled_batch(data, batch, seeds, fanouts):
    r"""A batch sampled with a finite fan-out is a valid one: seeds first,
    every edge an edge of the graph with its id, and exactly
    :obj:`min(k, in-degree)` in-edges per vertex of every hop's frontier."""
    n_id, e_id = batch.n_id.cpu(), batch.e_id.cpu()
    row, col = batch.edge_index.cpu()
    nsn, nse = batch.num_sampled_nodes, batch.num_sampled_edges
    src, dst = data.edge_index
    indeg = torch.bincount(dst, minlength=data.num_nodes)
    assert torch.equal(n_id[:batch.batch_size], seeds)
    assert sum(nsn) == n_id.numel() and sum(nse) == e_id.numel()
    rest = n_id[seeds.numel():]
    assert rest.unique().numel() == rest.numel()
    assert not bool(torch.isin(rest, seeds).any())
    assert torch.equal(src[e_id], n_id[row])
    assert torch.equal(dst[e_id], n_id[col])
    assert e_id.unique().numel() == e_id.numel()
    offset = 0
    for hop, k in enumerate(fanouts):
        c = col[offset:offset + nse[hop]]
        lo = sum(nsn[:hop])
        assert bool(((c >= lo) & (c < lo + nsn[hop])).all())
        got = torch.bincount(c - lo, minlength=nsn[hop])
        assert torch.equal(got, indeg[n_id[lo:lo + nsn[hop]]].clamp(max=k))
        offset += nse[hop]
    assert torch.equal(batch.x.cpu(), data.x[n_id])
    assert torch.equal(batch.edge_attr.cpu(), data.edge_attr[e_id])


def _gpu_sampling(rank, world_size, out_dir, nccl, via_hybrid):
    from pyg_orch import HybridNeighborLoader
    from pyg_orch.distributed import open_stores
    from pyg_orch.parallel.exchange import comm_device
    torch.cuda.set_device(rank)
    device = torch.device('cuda', rank)
    assert comm_device() == (device if nccl else torch.device('cpu'))
    data = graph()
    part = load_partition(out_dir, rank)
    seeds = part.node_ids[:40 if rank == 0 else 25]

    def make(fanouts, cache_size=0, **kw):
        if via_hybrid:
            return HybridNeighborLoader(
                out_dir, fanouts, batch_size=8, input_nodes=seeds,
                device=device, even='pad', sampling_device=device,
                cache_size=cache_size, **kw)
        stores = open_stores(out_dir, device=device, sampling_device=device,
                             cache_size=cache_size)
        return HybridNeighborLoader(stores, fanouts, batch_size=8,
                                    input_nodes=seeds, device=device,
                                    even='pad', **kw)

    # Full fan-out: the single-process loader's batches.
    loader = make(FANOUTS, cache_size=60)
    assert loader.node_sampler.device == device
    assert loader.node_sampler.generator.device == device
    assert part.csc.row.device.type == 'cpu'  # The part is left as it is.
    ref = list(HybridNeighborLoader(data, FANOUTS, batch_size=8,
                                    input_nodes=seeds, device='cpu'))
    ours = assert_batches_equal(loader, ref, device)
    for batch, b in zip(ours, ref):
        assert batch.num_sampled_nodes == b.num_sampled_nodes
        assert batch.num_sampled_edges == b.num_sampled_edges
    remote = sum(s['remote_requests'] for s in loader.batch_stats)

    # A finite fan-out: valid batches, the same for the same seed.
    fanouts = [5, 3]
    runs = []
    for _ in range(2):
        runs.append([b for b in make(fanouts, seed=11)
                     if b.batch_size > 0])
    assert len(runs[0]) == len(runs[1]) == len(ref)
    for i, (a, b) in enumerate(zip(*runs)):
        check_sampled_batch(data, a, seeds[8 * i:8 * (i + 1)], fanouts)
        for key in KEYS:
            assert a[key].device == device, key
            assert torch.equal(a[key], b[key]), key
    torch.cuda.synchronize()
    return len(ours), remote


# HybridNeighborLoader's forwarding of sampling_device is checked on the GPU
# by the heterogeneous case below.
@pytest.mark.parametrize('backend,via_hybrid', [('nccl', False),
                                                ('gloo', False)])
def test_gpu_sampling(tmp_path, backend, via_hybrid):
    data = graph()
    info = partition_graph(data, 2, tmp_path / 'p', 'random',
                           progress=False)
    out = run_workers(_gpu_sampling, 2,
                      args=(str(info.out_dir), backend == 'nccl',
                            via_hybrid),
                      backend=backend, start_method='spawn',
                      env=MULTICAST_OFF_ENV, timeout=300)
    for rank, (checked, remote) in enumerate(out):
        assert checked == (5 if rank == 0 else 4)
        assert remote > 0  # Vertices really were sampled by the other rank.


# Gathering features on the GPU (feature_device) ##############################

def _gpu_features(rank, world_size, out_dir, hetero_dir):
    from conftest import small_paper_graph

    from pyg_orch import HybridNeighborLoader
    from pyg_orch.distributed import open_stores
    torch.cuda.set_device(rank)
    device = torch.device('cuda', rank)
    data = graph()
    part = load_partition(out_dir, rank)
    seeds = part.node_ids[:40 if rank == 0 else 25]
    ref = list(HybridNeighborLoader(data, FANOUTS, batch_size=8,
                                    input_nodes=seeds, device='cpu'))
    counts = []
    # HybridNeighborLoader forwards feature_device (the 'lru' case):
    for policy in ('static', 'lru'):
        kw = dict(batch_size=8, input_nodes=seeds, device=device, even='pad')
        placement = dict(cache_size=60, sampling_device=device,
                         feature_device=device)
        if policy == 'static':  # The stores' spelling:
            loader = HybridNeighborLoader(open_stores(
                out_dir, device=device, policy=policy, **placement),
                FANOUTS, **kw)
        else:
            loader = HybridNeighborLoader(
                out_dir, FANOUTS, cache=CacheOptions(policy=policy),
                **placement, **kw)
        gather = loader.partition_batches.gather
        assert loader.partition_batches.feature_device == gather.feature_device == device
        assert gather.cache_slot.device == device
        assert gather.last_used.device == device
        assert part.x.device.type == 'cpu'  # The part is left as it is.
        remote, cached = 0, 0
        for epoch in range(2):  # The second one reads the filled cache.
            ours = assert_batches_equal(loader, ref, device)
            remote += sum(s['remote_rows'] for s in loader.batch_stats)
            cached += sum(s['cached_rows'] for s in loader.batch_stats)
        counts.append((len(ours), remote, cached))

    # Heterogeneous, through HybridNeighborLoader:
    hloader, num = check_hetero_folder_loader(
        hetero_dir, rank, device, FANOUTS, cache_size=30,
        sampling_device=device, feature_device=device)
    assert hloader.partition_batches.gather.feature_device == device
    assert all(g.cache_slot.device == device
               for g in hloader.partition_batches.gather.by_node_type.values())
    hdata = small_paper_graph()
    cites = ('paper', 'cites', 'paper')
    hetero_cached = 0
    for b in hloader:  # Again, the cache filled: y and edge_attr too.
        if b['paper'].batch_size == 0:
            continue
        for t in hdata.node_types:
            assert b[t].x.device == device
            assert torch.equal(b[t].x.cpu(), hdata[t].x[b[t].n_id.cpu()])
        assert torch.equal(b['paper'].y.cpu(),
                           hdata['paper'].y[b['paper'].n_id.cpu()])
        assert b[cites].edge_attr.device == device
        assert torch.equal(b[cites].edge_attr.cpu(),
                           hdata[cites].edge_attr[b[cites].e_id.cpu()])
        hetero_cached += hloader.batch_stats[-1]['cached_rows']
    torch.cuda.synchronize()
    return counts, num, hetero_cached


def test_gpu_features(tmp_path):
    from conftest import small_paper_partition
    info = partition_graph(graph(), 2, tmp_path / 'p', 'random',
                           progress=False)
    hetero = small_paper_partition(tmp_path / 'h')
    out = run_workers(_gpu_features, 2,
                      args=(str(info.out_dir), str(hetero.out_dir)),
                      backend='nccl', start_method='spawn',
                      env=MULTICAST_OFF_ENV, timeout=300)
    for rank, (counts, num, hetero_cached) in enumerate(out):
        for checked, remote, cached in counts:
            assert checked == (5 if rank == 0 else 4)
            assert remote > 0 and cached > 0  # Both paths were read.
        assert num > 0 and hetero_cached > 0


# One part shared by the GPUs of a machine (topology='sharded') ##############

def _shared_part(rank, world_size, out_dir):
    from pyg_orch import HybridNeighborLoader
    torch.cuda.set_device(rank)
    device = torch.device('cuda', rank)
    kw = dict(batch_size=8, device=device, sampling_device=device, seed=3)
    sharded = HybridNeighborLoader(out_dir, [4, 3],
                                   placement=SHARDED, **kw)
    plain = HybridNeighborLoader(out_dir, [4, 3], **kw)
    full = HybridNeighborLoader(out_dir, FANOUTS,
                                placement=SHARDED, **kw)
    ref = list(HybridNeighborLoader(graph(), FANOUTS, batch_size=8,
                                    input_nodes=full.partition_batches.input_nodes.cpu(),
                                    device='cpu'))
    checked = len(assert_batches_equal(full, ref, device))
    # One epoch of the unsharded loader, compared with both sharded ones
    # (its next epoch would draw other neighbors):
    plain = list(plain)
    same = 0
    for a, b in zip(sharded, plain):
        for key in KEYS:
            assert torch.equal(a[key], b[key]), key
        same += 1
    reads = sharded.node_sampler.topology_reads()
    # The part's feature rows split across the two GPUs too (symmetric
    # memory): the same batches, rows read from both GPUs.
    both = HybridNeighborLoader(out_dir, [4, 3], placement=SHARDED,
                                feature_placement='sharded',
                                feature_device=device, **kw)
    both_batches = list(both)
    assert len(both_batches) == len(plain) == same
    for a, b in zip(both_batches, plain):
        for key in KEYS:
            assert torch.equal(a[key], b[key]), key
    row_reads = both.partition_batches.gather.row_reads()
    assert row_reads['peer'] > 0 and row_reads['local'] > 0
    torch.cuda.synchronize()
    return checked, same, reads


def test_one_part_sharded_across_the_gpus_of_a_machine(tmp_path):
    info = partition_graph(graph(), 1, tmp_path / 'p', 'contiguous',
                           progress=False)
    out = run_workers(_shared_part, 2, args=(str(info.out_dir), ),
                      backend='nccl', start_method='spawn',
                      env=MULTICAST_OFF_ENV, timeout=300)
    for checked, same, reads in out:
        assert checked > 0 and same > 0
        assert reads['peer'] > 0 and reads['local'] > 0
