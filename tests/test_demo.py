"""The README's demo, at a tiny size: both features train and the stage
tables are printed."""
import pytest

from pyg_orch import demo


def test_demo_runs_both_phases(capsys):
    demo.main(['--nodes', '3000', '--edges', '30000', '--epochs', '2',
               '--batch-size', '256', '--device', 'cpu',
               '--offload-epochs', '1'])
    out = capsys.readouterr().out
    assert 'training stage times on cpu, epoch 2' in out
    assert 'with BottomLayerOffload' in out
    for stage in ('sample', 'gather', 'train', 'wait'):
        assert f'\n{stage} ' in out
    assert 'hot vertices' in out and 'max staleness seen' in out
    assert 'epoch  3:' in out  # The offload phase trained an epoch.
    # The three test accuracies: MLP, GraphSAGE, GraphSAGE with offload.
    summary = out[out.index('test accuracy ('):].splitlines()[1:]
    assert [line.split()[0] for line in summary] == \
        ['MLP', 'GraphSAGE,', 'GraphSAGE,']
    assert 'BottomLayerOffload' in summary[2]
    for line in summary:
        assert 0.0 <= float(line.split()[-1]) <= 1.0


def test_demo_help_names_each_default_once(capsys):
    with pytest.raises(SystemExit):
        demo.main(['--help'])
    out = capsys.readouterr().out
    assert '(default: None)' not in out
    device_help = out[out.index('\n  --device'):out.index('\n  --seed')]
    assert device_help.count('default') == 1


def test_demo_without_offload(capsys):
    demo.main(['--nodes', '2000', '--edges', '20000', '--epochs', '1',
               '--batch-size', '512', '--device', 'cpu',
               '--offload-epochs', '0'])
    out = capsys.readouterr().out
    assert 'with BottomLayerOffload' not in out
    summary = out[out.index('test accuracy ('):].splitlines()[1:]
    assert len(summary) == 2
