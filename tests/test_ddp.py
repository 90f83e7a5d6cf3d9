"""DDP glue (pyg_orch.parallel.ddp, pyg_orch.parallel.watchdog): seed splits
with equal batch counts, reshuffling, failure propagation, statistics over
ranks; multi-process parts run as 2 CPU processes with gloo
(tests/multiproc.py)."""
import itertools
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from conftest import REPO, random_graph
from multiproc import WorkerExit, run_workers
from torch.utils.data import DistributedSampler

from pyg_orch import HybridNeighborLoader
from pyg_orch.parallel.ddp import (
    DistributedSeedSplit,
    all_ranks_stats,
    equal_batch_count,
    init_distributed,
    rank_info,
    rank_input_nodes,
)
from pyg_orch.parallel.watchdog import RankFailedError, rank_guard

# Seed splitting (no processes needed: every rank computes its own part) ####


@pytest.mark.parametrize('num_seeds', [0, 1, 7, 10, 13])
@pytest.mark.parametrize('world_size', [1, 2, 3, 4])
@pytest.mark.parametrize('drop_last', [False, True])
def test_split_counts_equal_and_cover(num_seeds, world_size, drop_last):
    seeds = torch.randperm(100)[:num_seeds]
    parts = [rank_input_nodes(seeds, r, world_size, seed=3, epoch=1,
                              drop_last=drop_last)
             for r in range(world_size)]
    counts = {p.numel() for p in parts}
    assert len(counts) == 1  # The same number of seeds on every rank.
    count = counts.pop()
    union = torch.cat(parts)
    if drop_last:
        assert count == num_seeds // world_size
        assert union.unique().numel() == union.numel()  # No seed twice.
        assert num_seeds - union.numel() < world_size
    else:
        assert count == -(-num_seeds // world_size)
        assert set(union.tolist()) == set(seeds.tolist())  # All seeds.
        assert union.numel() - num_seeds < world_size  # Few repeated.
    assert set(union.tolist()) <= set(seeds.tolist())


def test_split_is_distributed_samplers():
    seeds = torch.arange(100, 123)
    for epoch, drop_last in [(0, False), (1, False), (2, True)]:
        for rank in range(3):
            ref = DistributedSampler(range(23), num_replicas=3, rank=rank,
                                     shuffle=True, seed=5,
                                     drop_last=drop_last)
            ref.set_epoch(epoch)
            split = DistributedSeedSplit(seeds, rank, 3, seed=5,
                                         drop_last=drop_last)
            split.set_epoch(epoch)
            assert list(split) == list(ref)
            assert len(split) == len(ref)
            assert torch.equal(split.rank_nodes(), seeds[list(ref)])


def test_reshuffle_per_epoch():
    mask = torch.rand(300, generator=torch.Generator().manual_seed(0)) < 0.4
    ids = mask.nonzero().view(-1)
    splits = [DistributedSeedSplit(mask, r, 2, seed=7) for r in range(2)]
    epochs = []
    for epoch in range(3):
        parts = []
        for split in splits:
            split.set_epoch(epoch)
            parts.append(split.rank_nodes())
            # The same as the functional form, on a mask or indices:
            assert torch.equal(parts[-1], rank_input_nodes(
                ids, split.rank, 2, seed=7, epoch=epoch))
        assert set(torch.cat(parts).tolist()) == set(ids.tolist())
        epochs.append(parts)
    # Another epoch, another split; the same epoch, the same split (what
    # every rank computes alone is consistent):
    assert not torch.equal(epochs[0][0], epochs[1][0])
    assert not torch.equal(epochs[1][0], epochs[2][0])
    again = DistributedSeedSplit(mask, 0, 2, seed=7)
    again.set_epoch(1)
    assert torch.equal(again.rank_nodes(), epochs[1][0])
    # No shuffling: contiguous round-robin, the same every epoch.
    plain = rank_input_nodes(ids, 1, 2, shuffle=False, epoch=4)
    assert torch.equal(plain, ids[1::2])


def test_split_forms():
    mask = torch.zeros(10, dtype=torch.bool)
    mask[[1, 4, 5, 8]] = True
    assert rank_input_nodes(mask, 0, 2, shuffle=False).tolist() == [1, 5]
    assert rank_input_nodes([1, 4, 5, 8], 1, 2,
                            shuffle=False).tolist() == [4, 8]
    node_type, nodes = rank_input_nodes(('paper', mask), 1, 2,
                                        shuffle=False)
    assert node_type == 'paper' and nodes.tolist() == [4, 8]
    split = DistributedSeedSplit(5, 0, 2, shuffle=False)
    assert list(split) == [0, 2, 4] and len(split) == 3
    assert rank_info() == (0, 1, 0, 1) or 'RANK' in os.environ


@pytest.mark.parametrize('call, match', [
    (lambda: rank_input_nodes(torch.rand(5), 0, 2), "'input_nodes' must be"),
    (lambda: rank_input_nodes(torch.ones(2, 2, dtype=torch.long), 0, 2),
     "'input_nodes' must be a 1-dimensional"),
    (lambda: rank_input_nodes(torch.arange(4), 2, 2), "'rank' must be an "
     "integer in \\[0, 2\\)"),
    (lambda: rank_input_nodes(torch.arange(4), 0, 0), "'world_size' must"),
    (lambda: DistributedSeedSplit(-1, 0, 1), "'input_nodes' as a number"),
    (lambda: DistributedSeedSplit(4, 0, 1).set_epoch(-1), "'epoch' must"),
    (lambda: equal_batch_count(-1), "'num_batches' must"),
    (lambda: all_ranks_stats([1]), "'stats' must be a dict"),
    (lambda: init_distributed(timeout=0), "'timeout' must be"),
    (lambda: init_distributed(device='meta'), "'device' must be"),
    (lambda: rank_guard(timeout=-1), "'timeout' must be"),
    (lambda: rank_guard(name='a/b'), "'name' must be"),
])
def test_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_single_process_fallbacks():
    assert equal_batch_count(5) == 5
    stats = {'a': 1, 'b': {'c': 2.5, 'flag': True}, 'd': None}
    out = all_ranks_stats(stats)
    assert out['per_rank'] == [stats]
    assert out['total'] == stats and out['max'] == stats
    with pytest.raises(RuntimeError, match='initialized process group'):
        with rank_guard():
            pass


def test_split_as_loader_sampler():
    data = random_graph(120, 600, num_features=4, train_ratio=0.5)
    seeds = data.train_mask.nonzero().view(-1)
    seen = []
    for rank in range(2):
        split = DistributedSeedSplit(data.train_mask, rank, 2, seed=1)
        loader = HybridNeighborLoader(data, [3, 2], batch_size=8,
                                      input_nodes=data.train_mask,
                                      sampler=split, device='cpu')
        for epoch in range(2):
            split.set_epoch(epoch)
            got = torch.cat([b.n_id[:b.batch_size] for b in loader])
            assert torch.equal(got, split.rank_nodes())
            assert len(loader) == -(-len(split) // 8)
            seen.append(got)
    assert set(torch.cat([seen[0], seen[2]]).tolist()) == set(seeds.tolist())
    assert not torch.equal(seen[0], seen[1])


# Multi-process: collectives, DDP training ####################################


def _graph():
    return random_graph(160, 800, num_features=8, num_classes=3,
                        train_ratio=0.45, seed=2)


def _collectives(rank, world_size):
    info = rank_info()
    count = equal_batch_count(3 + rank)  # Ranks disagree: 3 and 4.
    data = _graph()
    split = DistributedSeedSplit(data.train_mask, seed=0)  # From the group.
    loader = HybridNeighborLoader(data, [3, 2], batch_size=8,
                                  input_nodes=data.train_mask, sampler=split,
                                  device='cpu', seed=rank)
    steps = sum(1 for _ in itertools.islice(loader, count))
    loader_stats = all_ranks_stats(loader.stats())
    summary = all_ranks_stats({'rows': 10 * (rank + 1),
                               'bytes': {'host': 1.5, 'peer': rank},
                               'name': f'r{rank}', 'only0': None})
    return info, count, steps, split.rank_nodes(), loader_stats, summary


def test_collectives_two_ranks():
    out = run_workers(_collectives, 2, timeout=60)
    infos = [o[0] for o in out]
    assert infos == [(0, 2, 0, 2), (1, 2, 1, 2)]
    assert [o[1] for o in out] == [3, 3]  # MIN over ranks.
    assert [o[2] for o in out] == [3, 3]
    data = _graph()
    assert torch.equal(out[0][3], rank_input_nodes(data.train_mask, 0, 2))
    assert set(torch.cat([out[0][3], out[1][3]]).tolist()) == set(
        data.train_mask.nonzero().view(-1).tolist())
    summary = out[0][5]
    assert summary == out[1][5]
    assert summary['total'] == {'rows': 30, 'bytes': {'host': 3.0,
                                                      'peer': 1},
                                'name': 'r0', 'only0': None}
    assert summary['max']['rows'] == 20 and summary['mean']['rows'] == 15
    assert [s['name'] for s in summary['per_rank']] == ['r0', 'r1']
    loader_stats = out[1][4]
    per_rank = loader_stats['per_rank']
    assert len(per_rank) == 2
    calls = [s['stages']['sample']['calls'] for s in per_rank]
    assert loader_stats['total']['stages']['sample']['calls'] == sum(calls)


def _make_model():
    from torch_geometric.nn import GraphSAGE
    torch.manual_seed(0)
    return GraphSAGE(8, 16, num_layers=2, out_channels=3)


def _loss(model, batch):
    out = model(batch.x, batch.edge_index)[:batch.batch_size]
    return F.cross_entropy(out, batch.y[:batch.batch_size])


def _rank_loader(data, rank, world_size):
    # Sampling seeded per rank, so that one process can redo both ranks'
    # batches.
    split = DistributedSeedSplit(data.train_mask, rank, world_size, seed=4)
    loader = HybridNeighborLoader(data, [4, 3], batch_size=10,
                                  input_nodes=data.train_mask, sampler=split,
                                  device='cpu', seed=100 + rank)
    return split, loader


EPOCHS = 2


def _ddp_train(rank, world_size):
    from torch.nn.parallel import DistributedDataParallel
    data = _graph()
    split, loader = _rank_loader(data, rank, world_size)
    model = DistributedDataParallel(_make_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    steps = 0
    with rank_guard(timeout=20):
        for epoch in range(EPOCHS):
            split.set_epoch(epoch)
            for batch in loader:
                opt.zero_grad()
                _loss(model, batch).backward()
                opt.step()
                steps += 1
    flat = torch.cat([p.detach().view(-1) for p in model.parameters()])
    if rank != 0:
        return steps, flat, None
    # The same global batches in one process: the mean loss of each
    # rank's batch, averaged (DDP averages the ranks' gradients).
    ref = _make_model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    pairs = [_rank_loader(data, r, world_size) for r in range(world_size)]
    for epoch in range(EPOCHS):
        for s, _ in pairs:
            s.set_epoch(epoch)
        for batches in zip(*[ld for _, ld in pairs]):
            assert len({b.batch_size for b in batches}) == 1
            ref_opt.zero_grad()
            loss = sum(_loss(ref, b) for b in batches) / world_size
            loss.backward()
            ref_opt.step()
    ref_flat = torch.cat([p.detach().view(-1) for p in ref.parameters()])
    return steps, flat, ref_flat


def test_ddp_matches_single_process():
    out = run_workers(_ddp_train, 2, timeout=90)
    (steps0, flat0, ref), (steps1, flat1, _) = out
    assert steps0 == steps1 > EPOCHS
    assert torch.equal(flat0, flat1)  # Identical on both ranks.
    assert not torch.allclose(flat0, _make_model_flat())  # It trained.
    assert torch.allclose(flat0, ref, atol=1e-5, rtol=1e-4), \
        (flat0 - ref).abs().max()


def _make_model_flat():
    return torch.cat([p.detach().view(-1) for p in _make_model().parameters()])


# Multi-process: failure propagation ##########################################

FAIL_STEP = 2


def _fail_in_backward(rank, world_size):
    from torch.nn.parallel import DistributedDataParallel
    data = _graph()
    split, loader = _rank_loader(data, rank, world_size)
    model = DistributedDataParallel(_make_model())
    step_start = None
    try:
        with rank_guard(timeout=10):
            for step, batch in enumerate(loader):
                step_start = time.monotonic()
                if rank == 1 and step == FAIL_STEP:
                    raise ValueError(f'boom at step {step}')
                _loss(model, batch).backward()  # Rank 0 waits here.
    except RankFailedError as exc:
        return exc.failed_rank, str(exc), time.monotonic() - step_start
    return 'finished'


def test_failure_surfaces_in_other_rank():
    start = time.monotonic()
    out = run_workers(_fail_in_backward, 2, timeout=60, pg_timeout=30,
                      return_exceptions=True)
    assert isinstance(out[1], ValueError) and 'boom at step 2' in str(out[1])
    failed_rank, msg, waited = out[0]
    assert failed_rank == 1
    assert 'rank 1 failed' in msg and 'ValueError: boom at step 2' in msg
    assert waited < 5.0  # Not the process group's 30 s timeout.
    assert time.monotonic() - start < 25.0


def _busy_or_stuck(rank, world_size, mode):
    # Rank 1 fails, keeps its process group open and stays alive (as a rank
    # whose collectives never notice, e.g. with NCCL); rank 0 either computes
    # without collectives ('busy') or waits in an all-reduce ('stuck').
    start = time.monotonic()
    if rank == 1:
        try:
            with rank_guard(timeout=2, abort=False):
                raise KeyError('lost')
        except KeyError:
            pass
        time.sleep(4.0 if mode == 'stuck' else 0.5)
        return 'rank 1 done'
    try:
        with rank_guard(timeout=2):
            if mode == 'busy':
                while True:
                    time.sleep(0.01)
            dist.all_reduce(torch.ones(2))
            dist.all_reduce(torch.ones(2))
    except RankFailedError as exc:
        return exc.failed_rank, str(exc), time.monotonic() - start
    return 'finished'


def test_failure_interrupts_busy_rank():
    out = run_workers(_busy_or_stuck, 2, args=('busy', ), timeout=60,
                      pg_timeout=30)
    failed_rank, msg, waited = out[0]
    assert failed_rank == 1 and "KeyError: 'lost'" in msg
    assert waited < 3.0


def test_stuck_rank_exits_after_timeout():
    # A gloo collective waiting for a live rank that never answers only
    # ends at the process group's timeout (30 s here): the watchdog ends the
    # process rank_guard's timeout (2 s) after it saw the failure.
    start = time.monotonic()
    out = run_workers(_busy_or_stuck, 2, args=('stuck', ), timeout=60,
                      pg_timeout=30, return_exceptions=True)
    assert isinstance(out[0], WorkerExit) and 'code 1' in str(out[0])
    assert out[1] == 'rank 1 done'
    assert time.monotonic() - start < 20.0


# The harness itself ##########################################################


def _raise_in_rank_1(rank, world_size):
    if rank == 1:
        raise ZeroDivisionError('from rank 1')
    return rank


def _sleep_forever(rank, world_size):
    time.sleep(3600)


def test_harness_reports_errors_and_timeouts():
    with pytest.raises(ZeroDivisionError, match='from rank 1') as info:
        run_workers(_raise_in_rank_1, 2, init_process_group=False)
    assert 'ZeroDivisionError' in str(info.value.__cause__)  # Traceback.
    assert any('rank 1 of 2' in n for n in info.value.__notes__)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r'rank\(s\) \[0, 1\]'):
        run_workers(_sleep_forever, 2, timeout=1.5, init_process_group=False)
    assert time.monotonic() - start < 10.0


# The example #################################################################


def _kill_tree(proc: subprocess.Popen) -> None:
    # torchrun stops its workers on SIGTERM; those still alive after that
    # (they run in sessions of their own) are killed by process id.
    try:
        with open(f'/proc/{proc.pid}/task/{proc.pid}/children') as f:
            children = [int(pid) for pid in f.read().split()]
    except OSError:
        children = []
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_example_runs_under_torchrun():
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS='1')
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc-per-node',
           '2', '--standalone', str(REPO / 'examples' /
                                          'multi_gpu_ddp.py'),
           '--device', 'cpu', '--epochs', '1', '--max-steps', '3']
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        stdout, stderr = proc.communicate(timeout=10)
        pytest.fail('the example did not finish within 120 s:\n' +
                    stdout[-3000:] + stderr[-3000:])
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert 'all ranks' in stdout


