r"""A rank's failure raised in every rank, within a timeout, instead of the
other ranks hanging in a collective (e.g. DDP's gradient all-reduce).

A failing rank records its error in the process group's store and aborts its
group; every other rank's watchdog thread sees it, aborts its own group and
interrupts the guarded thread, which raises :class:`RankFailedError` (or ends
the process after :obj:`timeout` if still blocked). Ranks that die without an
exception are found through heartbeats in the store (a peer of this host once
its process is gone, others after :obj:`dead_after`)."""
import ctypes
import json
import os
import socket
import sys
import threading
import time
import traceback
from typing import Any, Dict, List, Optional, Set

import torch.distributed as dist

from pyg_orch.core.checks import check_seconds

#: Prefix of the store keys the guards use.
KEY_PREFIX = 'pyg_orch/rank_guard'

#: Added to a rank's heartbeat counter when it leaves its guard.
_LEFT = 1 << 40


class RankFailedError(RuntimeError):
    r"""Raised in a rank when another rank failed inside the same
    :func:`rank_guard`: :obj:`failed_rank`, its :obj:`error` and
    :obj:`remote_traceback`."""
    def __init__(self, failed_rank: Optional[int], error: str,
                 remote_traceback: str = '', rank: Optional[int] = None):
        self.failed_rank = failed_rank
        self.error = error
        self.remote_traceback = remote_traceback
        self.rank = rank
        who = 'another rank' if failed_rank is None else \
            f'rank {failed_rank}'
        here = '' if rank is None else f' (seen by rank {rank})'
        msg = f'{who} failed{here}: {error}'
        if remote_traceback:
            msg += f'\n\nTraceback of rank {failed_rank}:\n' + \
                remote_traceback.rstrip()
        super().__init__(msg)

    def __reduce__(self):
        return (type(self), (self.failed_rank, self.error,
                             self.remote_traceback, self.rank))


class _Interrupt(BaseException):
    # A BaseException: `except Exception` in the guarded code keeps it.
    pass


_counters: Dict[str, int] = {}


def _set_async_exc(thread_id: int, exc: Optional[type]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id),
        ctypes.py_object(exc) if exc is not None else ctypes.c_void_p(0))


def _abort_group(group: Optional[Any]) -> None:
    from torch.distributed import distributed_c10d as c10d
    try:
        c10d._abort_process_group(group or dist.group.WORLD)
    except Exception:
        pass


def _host_identity() -> str:
    # Processes of one identity see each other's pids: one host (boot) and
    # one pid namespace; '' where that cannot be told.
    try:
        ns = os.stat('/proc/self/ns/pid').st_ino
        with open('/proc/sys/kernel/random/boot_id') as f:
            boot = f.read().strip()
    except OSError:
        return ''
    return f'{socket.gethostname()}/{boot}/{ns}'


