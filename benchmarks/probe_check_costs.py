"""Costs of the argument and data checks of issue 49 (items 6-8): the NaN
check of node, edge and seed times (at construction), the id check of
:meth:`TieredFeatureStore.gather` (per batch), and :func:`read_musae`'s
per-row checks (at load), each against the work it guards."""
import argparse
import os
import time

import torch

from pyg_orch.topology.graph import check_not_nan
from pyg_orch.features.tiered import TieredFeatureStore, check_node_ids


def best_of(fn, repeat: int = 7) -> float:
    fn()
    times = []
    for _ in range(repeat):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--musae', default='../shared/datasets/musae/github')
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f'device={device}, threads={torch.get_num_threads()}')

    # NaN check of times, at construction, against sorting them (which the
    # topology does anyway):
    for n in (10**6, 10**7):
        t = torch.rand(n, dtype=torch.float32)
        check = best_of(lambda: check_not_nan(t, 'time', 'node'))
        sort = best_of(lambda: torch.sort(t, stable=True))
        print(f'times n={n:>9}: NaN check {check * 1e3:7.2f} ms, '
              f'stable sort {sort * 1e3:7.2f} ms')

    # Id check per gather, against the gather itself:
    x = torch.randn(10**6, 128)
    store = TieredFeatureStore(x, device, cache_ratio=0.1,
                               gpu_memory_budget=2**34)
    for n in (10**4, 10**5):
        index = torch.randint(0, x.size(0), (n, ), device=device)
        check = best_of(lambda: check_node_ids(index, x.size(0)))
        gather = best_of(lambda: store.gather(index))
        print(f'gather n={n:>7} x 128: id check {check * 1e6:8.1f} us, '
              f'gather with it {gather * 1e6:9.1f} us '
              f'({100 * check / gather:.2f}%)')

    if os.path.isdir(args.musae):
        from pyg_orch.datasets import read_musae
        load = best_of(lambda: read_musae(args.musae), repeat=3)
        print(f'read_musae({args.musae}): {load:.3f} s')


if __name__ == '__main__':
    main()