def _store_host_leaves_first(rank, world_size):
    # Rank 0 (which serves the store) finishes and exits while rank 1 is
    # still inside its guard: not a failure.
    with rank_guard(timeout=5):
        dist.all_reduce(torch.ones(1))
        if rank == 1:
            time.sleep(1.5)
    return 'ok'


def test_store_host_exit_is_not_a_failure():
    assert run_workers(_store_host_leaves_first, 2, timeout=60) == ['ok',
                                                                    'ok']


# Ending the process group ####################################################

def _train_then_destroy(rank, world_size):
    from torch.nn.parallel import DistributedDataParallel

    from pyg_orch.multigpu import destroy_distributed
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 2))
    model(torch.randn(3, 4)).sum().backward()  # A gradient all-reduce.
    was = dist.is_initialized()
    del model
    destroy_distributed(settle=0.01)
    return was, dist.is_initialized()


def test_destroy_distributed_ends_the_group():
    out = run_workers(_train_then_destroy, 2, timeout=60)
    assert out == [(True, False), (True, False)]


def test_destroy_distributed_without_group_and_bad_settle():
    from pyg_orch.multigpu import destroy_distributed
    destroy_distributed()  # No process group: nothing to do.
    for settle in (-1, 'x', True, float('nan')):
        with pytest.raises(ValueError, match="'settle'"):
            destroy_distributed(settle)
