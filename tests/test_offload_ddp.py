"""Bottom-layer offload under DistributedDataParallel: exact gradients with
max_staleness=0 (both wrapping orders), one hot set per machine, the CPU
cores shared by the ranks, the staleness bound per rank and the decision by
measurement agreed by the ranks; 2 CPU processes with gloo
(tests/multiproc.py)."""
import functools
import os
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from multiproc import run_workers
from torch.nn.parallel import DistributedDataParallel

from pyg_orch import HybridNeighborLoader
from pyg_orch.parallel.ddp import DistributedSeedSplit, rank_input_nodes
from pyg_orch.offload import (
    BottomLayerOffload,
    default_intra_op_threads,
    default_num_threads,
)
from pyg_orch.offload.ddp import machine_ranks
from pyg_orch.offload.hotness import select_hot_nodes, split_by_frequency
from pyg_orch.offload.options import OffloadOptions
from pyg_orch.offload.testing import offload_hooks
from pyg_orch.offload.workers import cpu_cores_per_rank, local_ranks

from conftest import (
    PrunedClock,
    flat_params,
    tiny_graph,
    tiny_model,
    train_sgd,
)

STEPS = 6


def _split_loader(data, seed: int = 0):
    # Every rank gives the loader all seeds; the split picks its own.
    seeds = torch.arange(data.num_nodes)
    split = DistributedSeedSplit(seeds, seed=seed)
    loader = HybridNeighborLoader(data, [-1, -1], batch_size=16,
                                  input_nodes=seeds, sampler=split,
                                  device='cpu', seed=1)
    return split, loader


# Exact gradients ############################################################


def _exact(rank, world_size):
    data = tiny_graph()
    out = {}
    # Plain DDP training:
    split, loader = _split_loader(data)
    out['plain'] = train_sgd(DistributedDataParallel(tiny_model()), loader,
                             STEPS, split.set_epoch)
    # The same batches with offload (exact: max_staleness=0, full
    # neighbors, a weight-free CPU aggregation finished with the current
    # weights), in both wrapping orders:
    for order in ('ddp_outside', 'ddp_inside'):
        split, loader = _split_loader(data)
        model = tiny_model()
        kwargs = dict(hot_ratio=0.1, max_staleness=0, full_neighbors=True,
                      split='aggregate')
        if order == 'ddp_outside':
            off = BottomLayerOffload(model, loader, options=OffloadOptions(
                **kwargs))
            wrapped = DistributedDataParallel(off)
        else:
            off = BottomLayerOffload(
                DistributedDataParallel(model), loader, options=OffloadOptions(
                    **kwargs))
            wrapped = off
        out[order] = train_sgd(wrapped, loader, STEPS, split.set_epoch)
        out[order + '_stats'] = off.stats()
        out[order + '_hot'] = off.hot_nodes.clone()
        off.close()
    return out


def test_offload_ddp_equals_plain_ddp():
    out = run_workers(_exact, 2, timeout=90)
    init = flat_params(tiny_model())
    for order in ('ddp_outside', 'ddp_inside'):
        flat = [o[order] for o in out]
        assert torch.equal(flat[0], flat[1])  # Identical on both ranks.
        assert not torch.allclose(flat[0], init)  # It trained.
        plain = out[0]['plain']
        assert torch.equal(plain, out[1]['plain'])
        assert torch.allclose(flat[0], plain, atol=1e-5, rtol=1e-4), \
            (order, (flat[0] - plain).abs().max())
        for o in out:
            stats = o[order + '_stats']
            assert stats['hot_rows_replaced'] > 0  # Offload did run.
            assert stats['staleness_hist'] == {0: STEPS}
            assert stats['steps'] == STEPS
            assert stats['hot_set_ranks'] == 2
            assert stats['local_world_size'] == 2
            assert stats['decision']['mode'] == 'fixed'
        assert torch.equal(out[0][order + '_hot'], out[1][order + '_hot'])


# One hot set per machine, CPU cores shared, staleness per rank ##############

BOUND = 2


