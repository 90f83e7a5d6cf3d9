"""Rows computed once by default (:obj:`full_neighbors='auto'`, see
:mod:`pyg_orch.offload.static_rows`): when hot rows aggregate all
in-neighbors, the hot-set sizes the decision by measurement then tries, its
wait for their tables (fake clocks), the deadline and the memory cap."""
import time
from types import SimpleNamespace

import pytest
import torch
from torch_geometric.nn import GAT, GCN, GIN, GraphSAGE

from pyg_orch.offload import BottomLayerOffload, OffloadOptions
from pyg_orch.offload.testing import offload_hooks
from pyg_orch.offload.strategy import EmbeddingStrategy
from pyg_orch.offload.static_rows import (
    STATIC_RATIOS,
    cap_sizes,
    degree_probe,
    max_table_rows,
)

from conftest import (
    SlowCPU,
    StepClock,
    node_step,
    num_pruned,
    tiny_graph,
    tiny_loader,
    train_steps,
)

pytestmark = pytest.mark.usefixtures('no_thread_leaks', 'one_intra_op_thread')


# When rows aggregate all in-neighbors ########################################


@pytest.mark.parametrize('model, full, why', [
    (lambda: GraphSAGE(8, 16, 2, 3), True, 'mean'),
    (lambda: GraphSAGE(8, 16, 2, 3, aggr='max'), False, "['max']"),
    (lambda: GIN(8, 16, 2, 3), False, "['sum']"),
    (lambda: GAT(8, 16, 2, 3), False, "with its weights (split='output')"),
    (lambda: GCN(8, 16, 2, 3, normalize=False), False,
     "split 'pre_linear'"),
])
def test_auto_resolves_by_the_first_layers_aggregation(model, full, why):
    loader = tiny_loader(tiny_graph())
    torch.manual_seed(0)
    off = BottomLayerOffload(model(), loader, options=OffloadOptions(
        hot_ratio=0.2))
    stats = off.stats()
    assert off.full_neighbors is stats['full_neighbors'] is full
    assert stats['static_tables'] is full
    assert why in stats['full_neighbors_reason']
    computer = off.runtime.strategy.computer
    assert (computer.num_neighbors == -1) is full
    off.close()


def test_weighted_sampling_keeps_the_fan_out():
    data = tiny_graph()
    data.edge_weight = torch.rand(data.num_edges) + 0.1
    loader = tiny_loader(data, weight_attr='edge_weight')
    off = BottomLayerOffload(
        GraphSAGE(8, 16, 2, 3), loader, options=OffloadOptions(hot_ratio=0.2))
    assert not off.full_neighbors
    assert 'edge weight' in off.stats()['full_neighbors_reason']
    off.close()


@pytest.mark.parametrize('given', [True, False])
def test_given_full_neighbors_is_kept(given):
    loader = tiny_loader(tiny_graph())
    off = BottomLayerOffload(
        GraphSAGE(8, 16, 2, 3), loader, options=OffloadOptions(
            hot_ratio=0.2, full_neighbors=given))
    stats = off.stats()
    assert off.full_neighbors is given and stats['static_tables'] is given
    assert f'full_neighbors={given} was given' == \
        stats['full_neighbors_reason']
    off.close()


@pytest.mark.parametrize('value', ['yes', 1, None])
def test_bad_full_neighbors(value):
    loader = tiny_loader(tiny_graph())
    with pytest.raises(ValueError, match="'full_neighbors' must be True, "
                       "False or 'auto'"):
        BottomLayerOffload(
            GraphSAGE(8, 16, 2, 3), loader, options=OffloadOptions(
                full_neighbors=value))


