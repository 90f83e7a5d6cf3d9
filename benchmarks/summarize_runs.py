"""Median, minimum and maximum of the key figures of several runs of
``bench_gpu_data_path.py`` (and optionally ``bench_compute_bound.py``), each
on a fresh device machine, into one JSON: the figures README quotes.

    python benchmarks/summarize_runs.py \\
        --runs run1.json run2.json run3.json \\
        --compute-bound cb1.json cb2.json cb3.json \\
        --commit abc1234 --out benchmarks/results/gpu_data_path_runs.json
"""
import argparse
import datetime
import json
import statistics
from pathlib import Path
from typing import Any, Callable, Dict, List

def _pyg_best(r: dict, prefix: str) -> float:
    # The best over num_workers of PyG's rows named '<prefix>workers=<w>'.
    return min(v['ms_per_batch'] for k, v in r['pyg'].items()
               if k.startswith(prefix + 'workers='))


# Figure name -> how to read it from one result of bench_gpu_data_path.py.
FIGURES: Dict[str, Callable[[dict], float]] = {
    'sampling_edges_per_s': lambda r: r['sampling']['triton/device']
    ['edges_per_s'],
    'sampling_host_topology_edges_per_s': lambda r: r['sampling']
    ['triton/host']['edges_per_s'],
    'compute_only_ms': lambda r: r['compute_only']['ms_per_batch'],
    # Runs with --compile: the same bound with the eager model.
    'compute_only_eager_ms': lambda r: r['compute_only_eager']
    ['ms_per_batch'],
    'features_on_gpu_ms': lambda r: r['e2e_features_on_gpu']['ms_per_batch'],
    'features_on_gpu_over_compute_only': lambda r: r['e2e_features_on_gpu']
    ['over_compute_only'],
    'compute_only_no_trim_ms': lambda r: r['compute_only_no_trim']
    ['ms_per_batch'],
    'features_on_gpu_no_trim_ms': lambda r: r['e2e_features_on_gpu_no_trim']
    ['ms_per_batch'],
    'host_features_cache_ms': lambda r: r['e2e_host_features_cache']
    ['ms_per_batch'],
    'gather_frequency_uva_ms': lambda r: r['gather']['frequency/uva']
    ['ms_per_batch'],
    'gather_degree_uva_ms': lambda r: r['gather']['degree/uva']
    ['ms_per_batch'],
    'pyg_best_ms': lambda r: r['pyg']['best_ms_per_batch'],
    # Runs with --compile --pyg-eager-too: PyG with each model.
    'pyg_same_step_best_ms': lambda r: _pyg_best(r, ''),
    'pyg_eager_model_best_ms': lambda r: _pyg_best(r, 'eager_model/'),
    'speedup_vs_pyg_features_on_gpu': lambda r: r['speedup_vs_pyg']
    ['features_on_gpu'],
    'speedup_vs_pyg_host_features_cache': lambda r: r['speedup_vs_pyg']
    ['host_features_cache'],
}


def spread(values: List[float]) -> Dict[str, Any]:
    return {'median': statistics.median(values), 'min': min(values),
            'max': max(values), 'runs': len(values), 'values': values}


def summarize(runs: List[dict]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for name, read in FIGURES.items():
        values = []
        for r in runs:
            try:
                values.append(float(read(r)))
            except (KeyError, TypeError, ValueError):  # Not in this run.
                pass
        if values:
            out[name] = spread(values)
    best = [r.get('pyg', {}).get('best') or min(
        (k for k in r.get('pyg', {}) if k.startswith('workers=')),
        key=lambda k: r['pyg'][k]['ms_per_batch'], default=None)
        for r in runs]
    out['pyg_best_workers'] = best
    return out


def summarize_compute_bound(runs: List[dict]) -> Dict[str, Any]:
    keys = sorted({k for r in runs for k in r['runs']})
    out = {}
    for k in keys:
        ms = [r['runs'][k]['ms_per_batch'] for r in runs
              if 'ms_per_batch' in r['runs'].get(k, {})]
        if ms:
            out[k] = {
                'ms_per_batch': spread(ms),
                'speedup_over_tensor': spread([
                    r['runs'][k]['speedup'] for r in runs
                    if 'speedup' in r['runs'].get(k, {})
                ]),
                'max_abs_diff': max(r['runs'][k]['max_abs_diff']
                                    for r in runs if k in r['runs']),
            }
        else:
            out[k] = {'error': runs[0]['runs'][k].get('error')}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--runs', nargs='+', required=True)
    p.add_argument('--compute-bound', nargs='*', default=[])
    p.add_argument('--commit', required=True)
    p.add_argument('--date', default=datetime.date.today().isoformat())
    p.add_argument('--out', required=True)
    args = p.parse_args()
    runs = [json.loads(Path(f).read_text()) for f in args.runs]
    res = {'date': args.date, 'commit': args.commit,
           'machines': [r.get('machine', {}).get('gpu') for r in runs],
           'files': [Path(f).name for f in args.runs],
           'figures': summarize(runs)}
    if args.compute_bound:
        res['compute_bound'] = summarize_compute_bound(
            [json.loads(Path(f).read_text()) for f in args.compute_bound])
    Path(args.out).write_text(json.dumps(res, indent=1))
    for name, v in res['figures'].items():
        if isinstance(v, dict):
            print(f"{name:<40} median {v['median']:.4g}  min {v['min']:.4g}"
                  f"  max {v['max']:.4g}  ({v['runs']} runs)")
    print(f'wrote {args.out}')


if __name__ == '__main__':
    main()
