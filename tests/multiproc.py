"""A harness for tests that need several processes, one per rank, as under
``torchrun``: CPU processes joined by a gloo process group on a free port.

.. code-block:: python

    from multiproc import run_workers

    def _sum_ranks(rank, world_size, scale):  # Top-level, so picklable.
        t = torch.tensor([float(rank)])
        torch.distributed.all_reduce(t)
        return scale * t.item()

    def test_sum():
        assert run_workers(_sum_ranks, 2, args=(10, ), timeout=60) == [10, 10]

:func:`run_workers` starts :obj:`world_size` processes, sets the variables
``torchrun`` sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), joins them in a
process group (unless :obj:`init_process_group=False`), calls
:obj:`fn(rank, world_size, *args, **kwargs)` in each, and returns the return
values in rank order. A worker's exception is raised again in the caller,
with the worker's traceback as its cause and a note naming the rank. After
:obj:`timeout` seconds every worker still running is killed and
:class:`TimeoutError` is raised, so a test using the harness never hangs.

Processes start through a fork server by default: it imports :obj:`torch`
and :obj:`torch_geometric` once, and each worker is forked from it, clean
(no threads of the test process) and quick to start. It sees no GPU, so
its workers are CPU processes; workers that use CUDA start with
:obj:`start_method='spawn'`. :obj:`fn`, its
arguments and its return value must be picklable: define :obj:`fn` at the
top level of a module importable from the test process's :obj:`sys.path`
(a test module is).
"""
import multiprocessing as mp
import os
import pickle
import queue
import socket
import sys
import threading
import time
import traceback
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Sequence

#: Modules the fork server imports once, before forking workers.
PRELOAD = ['torch', 'torch.distributed', 'torch_geometric',
           'torch_geometric.loader', 'torch_geometric.nn']


class RemoteTraceback(Exception):
    r"""The formatted traceback of an exception raised in a worker; set as
    the :obj:`__cause__` of the exception raised again in the caller."""
    def __init__(self, tb: str):
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


class WorkerExit(RuntimeError):
    r"""A worker exited without returning (killed, crashed, or called
    :func:`os._exit`)."""


