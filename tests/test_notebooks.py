"""Every tutorial notebook runs from top to bottom without an error, and is
committed with the outputs of a real run for readers."""
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
    committed = path.read_bytes()
    _execute(path)
    # The run is in memory: the committed outputs are never overwritten.
    assert path.read_bytes() == committed


MAX_NOTEBOOK_BYTES = 1_000_000


def _code_cells(path: Path) -> list:
    return [c for c in json.loads(path.read_text())['cells']
            if c['cell_type'] == 'code']


def _plots(cell: dict) -> bool:
    return 'plt.show()' in ''.join(cell['source'])


@pytest.mark.parametrize('path', NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_committed_with_outputs(path):
    # Readers on GitHub see the results and plots of a real run.
    size = path.stat().st_size
    assert size < MAX_NOTEBOOK_BYTES, (
        f'{path.name} is {size} bytes; keep it under {MAX_NOTEBOOK_BYTES} '
        f'(smaller figures or dpi, fewer printed lines)')
    cells = _code_cells(path)
    assert any(c['outputs'] for c in cells), (
        f'{path.name} has no outputs; commit it executed')
    if not any(_plots(c) for c in cells):
        return
    images = [o for c in cells for o in c['outputs']
              if 'image/png' in o.get('data', {})]
    assert images, f'{path.name} plots but has no PNG output'


@pytest.mark.parametrize('path', NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_outputs_are_clean(path):
    # No progress-bar carriage returns and no error outputs in what readers see.
    for cell in _code_cells(path):
        for out in cell['outputs']:
            assert out['output_type'] != 'error', f'{path.name}: error output'
            if out['output_type'] == 'stream':
                text = ''.join(out['text'])
                assert '\r' not in text, (
                    f'{path.name}: carriage-return output {text[:80]!r}')


@pytest.mark.parametrize('path', NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_names_the_hardware_of_its_outputs(path):
    cells = json.loads(path.read_text())['cells']
    head = ''.join(''.join(c['source']) for c in cells[:2]
                   if c['cell_type'] == 'markdown')
    assert 'Outputs below are from a run on' in head, (
        f'{path.name}: say at the top which hardware produced the outputs')


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
