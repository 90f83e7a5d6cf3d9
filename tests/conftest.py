import functools
import gc
import shutil
import threading
import time
from pathlib import Path
from typing import Optional

import pytest
import torch
from torch_geometric.data import Data, HeteroData

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / 'shared'
DATASETS = SHARED / 'datasets'


def _has_torch_sparse() -> bool:
    try:
        import torch_sparse  # noqa: F401
    except Exception:
        return False
    return True


HAS_TORCH_SPARSE = _has_torch_sparse()
HAS_CUDA = torch.cuda.is_available()


#: Test modules whose tests start processes that meet over TCP ports (gloo
#: process groups, torchrun, the tutorials' launchers). Under pytest-xdist
#: (``scripts/test.sh``, ``--dist loadgroup``) they all run in one worker,
#: one after the other, so that two of them never pick the same port.
MULTIPROCESS_MODULES = ('test_ddp', 'test_distributed_', 'test_multi_gpu',
                        'test_offload_ddp', 'test_offload_partition',
                        'test_sharding', 'test_bench_distributed_cli',
                        'test_rank_failure')
#: The same for the tutorials that start such processes (by test id).
MULTIPROCESS_NOTEBOOKS = ('04_multi_gpu', '06_multi_machine')


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason='needs a CUDA device')
    skip_parity = pytest.mark.skip(
        reason="needs torch-sparse for PyG's NeighborLoader (see README)")
    one_worker = pytest.mark.xdist_group('multiprocess')
    for item in items:
        if 'gpu' in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)
        if 'parity' in item.keywords and not HAS_TORCH_SPARSE:
            item.add_marker(skip_parity)
        if item.path.stem.startswith(MULTIPROCESS_MODULES) or (
                item.path.stem == 'test_notebooks'
                and any(n in item.name for n in MULTIPROCESS_NOTEBOOKS)):
            item.add_marker(one_worker)


def _planetoid(name: str, tmp_path_factory):
    raw = DATASETS / name / 'raw'
    if not raw.exists():
        pytest.skip(f'{raw} not found')
    from torch_geometric.datasets import Planetoid
    root = tmp_path_factory.mktemp(name.lower())
    shutil.copytree(raw, root / name / 'raw')
    return Planetoid(str(root), name)[0]


@functools.lru_cache(maxsize=None)
def musae_graph(name: str, dtype: torch.dtype = torch.int64) -> Data:
    r"""The MUSAE graph :obj:`name` (:obj:`'facebook'` or :obj:`'github'`,
    skips when ../shared is absent) with :obj:`x` (the node id) and random
    :obj:`edge_attr` (2 columns). Cached per (name, dtype), so that loaders
    of several tests share one topology through the topology cache."""
    from pyg_orch.datasets import read_musae
    folder = DATASETS / 'musae' / name
    if not (folder / 'edges.csv').exists():
        pytest.skip(f'{folder} not found')
    data = read_musae(folder)
    data.edge_index = data.edge_index.to(dtype)
    if 'x' not in data:  # Some node features to check the slicing on.
        data.x = torch.arange(data.num_nodes, dtype=torch.float).view(-1, 1)
    g = torch.Generator().manual_seed(0)
    data.edge_attr = torch.randn(data.edge_index.size(1), 2, generator=g)
    return data


@pytest.fixture(scope='session')
def cora(tmp_path_factory):
    r"""Cora as a :class:`Data` (skips when ../shared is absent)."""
    return _planetoid('Cora', tmp_path_factory)


@pytest.fixture(scope='session')
def citeseer(tmp_path_factory):
    return _planetoid('CiteSeer', tmp_path_factory)


@pytest.fixture(params=['cpu', pytest.param('cuda', marks=pytest.mark.gpu)])
def device(request):
    return torch.device(request.param)


# Graph factories #############################################################
#
# Plain functions: test modules import them (`from conftest import
# random_graph`). Every factory draws from its own seeded generator, so the
# same arguments give the same graph.