def free_port(host: str = '127.0.0.1') -> int:
    r"""A TCP port that is free on :obj:`host` now (the operating system's
    choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, 0))
        return s.getsockname()[1]


def _context(start_method: Optional[str]):
    if start_method is None:
        start_method = ('forkserver' if 'forkserver'
                        in mp.get_all_start_methods() else 'spawn')
    ctx = mp.get_context(start_method)
    if start_method == 'forkserver':
        ctx.set_forkserver_preload(PRELOAD)
        _start_cpu_fork_server()
    return ctx


def _start_cpu_fork_server() -> None:
    # The fork server starts (once) without visible GPUs: a CUDA driver that
    # its imports initialized can not be used by the workers forked from it
    # ("CUDA error: initialization error", e.g. from Adam's graph-capture
    # check on a GPU machine). Its workers are CPU processes; GPU workers
    # start with start_method='spawn'.
    from multiprocessing import forkserver
    from unittest import mock
    with mock.patch.dict(os.environ, CUDA_VISIBLE_DEVICES=''):
        forkserver.ensure_running()


def _exit_with_parent(parent: int) -> None:
    # Workers never outlive the test process (e.g. killed by a CI timeout).
    def watch() -> None:
        while True:
            if os.getppid() != parent:
                try:
                    os.kill(parent, 0)
                except OSError:
                    os._exit(3)
            time.sleep(0.5)

    threading.Thread(target=watch, name='multiproc-parent-watch',
                     daemon=True).start()


def _worker(rank: int, world_size: int, fn: Callable, args: Sequence,
            kwargs: Dict[str, Any], env: Dict[str, str], backend: str,
            init_process_group: bool, pg_timeout: float, num_threads: int,
            parent: int, results) -> None:
    _exit_with_parent(parent)
    os.environ.update(env)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank))
    try:
        import torch
        import torch.distributed as dist
        if num_threads > 0:
            torch.set_num_threads(num_threads)
        if init_process_group:
            try:
                dist.init_process_group(
                    backend, rank=rank, world_size=world_size,
                    timeout=timedelta(seconds=pg_timeout))
            except Exception as exc:
                if not port_taken(exc):
                    raise
                # Another process took the port between free_port() and
                # the store's bind: the caller retries on a new port.
                results.put((rank, None, None, None))
                results.close()
                results.join_thread()
                os._exit(0)
        value = fn(rank, world_size, *args, **kwargs)
        # Pickled here, by value: through the queue, tensors would be sent
        # as shared-memory handles that die with this process.
        results.put((rank, True, pickle.dumps(value), None))
    except BaseException as exc:  # noqa: B902 -- reported to the caller.
        tb = traceback.format_exc()
        try:
            payload = pickle.dumps(exc)
        except Exception:
            payload = pickle.dumps(RuntimeError(f'{type(exc).__name__}: '
                                                f'{exc}'))
        results.put((rank, False, payload, tb))
    # Let the queue's feeder thread flush, then exit without tearing down
    # (exiting closes the process group's connections): a failed rank must
    # not block in a collective, and destroying a gloo group while its
    # thread still frees a Python tensor deadlocks (it waits for the
    # interpreter lock held by the thread that joins it).
    results.close()
    results.join_thread()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_workers(
    fn: Callable,
    world_size: int = 2,
    args: Sequence = (),
    kwargs: Optional[Dict[str, Any]] = None,
    *,
    timeout: float = 60.0,
    backend: str = 'gloo',
    init_process_group: bool = True,
    pg_timeout: float = 30.0,
    env: Optional[Dict[str, str]] = None,
    num_threads: int = 1,
    return_exceptions: bool = False,
    start_method: Optional[str] = None,
) -> List[Any]:
    r"""Runs :obj:`fn(rank, world_size, *args, **kwargs)` in
    :obj:`world_size` processes and returns the return values by rank.

    Args:
        fn (callable): A top-level (picklable) function.
        world_size (int): The number of processes. (default: :obj:`2`)
        args (sequence): Positional arguments after :obj:`rank` and
            :obj:`world_size` (picklable).
        kwargs (dict, optional): Keyword arguments (picklable).
        timeout (float): Seconds until every worker still running is killed
            and :class:`TimeoutError` raised. (default: :obj:`60.0`)
        backend (str): The process group's backend. (default:
            :obj:`'gloo'`)
        init_process_group (bool): Join the workers in the default process
            group (over ``MASTER_ADDR``/``MASTER_PORT``) before calling
            :obj:`fn`; with :obj:`False` only the environment variables are
            set. (default: :obj:`True`)
        pg_timeout (float): The process group's timeout in seconds: how long
            a collective may wait for a missing rank. (default: :obj:`30.0`)
        env (dict, optional): More environment variables for the workers.
        num_threads (int): :func:`torch.set_num_threads` in every worker;
            :obj:`0` leaves it. (default: :obj:`1`)
        return_exceptions (bool): Return a worker's exception in its slot
            instead of raising it (as :func:`asyncio.gather`); a worker that
            exited without a result gives a :class:`WorkerExit`.
            (default: :obj:`False`)
        start_method (str, optional): :obj:`'forkserver'` (the default where
            available), :obj:`'spawn'` or :obj:`'fork'`.

    Raises:
        The first exception a worker raised (unless
        :obj:`return_exceptions`), with the worker's traceback as
        :obj:`__cause__` and a note naming its rank; :class:`WorkerExit`
        when a worker exited without a result; :class:`TimeoutError` after
        :obj:`timeout`.
    """
    if not callable(fn):
        raise ValueError(f"'fn' must be a callable (got {fn!r})")
    if isinstance(world_size, bool) or not isinstance(world_size, int) \
            or world_size < 1:
        raise ValueError(f"'world_size' must be a positive integer "
                         f"(got {world_size!r})")
    ctx = _context(start_method)
    deadline = time.monotonic() + timeout
    for attempt in range(_PORT_ATTEMPTS):
        env_of_run = {
            'MASTER_ADDR': '127.0.0.1',
            'MASTER_PORT': str(free_port()),
            'WORLD_SIZE': str(world_size),
            'LOCAL_WORLD_SIZE': str(world_size),
            **(env or {}),
        }
        out = _attempt(ctx, fn, world_size, args, kwargs, env_of_run,
                       backend, init_process_group, pg_timeout,
                       num_threads, deadline, timeout)
        if out is not None:
            break
    else:
        raise RuntimeError(f'run_workers: the process group found its port '
                           f'taken {_PORT_ATTEMPTS} times in a row')
    out, errors = out
    if errors and not return_exceptions:
        rank, exc, tb = errors[0]
        if tb is not None:
            exc.__cause__ = RemoteTraceback(tb)
        exc.add_note(f'(raised in rank {rank} of {world_size} by '
                     f'run_workers{_summary(errors[1:])})')
        raise exc
    return [out[rank] for rank in range(world_size)]


#: How often :func:`run_workers` starts the workers again on a new port when
#: the one :func:`free_port` chose was taken before the store bound it.
_PORT_ATTEMPTS = 3


def port_taken(exc: BaseException) -> bool:
    r"""Whether :obj:`exc` says a port to listen on was taken."""
    text = str(exc)
    return 'EADDRINUSE' in text or 'ddress already in use' in text


def _attempt(ctx, fn, world_size, args, kwargs, full_env, backend,
             init_process_group, pg_timeout, num_threads, deadline,
             timeout):
    # One start of the workers; None when a rank found the port taken.
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=_worker, name=f'multiproc-rank{rank}',
            args=(rank, world_size, fn, tuple(args), dict(kwargs or {}),
                  full_env, backend, init_process_group, pg_timeout,
                  num_threads, os.getpid(), results))
        for rank in range(world_size)
    ]
    out: Dict[int, Any] = {}
    errors: List[tuple] = []  # (rank, exception, traceback), by arrival.
    grace = 2.0
    try:
        for p in procs:
            p.start()
        while len(out) < world_size:
            left = deadline - time.monotonic()
            if left <= 0:
                grace = 0.0
                missing = [r for r in range(world_size) if r not in out]
                raise TimeoutError(
                    f'run_workers: rank(s) {missing} of {world_size} did not '
                    f'finish within {timeout} s (killed); finished: '
                    f'{sorted(out)}' + _summary(errors))
            try:
                rank, ok, value, tb = results.get(timeout=min(left, 0.2))
            except queue.Empty:
                for rank, p in enumerate(procs):
                    # An exited worker's result may still be in the pipe.
                    if rank not in out and p.exitcode is not None:
                        if _drain(results, out, errors, 1.0):
                            grace = 0.0
                            return None
                        if rank not in out:
                            exc = WorkerExit(
                                f'rank {rank} exited with code '
                                f'{p.exitcode} without a result')
                            out[rank] = exc
                            errors.append((rank, exc, None))
                continue
            if ok is None:
                grace = 0.0
                return None
            out[rank] = value = pickle.loads(value)
            if not ok:
                errors.append((rank, value, tb))
    finally:
        _stop(procs, grace)
        results.close()
    return out, errors


def _drain(results, out: dict, errors: list, wait: float) -> bool:
    # True when a rank reported its port taken.
    try:
        while True:
            rank, ok, value, tb = results.get(timeout=wait)
            if ok is None:
                return True
            out[rank] = value = pickle.loads(value)
            if not ok:
                errors.append((rank, value, tb))
    except queue.Empty:
        return False


def _summary(errors: list) -> str:
    if not errors:
        return ''
    return '; other errors: ' + ', '.join(
        f'rank {r}: {type(e).__name__}: {e}' for r, e, _ in errors)


def _stop(procs: list, grace: float) -> None:
    # Workers that returned exit by themselves; the others are killed.
    deadline = time.monotonic() + grace
    for p in procs:
        if p.pid is not None:
            p.join(max(deadline - time.monotonic(), 0.0))
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        if p.pid is not None:
            p.join(1.0)
        if p.is_alive():
            p.kill()
            p.join(1.0)


def check_hetero_folder_loader(out_dir: str, rank: int, device, fanouts,
                               **kwargs):
    r"""In a rank's process: :class:`pyg_orch.HybridNeighborLoader` on the
    partition folder of :func:`conftest.paper_hetero_graph` (150 papers, 100
    authors, 4 features) yields, on :obj:`device`, the batches of the
    single-process loader over the whole graph for this rank's paper seeds
    (full fan-out: the same nodes, features and edges per type). Returns
    the loader and the number of batches compared."""
    import torch

    from conftest import small_paper_graph
    from pyg_orch import HybridNeighborLoader
    from pyg_orch.distributed import load_partition

    data = small_paper_graph()
    seeds = torch.arange(0, 150, 4)  # The paper seeds of all ranks.
    part = load_partition(out_dir, rank)
    mine = seeds[part.owner(seeds, 'paper') == rank]
    loader = HybridNeighborLoader(out_dir, fanouts, batch_size=6,
                                  input_nodes=('paper', seeds), even='pad',
                                  device=device, **kwargs)
    assert torch.equal(loader.partition_batches.input_nodes.cpu(), mine)
    ref = list(HybridNeighborLoader(data, fanouts, batch_size=6,
                                    input_nodes=('paper', mine),
                                    device='cpu'))
    ours = [b for b in loader if b['paper'].batch_size > 0]
    assert len(ours) == len(ref) > 0
    for a, b in zip(ours, ref):
        assert a['paper'].batch_size == b['paper'].batch_size
        for t in data.node_types:
            assert a[t].x.device == torch.device(device)
            assert torch.equal(a[t].n_id.cpu(), b[t].n_id), t
            assert torch.equal(a[t].x.cpu(), b[t].x), t
        for et in data.edge_types:
            assert torch.equal(a[et].edge_index.cpu(), b[et].edge_index), et
            assert torch.equal(a[et].e_id.cpu(), b[et].e_id), et
    return loader, len(ours)


def check_full_fanout_batches(data, batches, input_nodes, batch_size: int,
                              keys) -> None:
    r"""The non-empty :obj:`batches` (dictionaries of CPU tensors under
    :obj:`keys`, plus :obj:`'batch_size'`) taken by a rank of a partition
    folder's loader with full fan-out are the single-process loader's over
    :obj:`data` for the rank's :obj:`input_nodes`."""
    import torch

    from pyg_orch import HybridNeighborLoader
    ref = list(HybridNeighborLoader(data, [-1, -1], input_nodes=input_nodes,
                                    batch_size=batch_size, device='cpu'))
    real = [b for b in batches if b['batch_size'] > 0]
    assert len(real) == len(ref) > 0
    for a, b in zip(real, ref):
        for key in keys:
            assert torch.equal(a[key], b[key]), key


