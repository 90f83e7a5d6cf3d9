r"""GraphSAGE with DistributedDataParallel over a partitioned graph: one
process per part, each loading only its own part, the same script on one
machine or on several (:func:`pyg_orch.distributed.partition_graph` wrote
the parts; see ``docs/distributed.rst``).

.. code-block:: bash

    # Once, where the whole graph fits (or `python -m
    # pyg_orch.partition.cli --data graph.pt --parts 2 --out parts/`):
    python examples/multi_machine.py --partition-only --parts 2 --out parts/

    # Two processes on this machine, each acting as a machine (gloo):
    torchrun --nproc-per-node 2 examples/multi_machine.py --parts-dir parts/ \
        --device cpu

    # Two machines, one process each (copy parts/ to both first):
    torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \
        --rdzv-id job1 --rdzv-endpoint machine0:29400 \
        examples/multi_machine.py --parts-dir /data/parts/

The training loop is PyG's: only the loader's first argument, a partition
folder instead of a graph, differs from a single-machine script. With
``--offload 0.1`` (or ``default``), each rank wraps the model in
:class:`~pyg_orch.BottomLayerOffload` over its own part.
"""
import argparse
import faulthandler
import signal
import time
from typing import List, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import GraphSAGE

from pyg_orch import BottomLayerOffload, HybridNeighborLoader
from pyg_orch.offload import OffloadOptions
from pyg_orch.multigpu import destroy_distributed


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--partition-only', action='store_true',
                        help='write a partitioned synthetic graph and exit')
    parser.add_argument('--parts', type=int, default=2)
    parser.add_argument('--method', default='auto',
                        help="'metis', 'random', 'contiguous' or 'auto'")
    parser.add_argument('--out', default='parts')
    parser.add_argument('--nodes', type=int, default=5000)
    parser.add_argument('--edges', type=int, default=50000)
    parser.add_argument('--features', type=int, default=32)
    parser.add_argument('--classes', type=int, default=8)
    parser.add_argument('--parts-dir', default='parts',
                        help='the partition folder to train on')
    parser.add_argument('--device', choices=['cuda', 'cpu'], default=None,
                        help='cuda (nccl) or cpu (gloo); cuda if available')
    parser.add_argument('--hidden', type=int, default=64)
    parser.add_argument('--fanout', type=int, nargs='+', default=[10, 5])
    parser.add_argument('--batch-size', type=int, default=256)
    parser.add_argument('--cache-size', type=int, default=1000,
                        help='remote rows cached per rank')
    parser.add_argument('--part-on-host', action='store_true',
                        help='with CUDA, sample and read features on the CPU '
                        "over the part's files instead of over copies on "
                        'the GPU (for parts that do not fit in its memory)')
    parser.add_argument('--offload', default=None,
                        help="wrap the model in BottomLayerOffload on each "
                        "rank: 'default' (the hot-set size decided by "
                        "measurement) or a hot ratio of the rank's part "
                        "(default: no offload)")
    parser.add_argument('--epochs', type=int, default=2)
    parser.add_argument('--lr', type=float, default=0.01)
    return parser.parse_args(argv)


def partition(args: argparse.Namespace) -> None:
    from pyg_orch.datasets import power_law_graph
    from pyg_orch.distributed import partition_graph

    data = power_law_graph(args.nodes, args.edges, args.features,
                           args.classes, seed=0)
    info = partition_graph(data, num_parts=args.parts, out_dir=args.out,
                           method=args.method)
    print(f'{args.parts} parts ({info.method}) in {args.out}: edge cut '
          f'{info.edge_cut:.1%}, balance {info.balance:.3f}')


def train(args: argparse.Namespace) -> None:
    from pyg_orch.multigpu import init_distributed
    from pyg_orch.parallel.watchdog import rank_guard

    # A rank stopped by torchrun (SIGTERM, e.g. past a job's time limit)
    # prints where each of its threads was before it ends:
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    device = init_distributed(device=args.device, timeout=60)
    rank, world = dist.get_rank(), dist.get_world_size()
    # With CUDA, the part's topology and features are copied to the GPU
    # once, so that sampling and gathering run there:
    on_gpu = device.type == 'cuda' and not args.part_on_host
    loader = HybridNeighborLoader(args.parts_dir, num_neighbors=args.fanout,
                                  batch_size=args.batch_size, shuffle=True,
                                  device=device, cache_size=args.cache_size,
                                  sampling_device=device if on_gpu else None,
                                  feature_device=device if on_gpu else None)
    part = loader.partition_batches.partition  # This rank's part.
    num_features = part.node_attrs['x'].size(-1)
    num_classes = part.node_attrs['y'].max().view(1).to(device)
    dist.all_reduce(num_classes, op=dist.ReduceOp.MAX)  # Over all parts.
    num_classes = int(num_classes) + 1
    torch.manual_seed(0)  # The same initial weights on every rank.
    model = GraphSAGE(num_features, args.hidden, len(args.fanout),
                      num_classes).to(device)
    offload = None
    if args.offload is not None:
        # The bottom layer of this rank's hottest vertices on its CPU (a
        # collective: every rank builds it with the same options):
        hot_ratio = None if args.offload == 'default' else \
            float(args.offload)
        model = offload = BottomLayerOffload(
            model, loader, options=OffloadOptions(hot_ratio=hot_ratio))
    model = DistributedDataParallel(
        model, device_ids=[device.index] if device.type == 'cuda' else None)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    with rank_guard(timeout=60):  # One rank's error is raised everywhere.
        for epoch in range(args.epochs):
            start, total, steps = time.perf_counter(), 0.0, 0
            for batch in loader:
                opt.zero_grad()
                out = model(batch.x, batch.edge_index)[:batch.batch_size]
                loss = F.cross_entropy(out, batch.y[:batch.batch_size])
                loss.backward()
                opt.step()
                total, steps = total + loss.item(), steps + 1
            stats = loader.batch_stats[-1] if loader.batch_stats else {}
            print(f'rank {rank}/{world} epoch {epoch}: {steps} steps, '
                  f'loss {total / max(steps, 1):.4f}, '
                  f'{time.perf_counter() - start:.2f} s; last batch: '
                  f'{stats.get("remote_rows", 0)} remote rows, '
                  f'{stats.get("cached_rows", 0)} from the cache\n',
                  end='', flush=True)  # One write: ranks' lines stay whole.
    if offload is not None:
        stats = offload.stats()
        print(f"rank {rank}/{world} offload: {stats['num_hot']} hot "
              f"vertices of its part, {stats['hot_rows_replaced']} rows "
              f"replaced, decision: {stats['decision']['reason']}\n",
              end='', flush=True)
        offload.close()
    # The DDP model holds the process group: dropped first, so that the
    # group ends in destroy_distributed (a barrier, then a pause that lets
    # gloo's threads finish: see its docstring for the deadlock it avoids).
    del model, opt
    destroy_distributed()


def main(argv: Optional[List[str]] = None) -> None:
    args = parse_args(argv)
    if args.partition_only:
        partition(args)
    else:
        train(args)


if __name__ == '__main__':
    main()
