"""``benchmarks/bench_distributed.py --ranks-per-part``: several ranks per
part (as the GPUs of one machine), with the part's topology sharded across
them (and its feature rows) or not; the sampled batches are the
same."""
import importlib
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / 'benchmarks'


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module('bench_distributed')


@pytest.mark.parametrize('argv,match', [
    (['--topology', 'sharded'], 'needs --ranks-per-part'),
    (['--feature-placement', 'sharded'], 'needs --ranks-per-part'),
    (['--ranks-per-part', '0'], 'at least 1'),
    (['--world-size', '1'], 'must be at least 2'),
])
def test_bad_arguments(bench, argv, match, capsys):
    with pytest.raises(SystemExit):
        bench.main(argv)
    assert match in capsys.readouterr().err


def test_ranks_per_part_sharded_and_not(bench, tmp_path):
    runs = {}
    for topology in ('auto', 'sharded'):
        out = tmp_path / f'{topology}.json'
        # With sharded topology, the feature rows are split too.
        bench.main(['--nodes', '3000', '--edges', '20000', '--methods',
                    'random', '--ranks-per-part', '2', '--topology',
                    topology, '--feature-placement',
                    'sharded' if topology == 'sharded' else 'auto',
                    '--batch-size', '64', '--batches', '2',
                    '--repeats', '1', '--warmup', '1', '--probe-rounds', '0',
                    '--threads', '1', '--work-dir', str(tmp_path / topology),
                    '--out', str(out)])
        runs[topology] = json.loads(out.read_text())['methods']['random']
    for topology, res in runs.items():
        ranks = res['ranks']
        assert [r['part'] for r in ranks] == [0, 0, 1, 1]
        reads = [r['topology_reads'] for r in ranks]
        row_reads = [r['row_reads'] for r in ranks]
        if topology == 'auto':
            assert reads == [None] * 4 and row_reads == [None] * 4
        else:  # Every rank read its own shard and its peer's.
            assert all(r['local'] > 0 and r['peer'] > 0 for r in reads)
            assert all(r['local'] > 0 and r['peer'] > 0 for r in row_reads)
    # Sharding does not change what is sampled:
    assert [h['sampled_edges'] for h in runs['auto']['hops']] == \
        [h['sampled_edges'] for h in runs['sharded']['hops']]


def test_cache_ranking_reaches_the_loader(bench, tmp_path):
    runs = {}
    for ranking in ('frequency', 'degree'):
        out = tmp_path / f'{ranking}.json'
        bench.main(['--nodes', '3000', '--edges', '20000', '--methods',
                    'random', '--cache-ranking', ranking,
                    '--cache-rows', '300', '--batch-size', '64',
                    '--batches', '2', '--repeats', '1', '--warmup', '1',
                    '--probe-rounds', '0', '--threads', '1',
                    '--work-dir', str(tmp_path / ranking),
                    '--out', str(out)])
        res = json.loads(out.read_text())
        assert res['args']['cache_ranking'] == ranking
        runs[ranking] = res['methods']['random']
    for ranking, res in runs.items():
        assert [r['cache_ranking'] for r in res['ranks']] == [ranking] * 2
        assert all(r['cache_rows'] == 300 for r in res['ranks'])
        assert res['features']['cached_rows'] > 0
    # The cache changes where rows come from, not what is sampled:
    assert [h['sampled_edges'] for h in runs['frequency']['hops']] == \
        [h['sampled_edges'] for h in runs['degree']['hops']]
