"""Helpers shared by the benchmark scripts: logging, device sync, argument
parsing, tables and the machine description saved with every result."""
import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # Run from a checkout without installing.
    sys.path.insert(0, str(REPO))

warnings.filterwarnings('ignore', message=".*'pyg-lib'.*")

# Graph sizes (power-law, 100 features, 47 classes unless overridden), and
# what scales with them: bench_offload.py's timed and warm-up batches per
# mode. 'scale' is bench_gpu_data_path.py --scale (features in pinned host
# memory), not a choice of --preset.
PRESETS = {
    'default': dict(num_nodes=2_400_000, num_edges=120_000_000,
                    offload_batches=200, offload_warmup=10),
    'small': dict(num_nodes=1_000_000, num_edges=20_000_000,
                  offload_batches=60, offload_warmup=5),
    'tiny': dict(num_nodes=20_000, num_edges=200_000, offload_batches=30,
                 offload_warmup=3),
    'scale': dict(num_nodes=100_000_000, num_edges=1_000_000_000,
                  num_features=128),
}
PRESET_CHOICES = ('default', 'small', 'tiny')


def _count(n: int) -> str:
    for div, unit in ((10**9, 'B'), (10**6, 'M'), (10**3, 'k')):
        if n >= div:
            return f'{n / div:g}{unit}'
    return str(n)


def describe_preset(name: str) -> str:
    r"""E.g. :obj:`'20k nodes, 200k edges'`."""
    p = PRESETS[name]
    text = f"{_count(p['num_nodes'])} nodes, {_count(p['num_edges'])} edges"
    if 'num_features' in p:
        text += f", {p['num_features']} features"
    return text


def presets_help() -> str:
    r"""One line on every preset, for a parser's description or epilog."""
    return 'Presets: ' + '; '.join(f'{name} = {describe_preset(name)}'
                                   for name in PRESET_CHOICES)


def add_preset_args(parser) -> None:
    r"""Adds :obj:`--preset {default,small,tiny}` and its shortcuts
    :obj:`--small` and :obj:`--tiny` (to a parser or an argument group)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument('--preset', choices=PRESET_CHOICES, default='default',
                       help='graph size: ' + '; '.join(
                           f'{name} = {describe_preset(name)}'
                           for name in PRESET_CHOICES))
    for name in PRESET_CHOICES[1:]:
        group.add_argument(f'--{name}', action='store_const', dest='preset',
                           const=name, help=f'--preset {name}')


def apply_preset(args, *names: str, **renamed: str) -> None:
    r"""Sets the arguments :obj:`names` (and those of :obj:`renamed`, to
    the preset's values of other keys) that are still :obj:`None` from
    :obj:`PRESETS[args.preset]`."""
    preset = PRESETS[args.preset]
    for name, key in [(n, n) for n in names] + list(renamed.items()):
        if getattr(args, name) is None:
            setattr(args, name, preset[key])


def resolve_device(parser, args) -> None:
    r"""Resolves :obj:`--device auto` to :obj:`'cuda'` where available, else
    :obj:`'cpu'`; :obj:`--device cuda` without CUDA is a parser error."""
    if args.device == 'cuda' and not torch.cuda.is_available():
        parser.error('--device cuda, but CUDA is not available')
    if args.device == 'auto':
        args.device = 'cuda' if torch.cuda.is_available() else 'cpu'


def log(*a) -> None:
    print(*a, flush=True)


def write_report(report: Dict[str, Any], path: Any) -> Path:
    r"""Writes :obj:`report` as JSON to :obj:`path` (creating its folder)
    and logs where; returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str))
    log(f'\n[out] {out}')
    return out


def sync(device) -> None:
    if torch.device(device).type == 'cuda':
        torch.cuda.synchronize(device)


def int_list(text: str) -> List[int]:
    r"""Parses comma-separated integers (an :mod:`argparse` type)."""
    try:
        values = [int(v) for v in text.replace(' ', '').split(',') if v]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f'expected comma-separated integers (got {text!r})') from None
    if not values:
        raise argparse.ArgumentTypeError('expected at least one integer')
    return values


