"""Bounded staleness of :class:`pyg_orch.offload.BottomLayerOffload`: every
embedding table is used at most ``max_staleness`` optimizer steps after the
weights it was computed with, over thousands of steps, also when the CPU side
is slow (then the training loop waits, and the wait is reported)."""
import random
import time

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GraphSAGE, SAGEConv
from torch_geometric.nn.conv import MessagePassing

from pyg_orch.offload import BottomLayerOffload, OffloadOptions
from pyg_orch.offload.testing import offload_hooks
from pyg_orch.offload.bottom_layer import BottomLayerComputer
from pyg_orch.offload.hot_set import HotSetSizer
from pyg_orch.offload.batch_cache import BatchEmbeddingCache
from pyg_orch.offload.super_batch import EmbeddingPipeline
from pyg_orch.offload.tables import default_super_batch_size
from pyg_orch.topology.csc import CSCTopology

from conftest import SlowCPU, tiny_graph, tiny_loader, wait_no_threads

# No offload thread outlives a test; one intra-op thread (conftest):
pytestmark = pytest.mark.usefixtures('no_thread_leaks', 'one_intra_op_thread')


class Stamp(MessagePassing):
    r"""Outputs its parameter :obj:`stamp` for every vertex: a table then
    shows which weights it was computed with."""
    def __init__(self):
        super().__init__(aggr='sum')
        self.stamp = torch.nn.Parameter(torch.zeros(1))

    def forward(self, x, edge_index):
        out = self.propagate(edge_index, x=x[:, :1])
        return out * 0 + self.stamp


def make_pipeline(max_staleness, num_threads=1, hot_nodes=None, **kwargs):
    data = tiny_graph(num_nodes=100, num_edges=600)
    csc = CSCTopology.from_edge_index(data.edge_index, 100, 100)
    layer = Stamp()
    computer = BottomLayerComputer(layer, data.x, csc, num_neighbors=3,
                                   seed=0)
    if hot_nodes is None:
        hot_nodes = torch.arange(0, 100, 3)
    pipeline = EmbeddingPipeline(computer, layer, hot_nodes,
                                 torch.device('cpu'), max_staleness,
                                 num_threads, **kwargs)
    return layer, pipeline


def step(layer, pipeline, version, grown=None) -> int:
    r"""One forward pass at weight version :obj:`version`; returns the
    staleness of the table used. With a list :obj:`grown`, appends the new
    size of the hot set in use whenever it grows."""
    before = pipeline.hot.size
    with torch.no_grad():
        layer.stamp.fill_(version)
    pipeline.maybe_submit(version)
    table = pipeline.acquire(version)
    # The table holds exactly the weights of the version it claims:
    assert bool((table.emb == table.version).all())
    if grown is not None:
        # Every row the sampler may prune has an embedding:
        assert table.emb.size(0) >= pipeline.hot.size
        if pipeline.hot.size != before:
            # Only once a table of that many rows is in use:
            assert table.emb.size(0) == pipeline.hot.size
            grown.append(pipeline.hot.size)
    return version - table.version


def run_versions(layer, pipeline, num_forwards, seed=0):
    r"""Simulates training: before every forward pass the weights move on by
    0 (gradient accumulation), 1 (usually) or 2 (two optimizer steps)
    versions; returns the staleness seen at every forward pass."""
    rng = random.Random(seed)
    version, seen = 0, []
    for i in range(num_forwards):
        if i > 0:
            version += rng.choices([0, 1, 2], weights=[1, 8, 1])[0]
        seen.append(step(layer, pipeline, version))
    return seen


@pytest.mark.parametrize('max_staleness,num_forwards', [
    (0, 1000),
    (1, 3000),
    (2, 1000),
    (3, 1000),
    (6, 1000),
])
def test_staleness_bound_holds(max_staleness, num_forwards):
    layer, pipeline = make_pipeline(max_staleness, num_threads=2)
    try:
        seen = run_versions(layer, pipeline, num_forwards)
    finally:
        pipeline.close()
    assert 0 <= min(seen) and max(seen) <= max_staleness
    stats = pipeline.stats()
    assert stats['max_staleness_seen'] == max(seen)
    assert sum(stats['staleness_hist'].values()) == num_forwards
    assert stats['super_batch_size'] == default_super_batch_size(
        max_staleness)
    if max_staleness >= 3:
        # Tables are reused across steps (super-batches), as allowed:
        assert stats['tables_computed'] < 0.8 * num_forwards
    assert wait_no_threads() == []


