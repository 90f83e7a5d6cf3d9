import threading
import time

import pytest
import torch

from pyg_orch import HybridNeighborLoader
from pyg_orch.loader.prefetch import PrefetchIterator

from conftest import random_graph

DEVICE = 'cuda' if torch.cuda.is_available() else 'cpu'


def prefetch_threads():
    return [t for t in threading.enumerate()
            if t.name == 'pyg_orch-prefetch' and t.is_alive()]


@pytest.fixture
def graph():
    return random_graph(600, 6000, num_features=16)


def test_same_batches_as_without_prefetch(graph):
    kwargs = dict(batch_size=50, seed=1, shuffle=True, device=DEVICE)
    a = list(HybridNeighborLoader(graph, [4, 3], prefetch=3, **kwargs))
    b = list(HybridNeighborLoader(graph, [4, 3], prefetch=0, **kwargs))
    assert len(a) == len(b) == 12
    for x, y in zip(a, b):
        assert torch.equal(x.n_id, y.n_id)
        assert torch.equal(x.edge_index, y.edge_index)
        assert torch.equal(x.x, y.x)
    assert not prefetch_threads()


def test_slow_consumer_sees_consistent_batches(graph):
    # Checksums of every batch against a recomputation from the graph: a
    # batch used before its data is written, or overwritten while in use,
    # would not match.
    loader = HybridNeighborLoader(graph, [5, 5], batch_size=40, seed=2,
                                  device=DEVICE, prefetch=4)
    n = 0
    for batch in loader:
        time.sleep(0.02)
        ref = graph.x[batch.n_id.cpu()]
        assert torch.equal(batch.x.cpu(), ref)
        src, dst = graph.edge_index[:, batch.e_id.cpu()]
        assert torch.equal(batch.n_id.cpu()[batch.edge_index[0].cpu()], src)
        assert torch.equal(batch.n_id.cpu()[batch.edge_index[1].cpu()], dst)
        n += 1
    assert n == 15
    stats = loader.stats()['stages']
    assert stats['wait']['calls'] == 15
    assert stats['sample']['calls'] == 15


def test_exception_in_thread_reaches_consumer(graph):
    calls = {'n': 0}

    def transform(batch):
        calls['n'] += 1
        if calls['n'] == 3:
            raise RuntimeError('boom in transform')
        return batch

    loader = HybridNeighborLoader(graph, [3], batch_size=50, device=DEVICE,
                                  prefetch=2, transform=transform)
    seen = 0
    with pytest.raises(RuntimeError, match='boom in transform'):
        for _ in loader:
            seen += 1
    assert seen == 2
    time.sleep(0.2)
    assert not prefetch_threads()


def test_break_and_del_stop_the_thread(graph):
    loader = HybridNeighborLoader(graph, [3], batch_size=10, device=DEVICE,
                                  prefetch=2)
    it = iter(loader)
    next(it)
    assert len(prefetch_threads()) == 1
    it.iterator.close()
    assert not prefetch_threads()
    for i, _ in enumerate(loader):
        if i == 2:
            break
    import gc
    gc.collect()
    time.sleep(0.3)
    assert not prefetch_threads()


def test_bad_prefetch_arguments(graph):
    with pytest.raises(ValueError, match='prefetch'):
        HybridNeighborLoader(graph, [3], prefetch=-1, device='cpu')
    with pytest.raises(ValueError, match='prefetch'):
        HybridNeighborLoader(graph, [3], prefetch=2, num_workers=2,
                             device='cpu')
    with pytest.raises(ValueError, match='prefetch'):
        PrefetchIterator(iter([]), 0, torch.device('cpu'))


@pytest.mark.parametrize('layout', ['csr', 'csc', 'coo', 'coo_uncoalesced'])
def test_sparse_batch_tensors_record_their_parts(layout):
    # PyTorch has no record_stream for sparse layouts: the hand-over records
    # the index and value tensors that hold a sparse adj_t's memory.
    from pyg_orch.loader.prefetch import _strided_parts
    dense = torch.tensor([[0., 1., 0.], [2., 0., 3.], [0., 0., 4.]])
    if layout == 'csr':
        t = dense.to_sparse_csr()
        want = (t.crow_indices(), t.col_indices(), t.values())
    elif layout == 'csc':
        t = dense.to_sparse_csc()
        want = (t.ccol_indices(), t.row_indices(), t.values())
    else:
        t = dense.to_sparse()
        if layout == 'coo_uncoalesced':
            t = torch.sparse_coo_tensor(torch.tensor([[1, 0], [0, 1]]),
                                        torch.tensor([2., 1.]), (3, 3))
            assert not t.is_coalesced()
        want = (t._indices(), t._values())
    parts = _strided_parts(t)
    assert [p.data_ptr() for p in parts] == [w.data_ptr() for w in want]
    assert all(p.layout == torch.strided for p in parts)
    assert _strided_parts(dense) == (dense, )
