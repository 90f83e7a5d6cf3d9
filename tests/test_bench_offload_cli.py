"""``benchmarks/bench_offload.py --process-per-run``: every run of a mode in
a fresh process, merged into one report."""
import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / 'benchmarks'


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module('bench_offload')


@pytest.mark.parametrize('argv', [
    ['--tiny', '--modes', 'plain,default', '--both-orders', '--out', 'a.json',
     '--process-per-run', '--batches', '3'],
    ['--tiny', '--modes=plain,default', '--out=a.json', '--process-per-run',
     '--batches', '3'],
])
def test_child_command_line_runs_one_mode(bench, argv):
    child = bench._child_argv(argv, 'default', 'run0.json')
    assert child == ['--tiny', '--batches', '3', '--only-mode', 'default',
                     '--out', 'run0.json']
    args = bench.parse_args(child)
    assert args.modes == ['plain', 'default'] and args.only_mode == 'default'
    assert not args.process_per_run and not args.both_orders


def test_process_per_run_merges_the_runs(bench, tmp_path):
    out = tmp_path / 'r.json'
    report = bench.main([
        '--tiny', '--device', 'cpu', '--batches', '2', '--warmup', '1',
        '--modes', 'plain,super_batch:h=0', '--both-orders',
        '--process-per-run', '--out', str(out)
    ])
    res = report['results']
    assert out.exists()
    # plain, offload, offload, plain: each in its own process, in order.
    assert [r['process'] for r in res['plain']['orders']] == [1, 4]
    assert [r['process'] for r in res['super_batch:h=0']['orders']] == [2, 3]
    # Every process built the same graph; no vertex is hot, so every run
    # drew the same batches.
    nodes = {r['nodes_per_batch'] for mode in ('plain', 'super_batch:h=0')
             for r in res[mode]['orders']}
    assert len(nodes) == 1
    assert res['super_batch:h=0']['offload']['num_hot'] == 0
    assert set(res['speedup']) == {'super_batch:h=0'}


@pytest.mark.parametrize('default_first', [False, True])
def test_same_process_phases(monkeypatch, tmp_path, default_first):
    # bench_offload_same_process.py: plain, the default after its trial and
    # plain again, in one process, each phase with its step times.
    monkeypatch.syspath_prepend(str(BENCH))
    same = importlib.import_module('bench_offload_same_process')
    out = tmp_path / 's.json'
    report = same.main(['--tiny', '--device', 'cpu', '--steps', '2',
                        '--warmup-steps', '1', '--trial-steps', '3',
                        '--out', str(out)] +
                       (['--default-first'] if default_first else []))
    res = report['results']
    assert out.exists()
    phases = ('default_after', 'unwrapped', 'after_empty_cache',
              'fresh_model', 'plain_2')
    assert all(res[p]['ms_per_step'] > 0 for p in phases)
    assert ('plain_1' in res) == (not default_first)
    assert 1 <= res['trial_steps'] <= 3
    # Three steps are too few for the trial to decide; its state is kept.
    assert res['decision']['state'] in ('trial', 'settling')
    with pytest.raises(SystemExit):
        same.parse_args(['--tiny', '--steps', '0'])


def _orders_file(path, first, ms):
    # A --process-per-run --both-orders result: `ms` per process (1-4),
    # the modes in the order `first`, other, other, first.
    import json
    modes = [first, 'default' if first == 'plain' else 'plain']
    order = [modes[0], modes[1], modes[1], modes[0]]
    res = {m: {'orders': []} for m in modes}
    for p, (m, t) in enumerate(zip(order, ms), 1):
        res[m]['orders'].append({'process': p, 'ms_per_batch': t})
    mean = {m: sum(o['ms_per_batch'] for o in res[m]['orders']) / 2
            for m in modes}
    res['speedup'] = {'default': mean['plain'] / mean['default']}
    path.write_text(json.dumps({'results': res}))
    return str(path)


def test_summarize_offload_orders(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(BENCH))
    orders = importlib.import_module('summarize_offload_orders')
    # Outer processes 2% faster, the default itself 1% slower:
    abba = [_orders_file(tmp_path / f'a{i}.json', 'plain',
                         [9.8, 10.1, 10.1, 9.8]) for i in range(2)]
    baab = [_orders_file(tmp_path / 'b.json', 'default',
                         [9.9, 10.0, 10.0, 9.9])]
    runs = [orders.read_run(f, 'default') for f in abba + baab]
    assert [r['order'] for r in runs] == ['A B B A'] * 2 + ['B A A B']
    assert runs[0]['first_over_inner'] == pytest.approx(9.8 / 10.1)
    s = orders.summarize(runs)
    assert s['plain_first']['median'] == pytest.approx(9.8 / 10.1)
    assert s['mode_first']['median'] == pytest.approx(10.0 / 9.9)
    assert s['balanced'] == pytest.approx(
        (9.8 / 10.1 * 10.0 / 9.9) ** 0.5)
    out = tmp_path / 'o.json'
    orders.main(['--runs', *abba, *baab, '--out', str(out)])
    assert out.exists()
    bad = tmp_path / 'bad.json'
    bad.write_text('{"results": {"plain": {}, "default": {}}}')
    with pytest.raises(ValueError, match="not a --process-per-run"):
        orders.read_run(str(bad), 'default')


def test_full_neighbors_per_mode(bench, tmp_path):
    # 'f=1' computes a mode's rows once from all neighbors (static tables,
    # see BottomLayerOffload's full_neighbors); 'f=0' samples them.
    with pytest.raises(ValueError, match="bad value in 'f=2'"):
        bench.mode_options(bench.parse_args(['--tiny']), 'super_batch:f=2')
    report = bench.main([
        '--tiny', '--device', 'cpu', '--batches', '3', '--warmup', '2',
        '--modes', 'plain,super_batch:h=0.2:f=1,super_batch:h=0.2:f=0',
        '--out', str(tmp_path / 'r.json')
    ])
    res = report['results']
    static = res['super_batch:h=0.2:f=1']['offload']
    sampled = res['super_batch:h=0.2:f=0']['offload']
    assert static['static_tables'] and static['num_hot'] > 0
    assert static['sample_age_max'] == 0
    assert not sampled['static_tables']
    assert all(res[m]['warmup_s'] > 0 for m in res if m in (
        'plain', 'super_batch:h=0.2:f=1', 'super_batch:h=0.2:f=0'))


def test_multi_gpu_worlds_are_checked(monkeypatch, capsys):
    # Checked before any GPU is touched.
    monkeypatch.syspath_prepend(str(BENCH))
    bench = importlib.import_module('bench_multi_gpu')
    for worlds, expected in (('3', 'must lie in 1..--gpus'),
                             ('two', 'comma-separated GPU counts')):
        monkeypatch.setattr('sys.argv', ['bench_multi_gpu.py', '--gpus', '2',
                                         '--worlds', worlds])
        with pytest.raises(SystemExit) as exc:
            bench.main()
        assert exc.value.code == 2
        assert expected in capsys.readouterr().err


def test_accuracy_models_are_checked(bench, capsys):
    assert bench.parse_args(['--accuracy-models', 'sage']).accuracy_models \
        == ['sage']
    with pytest.raises(SystemExit):
        bench.parse_args(['--accuracy-models', 'sage,gat'])
    assert "--accuracy-models takes a comma-separated list of sage, gcn " \
        "(got sage,gat)" in capsys.readouterr().err