def test_default_rows_are_exact_means_of_all_neighbors():
    # The default's rows of a mean-aggregating layer: the mean of all
    # in-neighbors' features, the same at every step.
    data = tiny_graph()
    loader = tiny_loader(data)
    off = BottomLayerOffload(
        GraphSAGE(8, 16, 2, 3), loader, options=OffloadOptions(hot_ratio=0.2))
    train_steps(off, loader, 12, node_step)
    strategy = off.runtime.strategy
    table = strategy._current
    nodes = off.runtime.hot.hot_nodes
    src, dst = data.edge_index
    expect = torch.zeros(data.num_nodes, 8).index_add_(0, dst, data.x[src])
    deg = torch.bincount(dst, minlength=data.num_nodes).clamp(min=1)
    expect = expect / deg.unsqueeze(1)
    assert torch.allclose(table.emb[:nodes.numel()], expect[nodes],
                          atol=1e-5)
    stats = off.stats()
    assert stats['tables_computed'] == 1 and stats['sample_age_max'] == 0
    off.close()


def test_degree_probe_takes_the_highest_in_degrees():
    colptr = torch.tensor([0, 1, 5, 5, 8, 10])  # Degrees 1, 4, 0, 3, 2.
    assert degree_probe(colptr, 3).tolist() == [1, 3, 4]
    assert degree_probe(colptr, 10).numel() == 5


# The sizes tried #############################################################


def static_on_fake_clock(gain_per_pruned: float, work_hook=None, **kwargs):
    loader = tiny_loader(tiny_graph())
    clock = StepClock(lambda: 1.0 - gain_per_pruned * num_pruned(loader))
    torch.manual_seed(0)
    with offload_hooks(work_hook=work_hook, autotune_clock=clock):
        off = BottomLayerOffload(
            GraphSAGE(8, 16, 2, 3), loader, options=OffloadOptions(**kwargs))
    return off, loader


def test_default_tries_large_hot_sets_for_rows_computed_once():
    off, loader = static_on_fake_clock(0.002)
    stats = off.stats()
    assert stats['full_neighbors'] and stats['static_tables']
    decision = stats['decision']
    assert [c['hot_ratio'] for c in decision['candidates']] == \
        pytest.approx((0.0, ) + STATIC_RATIOS)
    sizes = [c['num_hot'] for c in decision['candidates']]
    assert sizes == [0, 50, 100, 140]  # Of the 200 vertices.
    train_steps(off, loader, 100, node_step)
    for _ in range(60):
        if num_pruned(loader) == 140:
            break
        train_steps(off, loader, 1, node_step)
    stats = off.stats()
    decision = stats['decision']
    assert decision['state'] == 'decided'
    assert decision['chosen_num_hot'] == 140 == num_pruned(loader)
    medians = {c['num_hot']: c['median_step_s']
               for c in decision['candidates']}
    # Every timed step ran with its candidate's whole hot set pruned:
    for n in sizes:
        assert medians[n] == pytest.approx(1.0 - 0.002 * n)
    # One table per larger size, each computed once:
    assert stats['tables_computed'] == 3 and stats['sample_age_max'] == 0
    off.close()


def test_a_slow_smaller_size_does_not_stop_larger_ones():
    # Only the largest set pays (a fake clock: 25% hot is 10% slower):
    def cost(n):
        return {0: 1.0, 50: 1.1, 100: 1.0, 140: 0.8}.get(n, 1.0)

    loader = tiny_loader(tiny_graph())
    clock = StepClock(lambda: cost(num_pruned(loader)))
    with offload_hooks(autotune_clock=clock):
        off = BottomLayerOffload(GraphSAGE(8, 16, 2, 3), loader)
    train_steps(off, loader, 100, node_step)
    decision = off.stats()['decision']
    assert decision['state'] in ('settling', 'decided')
    assert [c['measured_steps'] for c in decision['candidates']] == [10] * 4
    assert decision['chosen_num_hot'] == 140
    off.close()


