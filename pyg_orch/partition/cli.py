r"""Command line for offline partitioning of a synthetic power-law graph or a
graph saved with :func:`torch.save` (loaded with :obj:`weights_only=True`
unless :obj:`--trust-pickle`); prints the edge cut and the balance::

    python -m pyg_orch.partition.cli --data graph.pt --parts 8 \
        --out parts/ --method metis
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from pyg_orch.partition.build import partition_graph
from pyg_orch.partition.partitioning import METHODS

__all__ = ['load_graph', 'main']


def _safe_globals() -> list:
    # What the pickles of Data and HeteroData reference (PyG 2.8 registers
    # Data and HeteroData themselves, not their storages).
    from torch_geometric.data import Data, HeteroData
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import (
        BaseStorage,
        EdgeStorage,
        GlobalStorage,
        NodeStorage,
    )
    return [Data, HeteroData, DataEdgeAttr, DataTensorAttr, BaseStorage,
            EdgeStorage, GlobalStorage, NodeStorage]


def _unpickling_reason(error: Exception) -> str:
    # The line of torch's message that says what was refused.
    skip = ('Weights only load failed', 'Check the documentation',
            'Please file an issue')
    for line in str(error).splitlines():
        line = line.split('WeightsUnpickler error:')[-1].strip()
        if line and not line.startswith(skip):
            return line.split(' Please use')[0].rstrip('.')
    return 'it holds objects other than tensors and PyG data'


def load_graph(path: str, trust_pickle: bool = False):
    r"""Loads a graph saved with :func:`torch.save` (or a sequence whose first
    element is one) with :obj:`weights_only=True` and PyG's data classes, or
    any pickle with :obj:`trust_pickle`; a :class:`ValueError` naming the file
    where it cannot be loaded safely."""
    import pickle

    import torch
    try:
        if trust_pickle:
            data = torch.load(path, weights_only=False)
        else:
            with torch.serialization.safe_globals(_safe_globals()):
                data = torch.load(path, weights_only=True)
    except OSError:
        raise
    except pickle.UnpicklingError as e:
        if trust_pickle:
            raise ValueError(f"'--data' {path!r} could not be loaded: "
                             f"{e}") from None
        raise ValueError(
            f"'--data' {path!r} cannot be loaded safely "
            f"(weights_only=True): {_unpickling_reason(e)}. Only tensors "
            f"and PyG's Data/HeteroData are allowed; pass --trust-pickle to "
            f"load it anyway, which runs any code the file holds (only for "
            f"files you trust)") from None
    except Exception as e:  # Not a torch.save file, or a damaged one.
        raise ValueError(f"'--data' {path!r} is not a file saved with "
                         f"torch.save: {type(e).__name__}: {e}") from None
    if isinstance(data, (list, tuple)) and len(data) > 0:
        data = data[0]
    return data


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog='python -m pyg_orch.partition.cli',
        description='Partition a graph offline into parts, one folder each '
        '(pyg_orch.distributed.partition_graph).')
    src = p.add_mutually_exclusive_group()
    src.add_argument('--data', metavar='PATH',
                     help='a torch_geometric Data or HeteroData saved with '
                     'torch.save (loaded with weights_only=True: tensors '
                     'and PyG data classes only)')
    p.add_argument('--trust-pickle', action='store_true',
                   help='load --data with weights_only=False: a pickle can '
                   'hold any object, and loading it RUNS ANY CODE the file '
                   'contains; only for files you made or trust')
    for flag, default, what in (
            ('--nodes', 10_000, 'vertices of the synthetic power-law graph'),
            ('--edges', 100_000, 'edges of the synthetic power-law graph'),
            ('--features', 16, 'features of the synthetic graph')):
        p.add_argument(flag, type=int, default=default,
                       help=f'{what} (default: %(default)s)')
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
    from pyg_orch.datasets import power_law_graph
    try:
        data = power_law_graph(
            args.nodes, args.edges, num_features=args.features,
            seed=args.seed) if args.data is None else load_graph(
                args.data, trust_pickle=args.trust_pickle)
        info = partition_graph(data, args.parts, args.out, args.method,
                               args.seed, overwrite=args.overwrite,
                               progress=not args.quiet)
    except (ValueError, OSError, TypeError, ImportError,
            NotImplementedError) as e:
        print(f'error: {e}', file=sys.stderr)
        return 2
    print(info.summary())
    print(f'edge cut: {info.edge_cut:.4f}')
    print(f'balance: {info.balance:.4f}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
