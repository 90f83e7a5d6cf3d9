"""Does GCN's normalization cost BottomLayerOffload accuracy? On the MUSAE
GitHub graph (hubs of ~9,500 neighbors), GCN (2 x 64, fan-out [10, 5], batch
64, 30 epochs, CPU) trained plainly and with a forced offload (5% hot,
``max_staleness=8``), with ``normalize=True`` (PyG's default) and
``normalize=False``, over ``--seeds`` seeds; test accuracy per seed to JSON.

    python benchmarks/probe_gcn_normalization.py --seeds 5 \\
        --out benchmarks/results/offload_gcn_normalize_github.json

Structural features and the seeded 10 / 10 / 80 split as
``bench_offload.py --accuracy`` (about 3 minutes per 5 seeds and setting on
2 cores).
"""
import argparse
import json
import statistics
import warnings
from pathlib import Path

from _bench_common import REPO, log, machine_info

from pyg_orch.datasets import read_musae, structural_features
from pyg_orch.evaluation import random_split, train_and_test


def run(data, seed: int, offload: bool, normalize: bool,
        epochs: int) -> float:
    with warnings.catch_warnings():  # The offload is forced on purpose.
        warnings.simplefilter('ignore', UserWarning)
        return train_and_test(data, 'gcn', seed, offload, epochs,
                              max_staleness=8, hot_ratio=0.05, batch_size=64,
                              model_kwargs={'normalize': normalize})['acc']


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--datasets', default=str(REPO.parent / 'shared' /
                                             'datasets'))
    p.add_argument('--seeds', type=int, default=5)
    p.add_argument('--epochs', type=int, default=30)
    p.add_argument('--out', default=None)
    args = p.parse_args()
    root = Path(args.datasets) / 'musae'
    if not (root / 'github').exists():
        raise SystemExit(f'{root / "github"} not found')
    data = read_musae(str(root), 'github')
    data.x = structural_features(data.edge_index, data.num_nodes)
    data.train_mask, data.val_mask, data.test_mask = random_split(
        data.num_nodes, 0.1, 0.1, 0)
    res = {'machine': machine_info(), 'args': vars(args), 'runs': {}}
    for normalize in (True, False):
        for offload in (False, True):
            accs = [run(data, s, offload, normalize, args.epochs)
                    for s in range(args.seeds)]
            key = f'normalize={normalize}/offload={offload}'
            res['runs'][key] = {'accs': accs, 'mean': statistics.mean(accs)}
            log(f'{key}: {100 * statistics.mean(accs):.2f} '
                f'{[round(100 * a, 1) for a in accs]}')
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))
        log(f'wrote {args.out}')


if __name__ == '__main__':
    main()