def process_gone(pid: int) -> bool:
    r"""Whether the process :obj:`pid` (of this host) has ended: it no
    longer exists, or is a zombie that its parent has not reaped yet."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f'/proc/{pid}/stat') as f:
            state = f.read().rsplit(')', 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in ('Z', 'X')


class PeerLiveness:
    r"""Which ranks of a guard (the :obj:`ranks` of its group) died without
    a word, by heartbeat counters in :obj:`store` (see the module)."""
    def __init__(self, store: Any, prefix: str, rank: int, ranks: List[int],
                 dead_after: Optional[float]):
        self.store = store
        self.prefix = prefix
        self.rank = rank
        self.peers = [r for r in ranks if r != rank]
        self.dead_after = dead_after
        self.identity = _host_identity()
        self.beats: Dict[int, int] = {}
        #: How often each peer's counter was seen to change.
        self.changes: Dict[int, int] = {}
        self.changed: Dict[int, float] = {}
        self.where: Dict[int, List[Any]] = {}
        self.left: Set[int] = set()
        self.store_lost = False
        #: The dead peers and why they count as dead.
        self.dead: Dict[int, str] = {}

    def _key(self, what: str, rank: int) -> str:
        return f'{self.prefix}/{what}/{rank}'

    def announce(self) -> None:
        r"""Publishes where this rank runs, and its first beat."""
        self.store.set(self._key('where', self.rank),
                       json.dumps([self.identity, os.getpid()]))
        self.beat()

    def beat(self) -> None:
        self.store.add(self._key('beat', self.rank), 1)

    def leave(self) -> None:
        r"""Marks this rank as gone from the guard on purpose."""
        if self.store_lost:
            return
        try:
            self.store.add(self._key('beat', self.rank), _LEFT)
        except Exception:
            pass

    def look(self) -> Optional[int]:
        r"""Reads every peer's counter; the lowest dead peer, if any."""
        now = time.monotonic()
        for r in self.peers:
            if r in self.left or r in self.dead:
                continue
            value = int(self.store.add(self._key('beat', r), 0))
            if value >= _LEFT:
                self.left.add(r)
            elif value > 0:  # Inside its guard.
                if value != self.beats.get(r):
                    self.beats[r], self.changed[r] = value, now
                    self.changes[r] = self.changes.get(r, 0) + 1
                self._judge(r, now)
        return min(self.dead) if self.dead else None

    def look_without_store(self) -> Optional[int]:
        r"""The lowest peer of this host whose process is gone, by what was
        read before the store was lost."""
        self.store_lost = True
        for r in sorted(self.where):
            if r not in self.left and self._local_gone(r):
                return r
        return None

    def alive_since(self, start: Dict[int, int]) -> bool:
        r"""Whether every peer left or beat twice since :obj:`start` (a copy of
        :obj:`changes`; a killed peer may have one beat in flight)."""
        return all(r in self.left or
                   self.changes.get(r, 0) - start.get(r, 0) >= 2
                   for r in self.peers)

    def _on_this_host(self, r: int) -> bool:
        where = self.where.get(r)
        return where is not None and bool(self.identity) and \
            where[0] == self.identity

    def _local_gone(self, r: int) -> bool:
        if self._on_this_host(r) and process_gone(int(self.where[r][1])):
            self.dead[r] = f'its process (pid {self.where[r][1]}) is gone'
            return True
        return False

    def _judge(self, r: int, now: float) -> None:
        if r not in self.where:
            key = self._key('where', r)
            if self.store.check([key]):
                self.where[r] = json.loads(self.store.get(key).decode())
        if self._on_this_host(r):
            self._local_gone(r)  # Its process tells; a heartbeat may lag.
        elif self.dead_after is not None and \
                now - self.changed[r] > self.dead_after:
            self.dead[r] = (f'no heartbeat for {now - self.changed[r]:.1f} '
                            f's')


def _failure(rank: Optional[int], error: str,
             remote_traceback: str = '') -> Dict[str, Any]:
    # A failure as the guards record it in the store.
    return {'rank': rank, 'error': error, 'traceback': remote_traceback}


