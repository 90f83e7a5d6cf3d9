import shutil
from pathlib import Path

import pytest
import torch

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


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason='needs a CUDA device')
    skip_parity = pytest.mark.skip(
        reason="needs torch-sparse for PyG's NeighborLoader (see README)")
    for item in items:
        if 'gpu' in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)
        if 'parity' in item.keywords and not HAS_TORCH_SPARSE:
            item.add_marker(skip_parity)


def _planetoid(name: str, tmp_path_factory):
    raw = DATASETS / name / 'raw'
    if not raw.exists():
        pytest.skip(f'{raw} not found')
    from torch_geometric.datasets import Planetoid
    root = tmp_path_factory.mktemp(name.lower())
    shutil.copytree(raw, root / name / 'raw')
    return Planetoid(str(root), name)[0]


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
