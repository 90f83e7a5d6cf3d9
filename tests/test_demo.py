"""The README's demo, at a tiny size: both features train and the stage
tables are printed."""
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