def _machine(rank, world_size):
    os.cpu_count = lambda: 16  # A 16-core machine (this process only).
    data = tiny_graph()
    # Different seeds per rank (the first and second half of a shuffle):
    seeds = rank_input_nodes(torch.arange(data.num_nodes), seed=3)
    loader = HybridNeighborLoader(data, [4, 3], batch_size=8,
                                  input_nodes=seeds, device='cpu',
                                  shuffle=True, seed=10 + rank)
    # What this rank alone would choose:
    local = select_hot_nodes(loader.node_sampler, seeds, 8, 0.1, 0.0,
                             seed=0)
    model = tiny_model()
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.1, max_staleness=BOUND))
    steps = 2 * len(loader)
    ddp = DistributedDataParallel(off)
    train_sgd(ddp, loader, steps, lr=0.1)
    stats = off.stats()
    # Explicit thread numbers win over the share:
    loader2 = HybridNeighborLoader(data, [4, 3], batch_size=8,
                                   input_nodes=seeds, device='cpu')
    explicit = BottomLayerOffload(
        tiny_model(), loader2, options=OffloadOptions(
            hot_ratio=0.1, num_threads=3, intra_op_threads=5))
    explicit_stats = explicit.stats()
    explicit.close()
    # Wrapping twice is refused (before any collective):
    try:
        BottomLayerOffload(ddp, loader2, options=OffloadOptions(hot_ratio=0.1))
        twice = None
    except ValueError as exc:
        twice = str(exc)
    result = dict(stats=stats, steps=steps, seeds=seeds,
                  local_hot=local.hot_nodes, local_counts=local.counts,
                  hot=off.hot_nodes.clone(), counts=off.access_counts,
                  explicit=explicit_stats, twice=twice,
                  defaults=(default_num_threads(), default_intra_op_threads(
                      default_num_threads())))
    off.close()
    return result


def test_one_hot_set_per_machine_and_shared_cores():
    out = run_workers(_machine, 2, timeout=90)
    r0, r1 = out
    # Each rank pre-sampled its own seeds ...
    assert not set(r0['seeds'].tolist()) & set(r1['seeds'].tolist())
    assert not torch.equal(r0['local_counts'], r1['local_counts'])
    assert not torch.equal(r0['local_hot'], r1['local_hot'])
    # ... and both chose the machine's hot set from the summed counts:
    total = r0['local_counts'] + r1['local_counts']
    assert torch.equal(r0['counts'], total)
    assert torch.equal(r1['counts'], total)
    assert torch.equal(r0['hot'], r1['hot'])
    assert torch.equal(r0['hot'], split_by_frequency(total, 0.1, 0.0)[0])
    assert r0['hot'].numel() == 20
    for r in out:
        stats = r['stats']
        # 16 cores, 2 ranks: 8 each; half of them for offload: 2 threads of
        # 2 intra-op threads (one process alone would get 2 x 4).
        assert stats['local_world_size'] == 2
        assert stats['cpu_cores_per_rank'] == 8
        assert stats['num_threads'] == 2 and stats['intra_op_threads'] == 2
        assert r['defaults'] == (2, 2)
        assert r['explicit']['num_threads'] == 3
        assert r['explicit']['intra_op_threads'] == 5
        assert r['explicit']['cpu_cores_per_rank'] == 8
        # The staleness bound holds on every rank:
        assert stats['steps'] == r['steps'] == r0['steps']
        assert stats['hot_rows_replaced'] > 0
        assert stats['max_staleness_seen'] <= BOUND
        assert max(stats['staleness_hist']) <= BOUND
        assert 'already wrapped' in r['twice']


def test_thread_share_without_process_group(monkeypatch):
    monkeypatch.setattr(os, 'cpu_count', lambda: 16)
    assert not dist.is_initialized() and local_ranks() == 1
    assert machine_ranks() is None
    assert cpu_cores_per_rank() == 16 and cpu_cores_per_rank(4) == 4
    assert (default_num_threads(), default_intra_op_threads(2)) == (2, 4)
    assert (default_num_threads(2), default_intra_op_threads(2, 2)) == (2, 2)
    # Never below one thread, however many ranks share the cores:
    assert cpu_cores_per_rank(64) == 1
    assert (default_num_threads(64), default_intra_op_threads(1, 64)) == \
        (1, 1)
    options = OffloadOptions()
    assert (options.local_world_size, options.cpu_cores) == (1, 16)
    assert (options.num_threads, options.intra_op_threads) == (2, 4)


# The decision by measurement, agreed ########################################