def fmt_table(headers: List[str], rows: List[List[Any]]) -> str:
    r"""A fixed-width text table; floats with two decimals (or three
    significant digits when large)."""
    def cell(v):
        if v is None:
            return '-'
        if isinstance(v, float):
            return f'{v:.3g}' if abs(v) >= 1e5 else f'{v:.2f}'
        return str(v)

    cells = [[cell(v) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells])
              for i, h in enumerate(headers)]

    def line(values):
        return '  '.join(v.ljust(w) if i == 0 else v.rjust(w)
                         for i, (v, w) in enumerate(zip(values, widths)))

    head = line(headers)
    return '\n'.join([head, '-' * len(head)] + [line(r) for r in cells])


def seed_batches(num_inputs: int, batch_size: int, count: int,
                 seed: int) -> List[torch.Tensor]:
    r""":obj:`count` batches of indices into the loader's inputs, drawn
    without replacement within an epoch (as with :obj:`shuffle=True`)."""
    gen = torch.Generator().manual_seed(seed)
    out: List[torch.Tensor] = []
    while len(out) < count:
        perm = torch.randperm(num_inputs, generator=gen)
        chunks = list(perm.split(batch_size))
        if len(chunks) > 1 and chunks[-1].numel() < batch_size:
            chunks = chunks[:-1]
        out.extend(chunks)
    return out[:count]


