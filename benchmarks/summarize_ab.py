r"""Speed of the new side over the base side from the JSONs of
``benchmarks/ab_speed.sh`` (files ``NAME__base.json`` / ``NAME__new.json``),
per run directory, and the median [min-max] over several run directories:

    python benchmarks/summarize_ab.py RUN_DIR [RUN_DIR ...] [--out ab.json]

A ratio above 1 means the new side is faster.
"""
import argparse
import json
import os
import statistics
from typing import Dict, List, Tuple

def _gpu_data_path(d: dict) -> Dict[str, Tuple[float, bool]]:
    out = {}
    for key in ('e2e_features_on_gpu', 'e2e_host_features_cache',
                'compute_only'):
        if isinstance(d.get(key), dict) and 'ms_per_batch' in d[key]:
            out[f'{key} ms/batch'] = (d[key]['ms_per_batch'], False)
    for key, v in (d.get('sampling') or {}).items():
        if isinstance(v, dict) and 'ms_per_batch' in v:
            out[f'sampling {key} ms/batch'] = (v['ms_per_batch'], False)
    return out


def _multi_gpu(d: dict) -> Dict[str, Tuple[float, bool]]:
    return {f'{k} seeds/s': (v['seeds_per_s']['median'], True)
            for k, v in (d.get('summary') or {}).items()
            if isinstance(v, dict) and 'seeds_per_s' in v}


def _distributed(d: dict) -> Dict[str, Tuple[float, bool]]:
    out = {}
    for m, v in (d.get('methods') or {}).items():
        for key in ('time_per_batch_ms', 'loader_ms', 'train_ms'):
            if isinstance(v.get(key), dict):
                out[f'{m} {key}'] = (v[key]['median'], False)
    return out


READERS = {'bench_gpu_data_path': _gpu_data_path,
           'bench_multi_gpu': _multi_gpu,
           'bench_distributed': _distributed}


def ratios(run_dir: str) -> Dict[str, float]:
    r"""New-over-base speed per metric of one run directory."""
    out = {}
    for name, read in READERS.items():
        paths = [os.path.join(run_dir, f'{name}__{s}.json')
                 for s in ('base', 'new')]
        if not all(os.path.exists(p) for p in paths):
            continue
        base, new = (read(json.load(open(p))) for p in paths)
        for key in sorted(set(base) & set(new)):
            (b, higher), (n, _) = base[key], new[key]
            if b > 0 and n > 0:
                out[f'{name}: {key}'] = n / b if higher else b / n
    return out


def main(argv: List[str] = None) -> Dict:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('runs', nargs='+', help='run directories')
    p.add_argument('--out', default=None)
    args = p.parse_args(argv)
    per_run = {r: ratios(r) for r in args.runs}
    keys = sorted(set().union(*per_run.values()))
    summary = {}
    for k in keys:
        vals = [v[k] for v in per_run.values() if k in v]
        summary[k] = {'median': statistics.median(vals), 'min': min(vals),
                      'max': max(vals), 'runs': vals}
        print(f"{k:80s} {summary[k]['median']:.3f}x "
              f"[{min(vals):.3f}-{max(vals):.3f}] n={len(vals)}")
    res = {'per_run': per_run, 'summary': summary}
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == '__main__':
    main()