def _autotune(rank, world_size, full_neighbors):
    data = tiny_graph()
    seeds = torch.arange(data.num_nodes)
    split = DistributedSeedSplit(seeds, seed=0)
    loader = HybridNeighborLoader(data, [4, 3], batch_size=8,
                                  input_nodes=seeds, sampler=split,
                                  device='cpu', seed=rank)
    # Offload makes rank 0's steps faster and rank 1's slower; on average
    # faster (alone, rank 1 would switch it off):
    clock = PrunedClock(loader, -0.01 if rank == 0 else 0.002)
    with offload_hooks(autotune_clock=clock):
        off = BottomLayerOffload(tiny_model(), loader, options=OffloadOptions(
            full_neighbors=full_neighbors))
    ddp = DistributedDataParallel(off)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    steps, epoch = 0, 0
    while off.stats()['decision']['state'] != 'decided' and steps < 200:
        split.set_epoch(epoch)
        for i, batch in enumerate(loader):
            if rank == 0 and epoch == 1 and i == 2:
                # Evaluation on one rank only (eval mode: no collective).
                ddp.eval()
                with torch.no_grad():
                    ddp(batch.x, batch.edge_index)
                ddp.train()
            optimizer.zero_grad()
            out = ddp(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
            steps += 1
        epoch += 1
    # One more epoch on every rank: the chosen hot set grows from none
    # (plain training was timed again last) once a table holds it.
    split.set_epoch(epoch)
    for batch in loader:
        optimizer.zero_grad()
        out = ddp(batch.x, batch.edge_index)[:batch.batch_size]
        F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        optimizer.step()
    stats = off.stats()
    off.close()
    return stats, steps


@pytest.mark.parametrize('full_neighbors', [False, 'auto'])
def test_decision_by_measurement_is_the_same_on_all_ranks(full_neighbors):
    # Rows computed once ('auto' with this mean-aggregating model): the
    # ranks wait for their tables alike, however long each takes.
    out = run_workers(functools.partial(_autotune,
                                        full_neighbors=full_neighbors), 2,
                      timeout=90)
    (s0, steps0), (s1, steps1) = out
    assert steps0 == steps1 < 200
    d0, d1 = s0['decision'], s1['decision']
    assert s0['static_tables'] == s1['static_tables'] == (
        full_neighbors == 'auto')
    assert d0['mode'] == 'measure' and d0['state'] == 'decided'
    largest = d0['candidates'][-1]['num_hot']
    assert largest == (30 if full_neighbors is False else 140)
    assert d0['chosen_num_hot'] == d1['chosen_num_hot'] == largest
    assert d0['candidates'] == d1['candidates']  # The ranks' mean times.
    assert d0['reason'] == d1['reason']
    assert s0['num_hot'] == s1['num_hot'] == largest
    # The mean of -0.01 and +0.002 per pruned vertex:
    medians = {c['num_hot']: c['median_step_s'] for c in d0['candidates']}
    assert medians[0] == pytest.approx(1.0)
    assert medians[largest] == pytest.approx(1.0 - 0.004 * largest)


# Errors and warnings ########################################################


def test_data_parallel_is_refused():
    data = tiny_graph()
    split = DistributedSeedSplit(torch.arange(data.num_nodes), 0, 1)
    loader = HybridNeighborLoader(data, [4, 3], batch_size=8, sampler=split,
                                  input_nodes=torch.arange(data.num_nodes),
                                  device='cpu')
    with pytest.raises(ValueError, match="'model' must not be a "
                       "torch.nn.DataParallel"):
        BottomLayerOffload(
            torch.nn.DataParallel(tiny_model()), loader,
            options=OffloadOptions(hot_ratio=0.1))
    off = BottomLayerOffload(tiny_model(), loader, options=OffloadOptions(
        hot_ratio=0.1))
    assert off.stats()['hot_set_ranks'] == 1
    replica = off._replicate_for_data_parallel()  # What DataParallel does.
    batch = next(iter(loader))
    with pytest.raises(RuntimeError, match='DataParallel'):
        replica(batch.x, batch.edge_index)
    off.close()


def _late_group(rank, world_size):
    data = tiny_graph()
    loader = HybridNeighborLoader(data, [4, 3], batch_size=8, device='cpu',
                                  input_nodes=torch.arange(data.num_nodes))
    off = BottomLayerOffload(tiny_model(), loader, options=OffloadOptions(
        hot_ratio=0.1))
    dist.init_process_group('gloo', rank=rank, world_size=world_size)
    batch = next(iter(loader))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        off(batch.x, batch.edge_index)
        off(batch.x, batch.edge_index)
    off.close()
    return [str(w.message) for w in caught
            if 'process group was initialized' in str(w.message)]


def test_building_before_the_process_group_warns():
    out = run_workers(_late_group, 2, timeout=60, init_process_group=False)
    assert [len(messages) for messages in out] == [1, 1]
    assert 'init_process_group()' in out[0][0]
