r"""How fast feature rows come from host memory to the GPU, by how they are
read and where the host memory comes from.

The papers100M-shaped epoch on one GPU is bound by gathering the rows its
GPU cache misses (see docs/performance.rst). This times, for one batch's
worth of random rows (528k rows of 128 :obj:`float32` by default, what one
batch reads from host memory there):

* ``uva``: :class:`~pyg_orch.gpu.TieredFeatureStore`'s zero-copy gather
  (GPU threads read pinned host memory), with the default grid and
  uncapped;
* ``cpu``: the same store with :obj:`method='cpu'` (CPU threads gather
  into a staging buffer, then one copy);
* ``bulk``: one contiguous pinned-to-GPU copy of the same bytes (the link's
  rate);

over host memory from ``cudaHostAlloc`` (``pinned``) and, where the kernel
offers transparent huge pages, over anonymous memory advised
``MADV_HUGEPAGE`` and page-locked in place (``thp``)::

    python benchmarks/bench_host_gather.py --rows 40000000

Results: JSON under ``benchmarks/results/`` (and ``$OUT``).
"""
import argparse
import ctypes
import datetime
import itertools
import json
import mmap
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import log, machine_info, write_report  # noqa: E402

from pyg_orch.gpu import TieredFeatureStore  # noqa: E402
from pyg_orch.parallel.peer_memory import register_pinned  # noqa: E402

MADV_HUGEPAGE = 14


def thp_mode() -> str:
    r"""The kernel's transparent huge page setting, or :obj:`'absent'`."""
    path = Path('/sys/kernel/mm/transparent_hugepage/enabled')
    return path.read_text().strip() if path.exists() else 'absent'


def thp_rows(rows: int, width: int) -> torch.Tensor:
    r"""Anonymous host memory advised for huge pages, touched, page-locked
    in place."""
    size = rows * width * 4
    buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    libc = ctypes.CDLL(None, use_errno=True)
    addr = ctypes.c_void_p.from_buffer(buf)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    rc = libc.madvise(ctypes.addressof(addr), size, MADV_HUGEPAGE)
    del addr
    if rc != 0:
        raise OSError(ctypes.get_errno(), 'madvise(MADV_HUGEPAGE) failed')
    x = torch.frombuffer(buf, dtype=torch.float32).view(rows, width)
    x.zero_()  # Touch every page (huge where the kernel grants them).
    register_pinned(x)
    return x


def huge_pages_of_process() -> int:
    r"""AnonHugePages of this process in kB (0 where unknown)."""
    try:
        for line in Path('/proc/self/smaps_rollup').read_text().splitlines():
            if line.startswith('AnonHugePages:'):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def timed(fn: Callable[[], Any], batches: int) -> float:
    r"""Milliseconds per call of :obj:`fn`, after two warm-up calls."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(batches):
        fn()
    torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - start) / batches


def time_memory(x: torch.Tensor, args: argparse.Namespace
                ) -> Dict[str, float]:
    r"""The gathers over host rows :obj:`x`, in ms per batch."""
    gen = torch.Generator().manual_seed(0)
    ids = [torch.randint(0, x.size(0), (args.batch_rows, ), generator=gen)
           .cuda() for _ in range(4)]
    out: Dict[str, float] = {}
    batches = itertools.cycle(ids)
    for name, kw in (('uva_default_grid', {}),
                     ('uva_uncapped', {'gather_blocks': None}),
                     ('cpu', {'method': 'cpu'})):
        store = TieredFeatureStore(x, 'cuda', gpu_memory_budget=0,
                                   reuse=False, **kw)
        out[name] = timed(lambda: store.gather(next(batches)), args.batches)
        del store
    dst = torch.empty(args.batch_rows, x.size(1), device='cuda')
    src = x[:args.batch_rows]
    out['bulk'] = timed(lambda: dst.copy_(src, non_blocking=True),
                        args.batches)
    return out


MEMORY_KINDS = ('pinned', 'thp')


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--rows', type=int, default=40_000_000,
                   help='host rows (40M x 128 float32: 20.5 GB)')
    p.add_argument('--width', type=int, default=128)
    p.add_argument('--batch-rows', type=int, default=528_000)
    p.add_argument('--batches', type=int, default=30)
    p.add_argument('--memory', default='pinned,thp',
                   help="comma-separated: 'pinned' (cudaHostAlloc), 'thp' "
                   "(huge pages, registered in place)")
    p.add_argument('--tag', default='')
    p.add_argument('--out', default=None)
    args = p.parse_args(argv)
    for name in ('rows', 'width', 'batch_rows', 'batches'):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1 (got "
                    f"{getattr(args, name)})")
    if args.batch_rows > args.rows:
        p.error(f'--batch-rows ({args.batch_rows}) must be at most --rows '
                f'({args.rows})')
    args.memory = args.memory.split(',')
    unknown = [k for k in args.memory if k not in MEMORY_KINDS]
    if unknown:
        p.error(f'--memory: unknown {unknown} (expected a comma-separated '
                f'list of {MEMORY_KINDS})')
    return args


def main(argv: Optional[List[str]] = None) -> None:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit('bench_host_gather.py needs a CUDA GPU')
    res: Dict[str, Any] = {'machine': machine_info(), 'config': vars(args),
                           'thp': thp_mode(), 'memory': {}}
    batch_mb = args.batch_rows * args.width * 4 / 1e6
    thp_selected = res['thp'].partition('[')[2].partition(']')[0]
    for kind in tqdm(args.memory, desc='host memory'):
        if kind == 'thp' and thp_selected in ('never', ''):
            res['memory'][kind] = {'skipped': res['thp']}
            continue
        start = time.perf_counter()
        if kind == 'pinned':
            x = torch.empty(args.rows, args.width, pin_memory=True)
            x.zero_()
        else:
            x = thp_rows(args.rows, args.width)
        alloc_s = time.perf_counter() - start
        ms = time_memory(x, args)
        res['memory'][kind] = {
            'alloc_s': alloc_s,
            'anon_huge_pages_kb': huge_pages_of_process(),
            'ms_per_batch': ms,
            'GBps': {k: batch_mb / v for k, v in ms.items()}}
        log(kind, json.dumps(res['memory'][kind]))
        del x
    out = args.out or (f"benchmarks/results/host_gather_"
                       f"{datetime.date.today().isoformat()}"
                       f"{'_' + args.tag if args.tag else ''}.json")
    write_report(res, out)
    if os.environ.get('OUT'):
        write_report(res, Path(os.environ['OUT'], Path(out).name))


if __name__ == '__main__':
    main()
