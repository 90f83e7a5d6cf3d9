import pytest
import torch

from pyg_orch.loader.stats import StageTimer, plot_stage_times


def test_timer_table_and_summary():
    timer = StageTimer()
    timer.add('sample', 0.010)
    timer.add('train', 0.030)
    timer.add('train', 0.010)
    timer.num_batches = 2
    summary = timer.summary()
    assert summary['train']['calls'] == 2
    assert summary['train']['ms_per_batch'] == pytest.approx(20.0)
    assert summary['sample']['total_s'] == pytest.approx(0.010)
    table = timer.table()
    assert 'train' in table and '20.00' in table and '2 batches' in table
    with timer.stage('gather'):
        torch.ones(10).sum()
    assert timer.summary()['gather']['calls'] == 1
    timer.reset()
    assert timer.summary() == {} and timer.num_batches == 0


def test_plot_stage_times():
    matplotlib = pytest.importorskip('matplotlib')
    matplotlib.use('Agg')
    a, b = StageTimer(), StageTimer()
    a.add('sample', 0.004)
    a.add('train', 0.010)
    b.add('train', 0.006)
    a.num_batches = b.num_batches = 1
    ax = plot_stage_times({'pyg': a, 'ours': b.summary()})
    heights = {}
    for container, label in zip(ax.containers, ['sample', 'train']):
        heights[label] = [bar.get_height() for bar in container]
    assert heights['sample'] == pytest.approx([4.0, 0.0])
    assert heights['train'] == pytest.approx([10.0, 6.0])
    # Stacked: train bars start on top of sample bars.
    assert [bar.get_y() for bar in ax.containers[1]] == pytest.approx(
        [4.0, 0.0])
