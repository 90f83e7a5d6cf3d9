r"""Command line for offline partitioning::

    python -m pyg_orch.distributed.partition --nodes 100000 --edges 1000000 \
        --parts 4 --out parts/
    python -m pyg_orch.distributed.partition --data graph.pt --parts 8 \
        --out parts/ --method metis

It partitions a synthetic power-law graph
(:func:`~pyg_orch.datasets.power_law_graph`) or a
:class:`~torch_geometric.data.Data` saved with :func:`torch.save`, and prints
the edge cut and the balance."""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from pyg_orch.distributed.build import partition_graph
from pyg_orch.core.partitioning import METHODS

__all__ = ['main']


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog='python -m pyg_orch.distributed.partition',
        description='Partition a graph offline into parts, one folder each '
        '(pyg_orch.distributed.partition_graph).')
    src = p.add_mutually_exclusive_group()
    src.add_argument('--data', metavar='PATH',
                     help='a torch_geometric Data saved with torch.save '
                     '(loaded with weights_only=False: only files you trust)')
    p.add_argument('--nodes', type=int, default=10_000,
                   help='vertices of the synthetic power-law graph '
                   '(default: %(default)s)')
    p.add_argument('--edges', type=int, default=100_000,
                   help='edges of the synthetic power-law graph '
                   '(default: %(default)s)')
    p.add_argument('--features', type=int, default=16,
                   help='features of the synthetic graph (default: '
                   '%(default)s)')
    p.add_argument('--parts', type=int, required=True,
                   help='number of parts')
    p.add_argument('--out', required=True, help='output folder')
    p.add_argument('--method', choices=METHODS, default='auto',
                   help="'auto': metis where pymetis is installed, else "
                   "contiguous (default: %(default)s)")
    p.add_argument('--seed', type=int, default=0,
                   help='seed of the graph and of random/metis '
                   '(default: %(default)s)')
    p.add_argument('--overwrite', action='store_true',
                   help='replace a partition already in --out')
    p.add_argument('--quiet', action='store_true', help='no progress bar')
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if args.data is not None:
        import torch
        data = torch.load(args.data, weights_only=False)
        if isinstance(data, (list, tuple)) and len(data) > 0:
            data = data[0]
    else:
        from pyg_orch.datasets import power_law_graph
        data = power_law_graph(args.nodes, args.edges,
                               num_features=args.features, seed=args.seed)
    try:
        info = partition_graph(data, args.parts, args.out, args.method,
                               args.seed, overwrite=args.overwrite,
                               progress=not args.quiet)
    except (ValueError, TypeError, ImportError,
            NotImplementedError) as e:
        print(f'error: {e}', file=sys.stderr)
        return 2
    print(info.summary())
    print(f'edge cut: {info.edge_cut:.4f}')
    print(f'balance: {info.balance:.4f}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