def random_graph(num_nodes: int = 400, num_edges: int = 4000, seed: int = 0,
                 *, num_features: int = 0, num_classes: int = 0,
                 train_ratio: float = 0.0, edge_dim: int = 0,
                 sort: bool = False,
                 explicit_num_nodes: bool = True) -> Data:
    r"""A directed multigraph with uniformly random edges. Drawn in this
    order: :obj:`edge_index` (sorted by destination if :obj:`sort`), then,
    where asked for, :obj:`x` (:obj:`num_features` columns), :obj:`y`
    (:obj:`num_classes` classes), :obj:`train_mask` (a fraction
    :obj:`train_ratio` of the nodes) and :obj:`edge_attr` (:obj:`edge_dim`
    columns). :obj:`num_nodes` is set as an attribute unless
    :obj:`explicit_num_nodes` is :obj:`False`."""
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=gen)
    if sort:
        edge_index = edge_index[:, torch.sort(edge_index[1], stable=True)[1]]
    data = Data(edge_index=edge_index)
    if explicit_num_nodes:
        data.num_nodes = num_nodes
    if num_features:
        data.x = torch.randn(num_nodes, num_features, generator=gen)
    if num_classes:
        data.y = torch.randint(0, num_classes, (num_nodes, ), generator=gen)
    if train_ratio:
        data.train_mask = torch.rand(num_nodes, generator=gen) < train_ratio
    if edge_dim:
        data.edge_attr = torch.randn(num_edges, edge_dim, generator=gen)
    return data