def test_trial_waits_for_a_table_past_the_step_hold():
    # Each CPU work item takes 0.05 s, and the fake-clock steps take no
    # real time: a table takes hundreds of steps. Steps with a candidate
    # are timed only once its table is in use (no hold of 50 steps).
    off, loader = static_on_fake_clock(0.002, chunk_size=10,
                                       num_threads=1,
                                       work_hook=SlowCPU(0.05))
    train_steps(off, loader, 400, node_step)
    decision = off.stats()['decision']
    tried = [c for c in decision['candidates'] if c['measured_steps']]
    assert len(tried) >= 2
    for c in tried:
        assert c['median_step_s'] == pytest.approx(1.0 - 0.002 *
                                                   c['num_hot'])
    off.close()


def test_a_table_past_the_deadline_is_not_usable(monkeypatch):
    monkeypatch.setattr(EmbeddingStrategy, 'STATIC_DEADLINE_S', 0.2)
    off, loader = static_on_fake_clock(0.002, num_threads=1, chunk_size=5,
                                       work_hook=SlowCPU(0.1))
    train_steps(off, loader, 60, node_step)
    decision = off.stats()['decision']
    assert decision['state'] == 'decided' and \
        decision['chosen_num_hot'] == 0
    assert [c['usable'] for c in decision['candidates']] == [True, False,
                                                               False, False]
    assert 'not usable' in decision['reason']
    off.close()


def test_static_deadline_projects_the_oldest_unfinished_table():
    strategy = EmbeddingStrategy.__new__(EmbeddingStrategy)
    strategy.static, strategy.num_threads = True, 2

    def job(elapsed, chunks, remaining, done=False):
        return SimpleNamespace(launched=time.perf_counter() - elapsed,
                               chunks=[None] * chunks, remaining=remaining,
                               future=SimpleNamespace(done=lambda: done))

    strategy._jobs = []
    assert not strategy.cannot_keep_up()
    deadline = EmbeddingStrategy.STATIC_DEADLINE_S
    # 10 of 100 items in a tenth of the deadline: on time.
    strategy._jobs = [job(0.09 * deadline, 100, 90)]
    assert not strategy.cannot_keep_up()
    strategy._jobs = [job(0.11 * deadline, 100, 90)]
    assert strategy.cannot_keep_up()
    # None done yet: 50 rounds of two items, each longer than 2% of it.
    strategy._jobs = [job(0.03 * deadline, 100, 100)]
    assert strategy.cannot_keep_up()
    strategy._jobs = [job(0.01 * deadline, 100, 100)]
    assert not strategy.cannot_keep_up()
    # A finished table ahead does not count:
    strategy._jobs = [job(deadline, 2, 0, done=True),
                      job(0.01 * deadline, 100, 100)]
    assert not strategy.cannot_keep_up()


# GPU memory ##################################################################


def test_sizes_are_capped_by_table_memory():
    sizes, ratios = [0, 50, 100, 140], [0.0, 0.25, 0.5, 0.7]
    assert cap_sizes(sizes, ratios, None) == (sizes, ratios)
    assert cap_sizes(sizes, ratios, 80) == ([0, 50, 80], [0.0, 0.25, 0.4])
    assert cap_sizes(sizes, ratios, 0) == ([0], [0.0])
    assert max_table_rows(400, 'cpu') is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_max_table_rows_on_cuda():
    free, _ = torch.cuda.mem_get_info()
    rows = max_table_rows(1000, 'cuda', share=0.5)
    assert rows == pytest.approx(free / 2 / 1000, rel=0.05)


def test_offload_cache_is_never_smaller_than_the_loaders():
    # A loader caching 30% of the rows keeps as many once the offload's
    # candidates (10% asked for) replace them.
    loader = tiny_loader(tiny_graph())
    own, given = torch.arange(60), []
    loader.get_gpu_cache_nodes = lambda: own
    loader.set_gpu_cache_nodes = given.append
    off = BottomLayerOffload(
        GraphSAGE(8, 16, 2, 3), loader, options=OffloadOptions(
            hot_ratio=0.2, cache_ratio=0.1))
    assert off.gpu_cache_nodes.numel() == 60
    assert torch.equal(given[-1], off.gpu_cache_nodes)
    off.close()
