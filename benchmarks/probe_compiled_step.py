"""Probe: the training step's compute-only time with the model eager and
compiled by ``torch.compile(model, dynamic=True)`` (one run, one JSON).

The batches come from ``HybridNeighborLoader`` (fused sampling, features on
the GPU), are kept on the GPU, and the same batches are trained on by each
variant: a fresh copy of the same initial model, Adam, forward, loss,
backward, step. Reported per variant: the median [min-max] ms per batch of
``--repeats`` passes, the first pass's time (it includes the compiles), the
graphs Dynamo compiled while warming up and while timed (a recompile per
batch would show there), and the largest difference of the first batch's
output from the eager model's.

* ``homo``: GraphSAGE 3x256 on the 2.4M-node / 120M-edge power-law graph,
  fan-out [15, 10, 5], batch 1024, with and without ``trim_to_layer``;
* ``e2e``: the loader and the trimmed homogeneous step together, with
  the host's time per batch in the loader and in the step, and the CUDA
  runtime calls that wait for the device;
* ``hetero``: ``to_hetero`` GraphSAGE 2x256 on ``bench_hetero_gpu.py``'s
  paper / author / institution graph, fan-out [15, 10], batch 1024.

GPU box (H100), about 3 minutes:

    python benchmarks/probe_compiled_step.py --out compiled_step.json

CPU smoke test: ``--device cpu --small`` (compiles with the C++ backend).
"""
import argparse
import copy
import itertools
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_common import (  # noqa: E402
    PRESETS,
    adam,
    compile_model,
    device_time,
    dynamo_graphs,
    endless,
    host_time,
    log,
    machine_info,
    sync,
    step_host_ms,
    time_steps,
    write_report,
)
from pyg_orch import HybridNeighborLoader  # noqa: E402


def time_variant(step: Callable, batches: List, repeats: int,
                 device: torch.device) -> Dict:
    r"""The first pass (compiles included), then :obj:`repeats` timed
    passes over :obj:`batches`."""
    g0 = dynamo_graphs()
    start = time.perf_counter()
    for b in batches:
        step(b)
    sync(device)
    first = time.perf_counter() - start
    g1 = dynamo_graphs()
    cycle = itertools.cycle(batches)
    res = time_steps(lambda: next(cycle), step, 0, len(batches), repeats,
                     device)
    res.update(first_pass_s=first, graphs_compiled_warmup=g1 - g0,
               graphs_compiled_timed=dynamo_graphs() - g1)
    return res


def compare(variants: Dict[str, Callable], outputs: Dict[str, Callable],
            batches: List, repeats: int, device: torch.device,
            padded: List = None) -> Dict:
    r"""Each variant on :obj:`batches` (variants named ``padded-*`` on
    :obj:`padded`), timed, profiled, and compared with the first one."""
    res: Dict = {}
    ref = None
    for name, step in variants.items():
        bs = padded if name.startswith('padded') else batches
        with torch.no_grad():
            out = outputs[name](bs[0]).float().clone()
        if ref is None:
            ref = out
        r = time_variant(step, bs, repeats, device)
        if device.type == 'cuda':
            prof = device_time(lambda: [step(b) for b in bs], len(bs), 12)
            r['device_us_per_batch'] = prof['device_us_per_batch']
            r['top_kernels'] = prof['kernels']
            r['step_host_ms'] = step_host_ms(step, bs, device)
            r['host'] = host_time(lambda: [step(b) for b in bs], len(bs))
        r['max_abs_diff_first_output'] = float((out - ref).abs().max())
        r['max_abs_first_output'] = float(ref.abs().max())
        res[name] = r
        log(f"  {name}: {r['ms_per_batch']:.3f} ms/batch "
            f"[{r['ms_per_batch_min']:.3f}-{r['ms_per_batch_max']:.3f}], "
            f"first pass {r['first_pass_s']:.1f} s, graphs "
            f"{r['graphs_compiled_warmup']}+{r['graphs_compiled_timed']}, "
            f"diff {r['max_abs_diff_first_output']:.2e}, device "
            f"{r.get('device_us_per_batch', 0) / 1e3:.3f} ms/batch, host "
            f"{r.get('step_host_ms', {}).get('median', 0):.3f} ms/step, "
            f"waiting calls {r.get('host', {}).get('waiting_calls')}")
    eager = res[next(iter(res))]['ms_per_batch']
    for name in res:
        res[name]['speedup_vs_eager'] = eager / res[name]['ms_per_batch']
    return res