def hub_graph(seed: int, num_nodes: int = 200, num_edges: int = 1500,
              dtype: torch.dtype = torch.int64, hub: int = 0) -> Data:
    r"""A directed multigraph with self-loops, a hub (node :obj:`hub`) of
    in-degree above :obj:`num_edges // 8` (so above
    :obj:`FLOYD_MAX_FANOUT + 8` with the defaults), nodes without in-edges (the last quarter) and fully
    isolated nodes (the last two), edges in random order; with :obj:`x` (4
    columns), :obj:`y` (5 classes) and :obj:`edge_attr` (3 columns)."""
    g = torch.Generator().manual_seed(seed)
    dst = torch.randint(0, num_nodes * 3 // 4, (num_edges, ), generator=g)
    dst[:num_edges // 8] = hub
    src = torch.randint(0, num_nodes - 2, (num_edges, ), generator=g)
    perm = torch.randperm(num_edges, generator=g)
    edge_index = torch.stack([src, dst])[:, perm].to(dtype)
    return Data(
        edge_index=edge_index,
        num_nodes=num_nodes,
        x=torch.randn(num_nodes, 4, generator=g),
        y=torch.randint(0, 5, (num_nodes, ), generator=g),
        edge_attr=torch.randn(num_edges, 3, generator=g),
    )


RANDOM_HETERO_SIZES = {'paper': 120, 'author': 70, 'inst': 6}
RANDOM_HETERO_EDGES = {
    ('author', 'writes', 'paper'): 400,
    ('paper', 'cites', 'paper'): 600,
    ('inst', 'employs', 'author'): 60,
    ('paper', 'written_by', 'author'): 300,
}


def random_hetero_graph(seed: int, num_nodes: Optional[dict] = None,
                        num_edges: Optional[dict] = None) -> HeteroData:
    r"""Three node types (:obj:`num_nodes`, default
    :obj:`RANDOM_HETERO_SIZES`) with :obj:`x` (2 columns) and the four edge
    types of :obj:`num_edges` (default :obj:`RANDOM_HETERO_EDGES`, the
    number of edges per type) with :obj:`edge_attr` (2 columns). Edges point
    only into the first two thirds of every destination type: the rest has
    no in-edges of that type."""
    num_nodes = num_nodes or RANDOM_HETERO_SIZES
    num_edges = num_edges or RANDOM_HETERO_EDGES
    g = torch.Generator().manual_seed(seed)
    data = HeteroData()
    for t, n in num_nodes.items():
        data[t].num_nodes = n
        data[t].x = torch.randn(n, 2, generator=g)
    for (src, rel, dst), e in num_edges.items():
        d = torch.randint(0, num_nodes[dst] * 2 // 3 + 1, (e, ), generator=g)
        s = torch.randint(0, num_nodes[src], (e, ), generator=g)
        data[src, rel, dst].edge_index = torch.stack([s, d])
        data[src, rel, dst].edge_attr = torch.randn(e, 2, generator=g)
    return data


WRITES = ('author', 'writes', 'paper')
REV_WRITES = ('paper', 'rev_writes', 'author')
CITES = ('paper', 'cites', 'paper')
EMPLOYS = ('institution', 'employs', 'author')
AFFILIATED = ('author', 'affiliated_with', 'institution')


def paper_hetero_graph(seed: int = 0, num_papers: int = 300,
                       num_authors: int = 200, num_institutions: int = 20,
                       num_features: int = 16, num_classes: int = 3,
                       sort: bool = False) -> HeteroData:
    r"""Papers, authors and institutions with :obj:`x`; five edge types
    (:obj:`WRITES` and its reverse, :obj:`CITES` with :obj:`edge_attr`,
    :obj:`EMPLOYS`, one institution per author, and its reverse), so that
    every node type is both a source and a destination and :func:`to_hetero`
    models update all of them. Papers have labels that a model can learn
    from their features (:obj:`y`) and a :obj:`train_mask` (60%). With
    :obj:`sort`, every edge type is sorted by destination."""
    gen = torch.Generator().manual_seed(seed)
    sizes = {'paper': num_papers, 'author': num_authors,
             'institution': num_institutions}
    data = HeteroData()
    for node_type, n in sizes.items():
        data[node_type].x = torch.randn(n, num_features, generator=gen)
    w = torch.randn(num_features, num_classes, generator=gen)
    data['paper'].y = (data['paper'].x @ w).argmax(dim=-1)
    data['paper'].train_mask = torch.rand(num_papers, generator=gen) < 0.6
    num_writes, num_cites = 3 * num_papers, 4 * num_papers
    writes = torch.stack([
        torch.randint(0, num_authors, (num_writes, ), generator=gen),
        torch.randint(0, num_papers, (num_writes, ), generator=gen),
    ])
    data[WRITES].edge_index = writes
    data[REV_WRITES].edge_index = writes.flip(0)
    data[CITES].edge_index = torch.randint(0, num_papers, (2, num_cites),
                                           generator=gen)
    employs = torch.stack([
        torch.randint(0, num_institutions, (num_authors, ), generator=gen),
        torch.arange(num_authors),
    ])
    data[EMPLOYS].edge_index = employs
    data[AFFILIATED].edge_index = employs.flip(0)
    data[CITES].edge_attr = torch.randn(num_cites, 2, generator=gen)
    if sort:
        for store in data.edge_stores:
            perm = torch.sort(store.edge_index[1], stable=True)[1]
            store.edge_index = store.edge_index[:, perm]
            if 'edge_attr' in store:
                store.edge_attr = store.edge_attr[perm]
    return data


def small_paper_graph() -> HeteroData:
    r"""The small :func:`paper_hetero_graph` that the partition tests split
    (150 papers, 100 authors, 4 features)."""
    return paper_hetero_graph(num_papers=150, num_authors=100,
                              num_features=4)


def small_paper_partition(out_dir, method: str = 'random'):
    r""":func:`small_paper_graph` split into 2 parts in :obj:`out_dir`."""
    from pyg_orch.distributed import partition_graph
    return partition_graph(small_paper_graph(), 2, out_dir, method,
                           progress=False)


# Temporal and weighted graphs: 3 node types with a time each, 5 edge types.
TEMPORAL_SIZES = {'a': 60, 'b': 50, 'c': 40}
B_TO_A = ('b', 'to', 'a')
A_TO_B = ('a', 'rev_to', 'b')
C_TO_A = ('c', 'in', 'a')
A_TO_C = ('a', 'has', 'c')
C_TO_B = ('c', 'near', 'b')
TEMPORAL_EDGE_TYPES = [B_TO_A, A_TO_B, C_TO_A, A_TO_C, C_TO_B]


def assert_same_sample(step, ref) -> None:
    r"""Asserts that a homogeneous sample :obj:`step` (node, row, col,
    edge, batch, num_sampled_nodes, num_sampled_edges, ...) equals the
    reference :obj:`MultiHopOutput` :obj:`ref`, order included."""
    node, row, col, edge, batch, nsn, nse = step[:7]
    assert torch.equal(node, ref.node[None])
    assert (batch is None) == (ref.batch is None)
    if batch is not None:
        assert torch.equal(batch, ref.batch[None])
    assert torch.equal(row, ref.row[None])
    assert torch.equal(col, ref.col[None])
    assert torch.equal(edge, ref.edge[None])
    assert nsn == ref.num_sampled_nodes[None]
    assert nse == ref.num_sampled_edges[None]


def same_subgraphs(loader_a, loader_b) -> int:
    r"""Asserts that two loaders give the same batches (nodes, edges and
    edge ids, batch by batch); returns the number of batches."""
    n = 0
    for a, b in zip(loader_a, loader_b):
        assert torch.equal(a.n_id, b.n_id)
        assert torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.e_id, b.e_id)
        n += 1
    return n


def one_part(data, out_dir):
    r""":obj:`data` written as a one-part partition to :obj:`out_dir`, and
    that part loaded."""
    from pyg_orch.distributed import load_partition, partition_graph
    info = partition_graph(data, 1, out_dir, 'contiguous', progress=False)
    return load_partition(info.out_dir, 0)


def random_weights(num: int, gen: torch.Generator,
                   zero_frac: float = 0.3) -> torch.Tensor:
    w = torch.rand(num, generator=gen) + 0.05
    w[torch.rand(num, generator=gen) < zero_frac] = 0.0
    return w


def temporal_graph(seed: int = 0, num_nodes: int = 80, num_edges: int = 600,
                   time_dtype=torch.int64) -> Data:
    r"""Random directed graph with node times (:obj:`time`), edge times
    (:obj:`edge_time`) and edge weights (:obj:`edge_weight`, 30% zeros)."""
    gen = torch.Generator().manual_seed(seed)
    data = Data(num_nodes=num_nodes)
    data.edge_index = torch.randint(0, num_nodes, (2, num_edges),
                                    generator=gen)
    data.x = torch.randn(num_nodes, 4, generator=gen)
    data.time = torch.randint(0, 30, (num_nodes, ),
                              generator=gen).to(time_dtype)
    data.edge_time = torch.randint(0, 30, (num_edges, ),
                                   generator=gen).to(time_dtype)
    data.edge_weight = random_weights(num_edges, gen)
    return data


def temporal_hetero_graph(seed: int = 0, num_edges: int = 300) -> HeteroData:
    r"""The heterogeneous :func:`temporal_graph`: node types
    :obj:`TEMPORAL_SIZES`, edge types :obj:`TEMPORAL_EDGE_TYPES`."""
    gen = torch.Generator().manual_seed(seed)
    data = HeteroData()
    for t, n in TEMPORAL_SIZES.items():
        data[t].x = torch.randn(n, 4, generator=gen)
        data[t].time = torch.randint(0, 30, (n, ), generator=gen)
    for et in TEMPORAL_EDGE_TYPES:
        src, dst = et[0], et[-1]
        data[et].edge_index = torch.stack([
            torch.randint(0, TEMPORAL_SIZES[src], (num_edges, ),
                          generator=gen),
            torch.randint(0, TEMPORAL_SIZES[dst], (num_edges, ),
                          generator=gen),
        ])
        data[et].edge_time = torch.randint(0, 30, (num_edges, ),
                                           generator=gen)
        data[et].edge_weight = random_weights(num_edges, gen)
    return data


# Offload #####################################################################
#
# The offload test modules (test_offload*.py) share the graph and loader
# below and run under the fixtures `no_thread_leaks` and
# `one_intra_op_thread` (`pytestmark = pytest.mark.usefixtures(...)`).


def tiny_graph(num_nodes=200, num_edges=2000, num_features=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    # Skewed destinations, so that some vertices are clearly hot:
    dst = (torch.rand(num_edges, generator=gen)**3 * num_nodes).long()
    src = torch.randint(0, num_nodes, (num_edges, ), generator=gen)
    return Data(x=torch.randn(num_nodes, num_features, generator=gen),
                edge_index=torch.stack([src, dst]),
                y=torch.randint(0, 3, (num_nodes, ), generator=gen))


def tiny_loader(data, num_neighbors=(4, 3), batch_size=8, **kwargs):
    from pyg_orch import HybridNeighborLoader
    kwargs.setdefault('shuffle', True)
    return HybridNeighborLoader(data, list(num_neighbors),
                                batch_size=batch_size, device='cpu', seed=1,
                                **kwargs)


def step_matches_unpruned(off, model, optimizer, batch, ref) -> None:
    r"""One training step of :obj:`off` on the pruned :obj:`batch`, whose
    seeds must get the outputs :obj:`model` gives them on the unpruned
    :obj:`ref`."""
    out = off(batch.x, batch.edge_index)[:batch.batch_size]
    expected = model(ref.x, ref.edge_index)[:ref.batch_size]
    assert torch.allclose(out, expected, atol=1e-5), \
        (out - expected).abs().max()
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(out,
                                             batch.y[:batch.batch_size])
    loss.backward()
    optimizer.step()


class SlowCPU:
    r"""A :obj:`work_hook` of :class:`~pyg_orch.BottomLayerOffload` that
    makes every CPU work item take :obj:`seconds` longer (less if the item is
    dropped meanwhile); the delay may change during training."""
    def __init__(self, seconds: float = 0.0):
        self.seconds = seconds

    def __call__(self, cancelled: threading.Event) -> None:
        if self.seconds:
            cancelled.wait(self.seconds)


class StepClock:
    r"""A fake clock for the decision by measurement
    (:obj:`autotune_clock`): every call moves on by :obj:`cost()` seconds,
    the time of the step that just ended."""
    def __init__(self, cost):
        self.cost, self.t = cost, 0.0

    def __call__(self) -> float:
        self.t += self.cost()
        return self.t


def num_pruned(loader) -> int:
    r"""The vertices (of all node types) that :obj:`loader`'s sampler
    prunes now (the hot set in use)."""
    hot = loader.node_sampler.hot_nodes  # Masks per node type.
    return 0 if hot is None else sum(int(m.sum()) for m in hot.values())


class PrunedClock(StepClock):
    r"""A fake clock whose steps take 1 s plus :obj:`per_pruned` seconds per
    vertex that :obj:`loader`'s sampler prunes now (:func:`num_pruned`)."""
    def __init__(self, loader, per_pruned: float):
        super().__init__(lambda: 1.0 + per_pruned * num_pruned(loader))


def tiny_model() -> torch.nn.Module:
    r"""GraphSAGE 2 x 16 over :func:`tiny_graph`'s 8 features, 3 classes,
    with the same initial weights on every call."""
    from torch_geometric.nn import GraphSAGE
    torch.manual_seed(0)
    return GraphSAGE(8, 16, 2, 3)


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    r"""All parameters of :obj:`model`, detached, in one flat tensor."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def train_sgd(model, loader, steps: int, set_epoch=None, lr: float = 0.5,
              until=None) -> torch.Tensor:
    r"""Trains :obj:`model` for :obj:`steps` steps over :obj:`loader` (SGD,
    learning rate :obj:`lr`, cross entropy on the seeds), going through
    epochs as needed (:obj:`set_epoch(epoch)` before each, if given), or
    fewer once :obj:`until()` holds after a step; returns
    :func:`flat_params`."""
    import torch.nn.functional as F
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    done, epoch = 0, 0
    while done < steps:
        if set_epoch is not None:
            set_epoch(epoch)
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
            done += 1
            if done == steps or (until is not None and until()):
                return flat_params(model)
        epoch += 1
    return flat_params(model)


def node_step(model, batch):
    r"""A :func:`train_steps` step of a node-level model over a homogeneous
    batch: the output and the seeds' cross-entropy loss."""
    out = model(batch.x, batch.edge_index)
    return out, torch.nn.functional.cross_entropy(
        out[:batch.batch_size], batch.y[:batch.batch_size])


def train_steps(model, loader, num_steps: int, step, check=None) -> None:
    r"""Trains :obj:`model` (e.g. a :class:`~pyg_orch.BottomLayerOffload`)
    for :obj:`num_steps` optimizer steps over :obj:`loader` (Adam, learning
    rate 0.01), going through epochs as needed; :obj:`step(model, batch)`
    returns the output and the loss, :obj:`check(batch, out)` (optional)
    sees every output."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model.train()
    steps = 0
    while steps < num_steps:
        for batch in loader:
            optimizer.zero_grad()
            out, loss = step(model, batch)
            if check is not None:
                check(batch, out)
            loss.backward()
            optimizer.step()
            steps += 1
            if steps == num_steps:
                break


def offload_threads():
    from pyg_orch.offload.workers import THREAD_NAME_PREFIX
    return [
        t for t in threading.enumerate()
        if t.name.startswith(THREAD_NAME_PREFIX) and t.is_alive()
    ]


def wait_no_threads(timeout: float = 5.0) -> list:
    deadline = time.monotonic() + timeout
    while offload_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return offload_threads()


@pytest.fixture
def no_thread_leaks():
    yield
    gc.collect()
    assert wait_no_threads() == []


@pytest.fixture
def one_intra_op_thread():
    # The graphs here are tiny: one thread per operation is fastest, and
    # leaves the other cores to the offload threads (with oversubscribed
    # cores, OpenMP's spinning slows everything down several times).
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# Comparing batches with PyG's ###############################################

#: Batch attributes that PyG's loader leaves out without pyg-lib.
PYG_MISSING_KEYS = {'num_sampled_nodes', 'num_sampled_edges'}


def batch_keys(store) -> set:
    r"""The attribute names of a batch (or one of its stores) that PyG's
    loader also sets."""
    return set(store.keys()) - PYG_MISSING_KEYS


def edge_triples(batch, edge_type=None, with_eid: bool = True) -> list:
    r"""The sampled edges of :obj:`batch` (of :obj:`edge_type`), sorted, as
    (global src, global dst[, e_id])."""
    if edge_type is None:
        src_n_id = dst_n_id = batch.n_id
        store = batch
    else:
        src_n_id = batch[edge_type[0]].n_id
        dst_n_id = batch[edge_type[-1]].n_id
        store = batch[edge_type]
    src = src_n_id[store.edge_index[0]].tolist()
    dst = dst_n_id[store.edge_index[1]].tolist()
    if not with_eid:
        return sorted(zip(src, dst))
    return sorted(zip(src, dst, store.e_id.tolist()))
