r"""End-to-end demo: GraphSAGE on a synthetic power-law graph with
:class:`pyg_orch.HybridNeighborLoader`, then a short phase with
:class:`pyg_orch.BottomLayerOffload`. Prints the loss and validation accuracy
per epoch, the time per loader stage, and the test accuracy of an MLP on the
features alone, of GraphSAGE and of GraphSAGE with offload.

.. code-block:: bash

    python -m pyg_orch.demo
    python -m pyg_orch.demo --nodes 1000000 --edges 20000000 --device cuda"""
import argparse
import time
from typing import List, Optional

import torch
import torch.nn.functional as F


def _parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog='python -m pyg_orch.demo',
        description='Train GraphSAGE on a synthetic power-law graph with '
        'pyg_orch.HybridNeighborLoader, then with BottomLayerOffload; print '
        'per-stage times and the test accuracy of an MLP on the features '
        'alone, of GraphSAGE and of GraphSAGE with offload.',
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    # Integer options: flag, default, smallest value, help.
    counts = (('--nodes', 100_000, 1, 'number of nodes'),
              ('--edges', 1_000_000, 0, 'number of directed edges'),
              ('--features', 64, 1, 'number of node features'),
              ('--classes', 10, 1, 'number of classes'),
              ('--epochs', 3, 1, 'number of training epochs'),
              ('--batch-size', 1024, 1, 'seed nodes per mini-batch'),
              ('--hidden', 128, 1, 'hidden channels of GraphSAGE'),
              ('--offload-epochs', 1, 0, 'epochs trained on afterwards '
               'with BottomLayerOffload (0 to skip)'))
    for flag, default, _, text in counts:
        parser.add_argument(flag, type=int, default=default, help=text)
    parser.add_argument('--num-neighbors', type=int, nargs='+',
                        default=[15, 10, 5], help='fan-out per hop')
    parser.add_argument('--feature-snr', type=float, default=3.0,
                        help='distance between class centroids in units of '
                        'the feature noise (power_law_graph\'s feature_snr): '
                        'how informative the features alone are')
    parser.add_argument('--device', default='auto',
                        help="'auto' (CUDA when available, else CPU), "
                        "'cpu', 'cuda', 'cuda:1', ...")
    parser.add_argument('--seed', type=int, default=0, help='random seed')
    parser.add_argument('--lr', type=float, default=3e-3,
                        help='learning rate (Adam)')
    args = parser.parse_args(argv)
    for flag, _, minimum, _ in counts:
        if getattr(args, flag[2:].replace('-', '_')) < minimum:
            parser.error(f'{flag} must be >= {minimum}')
    if not 0 <= args.feature_snr < float('inf'):
        parser.error('--feature-snr must be finite and >= 0')
    return args


def forward(model: torch.nn.Module, batch) -> torch.Tensor:
    r"""Logits of the seed nodes of :obj:`batch`. Batches list their nodes
    and edges in hop order, so every layer of the model skips the nodes and
    edges that cannot reach a seed anymore
    (:func:`~torch_geometric.utils.trim_to_layer`)."""
    out = model(batch.x, batch.edge_index,
                num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                num_sampled_edges_per_hop=batch.num_sampled_edges)
    return out[:batch.batch_size]


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader) -> float:
    r"""Accuracy over the seed nodes of :obj:`loader`."""
    model.eval()
    correct = total = 0
    for batch in loader:
        out = forward(model, batch)
        y = batch.y[:batch.batch_size]
        correct += int((out.argmax(dim=-1) == y).sum())
        total += batch.batch_size
    return correct / max(total, 1)


def main(argv: Optional[List[str]] = None) -> None:
    args = _parse_args(argv)

    from torch_geometric.nn import GraphSAGE

    from pyg_orch import HybridNeighborLoader
    from pyg_orch.datasets import power_law_graph
    from pyg_orch.core.checks import resolve_device

    device = resolve_device(None if args.device == 'auto' else args.device)
    torch.manual_seed(args.seed)
    print(f'pyg_orch demo on {device} '
          f'(torch {torch.__version__}, {torch.get_num_threads()} threads)')

    t = time.perf_counter()
    data = power_law_graph(args.nodes, args.edges,
                           num_features=args.features,
                           num_classes=args.classes,
                           feature_snr=args.feature_snr, seed=args.seed)
    data = data.to(device)  # Features gathered where sampling runs.
    print(f'graph: {data.num_nodes:,} nodes, {data.num_edges:,} edges, '
          f'{args.features} features, {args.classes} classes '
          f'({time.perf_counter() - t:.1f} s to generate)')

    t = time.perf_counter()
    train_loader = HybridNeighborLoader(
        data, num_neighbors=args.num_neighbors, batch_size=args.batch_size,
        shuffle=True, input_nodes=data.train_mask, device=device,
        seed=args.seed)
    # The validation loader reuses the training loader's CSC topology:
    val_loader, test_loader = (HybridNeighborLoader(
        data, num_neighbors=args.num_neighbors,
        batch_size=4 * args.batch_size, input_nodes=mask, device=device,
        seed=args.seed + offset, topology=train_loader.topology)
        for mask, offset in ((data.val_mask, 1), (data.test_mask, 3)))
    print(f'loaders: {len(train_loader)} training batches, '
          f'{len(val_loader)} validation batches per epoch '
          f'({time.perf_counter() - t:.1f} s to build the topology)')

    model = GraphSAGE(args.features, args.hidden, num_layers=3,
                      out_channels=args.classes).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    timer = train_loader.timer
    t_start = time.perf_counter()
    train(model, optimizer, train_loader, val_loader, 1, args.epochs)
    print(f'{args.epochs} epochs in {time.perf_counter() - t_start:.1f} s\n')
    epochs = 'all epochs' if args.epochs == 1 else (
        'epoch 2' if args.epochs == 2 else f'epochs 2-{args.epochs}')
    print(timer.table(title=f'training stage times on {device}, {epochs}'))
    accuracy = {
        f'MLP on the features alone, {args.epochs} epochs':
        train_mlp(data, args),
        f'GraphSAGE, {args.epochs} epochs': evaluate(model, test_loader),
    }

    if args.offload_epochs > 0:
        accuracy[f'GraphSAGE, then {args.offload_epochs} epoch(s) with '
                 f'BottomLayerOffload'] = offload_phase(
                     model, optimizer, data, train_loader, val_loader,
                     test_loader, args, device)

    num_test = int(data.test_mask.sum())
    print(f'\ntest accuracy ({num_test:,} test nodes, '
          f'{args.classes} classes):')
    width = max(len(name) for name in accuracy)
    for name, acc in accuracy.items():
        print(f'  {name:<{width}}  {acc:.4f}')


