"""Every tutorial notebook runs from top to bottom without an error."""
import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TUTORIALS = REPO / 'tutorials'
NOTEBOOKS = sorted(TUTORIALS.glob('*.ipynb'))


def _uses_pyg_loader(path: Path) -> bool:
    # Code cells that run PyG's own loaders (which need torch-sparse or
    # pyg-lib): the notebooks worth a second run in the parity run.
    cells = json.loads(path.read_text())['cells']
    code = '\n'.join(''.join(c['source']) for c in cells
                     if c['cell_type'] == 'code')
    return 'torch_sparse' in code or 'from torch_geometric.loader' in code


PYG_NOTEBOOKS = [p for p in NOTEBOOKS if _uses_pyg_loader(p)]


def _execute(path: Path) -> None:
    for module in ('nbclient', 'nbformat', 'ipykernel'):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f'{module} is not installed')
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name='python3',
                            resources={'metadata': {
                                'path': str(TUTORIALS)
                            }})
    # Raises `CellExecutionError` (with the cell's traceback) on any error:
    client.execute()


def test_notebooks_found():
    assert NOTEBOOKS, f'no notebooks in {TUTORIALS}'


@pytest.mark.parametrize('path', NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path):
    _execute(path)


def test_some_notebooks_compare_with_pyg_loaders():
    # The parity run below must not silently run no notebook.
    assert PYG_NOTEBOOKS, 'no notebook runs PyG\'s own loaders'


@pytest.mark.parity
@pytest.mark.parametrize('path', PYG_NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_with_pyg_baseline(path):
    # Only in the parity run (torch-sparse importable, and inherited by the
    # kernel through PYTHONPATH): the notebooks' PyG NeighborLoader parts run.
    # Notebooks that never use PyG's loaders ran in the main run already.
    import torch_sparse  # noqa: F401
    _execute(path)
