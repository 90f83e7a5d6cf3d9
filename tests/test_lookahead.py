"""Look-ahead: the loader keeps the next batch in flight in the loop's own
thread. On CPU it is forced on (lookahead=True) to check its bookkeeping; on
a GPU it also checks the side stream against a slow, in-place-writing
consumer."""
import time

import pytest
import torch

from pyg_orch import CacheOptions, HybridNeighborLoader, HybridNeighborSampler
from pyg_orch.sampling.pending import PendingSample

from conftest import random_graph

DEVICE = 'cuda' if torch.cuda.is_available() else 'cpu'


@pytest.fixture
def graph():
    return random_graph(700, 7000, num_features=12, num_classes=4)


def batches(loader, stop=None):
    out = []
    for i, b in enumerate(loader):
        out.append(b)
        if stop is not None and i + 1 == stop:
            break
    return out


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for key in ('n_id', 'e_id', 'edge_index', 'x', 'y', 'input_id'):
            assert torch.equal(x[key].cpu(), y[key].cpu()), key
        assert x.batch_size == y.batch_size
        assert x.num_sampled_nodes == y.num_sampled_nodes


@pytest.mark.parametrize('shuffle', [False, True])
@pytest.mark.parametrize('drop_last', [False, True])
def test_same_batches_as_without_lookahead(graph, shuffle, drop_last):
    kw = dict(batch_size=64, seed=5, shuffle=shuffle, drop_last=drop_last,
              device=DEVICE)
    plain = HybridNeighborLoader(graph, [4, 3], lookahead=False, **kw)
    ahead = HybridNeighborLoader(graph, [4, 3], lookahead=True, **kw)
    assert ahead.lookahead and not plain.lookahead
    for _ in range(2):  # Two epochs: shuffling draws stay in step.
        a, b = batches(plain), batches(ahead)
        assert len(a) == (10 if drop_last else 11)
        assert_same(a, b)
    stages = ahead.stats()['stages']
    assert stages['wait']['calls'] == 2 * len(a)
    assert stages['gather']['calls'] == 2 * len(a)


def test_break_then_new_epoch(graph):
    kw = dict(batch_size=100, seed=1, device=DEVICE)
    loader = HybridNeighborLoader(graph, [3, 3], lookahead=True, **kw)
    first = batches(loader, stop=2)
    assert len(first) == 2
    again = batches(loader)  # The batch left in flight is dropped.
    assert len(again) == 7
    seeds = torch.cat([b.input_id.cpu() for b in again])
    assert torch.equal(seeds.sort().values, torch.arange(700))
    for b in again:
        assert torch.equal(b.x.cpu(), graph.x[b.n_id.cpu()])
        src, dst = graph.edge_index[:, b.e_id.cpu()]
        assert torch.equal(b.n_id.cpu()[b.edge_index[0].cpu()], src)


class FailingSampler(HybridNeighborSampler):
    def __init__(self, *args, fail_at, **kwargs):
        super().__init__(*args, **kwargs)
        self.fail_at, self.calls = fail_at, 0

    def launch_from_nodes(self, inputs):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError('sampler failed on purpose')
        return super().launch_from_nodes(inputs)


def test_error_reaches_the_loop_at_its_batch(graph):
    sampler = FailingSampler(graph, [3], device=DEVICE, fail_at=3)
    loader = HybridNeighborLoader(graph, [3], batch_size=100,
                                  neighbor_sampler=sampler, lookahead=True,
                                  device=DEVICE)
    it = iter(loader)
    next(it), next(it)  # Batch 3 is launched (and fails) here already...
    with pytest.raises(RuntimeError, match='on purpose'):
        next(it)  # ...but its error comes with batch 3.


def test_transform_error_is_raised(graph):
    def transform(batch):
        if int(batch.input_id[0]) >= 200:
            raise ValueError('bad batch')
        return batch

    loader = HybridNeighborLoader(graph, [3], batch_size=100, lookahead=True,
                                  transform=transform, device=DEVICE)
    it = iter(loader)
    next(it), next(it)
    with pytest.raises(ValueError, match='bad batch'):
        next(it)


def test_bad_lookahead_arguments(graph):
    with pytest.raises(ValueError, match="'lookahead'"):
        HybridNeighborLoader(graph, [3], batch_size=10, lookahead='yes')
    with pytest.raises(ValueError, match='num_workers=0'):
        HybridNeighborLoader(graph, [3], batch_size=10, lookahead=True,
                             prefetch=1, device=DEVICE)
    with pytest.raises(ValueError, match='num_workers=0'):
        HybridNeighborLoader(graph, [3], batch_size=10, lookahead=True,
                             num_workers=2, device='cpu')


def test_auto_lookahead_only_on_the_fused_gpu_path(graph):
    loader = HybridNeighborLoader(graph, [3], batch_size=10, device=DEVICE)
    expected = (DEVICE == 'cuda'
                and loader.node_sampler.backend == 'triton')
    assert loader.lookahead == expected
    cpu = HybridNeighborLoader(graph, [3], batch_size=10, device='cpu')
    assert not cpu.lookahead


def test_pending_sample_raises_every_time():
    calls = []

    def fail():
        calls.append(1)
        raise KeyError('x')

    pending = PendingSample(fail)
    for _ in range(2):
        with pytest.raises(KeyError):
            pending.result()
    assert len(calls) == 1
    assert PendingSample.ready(3).result() == 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