def check_seeds_split_by_machine(out_dir: str, input_nodes: list, seeds,
                                 per_machine: int) -> None:
    r"""Every machine's ranks (blocks of :obj:`per_machine` ranks, as
    ``torchrun`` numbers them) took non-empty, disjoint shares of the
    :obj:`seeds` in its part that together are all of them;
    :obj:`input_nodes` holds each rank's seeds, by rank."""
    import torch

    from pyg_orch.distributed import load_partition
    for machine in range(len(input_nodes) // per_machine):
        part = load_partition(out_dir, machine)
        mine = input_nodes[machine * per_machine:(machine + 1) * per_machine]
        assert all(m.numel() > 0 for m in mine)
        assert torch.equal(torch.sort(torch.cat(mine)).values,
                           seeds[part.owner(seeds) == machine])


def run_machines(fn: Callable, data, folder, machines: int, per_machine: int,
                 env: Optional[Dict[str, str]] = None, **kwargs) -> tuple:
    r"""Partitions :obj:`data` into :obj:`machines` random parts in
    :obj:`folder` and runs :obj:`fn(rank, world_size, out_dir)` in
    :obj:`machines * per_machine` processes acting as :obj:`machines`
    machines of :obj:`per_machine` ranks (``LOCAL_WORLD_SIZE``);
    :obj:`kwargs` go to :func:`run_workers`. Returns the partition's info
    and the return values by rank."""
    from pyg_orch.distributed import partition_graph
    info = partition_graph(data, machines, folder, 'random', progress=False)
    out = run_workers(fn, machines * per_machine, args=(str(info.out_dir), ),
                      env={'LOCAL_WORLD_SIZE': str(per_machine),
                           **(env or {})}, **kwargs)
    return info, out
