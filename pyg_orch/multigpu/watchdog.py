r"""A rank's failure raised in every rank, within a timeout, instead of the
other ranks hanging in a collective (e.g. DDP's gradient all-reduce).

.. code-block:: python

    from pyg_orch.multigpu.watchdog import rank_guard

    with rank_guard(timeout=60):
        for batch in loader:
            loss = ...
            loss.backward()  # rank 0 waits here if rank 1 raised
            optimizer.step()

When the block raises in one rank, the guard writes the error to the
process group's store (the ``TCPStore`` of the rendezvous), aborts that
rank's process group and raises the error again; the process then normally
exits, which closes its connections, and peers waiting for it in a gloo
collective fail at once. In every other rank a watchdog thread polls the
store; once it sees the failure it aborts its own process group too
(which unblocks NCCL collectives) and interrupts the guarded thread at its
next Python instruction. Every other rank then raises
:class:`RankFailedError` naming the failed rank and its error. Measured with
gloo on CPU (``tests/test_ddp.py``), 2 processes: a rank waiting in DDP's
gradient all-reduce raises about 0.5 s after the other rank's error, a rank
computing without collectives within 0.1 s.

Aborting a gloo process group does not wake a thread already waiting in one
of its collectives, and DDP holds on to the group, so its connections stay
open as long as a failed process lives on. If the guarded thread is still
blocked :obj:`timeout` seconds after the failure was seen, the watchdog
prints the error and ends the process with :obj:`exit_code`
(:obj:`hard_exit=True`, the default), which ``torchrun`` and
:func:`torch.multiprocessing.spawn` report as a failure of that rank.

The store lives in one process (rank 0, or ``torchrun``'s agent). A failed
rank that recorded the first failure waits up to :obj:`timeout` seconds
until every other rank has seen it before raising, so the store outlives
the news. Losing the store counts as a failure only when a collective
fails afterwards, or when the rank is still inside the guard
:obj:`timeout` seconds later (its host may just have finished first).
"""
import ctypes
import json
import os
import sys
import threading
import time
import traceback
from typing import Any, Dict, Optional

import torch.distributed as dist

#: Prefix of the store keys the guards use.
KEY_PREFIX = 'pyg_orch/rank_guard'


class RankFailedError(RuntimeError):
    r"""Raised in a rank when another rank failed inside the same
    :func:`rank_guard`: :obj:`failed_rank` and its :obj:`error` (the
    exception's type and message) and :obj:`remote_traceback`."""
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
    # Raised asynchronously in the guarded thread by the watchdog; turned
    # into RankFailedError by the guard (BaseException: `except Exception`
    # in the guarded code does not swallow it).
    pass


_counters: Dict[str, int] = {}


def _set_async_exc(thread_id: int, exc: Optional[type]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id),
        ctypes.py_object(exc) if exc is not None else ctypes.c_void_p(0))


def _default_store() -> Any:
    from torch.distributed import distributed_c10d as c10d
    return c10d._get_default_store()


def _abort_group(group: Optional[Any]) -> None:
    from torch.distributed import distributed_c10d as c10d
    try:
        c10d._abort_process_group(group or dist.group.WORLD)
    except Exception:
        pass


