"""``benchmarks/bench_host_gather.py`` without a GPU: huge-page host memory
and the refusal to run."""
import importlib
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / 'benchmarks'


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module('bench_host_gather')


@pytest.mark.skipif(not Path('/sys/kernel/mm/transparent_hugepage/enabled')
                    .exists(), reason='no transparent huge pages here')
def test_huge_page_rows_are_zeroed_and_registered(bench, monkeypatch):
    registered = []
    monkeypatch.setattr(bench, 'register_pinned', registered.append)
    x = bench.thp_rows(1 << 14, 128)  # 8 MiB: four huge pages.
    assert x.shape == (1 << 14, 128) and x.dtype == torch.float32
    assert not bool(x.any()) and registered == [x]
    x[3, 5] = 1.5  # Writable.
    assert float(x.sum()) == 1.5
    assert bench.thp_mode().count('[') == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason='has a GPU')
def test_refuses_to_run_without_a_gpu(bench, monkeypatch):
    monkeypatch.setattr(sys, 'argv', ['bench_host_gather.py'])
    with pytest.raises(SystemExit, match='needs a CUDA GPU'):
        bench.main()


@pytest.mark.parametrize('argv,match', [
    (['--rows', '0'], '--rows must be >= 1'),
    (['--rows', '10', '--batch-rows', '11'], 'at most --rows'),
    (['--memory', 'pinned,shm'], "unknown \\['shm'\\]"),
])
def test_bad_arguments_name_the_option(bench, capsys, argv, match):
    import re
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
    assert re.search(match, capsys.readouterr().err)
