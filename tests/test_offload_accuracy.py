"""Training with bottom-layer offload reaches the test accuracy of training
without it (a fast, loose version of ``benchmarks/bench_offload.py
--accuracy``, which compares means over 5 seeds within 1 point)."""
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GCN, GraphSAGE

from pyg_orch import HybridNeighborLoader
from pyg_orch.offload import BottomLayerOffload

from test_offload import (  # noqa: F401 (autouse fixtures)
    no_thread_leaks,
    one_intra_op_thread,
    wait_no_threads,
)

SEEDS = (0, 1)
TOLERANCE = 0.03  # Mean test accuracy over SEEDS, offload vs. plain.


def train_and_test(data, arch: str, seed: int, offload: bool,
                   epochs: int = 30) -> float:
    torch.manual_seed(seed)
    loader = HybridNeighborLoader(data, [10, 5], batch_size=32, shuffle=True,
                                  input_nodes=data.train_mask, device='cpu',
                                  seed=seed)
    Model = GraphSAGE if arch == 'sage' else GCN
    model = Model(data.num_features, 64, 2, int(data.y.max()) + 1,
                  dropout=0.5)
    if offload:
        model = BottomLayerOffload(model, loader, seed=seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01,
                                 weight_decay=5e-4)
    for _ in range(epochs):
        model.train()
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(dim=-1)
    if offload:
        stats = model.stats()
        assert stats['hot_rows_replaced'] > 0
        assert stats['max_staleness_seen'] <= 1
        model.close()
    mask = data.test_mask
    return float((pred[mask] == data.y[mask]).float().mean())


@pytest.mark.parametrize('arch', ['sage', 'gcn'])
@pytest.mark.parametrize('dataset', ['cora', 'citeseer'])
def test_offload_accuracy_close_to_plain(dataset, arch, request):
    data = request.getfixturevalue(dataset)
    plain = [train_and_test(data, arch, s, offload=False) for s in SEEDS]
    offload = [train_and_test(data, arch, s, offload=True) for s in SEEDS]
    mean_plain = sum(plain) / len(plain)
    mean_offload = sum(offload) / len(offload)
    assert mean_plain > 0.55  # The setup trains at all.
    assert abs(mean_offload - mean_plain) <= TOLERANCE, (plain, offload)
    assert wait_no_threads() == []
