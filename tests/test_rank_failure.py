"""Ranks that fail without a word, and ranks that disagree: a rank killed by
``SIGKILL`` inside :func:`~pyg_orch.parallel.watchdog.rank_guard` is named
by the survivors within seconds (not after the guard's timeout), and ranks
that shard different graphs get a clear error naming the ranks, before any
memory is shared. Checked with gloo processes on CPU."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

from conftest import random_graph
from multiproc import WorkerExit, run_workers
from pyg_orch import HybridNeighborLoader, PlacementOptions
from pyg_orch.topology.graph import GraphTopology
from pyg_orch.multigpu import PeerGroup, TopologySharding
from pyg_orch.parallel import watchdog
from pyg_orch.topology.sharded import check_same_graph
from pyg_orch.parallel.watchdog import (
    PeerLiveness,
    RankFailedError,
    process_gone,
    rank_guard,
)

GUARD_TIMEOUT = 30.0  # What a survivor waited before the fix.


# Killed ranks ################################################################


def _killed(rank, world_size, victim, survivor_mode, stamp):
    # `victim` kills itself inside the guard after a few steps; the other
    # rank either waits in all-reduces ('collective') or computes without
    # collectives ('busy').
    t = torch.ones(4)
    try:
        with rank_guard(timeout=GUARD_TIMEOUT):
            for step in range(1_000_000):
                if rank == victim and step == 5:
                    time.sleep(0.5)  # A training step.
                    with open(stamp, 'w') as f:
                        f.write(repr(time.monotonic()))
                    os.kill(os.getpid(), signal.SIGKILL)
                if rank != victim and survivor_mode == 'busy' and step >= 5:
                    time.sleep(0.01)
                    continue
                dist.all_reduce(t)
    except RankFailedError as exc:
        return exc.failed_rank, str(exc), time.monotonic()
    return 'finished'


@pytest.mark.parametrize('victim,survivor_mode', [
    (1, 'collective'),  # The survivor holds the store.
    (0, 'collective'),  # The killed rank held the store.
    (1, 'busy'),  # The survivor is in no collective.
])
def test_killed_rank_is_named_at_once(tmp_path, victim, survivor_mode):
    stamp = str(tmp_path / 'killed_at')
    out = run_workers(_killed, 2, args=(victim, survivor_mode, stamp),
                      timeout=90, pg_timeout=60, return_exceptions=True)
    assert isinstance(out[victim], WorkerExit)
    assert 'code -9' in str(out[victim])
    failed_rank, msg, raised_at = out[1 - victim]
    assert failed_rank == victim
    assert f'rank {victim} died without raising an error' in msg
    assert 'is gone' in msg
    with open(stamp) as f:
        killed_at = float(f.read())
    assert raised_at - killed_at < 5.0  # Not the guard's 30 s.


def _leave_and_exit(rank, world_size):
    # Rank 1 leaves its guard and its process ends (without error); rank 0
    # stays in its guard a while longer: no failure.
    with rank_guard(timeout=GUARD_TIMEOUT):
        dist.all_reduce(torch.ones(1))
        if rank == 0:
            time.sleep(2.0)
    return 'done'


def test_rank_that_left_is_not_dead():
    assert run_workers(_leave_and_exit, 2, timeout=90) == ['done', 'done']


# Heartbeats and pids (one process) ###########################################


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _liveness(store, rank, dead_after=2.0):
    return PeerLiveness(store, 'test', rank, [0, 1], dead_after)


def test_heartbeats_of_a_rank_on_another_host(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(watchdog.time, 'monotonic', clock)
    store = dist.HashStore()
    me, peer = _liveness(store, 0), _liveness(store, 1)
    peer.identity = 'another-host'
    me.announce()
    assert me.look() is None  # The peer has not entered its guard yet.
    peer.announce()
    assert me.look() is None
    clock.now += 1.5
    peer.beat()
    assert me.look() is None
    clock.now += 1.9  # 1.9 s since its last beat.
    assert me.look() is None
    clock.now += 0.2
    assert me.look() == 1 and 'no heartbeat for 2.1 s' in me.dead[1]
    # A rank that left on purpose is never dead:
    other = _liveness(store, 0)
    peer.leave()
    clock.now += 10
    assert other.look() is None and other.left == {1}


def test_rank_of_this_host_is_dead_once_its_process_is_gone(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(watchdog.time, 'monotonic', clock)
    store = dist.HashStore()
    child = subprocess.Popen([sys.executable, '-c', 'import time; '
                              'time.sleep(60)'])
    try:
        me = _liveness(store, 0, dead_after=None)
        # As if the child were rank 1 of this host, inside its guard:
        store.set('test/where/1', json.dumps([me.identity, child.pid]))
        store.add('test/beat/1', 1)
        clock.now += 100  # No beats: alive while its process is.
        assert not process_gone(child.pid)
        assert me.look() is None
        child.kill()
        child.wait()
        assert process_gone(child.pid)
        assert me.look() == 1
        assert f'pid {child.pid}' in me.dead[1]
    finally:
        child.kill()
        child.wait()


class _FakeDist:
    # Rank 0 of 2, as far as rank_guard asks.
    @staticmethod
    def is_available():
        return True

    @staticmethod
    def is_initialized():
        return True

    @staticmethod
    def get_rank():
        return 0

    @staticmethod
    def get_world_size(group=None):
        return 2


def _guard_with_dying_peer(monkeypatch, gone_after, name):
    # Rank 0's guard in this process, with a peer "rank 1" of this host
    # that beat once more right before its connections closed; its process
    # is gone after `gone_after` looks (never if None). Sleeping advances a
    # fake clock, and the peer beats while it is alive.
    clock = _Clock()
    monkeypatch.setattr(watchdog.time, 'monotonic', clock)
    monkeypatch.setattr(watchdog, 'dist', _FakeDist)
    looks = []

    def gone(pid):
        looks.append(pid)
        return gone_after is not None and len(looks) > gone_after

    monkeypatch.setattr(watchdog, 'process_gone', gone)
    store = dist.HashStore()
    # A long poll interval: the watchdog thread does not look before the
    # guard ends, so the guard's own look after the error decides.
    guard = rank_guard(timeout=1.0, name=name, store=store,
                       poll_interval=5.0, abort=False, hard_exit=False)
    peer = PeerLiveness(store, '', 1, [0, 1], 2.0)

    def sleep(seconds):
        clock.now += seconds
        if gone_after is None:
            peer.beat()

    monkeypatch.setattr(watchdog.time, 'sleep', sleep)
    return guard, peer


def test_collective_error_after_a_peer_died_names_it(monkeypatch):
    guard, peer = _guard_with_dying_peer(monkeypatch, 2, 'test-died')
    error = RuntimeError('Connection closed by peer')
    with pytest.raises(RankFailedError) as info:
        with guard:
            peer.prefix = guard.prefix
            peer.announce()
            peer.beat()  # In flight when it was killed.
            raise error
    assert info.value.failed_rank == 1 and info.value.__cause__ is error
    assert 'rank 1 died without raising an error' in str(info.value)


def test_collective_error_with_live_peers_is_raised_as_is(monkeypatch):
    guard, peer = _guard_with_dying_peer(monkeypatch, None, 'test-alive')
    with pytest.raises(RuntimeError, match='^Connection closed by peer$'):
        with guard:
            peer.prefix = guard.prefix
            peer.announce()
            peer.beat()
            raise RuntimeError('Connection closed by peer')


def test_a_beat_in_flight_is_no_sign_of_life():
    store = dist.HashStore()
    me, peer = _liveness(store, 0), _liveness(store, 1)
    me.announce()
    peer.announce()
    me.look()
    start = dict(me.changes)
    peer.beat()  # Maybe sent before it was killed.
    me.look()
    assert not me.alive_since(start)
    peer.beat()
    me.look()
    assert me.alive_since(start)


def test_bad_dead_after():
    with pytest.raises(ValueError, match="'dead_after' must be a positive "
                       "number of seconds or None \\(got 0\\)"):
        rank_guard(dead_after=0)


# Ranks with different graphs #################################################


def _different_graphs(rank, world_size, how):
    data = random_graph(300, 3000, seed=rank if how != 'same' else 0)
    try:
        if how == 'check':
            check_same_graph(PeerGroup(),
                             GraphTopology.from_data(data).fingerprint)
            return 'agreed'
        HybridNeighborLoader(data, [3, 2], batch_size=16, device='cpu',
                             placement=PlacementOptions(
                                 topology=TopologySharding()))
        return 'sharded'
    except ValueError as exc:
        return str(exc)


@pytest.mark.parametrize('how', ['check', 'loader'])
def test_ranks_with_different_graphs(how):
    out = run_workers(_different_graphs, 2, args=(how, ), timeout=120)
    for msg in out:  # The same clear error on every rank.
        assert 'Every rank must shard the same graph, but rank(s) [1] of 2 '\
            'hold another one' in msg
    assert run_workers(_different_graphs, 2, args=('same', ),
                       timeout=120) == ['sharded', 'sharded']


# On two GPUs (NCCL, symmetric memory) ########################################

needs_two_gpus = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2,
    reason='needs 2 CUDA devices')


def _gpu_graphs(rank, world_size, same):
    # Each rank draws its graph on its own GPU.
    from torch_geometric.data import Data
    torch.cuda.set_device(rank)
    device = torch.device('cuda', rank)
    gen = torch.Generator(device=device).manual_seed(0 if same else rank)
    edge_index = torch.randint(0, 2000, (2, 20000), generator=gen,
                               device=device)
    data = Data(edge_index=edge_index, num_nodes=2000)
    try:
        HybridNeighborLoader(data, [5, 3], batch_size=64, device=device,
                             placement=PlacementOptions(topology='sharded'))
        return 'sharded'
    except ValueError as exc:
        return str(exc)


@pytest.mark.gpu
@needs_two_gpus
@pytest.mark.parametrize('same', [False, True])
def test_gpu_ranks_with_different_graphs(same):
    from pyg_orch.multigpu import MULTICAST_OFF_ENV
    out = run_workers(_gpu_graphs, 2, args=(same, ), backend='nccl',
                      start_method='spawn', env=MULTICAST_OFF_ENV,
                      timeout=300)
    if same:
        assert out == ['sharded', 'sharded']
    else:
        for msg in out:
            assert 'Every rank must shard the same graph, but rank(s) [1]' \
                in msg


def _gpu_killed(rank, world_size, victim, stamp):
    torch.cuda.set_device(rank)
    t = torch.ones(4, device=torch.device('cuda', rank))
    try:
        with rank_guard(timeout=GUARD_TIMEOUT):
            for step in range(1_000_000):
                if rank == victim and step == 5:
                    time.sleep(0.5)
                    with open(stamp, 'w') as f:
                        f.write(repr(time.monotonic()))
                    os.kill(os.getpid(), signal.SIGKILL)
                dist.all_reduce(t)
                torch.cuda.synchronize()  # Waits for the dead peer.
    except RankFailedError as exc:
        return exc.failed_rank, str(exc), time.monotonic()
    return 'finished'


@pytest.mark.gpu
@needs_two_gpus
def test_gpu_killed_rank_is_named_at_once(tmp_path):
    # A NCCL collective waiting for a dead rank never fails by itself.
    from pyg_orch.multigpu import MULTICAST_OFF_ENV
    stamp = str(tmp_path / 'killed_at')
    out = run_workers(_gpu_killed, 2, args=(1, stamp), backend='nccl',
                      start_method='spawn', env=MULTICAST_OFF_ENV,
                      timeout=120, return_exceptions=True)
    assert isinstance(out[1], WorkerExit)
    failed_rank, msg, raised_at = out[0]
    assert failed_rank == 1 and 'rank 1 died' in msg
    with open(stamp) as f:
        assert raised_at - float(f.read()) < 5.0


def _rank_sum(rank, world_size):
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    return t.item()


def test_harness_retries_on_a_port_taken_before_the_store_bound_it(
        monkeypatch):
    # free_port() closes its socket before rank 0's store binds the port;
    # another process may take it in between (CI saw EADDRINUSE). The
    # harness starts the workers again on a new port.
    import socket

    import multiproc
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(('127.0.0.1', 0))
    taken.listen(1)
    ports = [taken.getsockname()[1]]
    real = multiproc.free_port
    monkeypatch.setattr(multiproc, 'free_port',
                        lambda: ports.pop() if ports else real())
    try:
        assert run_workers(_rank_sum, 2, timeout=60) == [1.0, 1.0]
    finally:
        taken.close()
    assert ports == []  # The taken port was tried first.