def variants_of(model: torch.nn.Module, forward: Callable, loss: Callable,
                modes: List[str]) -> tuple:
    r"""Per mode, a training step and an output function on its own copy
    of :obj:`model` (same initial weights)."""
    steps, outputs = {}, {}
    for mode in modes:
        m = copy.deepcopy(model)
        fused = mode.endswith('+fused_adam')  # One kernel per step.
        opt = adam(m.parameters(), fused)
        mode = mode[:-len('+fused_adam')] if fused else mode
        if mode == 'eager':
            fm = m
        elif mode.startswith('padded-'):  # Static shapes: CUDA graphs.
            fm = torch.compile(m, dynamic=False, mode=mode[len('padded-'):])
        else:
            fm = compile_model(m, mode)

        def step(b, fm=fm, opt=opt):
            opt.zero_grad(set_to_none=True)
            loss(forward(fm, b), b).backward()
            opt.step()

        name = mode + ('+fused_adam' if fused else '')
        steps[name] = step
        outputs[name] = (lambda b, fm=fm: forward(fm, b))
    return steps, outputs


def _cap(n: int, multiple: int) -> int:
    return -(-(n + 1) // multiple) * multiple  # Room for a dummy row.


def _pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    out = t.new_zeros((rows, ) + tuple(t.shape[1:]))
    out[:t.size(0)] = t
    return out


def _pad_edges(ei: torch.Tensor, edges: int, src: int, dst: int
               ) -> torch.Tensor:
    r"""Pads :obj:`ei` with edges from dummy row :obj:`src` to dummy row
    :obj:`dst` (rows no real edge touches)."""
    pad = ei.new_empty((2, edges - ei.size(1)))
    pad[0], pad[1] = src, dst
    return torch.cat([ei, pad], 1)


def pad_homo(batches: List) -> List:
    r"""Every batch padded to the same node and edge counts (zero rows, and
    edges between the last, dummy, rows), for static shapes."""
    from torch_geometric.data import Data
    n_cap = _cap(max(b.num_nodes for b in batches), 1024)
    e_cap = _cap(max(b.edge_index.size(1) for b in batches), 4096)
    return [Data(x=_pad_rows(b.x, n_cap), y=_pad_rows(b.y, n_cap),
                 edge_index=_pad_edges(b.edge_index, e_cap, n_cap - 1,
                                       n_cap - 1),
                 batch_size=b.batch_size) for b in batches]


def pad_hetero(batches: List) -> List:
    r"""The same per node type and edge type."""
    from torch_geometric.data import HeteroData
    b0 = batches[0]
    n_cap = {t: _cap(max(b[t].num_nodes for b in batches), 1024)
             for t in b0.node_types}
    e_cap = {et: _cap(max(b[et].edge_index.size(1) for b in batches), 4096)
             for et in b0.edge_types}
    out = []
    for b in batches:
        p = HeteroData()
        for t in b0.node_types:
            p[t].x = _pad_rows(b[t].x, n_cap[t])
        p['paper'].y = _pad_rows(b['paper'].y, n_cap['paper'])
        p['paper'].batch_size = b['paper'].batch_size
        for et in b0.edge_types:
            p[et].edge_index = _pad_edges(b[et].edge_index, e_cap[et],
                                          n_cap[et[0]] - 1,
                                          n_cap[et[-1]] - 1)
        out.append(p)
    return out


def homo_setup(args, device) -> tuple:
    r"""The homogeneous graph's loader (fused sampling, features on the
    device) and GraphSAGE 3 x 256 (its initial weights from seed 0)."""
    from torch_geometric.nn import GraphSAGE

    from pyg_orch.datasets import power_law_graph
    p = PRESETS['tiny' if args.small else 'default']
    data = power_law_graph(p['num_nodes'], p['num_edges'], 100, 47,
                           device=device, seed=0)
    loader = HybridNeighborLoader(data, [15, 10, 5], batch_size=1024,
                                  input_nodes=data.train_mask, shuffle=True,
                                  device=device, seed=0)
    torch.manual_seed(0)
    return loader, GraphSAGE(100, 256, 3, 47).to(device)


def homo_forward(m: torch.nn.Module, b, trim: bool = True) -> torch.Tensor:
    r"""The seeds' outputs, with :obj:`trim_to_layer` if :obj:`trim`."""
    kw = dict(num_sampled_nodes_per_hop=b.num_sampled_nodes,
              num_sampled_edges_per_hop=b.num_sampled_edges) if trim else {}
    return m(b.x, b.edge_index, **kw)[:b.batch_size]


def homo_loss(out: torch.Tensor, b) -> torch.Tensor:
    return F.cross_entropy(out, b.y[:b.batch_size])


def homo(args, device) -> Dict:
    loader, model = homo_setup(args, device)
    batches = list(itertools.islice(loader, args.batches))
    del loader
    preset = PRESETS['tiny' if args.small else 'default']
    res: Dict = {'graph': {'nodes': preset['num_nodes'],
                           'edges': preset['num_edges']},
                 'edges_per_batch': statistics.mean(
                     b.edge_index.size(1) for b in batches)}

    for trim in (True, False):
        def forward(m, b, trim=trim):
            return homo_forward(m, b, trim)

        name = 'sage_trim' if trim else 'sage_no_trim'
        log(f'homo {name}')
        modes = [m for m in args.modes
                 if not (trim and m.startswith('padded'))]
        res[name] = compare(*variants_of(model, forward, homo_loss, modes),
                            batches, args.repeats, device,
                            None if trim else pad_homo(batches))
    return res


def hetero(args, device) -> Dict:
    from _hetero_train import hetero_model, init_model
    from bench_hetero_gpu import hetero_graph
    data = hetero_graph(20_000 if args.small else 1_000_000, 128)
    loader = HybridNeighborLoader(data, [15, 10], batch_size=1024,
                                  input_nodes='paper', shuffle=True,
                                  device=device, seed=0)
    batches = list(itertools.islice(loader, args.batches))
    del loader
    torch.manual_seed(0)
    model = hetero_model(data, 256, 16, 2, device)
    init_model(model, batches[0])

    def forward(m, b):
        return m(b.x_dict, b.edge_index_dict)['paper'][:b['paper'].batch_size]

    def loss(out, b):
        return F.cross_entropy(out, b['paper'].y[:b['paper'].batch_size])

    log('hetero to_hetero(SAGE)')
    return {'to_hetero_sage': compare(
        *variants_of(model, forward, loss, args.modes), batches,
        args.repeats, device, pad_hetero(batches))}


def e2e(args, device) -> Dict:
    r"""The loader and the trimmed GraphSAGE step together, per mode: wall
    ms per batch, the host's ms per batch in :obj:`next(loader)` and in the
    step, and (CUDA) where the host's time goes."""
    loader, model = homo_setup(args, device)
    steps, _ = variants_of(model, homo_forward, homo_loss,
                           [m for m in args.modes
                            if not m.startswith('padded')])
    kept = list(itertools.islice(loader, args.batches))
    res: Dict = {}
    for mode, step in steps.items():
        it = endless(loader)
        for _ in range(max(args.batches, 10)):  # Warm-up (and compiles).
            step(next(it))
        sync(device)
        cycle = itertools.cycle(kept)
        bound = time_steps(lambda: next(cycle), step, 3, len(kept),
                           args.repeats, device)
        t_next, t_step, runs = [], [], []
        for _ in range(args.repeats):
            start = time.perf_counter()
            for _ in range(args.batches):
                t0 = time.perf_counter()
                b = next(it)
                t1 = time.perf_counter()
                step(b)
                t_step.append(time.perf_counter() - t1)
                t_next.append(t1 - t0)
            sync(device)
            runs.append(1e3 * (time.perf_counter() - start) / args.batches)
        r = {'ms_per_batch': statistics.median(runs),
             'ms_per_batch_min': min(runs), 'ms_per_batch_max': max(runs),
             'compute_only_ms': bound['ms_per_batch'],
             'over_compute_only': statistics.median(runs) /
             bound['ms_per_batch'],
             'host_ms_next': 1e3 * statistics.median(t_next),
             'host_ms_step': 1e3 * statistics.median(t_step),
             'step_host_ms_idle_device': step_host_ms(step, kept, device)}
        if device.type == 'cuda':
            r['host'] = host_time(
                lambda: [step(next(it)) for _ in range(args.batches)],
                args.batches)
        if args.cprofile:
            r['cprofile'] = cprofile_top(
                lambda: [step(next(it)) for _ in range(args.batches)], 45)
            r['cprofile_loader'] = cprofile_loader(it, step, args.batches,
                                                   60)
            args.cprofile = False  # The first mode's only.
        res[mode] = r
        log(f"  e2e {mode}: {r['ms_per_batch']:.3f} ms/batch "
            f"[{r['ms_per_batch_min']:.3f}-{r['ms_per_batch_max']:.3f}], "
            f"compute only {r['compute_only_ms']:.3f} "
            f"({r['over_compute_only']:.3f}x), "
            f"host in next {r['host_ms_next']:.3f} ms, in step "
            f"{r['host_ms_step']:.3f} ms, waiting calls "
            f"{r.get('host', {}).get('waiting_calls')}")
    return res


def _profile_lines(prof, top: int, *orders: str) -> List[str]:
    import io
    import pstats
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    for order in orders:
        stats.sort_stats(order).print_stats(top)
    return out.getvalue().splitlines()


def cprofile_top(run: Callable[[], None], top: int) -> List[str]:
    r"""The :obj:`top` functions by own time in :obj:`run()`, from
    :mod:`cProfile` (which slows Python code down: shares, not times)."""
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
    run()
    prof.disable()
    return _profile_lines(prof, top, 'tottime')


def cprofile_loader(it, step: Callable, batches: int, top: int
                    ) -> List[str]:
    r"""The loader's share of the loop: :mod:`cProfile` on
    :obj:`next(it)` only (the step runs unprofiled), by cumulative and by
    own time."""
    import cProfile
    prof = cProfile.Profile()
    for _ in range(batches):
        prof.enable()
        b = next(it)
        prof.disable()
        step(b)
    return _profile_lines(prof, top, 'cumulative', 'tottime')


def main(argv=None) -> Dict:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--what', default='homo,hetero')
    p.add_argument('--modes', default='eager,default,padded-reduce-overhead',
                   help="'eager' first, then torch.compile modes with "
                   "dynamic shapes ('default', 'max-autotune-no-cudagraphs', "
                   "'default+cpp_wrapper', ...) or 'padded-<mode>': static "
                   "shapes, every batch padded to the same sizes (not with "
                   "trim_to_layer); '+fused_adam' appended to any: Adam "
                   "with fused=True")
    p.add_argument('--batches', type=int, default=20)
    p.add_argument('--repeats', type=int, default=5)
    p.add_argument('--small', action='store_true')
    p.add_argument('--cprofile', action='store_true',
                   help="e2e: the first mode's loop under cProfile too")
    p.add_argument('--device', default='cuda')
    p.add_argument('--out', default=None)
    args = p.parse_args(argv)
    args.modes = args.modes.split(',')
    if not args.modes[0].startswith('eager'):
        p.error("--modes must start with 'eager' (the reference)")
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True  # As bench_gpu_data_path.
    res: Dict = {'machine': machine_info(), 'config': vars(args),
                 'torch': torch.__version__}
    for what in args.what.split(','):
        res[what] = {'homo': homo, 'hetero': hetero,
                     'e2e': e2e}[what](args, device)
    if args.out:
        write_report(res, args.out)
    return res


if __name__ == '__main__':
    main()