class RankGuard:
    r"""The context manager of :func:`rank_guard` (see there)."""
    def __init__(self, timeout: float = 60.0, *, name: str = 'default',
                 group: Optional[Any] = None, store: Optional[Any] = None,
                 poll_interval: float = 0.05, abort: bool = True,
                 interrupt: bool = True, hard_exit: bool = True,
                 exit_code: int = 1, dead_after: Optional[float] = 2.0):
        dead_after = check_seconds('dead_after', dead_after, positive=True,
                                   optional=True)
        timeout = check_seconds('timeout', timeout, positive=True)
        poll_interval = check_seconds('poll_interval', poll_interval,
                                      positive=True)
        if not isinstance(name, str) or not name or '/' in name:
            raise ValueError(f"'name' must be a non-empty string without "
                             f"'/' (got {name!r})")
        self.timeout = timeout
        self.name = name
        self.group = group
        self._store = store
        self.poll_interval = poll_interval
        self.abort = abort
        self.interrupt = interrupt
        self.hard_exit = hard_exit
        self.exit_code = exit_code
        self.dead_after = dead_after
        # Seconds between two heartbeats (and looks at the peers' ones).
        self.beat_interval = max(poll_interval, 0.25 if dead_after is None
                                 else min(0.25, dead_after / 4))
        self.failure: Optional[Dict[str, Any]] = None
        self._lock = threading.Lock()
        self._active = False
        self._interrupted = False
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _key(self, what: str) -> str:
        return f'{self.prefix}/{what}'

    def __enter__(self) -> 'RankGuard':
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("rank_guard needs an initialized process "
                               "group (see pyg_orch.parallel.ddp."
                               "init_distributed)")
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size(self.group)
        if self._store is None:
            from torch.distributed import distributed_c10d as c10d
            self._store = c10d._get_default_store()
        # Every rank enters its guards of one name in the same order.
        count = _counters.get(self.name, 0)
        _counters[self.name] = count + 1
        self.prefix = f'{KEY_PREFIX}/{self.name}/{count}'
        ranks = dist.get_process_group_ranks(self.group) if \
            self.group is not None else list(range(self.world_size))
        self._peers = PeerLiveness(self._store, self.prefix, self.rank,
                                   ranks, self.dead_after)
        self._peers.announce()
        self.failure = None
        self._interrupted = False
        self._acknowledged = False
        self._thread_id = threading.get_ident()
        self._stop.clear()
        self._active = True
        self._thread = threading.Thread(
            target=self._watch, name=f'pyg_orch-rank-guard-{self.rank}',
            daemon=True)
        self._thread.start()
        return self

    def _read_failure(self) -> Optional[Dict[str, Any]]:
        key = self._key('failed')
        if not self._store.check([key]):
            return None
        return json.loads(self._store.get(key).decode())

    def _watch(self) -> None:
        detected_at: Optional[float] = None
        lost_at: Optional[float] = None
        next_beat = time.monotonic()  # Learn the peers' pids early.
        while not self._stop.wait(self.poll_interval):
            if detected_at is None:
                try:
                    failure = self._read_failure()
                    if failure is None and time.monotonic() >= next_beat:
                        next_beat = time.monotonic() + self.beat_interval
                        self._peers.beat()
                        dead = self._peers.look()
                        if dead is not None:
                            failure = self._record_death(dead)
                except Exception as exc:  # The store's server is gone.
                    # Its host may have left its guard and exited normally:
                    # a failure only if this rank is still inside after
                    # `timeout` (a collective error here says so sooner).
                    if lost_at is None:
                        lost_at = time.monotonic()
                    if time.monotonic() - lost_at <= self.timeout:
                        continue
                    failure = _failure(
                        None, f'lost the store of the process group '
                        f'{self.timeout} s ago ({type(exc).__name__}: '
                        f'{exc}); the process that holds it (rank 0 unless '
                        f'under torchrun) probably exited')
                if failure is None or failure.get('rank') == self.rank:
                    continue
                with self._lock:
                    if not self._active:
                        return
                    self.failure = failure
                detected_at = time.monotonic()
                self._acknowledge()
                if self.abort:
                    _abort_group(self.group)
                with self._lock:
                    if self._active and self.interrupt:
                        self._interrupted = True
                        _set_async_exc(self._thread_id, _Interrupt)
            elif time.monotonic() - detected_at > self.timeout:
                with self._lock:
                    if not self._active:
                        return
                if self.hard_exit:
                    self._exit_process()
                return

    def _death(self, dead: int) -> Dict[str, Any]:
        return _failure(
            dead, f'rank {dead} died without raising an error '
            f'({self._peers.dead.get(dead, "its process is gone")}): '
            f'killed (e.g. SIGKILL, the out-of-memory killer) or crashed')

    def _record_death(self, dead: int) -> Dict[str, Any]:
        # The first failure recorded wins (maybe the dead rank's own).
        record = json.dumps(self._death(dead))
        try:
            stored = self._store.compare_set(self._key('failed'), '',
                                             record).decode()
        except Exception:
            return self._death(dead)
        return json.loads(stored)

    def _await_death(self) -> Optional[Dict[str, Any]]:
        # A dead peer's failure, or None once every peer was seen alive. A
        # peer killed a moment ago may still beat once, so only beats after
        # this first look count as signs of life.
        dead = self._peers.look()
        start = dict(self._peers.changes)
        deadline = time.monotonic() + self._death_wait()
        while True:
            if dead is not None:
                return self._record_death(dead)
            failure = self._read_failure()
            if failure is not None and failure.get('rank') != self.rank:
                return failure
            if self._peers.alive_since(start) or \
                    time.monotonic() > deadline:
                return None
            time.sleep(self.poll_interval)
            dead = self._peers.look()

    def _death_wait(self) -> float:
        return (self.dead_after or 0.0) + 2 * self.beat_interval

    def _exit_process(self) -> None:
        err = RankFailedError(self.failure.get('rank'),
                              self.failure.get('error', ''),
                              self.failure.get('traceback', ''), self.rank)
        sys.stderr.write(
            f'rank_guard: rank {self.rank} still blocked {self.timeout} s '
            f'after the failure of another rank; exiting with code '
            f'{self.exit_code}.\n{err}\n')
        sys.stderr.flush()
        os._exit(self.exit_code)

    def _deactivate(self) -> None:
        with self._lock:
            self._active = False
            if self._interrupted:  # An undelivered one must not fire later.
                _set_async_exc(self._thread_id, None)

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            self._deactivate()
        except _Interrupt:
            self._deactivate()
        self._stop.set()
        if self._thread is not None and \
                self._thread is not threading.current_thread():
            self._thread.join()
        try:
            self._raise_for(exc)
        finally:
            self._peers.leave()
        return False

    def _raise_for(self, exc: Optional[BaseException]) -> None:
        if isinstance(exc, _Interrupt) or (
                (exc is None or isinstance(exc, RuntimeError))
                and self._peer_failed(collective_error=exc is not None)):
            # Another rank failed: the failure a collective error here was
            # a consequence of, or one seen while finishing the block.
            failure = self.failure or {}
            if not self._acknowledged:
                self._acknowledge()
            raise RankFailedError(failure.get('rank'),
                                  failure.get('error', str(exc)),
                                  failure.get('traceback', ''),
                                  self.rank) from (
                                      None if isinstance(exc, _Interrupt)
                                      else exc)
        if isinstance(exc, Exception):
            self._report(exc, exc.__traceback__)

    def _peer_failed(self, collective_error: bool) -> bool:
        # A failing rank records before it closes its connections; one that
        # died without a word is found dead.
        if self.failure is not None:
            return True
        try:
            failure = self._read_failure()
            if failure is None and collective_error:
                failure = self._await_death()
        except Exception as exc:
            if not collective_error:
                return False
            failure = self._lost_store(exc)
        if failure is None or failure.get('rank') == self.rank:
            return False
        self.failure = failure
        return True

    def _lost_store(self, exc: BaseException) -> Dict[str, Any]:
        # A peer of this host may take a moment to be gone after its
        # connections closed.
        deadline = time.monotonic() + self._death_wait()
        while (dead := self._peers.look_without_store()) is None and \
                time.monotonic() < deadline:
            time.sleep(self.poll_interval)
        if dead is not None:
            failure = self._death(dead)
            failure['error'] += (f' (the store of the process group is '
                                 f'lost too: {type(exc).__name__}: {exc})')
            return failure
        return _failure(None, f'lost the store of the process group '
                        f'({type(exc).__name__}: {exc})')

    def _acknowledge(self) -> None:
        self._acknowledged = True
        try:
            self._store.add(self._key('seen'), 1)
        except Exception:
            pass

    def _report(self, exc: BaseException, tb: Any) -> None:
        record = json.dumps(_failure(
            self.rank, f'{type(exc).__name__}: {exc}',
            ''.join(traceback.format_exception(type(exc), exc, tb))[-4000:]))
        first = False
        try:
            self._store.set(self._key(f'error/{self.rank}'), record)
            stored = self._store.compare_set(self._key('failed'), '', record)
            first = stored.decode() == record
        except Exception:
            pass
        if self.abort:
            _abort_group(self.group)
        if first:
            self._linger()

    def _linger(self) -> None:
        # Keep the store (maybe served here) up until the living others
        # read the failure, or for `timeout` seconds.
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            try:
                self._peers.look()
                if self._store.add(self._key('seen'), 0) >= \
                        self.world_size - 1 - len(self._peers.dead):
                    return
            except Exception:
                return
            time.sleep(self.beat_interval)