def offload_phase(model, optimizer, data, train_loader, val_loader,
                  test_loader, args, device) -> float:
    r"""Trains :obj:`model` for :obj:`args.offload_epochs` more epochs with
    :class:`~pyg_orch.BottomLayerOffload` and returns its test accuracy."""
    # Offload reads features from host memory: a CPU copy of the graph.
    from pyg_orch import BottomLayerOffload, HybridNeighborLoader
    from pyg_orch.offload import OffloadOptions
    host_loader = HybridNeighborLoader(
        data.cpu(), num_neighbors=args.num_neighbors,
        batch_size=args.batch_size, shuffle=True,
        input_nodes=data.train_mask.cpu(), device=device,
        seed=args.seed + 2, topology=train_loader.topology)
    print(f'\nBottomLayerOffload: {args.offload_epochs} more epoch(s)')
    options = OffloadOptions(hot_ratio=0.05, max_staleness=1)
    with BottomLayerOffload(model, host_loader,
                            options=options) as offloaded:
        first = args.epochs + 1
        train(offloaded, optimizer, host_loader, val_loader, first,
              first + args.offload_epochs - 1, reset_after_first=False)
        stats = offloaded.stats()
    print(host_loader.timer.table(
        title=f'training stage times on {device}, with BottomLayerOffload'))
    print(f"offload: {stats['num_hot']:,} hot vertices "
          f"({100 * stats['hot_coverage']:.1f}% of bottom-layer accesses), "
          f"max staleness seen {stats['max_staleness_seen']} "
          f"(bound {stats['max_staleness']}), waited "
          f"{stats['wait_s']:.3f} s")
    return evaluate(model, test_loader)  # The plain model, exactly.


def train_mlp(data, args) -> float:
    r"""Trains an MLP as deep and wide as the GraphSAGE model on the
    features of the training nodes alone (no edges), with the same epochs,
    batch size and optimizer, and returns its test accuracy."""
    from torch_geometric.nn import MLP
    torch.manual_seed(args.seed)
    device = data.x.device
    mlp = MLP(in_channels=args.features, hidden_channels=args.hidden,
              out_channels=args.classes, num_layers=3).to(device)
    optimizer = torch.optim.Adam(mlp.parameters(), lr=args.lr)
    train_nodes = data.train_mask.nonzero().view(-1)
    t = time.perf_counter()
    for _ in range(args.epochs):
        mlp.train()
        perm = torch.randperm(train_nodes.numel(), device=device)
        for nodes in train_nodes[perm].split(args.batch_size):
            optimizer.zero_grad()
            loss = F.cross_entropy(mlp(data.x[nodes]), data.y[nodes])
            loss.backward()
            optimizer.step()
    mlp.eval()
    with torch.no_grad():
        pred = mlp(data.x[data.test_mask]).argmax(dim=-1)
    acc = float((pred == data.y[data.test_mask]).float().mean())
    print(f'MLP on the features alone: {args.epochs} epochs in '
          f'{time.perf_counter() - t:.1f} s')
    return acc


def train(model, optimizer, loader, val_loader, first: int, last: int,
          reset_after_first: bool = True) -> None:
    r"""Trains epochs :obj:`first..last`, timing the step as :obj:`'train'`
    in :obj:`loader.timer`."""
    timer = loader.timer
    timer.reset()
    for epoch in range(first, last + 1):
        if epoch == first + 1 and reset_after_first:
            # The first epoch pays one-time costs (allocator growth, kernel
            # compilation on GPUs): the table shows the steady state.
            timer.reset()
        t = time.perf_counter()
        model.train()
        loss_sum = num_seeds = 0
        for batch in loader:
            with timer.stage('train'):
                optimizer.zero_grad()
                out = forward(model, batch)
                loss = F.cross_entropy(out, batch.y[:batch.batch_size])
                loss.backward()
                optimizer.step()
            loss_sum += float(loss.detach()) * batch.batch_size
            num_seeds += batch.batch_size
        train_s = time.perf_counter() - t
        val_acc = evaluate(model, val_loader)
        print(f'epoch {epoch:>2}: loss {loss_sum / max(num_seeds, 1):.4f}  '
              f'val acc {val_acc:.4f}  train {train_s:.1f} s  '
              f'total {time.perf_counter() - t:.1f} s')


if __name__ == '__main__':
    main()