class RankGuard:
    r"""The context manager of :func:`rank_guard` (see there)."""
    def __init__(self, timeout: float = 60.0, *, name: str = 'default',
                 group: Optional[Any] = None, store: Optional[Any] = None,
                 poll_interval: float = 0.05, abort: bool = True,
                 interrupt: bool = True, hard_exit: bool = True,
                 exit_code: int = 1):
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
                or timeout <= 0:
            raise ValueError(f"'timeout' must be a positive number of "
                             f"seconds (got {timeout!r})")
        if isinstance(poll_interval, bool) or not isinstance(
                poll_interval, (int, float)) or poll_interval <= 0:
            raise ValueError(f"'poll_interval' must be a positive number of "
                             f"seconds (got {poll_interval!r})")
        if not isinstance(name, str) or not name or '/' in name:
            raise ValueError(f"'name' must be a non-empty string without "
                             f"'/' (got {name!r})")
        self.timeout = float(timeout)
        self.name = name
        self.group = group
        self._store = store
        self.poll_interval = float(poll_interval)
        self.abort = abort
        self.interrupt = interrupt
        self.hard_exit = hard_exit
        self.exit_code = exit_code
        self.failure: Optional[Dict[str, Any]] = None
        self._lock = threading.Lock()
        self._active = False
        self._interrupted = False
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # Keys ####################################################################

    def _key(self, what: str) -> str:
        return f'{self.prefix}/{what}'

    # Entering ################################################################

    def __enter__(self) -> 'RankGuard':
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("rank_guard needs an initialized process "
                               "group (see pyg_orch.multigpu.ddp."
                               "init_distributed)")
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size(self.group)
        if self._store is None:
            self._store = _default_store()
        # Every rank enters its guards of one name in the same order.
        count = _counters.get(self.name, 0)
        _counters[self.name] = count + 1
        self.prefix = f'{KEY_PREFIX}/{self.name}/{count}'
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

    # The watchdog thread #####################################################

    def _read_failure(self) -> Optional[Dict[str, Any]]:
        key = self._key('failed')
        if not self._store.check([key]):
            return None
        return json.loads(self._store.get(key).decode())

    def _watch(self) -> None:
        detected_at: Optional[float] = None
        lost_at: Optional[float] = None
        while not self._stop.wait(self.poll_interval):
            if detected_at is None:
                try:
                    failure = self._read_failure()
                except Exception as exc:  # The store's server is gone.
                    # Its host may have left its guard and exited normally:
                    # a failure only if this rank is still inside after
                    # `timeout` (a collective error here says so sooner).
                    if lost_at is None:
                        lost_at = time.monotonic()
                    if time.monotonic() - lost_at <= self.timeout:
                        continue
                    failure = {
                        'rank': None,
                        'error': f'lost the store of the process group '
                        f'{self.timeout} s ago ({type(exc).__name__}: '
                        f'{exc}); the process that holds it (rank 0 unless '
                        f'under torchrun) probably exited',
                        'traceback': '',
                    }
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

    # Leaving #################################################################

    def _deactivate(self) -> None:
        with self._lock:
            self._active = False
            if self._interrupted:
                # An interrupt not delivered yet must not fire later.
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
        if isinstance(exc, _Interrupt) or (
                (exc is None or isinstance(exc, RuntimeError))
                and self._peer_failed(lost_store=exc is not None)):
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
            self._report(exc, tb)
        return False

    def _peer_failed(self, lost_store: bool) -> bool:
        # A collective error: did another rank record a failure? It records
        # before it closes its connections, so the record is there already,
        # unless that rank died without reaching its guard.
        if self.failure is not None:
            return True
        try:
            failure = self._read_failure()
        except Exception as exc:
            if not lost_store:
                return False
            failure = {'rank': None, 'error': f'lost the store of the '
                       f'process group ({type(exc).__name__}: {exc})',
                       'traceback': ''}
        if failure is None or failure.get('rank') == self.rank:
            return False
        self.failure = failure
        return True

    def _acknowledge(self) -> None:
        self._acknowledged = True
        try:
            self._store.add(self._key('seen'), 1)
        except Exception:
            pass

    def _report(self, exc: BaseException, tb: Any) -> None:
        record = json.dumps({
            'rank': self.rank,
            'error': f'{type(exc).__name__}: {exc}',
            'traceback': ''.join(traceback.format_exception(
                type(exc), exc, tb))[-4000:],
        })
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
        # Keep the store (maybe served by this process) up until the others
        # read the failure, or for `timeout` seconds.
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            try:
                if self._store.add(self._key('seen'), 0) >= \
                        self.world_size - 1:
                    return
            except Exception:
                return
            time.sleep(self.poll_interval)


def rank_guard(timeout: float = 60.0, *, name: str = 'default',
               group: Optional[Any] = None, store: Optional[Any] = None,
               poll_interval: float = 0.05, abort: bool = True,
               interrupt: bool = True, hard_exit: bool = True,
               exit_code: int = 1) -> RankGuard:
    r"""A context manager that turns an exception in one rank into a
    :class:`RankFailedError` in every other rank of the process group,
    within :obj:`timeout` seconds, instead of a hang in the next collective
    (see :mod:`pyg_orch.multigpu.watchdog`). All ranks enter it together,
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
    """
    return RankGuard(timeout, name=name, group=group, store=store,
                     poll_interval=poll_interval, abort=abort,
                     interrupt=interrupt, hard_exit=hard_exit,
                     exit_code=exit_code)
