"""A model compiled with ``torch.compile(model, dynamic=True)`` trains on
the loader's batches without a recompile per batch (every batch has other
sizes), and computes what the eager model computes.

On the CPU the graphs are captured with the ``aot_eager`` backend (Dynamo's
guards and AOTAutograd, as with Inductor, without generating kernels); on
CUDA with the default backend (Inductor, Triton kernels) and the fused
sampler's batches."""
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GraphSAGE, SAGEConv, to_hetero

from pyg_orch import BottomLayerOffload, HybridNeighborLoader
from pyg_orch.offload import OffloadOptions

from conftest import (
    RANDOM_HETERO_EDGES,
    RANDOM_HETERO_SIZES,
    random_graph,
    random_hetero_graph,
    step_matches_unpruned,
    tiny_graph,
)

_dynamo = pytest.importorskip('torch._dynamo')

# conftest's heterogeneous graph, larger (no type of a batch is left with 0
# or 1 rows, sizes Dynamo would specialize on), and 'inst' a destination too
# (to_hetero needs every node type updated).
HETERO_SIZES = {t: n * 17 for t, n in RANDOM_HETERO_SIZES.items()}
HETERO_EDGES = {**{et: e * 20 for et, e in RANDOM_HETERO_EDGES.items()},
                ('author', 'works_at', 'inst'): 1000}


def compiled(model: torch.nn.Module, device: torch.device):
    _dynamo.reset()
    backend = 'inductor' if device.type == 'cuda' else 'aot_eager'
    return torch.compile(model, dynamic=True, backend=backend)


def graphs() -> int:
    from torch._dynamo.utils import counters
    return int(counters['stats']['unique_graphs'])


def _grad(p: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(p) if p.grad is None else p.grad


def train_both(model, fast, batches, forward, target):
    r"""Every batch through the eager and the compiled model (same
    parameters): outputs and gradients must agree, and no batch after the
    first may recompile."""
    tol = dict(atol=1e-4, rtol=1e-3)
    before = graphs()
    for i, batch in enumerate(batches):
        with _dynamo.config.patch(error_on_recompile=i > 0):
            out = forward(fast, batch)
            model.zero_grad()  # Gradients set to None: new tensors below.
            F.cross_entropy(out, target(batch)).backward()
        # A compiled backward gives zeros where the eager one gives None.
        grads = [_grad(p) for p in model.parameters()]
        ref = forward(model, batch)
        assert torch.allclose(out, ref, **tol), i
        model.zero_grad()
        F.cross_entropy(ref, target(batch)).backward()
        for g, p in zip(grads, model.parameters()):
            assert torch.allclose(g, _grad(p), **tol), i
    assert graphs() - before >= 1  # It was compiled, not run eagerly.


@pytest.mark.parametrize('trim', [False, True])
def test_compiled_model_trains_without_recompiles(device, trim):
    data = random_graph(1500, 15000, num_features=8, num_classes=3,
                        train_ratio=0.3, seed=1)
    loader = HybridNeighborLoader(data, [5, 3, 2], batch_size=100,
                                  input_nodes=data.train_mask, shuffle=True,
                                  device=device, seed=0)
    batches = list(loader)
    assert batches[-1].batch_size < 100  # Sizes differ, the last batch's too.
    torch.manual_seed(0)
    model = GraphSAGE(8, 16, 3, 3).to(device)

    def forward(m, b):
        kw = dict(num_sampled_nodes_per_hop=b.num_sampled_nodes,
                  num_sampled_edges_per_hop=b.num_sampled_edges) \
            if trim else {}
        return m(b.x, b.edge_index, **kw)[:b.batch_size]

    train_both(model, compiled(model, device), batches, forward,
               lambda b: b.y[:b.batch_size])


class _SAGE(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = SAGEConv((-1, -1), 16)
        self.conv2 = SAGEConv((-1, -1), 3)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def test_compiled_hetero_model_trains_without_recompiles(device):
    data = random_hetero_graph(0, HETERO_SIZES, HETERO_EDGES)
    g = torch.Generator().manual_seed(0)
    data['paper'].y = torch.randint(0, 3, (HETERO_SIZES['paper'], ),
                                    generator=g)
    loader = HybridNeighborLoader(data, [4, 3], batch_size=150,
                                  input_nodes='paper', shuffle=True,
                                  device=device, seed=0)
    batches = list(loader)[:6] + list(loader)[-1:]
    torch.manual_seed(0)
    model = to_hetero(_SAGE(), data.metadata(), aggr='sum').to(device)
    with torch.no_grad():  # Lazy parameters.
        model(batches[0].x_dict, batches[0].edge_index_dict)

    def forward(m, b):
        n = b['paper'].batch_size
        return m(b.x_dict, b.edge_index_dict)['paper'][:n]

    train_both(model, compiled(model, device), batches, forward,
               lambda b: b['paper'].y[:b['paper'].batch_size])


@pytest.mark.usefixtures('no_thread_leaks', 'one_intra_op_thread')
@pytest.mark.parametrize('where', ['model', 'wrapper'])
def test_offload_with_a_compiled_model(where):
    # BottomLayerOffload of a compiled model, or the wrapper compiled: with
    # split='output', max_staleness=0 and full neighbors, the seeds get
    # exactly the eager model's outputs on the unpruned batch. The split
    # 'aggregate' needs PyG's aggregation hooks, which do not run compiled:
    # with split='auto' the model runs unchanged, with split='aggregate' a
    # clear error; never unreplaced rows.
    data = tiny_graph()
    torch.manual_seed(0)
    model = GraphSAGE(8, 16, 2, 3)

    def make():
        return HybridNeighborLoader(data, [-1, -1], batch_size=16,
                                    device='cpu')

    loader, ref_loader = make(), make()
    cpu = torch.device('cpu')
    inner = compiled(model, cpu) if where == 'model' else model
    off = BottomLayerOffload(inner, loader, options=OffloadOptions(
        hot_ratio=0.1, max_staleness=0, full_neighbors=True, split='output'))
    fast = compiled(off, cpu) if where == 'wrapper' else off
    optimizer = torch.optim.Adam(off.parameters(), lr=0.01)
    for batch, ref in zip(loader, ref_loader):
        step_matches_unpruned(fast, model, optimizer, batch, ref)
    assert off.stats()['hot_rows_replaced'] > 0
    off.close()

    inner = compiled(model, cpu) if where == 'model' else model
    with pytest.warns(UserWarning, match='torch.compile'):
        off = BottomLayerOffload(inner, loader)  # The defaults.
        fast = compiled(off, cpu) if where == 'wrapper' else off
        for batch, ref in zip(loader, ref_loader):
            step_matches_unpruned(fast, model, optimizer, batch, ref)
    st = off.stats()
    assert st['decision']['mode'] == 'pass_through'
    assert st['hot_rows_replaced'] == 0
    off.close()

    if where == 'model':
        with pytest.raises(ValueError, match="split='aggregate'"):
            BottomLayerOffload(compiled(model, cpu), loader,
                               options=OffloadOptions(split='aggregate'))
        return
    # A fixed hot set prunes from the first batch on: compiled, the wrapper
    # can not replace its rows and says so before the first output.
    off = BottomLayerOffload(model, loader,
                             options=OffloadOptions(hot_ratio=0.1))
    fast = compiled(off, cpu)
    batch = next(iter(loader))
    with pytest.raises(RuntimeError, match='compile it before'):
        fast(batch.x, batch.edge_index)
    off.close()
