"""The Triton row gather against :meth:`torch.Tensor.index_select`. The
kernel runs on a GPU, or on the CPU under Triton's interpreter
(``TRITON_INTERPRET=1``); the choice of path is tested everywhere."""
import os

import pytest
import torch

from pyg_orch.core.triton_util import triton_available
from pyg_orch.gpu.row_gather import can_gather_rows, gather_rows

if torch.cuda.is_available():
    DEVICE = torch.device('cuda')
else:
    DEVICE = torch.device('cpu')
KERNEL = triton_available() and (torch.cuda.is_available() or os.environ.get(
    'TRITON_INTERPRET') == '1')
needs_kernel = pytest.mark.skipif(
    not KERNEL, reason='needs Triton and a CUDA device (or TRITON_INTERPRET=1)')


@needs_kernel
@pytest.mark.parametrize('width', [1, 3, 100, 128, 130, 300])
@pytest.mark.parametrize('dtype', [torch.float32, torch.float16, torch.int64])
@pytest.mark.parametrize('index_dtype', [torch.int64, torch.int32])
def test_kernel_equals_index_select(width, dtype, index_dtype):
    g = torch.Generator().manual_seed(width)
    x = (torch.randn(500, width, generator=g) * 100).to(dtype).to(DEVICE)
    # Repeats, any order, first and last rows.
    index = torch.cat([
        torch.randint(0, 500, (777, ), generator=g),
        torch.tensor([0, 499, 499, 0])
    ]).to(index_dtype).to(DEVICE)
    out = gather_rows(x, index, use_triton=True)
    assert out.dtype == dtype and out.shape == (781, width)
    assert torch.equal(out, x.index_select(0, index))


@needs_kernel
@pytest.mark.parametrize('dtype', [torch.bool, torch.int64, torch.float32])
def test_kernel_vectors(dtype):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(300, generator=g) > 0).to(dtype).to(DEVICE)
    index = torch.randint(0, 300, (1000, ), generator=g).to(DEVICE)
    out = gather_rows(x, index, use_triton=True)
    assert out.dtype == dtype and out.shape == (1000, )
    assert torch.equal(out, x.index_select(0, index))


@needs_kernel
def test_kernel_empty_index():
    x = torch.randn(10, 7, device=DEVICE)
    index = torch.empty(0, dtype=torch.int64, device=DEVICE)
    out = gather_rows(x, index, use_triton=True)
    assert out.shape == (0, 7)


@needs_kernel
def test_kernel_rejects_non_contiguous():
    x = torch.randn(10, 8, device=DEVICE).t()
    with pytest.raises(ValueError, match="'x' must be a contiguous 1-D or"):
        gather_rows(x, torch.tensor([0, 1], device=DEVICE), use_triton=True)


def test_path_choice():
    x = torch.randn(10, 4)
    index = torch.tensor([3, 1])
    assert not can_gather_rows(x, index)  # Not on a GPU.
    assert torch.equal(gather_rows(x, index), x[index])
    if torch.cuda.is_available() and triton_available():
        xc, ic = x.cuda(), index.cuda()
        assert can_gather_rows(xc, ic)
        assert not can_gather_rows(xc, index)  # Index on another device.
        assert not can_gather_rows(xc[:, 0], ic)  # Strided.
        assert can_gather_rows(xc[:, 0].contiguous(), ic)
        assert not can_gather_rows(xc.view(2, 5, 4), ic)  # 3-D.
        assert not can_gather_rows(xc.t(), ic)  # Not contiguous.
        w = xc.clone().requires_grad_()
        assert not can_gather_rows(w, ic)  # Autograd tracks it.
        with torch.no_grad():
            assert can_gather_rows(w, ic)


@pytest.mark.skipif(not torch.cuda.is_available() or not triton_available(),
                    reason='needs a CUDA device and Triton')
def test_loader_features_on_gpu_match_index_select():
    from pyg_orch import HybridNeighborLoader

    from conftest import random_graph
    data = random_graph(400, 4000, num_features=37, num_classes=3)
    data = data.to('cuda')
    loader = HybridNeighborLoader(data, [5, 3], batch_size=64,
                                  device='cuda', seed=0)
    for batch in loader:
        assert torch.equal(batch.x, data.x[batch.n_id])
        assert torch.equal(batch.y, data.y[batch.n_id])