@pytest.mark.parametrize('max_staleness', [0, 1, 3])
def test_staleness_bound_holds_with_slow_cpu(max_staleness):
    # Every table takes at least 4 ms:
    layer, pipeline = make_pipeline(max_staleness, work_hook=SlowCPU(0.004))
    try:
        seen = run_versions(layer, pipeline, 150, seed=1)
    finally:
        pipeline.close()
    assert max(seen) <= max_staleness
    stats = pipeline.stats()
    assert stats['wait_s'] > 0.0 and stats['num_waits'] > 0
    assert stats['cpu_compute_s'] >= 0.004 * stats['tables_computed']


def test_super_batch_size():
    assert [default_super_batch_size(s) for s in range(6)] == \
        [1, 1, 1, 2, 2, 3]
    # A super-batch size that exceeds the bound still holds it (by waiting):
    layer, pipeline = make_pipeline(1, super_batch_size=3)
    try:
        seen = run_versions(layer, pipeline, 200)
    finally:
        pipeline.close()
    assert max(seen) <= 1


def _train(off, loader, num_steps):
    optimizer = torch.optim.Adam(off.parameters(), lr=0.01)
    steps, start = 0, off.steps
    while steps < num_steps:
        for batch in loader:
            optimizer.zero_grad()
            out = off(batch.x, batch.edge_index)[:batch.batch_size]
            # Versions count exactly the optimizer steps so far:
            assert off.steps == start + steps
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
            steps += 1
            if steps == num_steps:
                break
    return off.stats()


@pytest.mark.parametrize('split', ['output', 'aggregate'])
@pytest.mark.parametrize('refresh', ['super_batch', 'batch'])
@pytest.mark.parametrize('max_staleness', [0, 1, 2])
def test_wrapper_staleness_bound(max_staleness, refresh, split):
    data = tiny_graph()
    loader = tiny_loader(data, batch_size=4)
    slow = SlowCPU()
    with offload_hooks(work_hook=slow):
        off = BottomLayerOffload(
            GraphSAGE(8, 8, 2, 3), loader, options=OffloadOptions(
                hot_ratio=0.1, max_staleness=max_staleness, refresh=refresh,
                split=split, full_neighbors=False))
    stats = _train(off, loader, 300)
    assert stats['steps'] == 300 and stats['step_source'] == 'optimizer'
    assert stats['max_staleness_seen'] <= max_staleness
    assert 0 < sum(stats['staleness_hist'].values()) <= 300
    # A deliberately slow CPU side: the bound still holds. Work queued
    # before the delay is set may still finish after the reset, without it.
    slow.seconds = 0.02
    started_fast = off.runtime.strategy.pending
    off.reset_stats()
    stats = _train(off, loader, 20)
    assert stats['max_staleness_seen'] <= max_staleness
    assert stats['cpu_compute_s'] >= 0.02 * (stats['tables_computed'] -
                                             started_fast)
    assert stats['sample_age_max'] <= stats['max_sample_age'] == 8
    if split == 'aggregate' and refresh == 'super_batch':
        # Weight-free tables serve any step within the sample-age bound
        # (max(max_staleness, 8) by default), waiting only beyond it.
        assert stats['max_staleness_seen'] == 0
        assert max_staleness < stats['max_table_age'] <= 8
    else:  # The loop waits.
        assert stats['wait_s'] > 0.0
    off.close()


def test_versions_without_optimizer_count_forwards():
    data = tiny_graph()
    loader = tiny_loader(data)
    model = GraphSAGE(8, 8, 2, 3)
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.1, max_staleness=1))
    # An optimizer over other parameters is not counted:
    other = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    for i, batch in enumerate(loader):
        if i == 5:
            break
        out = off(batch.x, batch.edge_index)[:batch.batch_size]
        F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        with torch.no_grad():  # A hand-written update.
            for p in model.parameters():
                p -= 0.01 * p.grad
                p.grad = None
        other.step()
    stats = off.stats()
    assert stats['step_source'] == 'forward'
    assert stats['steps'] == 4  # Forward passes after the first.
    assert stats['max_staleness_seen'] <= 1
    off.close()


def test_gradient_accumulation_counts_steps():
    data = tiny_graph()
    loader = tiny_loader(data)
    off = BottomLayerOffload(
        GraphSAGE(8, 8, 2, 3), loader, options=OffloadOptions(
            hot_ratio=0.1, max_staleness=0))
    optimizer = torch.optim.SGD(off.parameters(), lr=0.01)
    for i, batch in enumerate(loader):
        if i == 8:
            break
        out = off(batch.x, batch.edge_index)[:batch.batch_size]
        F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        if i % 2 == 1:
            optimizer.step()
            optimizer.zero_grad()
    stats = off.stats()
    # Before the first optimizer step is seen, the second forward pass counts
    # as a version (the counter can not know yet that an optimizer will
    # come); only stricter. Then versions count the 4 steps:
    assert stats['steps'] == 1 + 4 and stats['training_forwards'] == 8
    assert stats['step_source'] == 'optimizer'
    # Two forward passes per version: the second reuses the table. (Tables
    # of weight-free aggregations are not queued while one is pending, so
    # a slow worker, e.g. under load, means fewer.)
    assert 1 <= stats['tables_submitted'] <= 5
    off.close()