def rank_guard(timeout: float = 60.0, *, name: str = 'default',
               group: Optional[Any] = None, store: Optional[Any] = None,
               poll_interval: float = 0.05, abort: bool = True,
               interrupt: bool = True, hard_exit: bool = True,
               exit_code: int = 1,
               dead_after: Optional[float] = 2.0) -> RankGuard:
    r"""A context manager that turns an exception in one rank into a
    :class:`RankFailedError` in every other rank of the process group,
    within :obj:`timeout` seconds, instead of a hang in the next collective
    (see :mod:`pyg_orch.parallel.watchdog`). All ranks enter it together,
    around the code that communicates (the training loop); the failed rank
    raises its own exception.

    Args:
        timeout (float): Seconds a rank may stay blocked after another
            rank's failure was seen before the process is ended
            (:obj:`hard_exit`), and that a failed rank holding the store
            waits for the others to read its error. (default: :obj:`60.0`)
        name (str): Guards of different names may nest; guards of one name
            must be entered in the same order on every rank.
        group (ProcessGroup, optional): The group to abort; the default one
            if not set.
        store (torch.distributed.Store, optional): Where failures are
            recorded; the default process group's store if not set.
        poll_interval (float): Seconds between two looks at the store.
            (default: :obj:`0.05`)
        abort (bool): Abort the process group on a failure, ours or
            another rank's, so that no collective keeps waiting. The group
            cannot be used afterwards. (default: :obj:`True`)
        interrupt (bool): Raise in the guarded thread at its next Python
            instruction when another rank failed. (default: :obj:`True`)
        hard_exit (bool): End the process with :obj:`exit_code` if it is
            still inside the guard :obj:`timeout` seconds after another
            rank's failure was seen. (default: :obj:`True`)
        exit_code (int): The exit code then. (default: :obj:`1`)
        dead_after (float, optional): Seconds without a heartbeat after
            which a rank on another host counts as dead (a rank on this
            host counts as dead once its process is gone); :obj:`None`:
            only the latter. (default: :obj:`2.0`)
    """
    return RankGuard(timeout, name=name, group=group, store=store,
                     poll_interval=poll_interval, abort=abort,
                     interrupt=interrupt, hard_exit=hard_exit,
                     exit_code=exit_code, dead_after=dead_after)
