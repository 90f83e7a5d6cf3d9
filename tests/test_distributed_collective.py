"""The variable-size exchanges of pyg_orch.parallel.exchange: sizes
given by the receiver, and several fields of rows in one all-to-all."""
import pytest
import torch
from multiproc import run_workers

from pyg_orch.parallel.exchange import (
    exchange,
    exchange_rows,
    exchange_stacked_rows,
)


def _rows_for(src, dst, n):
    # What rank `src` sends rank `dst`: n rows of x (2x3 floats), y (int64)
    # and a mask, values naming the sender, receiver and row.
    base = torch.arange(n) + 100 * src + 10 * dst
    x = base.double()[:, None, None] + torch.arange(6.).view(1, 2, 3)
    return [x.float(), base, base % 2 == 0]


def _exchange_worker(rank, world_size):
    sizes = [[0, 3, 1], [2, 0, 4], [5, 1, 0]]  # sizes[src][dst]
    send = [_rows_for(rank, r, sizes[rank][r]) for r in range(world_size)]
    recv = [sizes[r][rank] for r in range(world_size)]
    fields = exchange_rows(send, recv)
    # Each field's rows for all ranks as one tensor, one field alone too:
    stacked = [torch.cat([s[i] for s in send]) for i in range(3)]
    send_sizes = [sizes[rank][r] for r in range(world_size)]
    fields_stacked = exchange_stacked_rows(stacked, send_sizes, recv)
    single = exchange_stacked_rows(stacked[:1], send_sizes, recv)
    assert len(single) == 1 and torch.equal(single[0], fields_stacked[0])
    for a, b in zip(fields, fields_stacked):
        assert a.dtype == b.dtype and torch.equal(a, b)
    # The same rows through exchange() with known and exchanged sizes:
    ys_known = exchange([s[1] for s in send], recv_sizes=recv)
    ys_asked = exchange([s[1] for s in send])
    return fields, ys_known, ys_asked


def test_exchange_rows_and_known_sizes():
    results = run_workers(_exchange_worker, 3, timeout=60)
    sizes = [[0, 3, 1], [2, 0, 4], [5, 1, 0]]
    for rank, (fields, ys_known, ys_asked) in enumerate(results):
        expected = [torch.cat(parts) for parts in zip(*[
            _rows_for(src, rank, sizes[src][rank]) for src in range(3)])]
        assert len(fields) == 3
        for got, want in zip(fields, expected):
            assert got.dtype == want.dtype and got.shape == want.shape
            assert torch.equal(got, want)
        assert [t.numel() for t in ys_known] == [sizes[s][rank]
                                                 for s in range(3)]
        for a, b in zip(ys_known, ys_asked):
            assert torch.equal(a, b)
        assert torch.equal(torch.cat(ys_known), expected[1])


def test_exchange_rows_one_rank_and_bad_input():
    x, y = torch.randn(4, 2), torch.arange(4)
    got = exchange_rows([[x, y]], [4])
    assert torch.equal(got[0], x) and torch.equal(got[1], y)
    assert exchange_rows([[]], [0]) == []
    with pytest.raises(ValueError, match="'recv_sizes'"):
        exchange_rows([[x, y]], [4, 1])
    with pytest.raises(ValueError, match="'recv_sizes'"):
        exchange([y], recv_sizes=[-1])
    with pytest.raises(ValueError, match="says 3 rows"):
        exchange([y], recv_sizes=[3])
    with pytest.raises(ValueError, match='same number of rows'):
        exchange_rows([[x, y[:3]]], [4])
    with pytest.raises(ValueError, match="'send'"):
        exchange_rows([[x], [x]], [4, 4])
    got = exchange_stacked_rows([x, y], [4], [4])
    assert torch.equal(got[0], x) and torch.equal(got[1], y)
    with pytest.raises(ValueError, match='sum\\(send_sizes\\) = 3'):
        exchange_stacked_rows([x, y], [3], [3])
    with pytest.raises(ValueError, match="'send_sizes'"):
        exchange_stacked_rows([x], [4, 0], [4])
