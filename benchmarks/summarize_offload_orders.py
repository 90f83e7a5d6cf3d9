#!/usr/bin/env python
"""Speed-ups of ``bench_offload.py --process-per-run --both-orders`` runs,
grouped by the order their processes ran in, and the estimate in which
the processes' positions cancel.

With two modes ``A`` (the baseline, ``plain``) and ``B``, ``--modes A,B``
runs the processes ``A B B A`` and ``--modes B,A`` runs ``B A A B``. Where
a process's position by itself changes its speed (for example the last
process of a machine running faster), each order favours one mode; the
median of each order and their geometric mean (the positions balanced)
tell the mode's own effect apart. An A/A run (both modes plain training,
e.g. ``--modes plain,plain:pruned=0``) shows the position effect alone.

    python benchmarks/summarize_offload_orders.py \\
        --runs abba1.json abba2.json baab1.json baab2.json \\
        --mode default --out benchmarks/results/offload_orders.json
"""
import argparse
import datetime
import json
import math
import statistics
from pathlib import Path
from typing import Any, Dict, List

from tqdm import tqdm


def spread(values: List[float]) -> Dict[str, Any]:
    r"""Median, minimum, maximum and the values."""
    if not values:
        return {'runs': 0}
    return {'median': statistics.median(values), 'min': min(values),
            'max': max(values), 'runs': len(values), 'values': values}


def read_run(path: str, mode: str) -> Dict[str, Any]:
    r"""One result file: the speed-up of :obj:`mode` over :obj:`'plain'`,
    which mode ran first (processes 1 and 4), and every process's ms per
    batch."""
    res = json.loads(Path(path).read_text())['results']
    if mode not in res or 'plain' not in res:
        raise ValueError(f"{path} has no results of 'plain' and {mode!r}")
    positions: Dict[int, Dict[str, Any]] = {}
    for name in ('plain', mode):
        orders = res[name].get('orders')
        if not orders:
            raise ValueError(f"{path} is not a --process-per-run "
                             f"--both-orders run (no 'orders' of {name!r})")
        for run in orders:
            positions[int(run['process'])] = {
                'mode': name, 'ms_per_batch': run['ms_per_batch']}
    if sorted(positions) != [1, 2, 3, 4]:
        raise ValueError(f"{path} must hold 4 processes (got "
                         f"{sorted(positions)})")
    first = positions[1]['mode']
    inner = (positions[2]['ms_per_batch'] + positions[3]['ms_per_batch']) / 2
    return {
        'file': Path(path).name,
        'speedup': res['speedup'][mode],
        'first': first,
        'order': ' '.join('A' if positions[p]['mode'] == 'plain' else 'B'
                          for p in (1, 2, 3, 4)),
        'ms_per_batch': [positions[p]['ms_per_batch'] for p in (1, 2, 3, 4)],
        # Outer over inner positions (< 1: processes 1 and 4 ran faster):
        'first_over_inner': positions[1]['ms_per_batch'] / inner,
        'last_over_inner': positions[4]['ms_per_batch'] / inner,
    }


def summarize(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    abba = [r['speedup'] for r in runs if r['first'] == 'plain']
    baab = [r['speedup'] for r in runs if r['first'] != 'plain']
    out: Dict[str, Any] = {
        'plain_first': spread(abba),  # A B B A: the mode inside.
        'mode_first': spread(baab),  # B A A B: the mode outside.
        'first_over_inner': spread([r['first_over_inner'] for r in runs]),
        'last_over_inner': spread([r['last_over_inner'] for r in runs]),
    }
    if abba and baab:
        out['balanced'] = math.sqrt(statistics.median(abba) *
                                    statistics.median(baab))
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog='summarize_offload_orders.py',
                                description=__doc__.split('\n\n')[0])
    p.add_argument('--runs', nargs='+', required=True,
                   help='result files of bench_offload.py')
    p.add_argument('--mode', default='default',
                   help="the mode compared with 'plain'")
    p.add_argument('--commit', default=None)
    p.add_argument('--note', default=None)
    p.add_argument('--out', default=None)
    args = p.parse_args(argv)
    runs = [read_run(f, args.mode) for f in tqdm(args.runs, desc='runs')]
    report = {
        'benchmark': 'offload_orders',
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec='seconds'),
        'commit': args.commit,
        'mode': args.mode,
        'note': args.note,
        'runs': runs,
        'summary': summarize(runs),
    }
    for r in runs:
        print(f"{r['file']:<60} {r['order']}  {r['speedup']:.3f}x  "
              f"first/inner {r['first_over_inner']:.3f}  "
              f"last/inner {r['last_over_inner']:.3f}")
    s = report['summary']
    for key in ('plain_first', 'mode_first'):
        if s[key]['runs']:
            print(f"{key}: median {s[key]['median']:.3f}x "
                  f"[{s[key]['min']:.3f}-{s[key]['max']:.3f}x] over "
                  f"{s[key]['runs']} runs")
    if 'balanced' in s:
        print(f"positions balanced: {s['balanced']:.3f}x")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + '\n')
        print(f'[out] {args.out}')


if __name__ == '__main__':
    main()