def machine_info() -> Dict[str, Any]:
    r"""The machine and software a result was measured with."""
    import torch_geometric

    info: Dict[str, Any] = {
        'hostname': platform.node(),
        'platform': platform.platform(),
        'python': platform.python_version(),
        'cpu_count': os.cpu_count(),
        'cpu_model': None,
        'torch_num_threads': torch.get_num_threads(),
        'memory_gb': None,
        'torch': torch.__version__,
        'torch_geometric': torch_geometric.__version__,
        'torch_sparse': None,
        'pyg_lib': None,
        'cuda_available': torch.cuda.is_available(),
        'cuda': torch.version.cuda,
        'gpu': None,
        'gpu_memory_gb': None,
        'git_commit': None,
        'load_average_start': None,
        'env': {k: os.environ.get(k) for k in (
            'OMP_NUM_THREADS', 'OMP_WAIT_POLICY', 'MKL_NUM_THREADS',
            'CUDA_VISIBLE_DEVICES', 'PYTHONPATH')},
    }
    for name in ('torch_sparse', 'pyg_lib'):
        try:
            info[name] = __import__(name).__version__
        except Exception:
            pass
    try:
        info['load_average_start'] = [round(v, 2) for v in os.getloadavg()]
    except OSError:
        pass
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    info['cpu_model'] = line.split(':', 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        pages = os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')
        info['memory_gb'] = round(pages / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    if torch.cuda.is_available():
        prop = torch.cuda.get_device_properties(0)
        info['gpu'] = prop.name
        info['gpu_memory_gb'] = round(prop.total_memory / 2**30, 1)
    try:
        info['git_commit'] = subprocess.run(
            ['git', 'rev-parse', 'HEAD'], cwd=REPO, capture_output=True,
            text=True, timeout=10).stdout.strip() or None
    except Exception:
        pass
    return info


def dynamo_graphs() -> int:
    r"""Graphs :func:`torch.compile` (Dynamo) has compiled in this process
    so far: a count that grows during a timed section means recompiles."""
    from torch._dynamo.utils import counters
    return int(counters['stats']['unique_graphs'])


def compile_model(model: torch.nn.Module, mode: str = 'default'
                  ) -> torch.nn.Module:
    r"""``torch.compile(model, dynamic=True)``: one graph for batches of
    every size (the mode ``'default'`` or another of
    :func:`torch.compile`'s; ``'+cpp_wrapper'`` appended: Inductor's
    launching code in C++ instead of Python, less host time per call)."""
    mode, *extra = mode.split('+')
    if extra and extra != ['cpp_wrapper']:
        raise ValueError(f"unknown compile option in {'+'.join(extra)!r} "
                         "(expected '<mode>' or '<mode>+cpp_wrapper')")
    if extra:  # Options and a mode cannot both be passed.
        options = dict(cpp_wrapper=True)
        if mode != 'default':
            from torch._inductor import list_mode_options
            options.update(list_mode_options(mode, dynamic=True))
        return torch.compile(model, dynamic=True, options=options)
    return torch.compile(model, dynamic=True,
                         **({} if mode == 'default' else {'mode': mode}))


def add_compile_args(parser, what: str) -> None:
    r"""Adds :obj:`--compile MODE` (:func:`compile_model`; :obj:`'none'`:
    eager, the default) and :obj:`--fused-adam`; :obj:`what` says what is
    compiled."""
    parser.add_argument('--compile', default='none',
                        help=f"train {what} compiled by torch.compile("
                        "..., dynamic=True) in this mode ('default', "
                        "'default+cpp_wrapper', another torch.compile mode; "
                        "'none': eager, the default)")
    parser.add_argument('--fused-adam', action='store_true',
                        help='Adam with fused=True (one kernel per step, '
                        'much less host time than the default foreach Adam)')


def adam(params, fused: bool = False) -> torch.optim.Adam:
    r"""The benchmarks' optimizer: Adam, lr 1e-3, with :obj:`fused=True`
    if :obj:`fused` (else PyTorch's default, foreach on CUDA)."""
    return torch.optim.Adam(params, lr=1e-3, fused=fused or None)


def endless(loader) -> Iterator:
    r"""The loader's batches, epoch after epoch (one iterator per epoch:
    persistent workers stay)."""
    while True:
        yield from loader


def time_steps(next_batch: Callable[[], Any],
               step: Callable[[Any], None], warmup: int,
               batches: int, repeats: int, device: torch.device) -> Dict:
    r"""Ms per batch of :obj:`step(next_batch())` over :obj:`batches`
    batches, :obj:`repeats` times after :obj:`warmup` batches; the device
    is waited for at the end of every repeat."""
    for _ in range(warmup):
        step(next_batch())
    sync(device)
    runs: List[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(batches):
            step(next_batch())
        sync(device)
        runs.append(1e3 * (time.perf_counter() - start) / batches)
    return {'ms_per_batch': statistics.median(runs),
            'ms_per_batch_min': min(runs),
            'ms_per_batch_max': max(runs),
            'ms_per_batch_runs': runs,
            'timed_batches': batches, 'warmup_batches': warmup,
            'repeats': repeats}


def release_workers(loader: Any) -> None:
    r"""Stops a PyTorch :class:`DataLoader`'s persistent workers at once:
    they end with the iterator the loader keeps, dropped here first
    (deleting the loader with its iterator waits about 5 s per worker)."""
    if getattr(loader, '_iterator', None) is not None:
        loader._iterator = None


def time_pyg_workers(make_loader: Callable[[int], Any], name: str,
                     device: torch.device, step: Callable[[Any], None],
                     workers: List[int], batches: int,
                     repeats: int) -> Dict:
    r"""A PyG loader (:obj:`make_loader(num_workers)`, e.g. PyG's
    :class:`~torch_geometric.loader.NeighborLoader`) at each
    :obj:`num_workers`: :obj:`2 * num_workers + 3` warm-up batches (the
    workers' first batches and the prefetch queue, so that the timed
    batches are produced in the steady state), then :obj:`batches` timed
    batches moved to :obj:`device`, :obj:`repeats` times (see
    :func:`time_steps`); and the best."""
    from torch_geometric.typing import WITH_PYG_LIB, WITH_TORCH_SPARSE
    if not (WITH_PYG_LIB or WITH_TORCH_SPARSE):
        return {'skipped': 'neither pyg_lib nor torch_sparse imports'}
    out: Dict = {'per_num_workers': {}, 'with': 'pyg_lib' if WITH_PYG_LIB
                 else 'torch_sparse'}
    # Garbage left by earlier loaders may hold CUDA streams and events;
    # collected in a forked worker, their destructors call CUDA there, and
    # the worker dies ("CUDA error: initialization error"). Collected here
    # and after each setting below.
    gc.collect()
    for w in workers:
        log(f'{name}, num_workers={w}')
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            loader = make_loader(w)
            it = endless(loader)
            try:
                res = time_steps(
                    lambda: next(it).to(device, non_blocking=True), step,
                    2 * w + 3, batches, repeats, device)
            except Exception as e:  # E.g. too few shared-memory handles.
                res = {'error': f'{type(e).__name__}: {e}'}
            finally:
                it.close()
        release_workers(loader)
        loader = None
        gc.collect()
        res['wall_s'] = time.perf_counter() - start
        out['per_num_workers'][w] = res
        if 'ms_per_batch' in res:
            log(f"  num_workers={w}: {res['ms_per_batch']:.2f} ms/batch")
    timed = [(r['ms_per_batch'], w) for w, r in
             out['per_num_workers'].items() if 'ms_per_batch' in r]
    if timed:
        ms, w = min(timed)
        out['best'] = {'num_workers': w, 'ms_per_batch': ms}
    return out


def device_time(run: Callable[[], None], num_batches: int,
                top: int = 25) -> Dict[str, Any]:
    r"""Device time per batch of :obj:`run()` (which does
    :obj:`num_batches` batches), from :mod:`torch.profiler`: the events
    without host time (kernels and copies), and the :obj:`top` largest as
    :obj:`(name, calls per batch, us per batch)`."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    total, rows = 0.0, []
    for e in prof.key_averages():
        us = getattr(e, 'self_device_time_total', 0) / num_batches
        if e.self_cpu_time_total == 0:
            total += us
        rows.append((e.key[:60], e.count / num_batches, round(us, 2)))
    rows.sort(key=lambda r: -r[2])
    return {'device_us_per_batch': total, 'kernels': rows[:top]}


#: CUDA runtime calls that can make the host wait for the device (the
#: synchronizations, :obj:`cudaFree`, and copies: one into pageable host
#: memory waits for the queue ahead of it). Prefixes.
WAITING_CALLS = ('cudaStreamSynchronize', 'cudaDeviceSynchronize',
                 'cudaEventSynchronize', 'cudaMemcpy', 'cudaFree')


def host_time(run: Callable[[], None], num_batches: int,
              top: int = 25) -> Dict[str, Any]:
    r"""Where the host's time goes in :obj:`run()` (which does
    :obj:`num_batches` batches), from :mod:`torch.profiler`: the CUDA
    runtime calls per batch (calls and host us, :obj:`WAITING_CALLS` among
    them: a synchronizing call takes as long as the device queue ahead of
    it), and the :obj:`top` host events by self time per batch."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU,
                             ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    runtime, rows = {}, []
    for e in prof.key_averages():
        if e.self_cpu_time_total <= 0:
            continue
        row = (e.key[:70], round(e.count / num_batches, 2),
               round(e.self_cpu_time_total / num_batches, 1))
        rows.append(row)
        if e.key.startswith(('cuda', 'cu')) and not e.key.startswith(
                'cudnn'):
            runtime[e.key] = {'calls_per_batch': row[1],
                              'host_us_per_batch': row[2]}
    rows.sort(key=lambda r: -r[2])
    waiting = {k: v for k, v in runtime.items()
               if k.startswith(WAITING_CALLS)}
    return {'runtime_calls': runtime, 'waiting_calls': waiting,
            'waiting_us_per_batch': sum(v['host_us_per_batch']
                                        for v in waiting.values()),
            'top_host_events': rows[:top]}


def step_host_ms(step: Callable[[Any], None], batches: List[Any],
                 device: torch.device) -> Dict[str, float]:
    r"""Host time of :obj:`step(b)` with the device idle before each call
    and not waited for after it (median [min-max] ms over
    :obj:`batches`): near the device time per step means the step waits
    for the device, far below means the host only launches work."""
    times = []
    for b in batches:
        sync(device)
        start = time.perf_counter()
        step(b)
        times.append(1e3 * (time.perf_counter() - start))
    sync(device)
    times.sort()
    return {'median': times[len(times) // 2], 'min': times[0],
            'max': times[-1]}


def train_step(model, optimizer, batch, trim: bool = False,
               hetero: bool = False) -> torch.Tensor:
    r"""One training step of the seeds of :obj:`batch` (node type
    :obj:`'b'` if :obj:`hetero`; with :obj:`trim`, the model trims its
    layers with the batch's per-hop counts); returns the loss."""
    optimizer.zero_grad(set_to_none=True)
    if hetero:
        out = model(batch.x_dict, batch.edge_index_dict)['b']
        batch = batch['b']
    elif trim:
        out = model(batch.x, batch.edge_index,
                    num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                    num_sampled_edges_per_hop=batch.num_sampled_edges)
    else:
        out = model(batch.x, batch.edge_index)
    loss = F.cross_entropy(out[:batch.batch_size], batch.y[:batch.batch_size])
    loss.backward()
    optimizer.step()
    return loss
