"""Test accuracy of reddit.py's training loop (2-layer SAGE, fan-out [25, 10])
with the swapped loader alone and with BottomLayerOffload as well (by
default, and with a fixed hot set), over seeds, on CPU.

    python benchmarks/accuracy_dropin.py --dataset Cora --seeds 0 1 2
"""
import argparse
import shutil
import tempfile
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch_geometric.datasets import Planetoid
from torch_geometric.nn import SAGEConv

from pyg_orch import HybridNeighborLoader
from pyg_orch.offload import BottomLayerOffload, OffloadOptions

SHARED = Path(__file__).resolve().parents[2] / 'shared' / 'datasets'


class SAGE(torch.nn.Module):  # reddit.py's model.
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.convs = torch.nn.ModuleList([
            SAGEConv(in_channels, hidden_channels),
            SAGEConv(hidden_channels, out_channels)
        ])

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.dropout(x.relu_(), p=0.5, training=self.training)
        return x


def load(name: str):
    root = Path(tempfile.mkdtemp())
    shutil.copytree(SHARED / name / 'raw', root / name / 'raw')
    # The full-supervised split: enough training batches to offload.
    return Planetoid(str(root), name, split='full')[0]


def run(data, mode: str, seed: int, epochs: int) -> dict:
    torch.manual_seed(seed)
    loader = HybridNeighborLoader(data, input_nodes=data.train_mask,
                                  num_neighbors=[25, 10], batch_size=128,
                                  shuffle=True, seed=seed)
    model = SAGE(data.num_features, 64, int(data.y.max()) + 1)
    if mode == 'default':
        model = BottomLayerOffload(model, loader)
    elif mode == 'fixed':
        model = BottomLayerOffload(model, loader, options=OffloadOptions(
            hot_ratio=0.1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(epochs):
        model.train()
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(dim=-1)
    mask = data.test_mask
    out = {'acc': float((pred[mask] == data.y[mask]).float().mean())}
    if mode != 'swap':
        stats = model.stats()
        out.update(mode=stats['decision']['mode'],
                   offloaded=stats['offloaded_forwards'],
                   replaced=stats['hot_rows_replaced'])
        model.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--dataset', default='Cora')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--epochs', type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter('ignore')
    data = load(args.dataset)
    for mode in ('swap', 'default', 'fixed'):
        accs = []
        for seed in args.seeds:
            res = run(data, mode, seed, args.epochs)
            accs.append(res['acc'])
            print(mode, seed, res, flush=True)
        mean = sum(accs) / len(accs)
        print(f'{mode}: mean test accuracy {100 * mean:.2f}', flush=True)


if __name__ == '__main__':
    main()