@pytest.mark.parametrize('host_features', [False, True])
def test_slow_consumer_writing_in_place_sees_right_batches(graph,
                                                           host_features):
    # The side stream samples and gathers batch t + 1 while the loop still
    # works on batch t (here: slowly, on the GPU, writing into batch.x): a
    # missing event or stream record would show in the checksums.
    data = graph if host_features else graph.clone().to('cuda')
    loader = HybridNeighborLoader(data, [5, 5], batch_size=40, seed=2,
                                  shuffle=True, device='cuda',
                                  cache=CacheOptions(cache_ratio=0.1),
                                  lookahead=True)
    n = 0
    for batch in loader:
        ref_x = graph.x[batch.n_id.cpu()]
        assert torch.equal(batch.x.cpu(), ref_x)
        src, dst = graph.edge_index[:, batch.e_id.cpu()]
        assert torch.equal(batch.n_id.cpu()[batch.edge_index[0].cpu()], src)
        assert torch.equal(batch.n_id.cpu()[batch.edge_index[1].cpu()], dst)
        big = torch.randn(2048, 2048, device='cuda')
        for _ in range(20):  # Slow GPU work queued before the next batch.
            big = big @ big / 2048
        batch.x.add_(big[0, 0] * 0)
        time.sleep(0.01)
        n += 1
    assert n == 18


def test_timer_does_not_synchronize_with_lookahead(graph):
    ahead = HybridNeighborLoader(graph, [3], batch_size=10, lookahead=True,
                                 device=DEVICE)
    plain = HybridNeighborLoader(graph, [3], batch_size=10, lookahead=False,
                                 device=DEVICE)
    assert not ahead.timer.sync and plain.timer.sync


def test_next_batch_is_launched_before_this_one_is_gathered():
    # The sampling of batch t + 2 is queued between resolving batch t + 1
    # and gathering its features, so that the counts waited for next time
    # never queue behind a long gather.
    from pyg_orch.loader.lookahead import LookaheadIterator
    calls = []

    def launches():
        for i in range(4):
            calls.append(('launch', i))
            yield PendingSample.ready(i)

    def resolve(pending):
        calls.append(('resolve', pending.result()))
        return pending

    def finish(pending):
        calls.append(('finish', pending.result()))
        return pending.result()

    it = LookaheadIterator(launches(), finish, torch.device('cpu'),
                           resolve=resolve)
    assert list(it) == [0, 1, 2, 3]
    order = list(calls)
    for i in range(3):
        assert order.index(('resolve', i)) < order.index(('launch', i + 1)) \
            < order.index(('finish', i))
    assert order.index(('resolve', 3)) < order.index(('finish', 3))


@pytest.mark.parametrize('shuffle', [False, True])
@pytest.mark.parametrize('drop_last', [False, True])
@pytest.mark.parametrize('n', [640, 700])
def test_tensor_index_batches_draw_as_the_batch_sampler(shuffle, drop_last,
                                                        n):
    # The look-ahead's index batches: those of DataLoader's batch sampler,
    # as tensors, and the generator left in the same state.
    from torch.utils.data import BatchSampler, RandomSampler
    from torch.utils.data import SequentialSampler

    from pyg_orch.loader.seed_batches import tensor_index_batches

    def make(seed):
        gen = torch.Generator().manual_seed(seed)
        inner = RandomSampler(range(n), generator=gen) if shuffle else \
            SequentialSampler(range(n))
        return BatchSampler(inner, 64, drop_last), gen

    ref, ref_gen = make(3)
    ours, our_gen = make(3)
    for _ in range(2):  # Two epochs.
        expected = [torch.tensor(b) for b in ref]
        got = list(tensor_index_batches(ours))
        assert len(got) == len(expected) == (
            n // 64 if drop_last else -(-n // 64))
        for a, b in zip(got, expected):
            assert torch.equal(a, b)
    assert torch.equal(ref_gen.get_state(), our_gen.get_state())


def test_tensor_index_batches_leave_other_samplers():
    from torch.utils.data import BatchSampler, RandomSampler

    from pyg_orch.loader.seed_batches import tensor_index_batches
    with_replacement = BatchSampler(RandomSampler(range(10), True), 4, False)
    assert tensor_index_batches(with_replacement) is None
    assert tensor_index_batches([[0, 1], [2]]) is None


@pytest.mark.parametrize('with_time', [False, True])
@pytest.mark.parametrize('with_input_id', [False, True])
def test_slice_node_input_is_pygs_getitem(with_time, with_input_id):
    from torch_geometric.sampler import NodeSamplerInput

    from pyg_orch.loader.seed_batches import slice_node_input
    g = torch.Generator().manual_seed(0)
    n = 50
    inputs = NodeSamplerInput(
        torch.randperm(n, generator=g) if with_input_id else None,
        torch.randint(0, 1000, (n, ), generator=g),
        torch.rand(n, generator=g) if with_time else None, 'paper')
    index = torch.tensor([7, 0, 49, 7, 3])
    ours, pyg = slice_node_input(inputs, index), inputs[index]
    for field in ('input_id', 'node', 'time'):
        a, b = getattr(ours, field), getattr(pyg, field)
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.equal(a, b)
    assert ours.input_type == pyg.input_type == 'paper'