def test_weight_free_tables_never_make_the_loop_wait():
    # split='aggregate': tables hold weight-free aggregations, so any table
    # serves any step. With a CPU side slower than the bound allows, the
    # loop waits only for the first table; one table is computed at a time,
    # back to back, and the weights' staleness stays 0.
    data = tiny_graph(num_nodes=100, num_edges=600)
    csc = CSCTopology.from_edge_index(data.edge_index, 100, 100)
    layer = Stamp()
    computer = BottomLayerComputer(layer, data.x, csc, num_neighbors=3,
                                   seed=0)
    hot = torch.arange(0, 100, 3)
    assert computer.choose_split(hot, 'aggregate') == 'aggregate'
    pipeline = EmbeddingPipeline(computer, layer, hot, torch.device('cpu'),
                                 max_staleness=1, num_threads=1,
                                 work_hook=SlowCPU(0.02))
    try:
        for version in range(60):
            pipeline.maybe_submit(version)
            assert pipeline.pending <= 1
            table = pipeline.acquire(version)
            # Aggregations of the stamp's input column, not the stamp:
            assert table.emb.shape == (hot.numel(), 1)
            time.sleep(0.002)
    finally:
        pipeline.close()
    stats = pipeline.stats()
    assert stats['num_waits'] == 1
    assert stats['staleness_hist'] == {0: 60}
    assert stats['max_table_age'] > 1  # Older than the bound: still served.
    assert 1 < stats['tables_computed'] < 30


@pytest.mark.parametrize('split', ['aggregate', 'output'])
@pytest.mark.parametrize('refresh', ['super_batch', 'batch'])
def test_static_rows_are_computed_once(split, refresh):
    # All neighbors, no weights: a row is exact at any later step, so it is
    # computed once, whatever the sample-age bound (here 2 steps), and
    # reported with age 0. Rows with weights (split='output') are not
    # static: they keep being recomputed within the bound.
    data = tiny_graph(num_nodes=100, num_edges=600)
    csc = CSCTopology.from_edge_index(data.edge_index, 100, 100)
    layer = Stamp()
    computer = BottomLayerComputer(layer, data.x, csc, num_neighbors=-1,
                                   seed=0)
    hot = torch.arange(0, 100, 3)
    assert computer.choose_split(hot, split) == split
    cls = EmbeddingPipeline if refresh == 'super_batch' else \
        BatchEmbeddingCache
    strategy = cls(computer, layer, hot, torch.device('cpu'),
                   max_staleness=1, num_threads=1, max_sample_age=2,
                   static=True)
    pos = torch.arange(hot.numel())
    first = None
    try:
        for version in range(40):
            with torch.no_grad():
                layer.stamp.fill_(version)
            if refresh == 'super_batch':
                strategy.maybe_submit(version)
                emb = strategy.acquire(version).emb
            else:
                emb = strategy.refresh_rows(pos, version)
            first = emb.clone() if first is None else first
            if split == 'aggregate':  # The same exact rows at every step.
                assert torch.equal(emb, first)
    finally:
        strategy.close()
    stats = strategy.stats()
    if split == 'aggregate':
        assert stats['static_tables']
        assert stats['rows_computed'] == hot.numel()
        assert stats['max_table_age'] == 0 and stats['sample_age_mean'] == 0
        assert stats['staleness_hist'] == {0: 40}
    else:
        assert not stats['static_tables']
        assert stats['rows_computed'] >= 10 * hot.numel()
        assert 0 < stats['max_table_age'] <= 1


def test_static_tables_follow_the_planned_hot_set():
    # A static table is computed again only for a larger planned hot set;
    # a smaller one is served by the table at hand.
    data = tiny_graph(num_nodes=100, num_edges=600)
    csc = CSCTopology.from_edge_index(data.edge_index, 100, 100)
    layer = Stamp()
    computer = BottomLayerComputer(layer, data.x, csc, num_neighbors=-1,
                                   seed=0)
    hot = HotSetSizer(torch.arange(100), num_nodes=100, size=20)
    assert computer.choose_split(hot.candidates, 'aggregate') == 'aggregate'
    pipeline = EmbeddingPipeline(computer, layer, hot, torch.device('cpu'),
                                 max_staleness=1, num_threads=1,
                                 max_sample_age=1, static=True)
    sizes = []
    try:
        for version in range(30):
            min_rows = 0
            if version == 10:
                hot.resize(50)
                pipeline.replan()
                min_rows = 50  # A batch pruned with the larger set.
            if version == 20:
                hot.resize(30, settle=True)
                pipeline.replan()
            pipeline.maybe_submit(version)
            sizes.append(pipeline.acquire(version, min_rows=min_rows)
                         .emb.size(0))
    finally:
        pipeline.close()
    stats = pipeline.stats()
    assert stats['tables_submitted'] == 2
    assert stats['rows_computed'] == 20 + 50
    # The larger table serves from then on, also after the shrink:
    assert sizes == [20] * 10 + [50] * 20


class StampNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stamp = Stamp()
        self.conv = SAGEConv(1, 3)

    def forward(self, x, edge_index):
        return self.conv(self.stamp(x, edge_index), edge_index)


@pytest.mark.parametrize('split', ['output', 'aggregate'])
@pytest.mark.parametrize('refresh', ['super_batch', 'batch'])
@pytest.mark.parametrize('max_staleness', [0, 1, 3])
def test_replaced_rows_hold_bounded_versions(max_staleness, refresh, split):
    # End to end: the first layer outputs its weight version (set to the
    # step count before every forward pass, as training would move it); the
    # replaced rows must show versions within the bound. With
    # split='aggregate' the CPU side only sums neighbors (no weights) and
    # the device applies the current stamp: no staleness at all.
    data = tiny_graph()
    loader = tiny_loader(data, batch_size=4)
    model = StampNet()
    off = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.2, max_staleness=max_staleness, refresh=refresh,
        split=split))
    assert off.stats()['split'] == split
    seen = []

    def check(module, args, out):
        info = off.runtime.ctx.info
        if info is None or info.rows.numel() == 0:
            return
        versions = out[info.rows].view(-1)
        seen.extend((off.steps - versions).tolist())

    model.stamp.register_forward_hook(check)  # Runs after the offload's.
    optimizer = torch.optim.SGD(model.conv.parameters(), lr=0.01)
    # The stamp counts as trained by the optimizer (it is in its groups):
    optimizer.add_param_group({'params': [model.stamp.stamp], 'lr': 0.0})
    steps = 0
    while steps < 200:
        for batch in loader:
            optimizer.zero_grad()
            out = off(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
            with torch.no_grad():  # Weights change with the step only.
                model.stamp.stamp.fill_(off.steps)
            steps += 1
    off.close()
    assert len(seen) > 100
    assert min(seen) >= 0 and max(seen) <= max_staleness
    if split == 'aggregate':
        assert max(seen) == 0
    elif max_staleness > 0:
        assert max(seen) > 0  # Rows are reused across steps.


# hot_ratio='auto' ############################################################


def _auto_pipeline(max_staleness, candidates, start, **kwargs):
    hot = HotSetSizer(candidates, 100, size=start, auto=True)
    layer, pipeline = make_pipeline(max_staleness, hot_nodes=hot, **kwargs)
    return layer, pipeline


def test_auto_hot_set_grows_while_cpu_keeps_up():
    candidates = torch.randperm(100)[:64]
    layer, pipeline = _auto_pipeline(3, candidates, 2)
    seen, grown = [], []
    for version in range(40):
        seen.append(step(layer, pipeline, version, grown))
        time.sleep(0.01)  # Training steps far slower than the tiny tables.
    sizes = pipeline.stats()['hot_sizes']
    # From 2 rows up to all 64 candidates, at most doubling at once:
    assert sizes[0] == 2 and sizes[-1] == 64
    assert all(a < b <= 2 * a for a, b in zip(sizes[:-1], sizes[1:]))
    assert grown == sizes[1:]
    assert torch.equal(pipeline.hot.planned_nodes, candidates)
    assert max(seen) <= 3
    pipeline.close()


def test_auto_hot_set_stays_when_cpu_is_slow():
    candidates = torch.randperm(100)[:64]
    # Each table takes longer than 2 steps:
    layer, pipeline = _auto_pipeline(3, candidates, 8,
                                     work_hook=SlowCPU(0.05))
    for version in range(12):
        pipeline.maybe_submit(version)
        pipeline.acquire(version)
        time.sleep(0.005)
    assert pipeline.num_waits > 1
    assert pipeline.stats()['hot_sizes'] == [8] and pipeline.hot.size == 8
    assert pipeline.hot.planned_nodes.numel() == 8
    pipeline.close()


def test_auto_size_within_candidates():
    with pytest.raises(ValueError, match='number of candidates'):
        HotSetSizer(torch.arange(10), size=11, auto=True)
