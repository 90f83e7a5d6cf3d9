r"""GraphSAGE with DistributedDataParallel on the GPUs of one machine,
PyG's multi-GPU recipe with :class:`pyg_orch.HybridNeighborLoader`: one
process per GPU, each training on its share of the training nodes.

.. code-block:: bash

    torchrun --nproc-per-node 4 examples/multi_gpu_ddp.py
    # CPU processes joined by gloo (no GPU needed):
    torchrun --nproc-per-node 2 examples/multi_gpu_ddp.py --device cpu \
        --epochs 1 --max-steps 3

Every rank builds the same synthetic graph
(:func:`~pyg_orch.datasets.power_law_graph`, seeded); a
:class:`~pyg_orch.parallel.ddp.DistributedSeedSplit` gives each rank as many
training nodes as the others, reshuffled every epoch, so all ranks run the
same number of steps. :func:`~pyg_orch.parallel.watchdog.rank_guard` turns
an error in one rank into an error in all of them instead of a hang, and
:func:`~pyg_orch.parallel.ddp.all_ranks_stats` sums the loaders' statistics.
"""
import argparse
import itertools
import time
from typing import List, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import GraphSAGE

from pyg_orch import HybridNeighborLoader, PlacementOptions
from pyg_orch.datasets import power_law_graph
from pyg_orch.parallel.ddp import (
    DistributedSeedSplit,
    all_ranks_stats,
    destroy_distributed,
    equal_batch_count,
    init_distributed,
    rank_info,
)
from pyg_orch.parallel.watchdog import rank_guard


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--device', choices=['cuda', 'cpu'], default=None,
                        help='cuda (nccl) or cpu (gloo); cuda if available')
    parser.add_argument('--nodes', type=int, default=5000)
    parser.add_argument('--edges', type=int, default=50000)
    parser.add_argument('--features', type=int, default=32)
    parser.add_argument('--classes', type=int, default=8)
    parser.add_argument('--hidden', type=int, default=64)
    parser.add_argument('--fanout', type=int, nargs='+', default=[10, 5])
    parser.add_argument('--batch-size', type=int, default=256)
    parser.add_argument('--epochs', type=int, default=3)
    parser.add_argument('--max-steps', type=int, default=None,
                        help='stop every epoch after this many steps')
    parser.add_argument('--lr', type=float, default=0.01)
    parser.add_argument('--topology-placement', default='auto',
                        choices=['auto', 'device', 'host', 'sharded'],
                        help="'sharded': neighbor lists split across the "
                        "ranks (and, on CUDA with host features, one feature "
                        "cache over all GPUs)")
    parser.add_argument('--timeout', type=float, default=60.0,
                        help='seconds until a rank failure ends all ranks')
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> None:
    args = parse_args(argv)
    device = init_distributed(device=args.device)
    rank, world_size, _, _ = rank_info()
    if device.type == 'cpu':
        torch.set_num_threads(1)  # One core per rank.

    # The same graph on every rank (the same seed); features stay in host
    # memory: on CUDA the loader caches hot rows on the GPU.
    data = power_law_graph(args.nodes, args.edges, args.features,
                           args.classes, seed=0)
    split = DistributedSeedSplit(data.train_mask, seed=0)
    loader = HybridNeighborLoader(data, args.fanout,
                                  batch_size=args.batch_size,
                                  input_nodes=data.train_mask, sampler=split,
                                  device=device, seed=rank,
                                  placement=PlacementOptions(
                                      topology=args.topology_placement))

    torch.manual_seed(0)  # DDP broadcasts rank 0's parameters anyway.
    model = GraphSAGE(args.features, args.hidden, len(args.fanout),
                      args.classes).to(device)
    model = DistributedDataParallel(
        model, device_ids=[device] if device.type == 'cuda' else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    with rank_guard(timeout=args.timeout):
        # Equal by construction; a loader of another kind may need this:
        steps = equal_batch_count(len(loader))
        if args.max_steps is not None:
            steps = min(steps, args.max_steps)
        for epoch in range(args.epochs):
            split.set_epoch(epoch)
            model.train()
            start = time.perf_counter()
            total_loss = torch.zeros((), device=device)
            for batch in itertools.islice(loader, steps):
                optimizer.zero_grad()
                out = model(batch.x, batch.edge_index)[:batch.batch_size]
                loss = F.cross_entropy(out, batch.y[:batch.batch_size])
                loss.backward()
                optimizer.step()
                total_loss += loss.detach()
            dist.all_reduce(total_loss)
            if rank == 0:
                print(f'epoch {epoch:02d}: loss '
                      f'{total_loss.item() / (steps * world_size):.4f}, '
                      f'{steps} steps per rank, '
                      f'{time.perf_counter() - start:.2f} s', flush=True)
        summary = all_ranks_stats(loader.stats())

    if rank == 0:
        stages = summary['total']['stages']
        print(f'all ranks ({world_size}): ' + ', '.join(
            f"{name} {s['total_s']:.3f} s" for name, s in stages.items()))
        features = summary['total']['features']
        if features is not None:
            print(f"  feature rows: {features['cache_rows']:.0f} from the "
                  f"own GPU's cache, {features['peer_rows']:.0f} from peers' "
                  f"caches, {features['host_rows']:.0f} from the host")
        reads = summary['total'].get('topology_reads')
        if reads is not None:
            print(f"  neighbors read: {reads['local']:.0f} from the own "
                  f"shard, {reads['replicated']:.0f} from copies, "
                  f"{reads['peer']:.0f} from peers' shards")
    # The DDP model holds the process group: dropped first, so that the
    # group ends in destroy_distributed (see its docstring for the gloo
    # teardown deadlock it avoids).
    del model, optimizer
    destroy_distributed()

if __name__ == '__main__':
    main()
