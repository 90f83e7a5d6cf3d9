"""The README's front door: its training loop runs as printed, its two
commands are the set-up scripts', and the package's version, dependency
floors and type marker agree with pyproject.toml."""
import re
from pathlib import Path

import pytest

import pyg_orch

REPO = Path(__file__).resolve().parents[1]
README = REPO / 'README.md'


def code_blocks(text: str, language: str) -> list:
    r"""Returns the fenced code blocks of :obj:`language` in a Markdown
    text, in order."""
    pattern = rf'^```{language}\n(.*?)^```'
    return re.findall(pattern, text, flags=re.MULTILINE | re.DOTALL)


def pyproject() -> dict:
    tomllib = pytest.importorskip('tomllib')
    with open(REPO / 'pyproject.toml', 'rb') as f:
        return tomllib.load(f)


def test_first_python_block_trains_on_cpu(monkeypatch, capsys):
    text = README.read_text()
    first = code_blocks(text, 'python')[0]
    # The first screen: the swap and the wrapper within about 40 lines.
    head = text.splitlines()[:45]
    assert any('HybridNeighborLoader as NeighborLoader' in line
               for line in head)
    assert any('BottomLayerOffload(model, loader)' in line for line in head)

    # The loop as printed, on the CPU even where CUDA is present.
    monkeypatch.setattr('torch.cuda.is_available', lambda: False)
    exec(compile(first, str(README), 'exec'), {'__name__': '__readme__'})
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith('epoch')]
    assert len(lines) == 3
    accuracies = [float(line.split()[-1]) for line in lines]
    # 8 classes: chance is about 0.125; the neighbors make it learnable.
    assert all(0.0 <= acc <= 1.0 for acc in accuracies)
    assert accuracies[-1] > 0.3, out


def test_readme_is_short_and_keeps_its_two_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    commands = [line.split('#')[0].strip()
                for block in code_blocks(text, 'bash')
                for line in block.splitlines()]
    assert 'bash scripts/demo.sh' in commands
    assert 'bash scripts/test.sh' in commands
    for script in ('demo.sh', 'test.sh'):
        assert (REPO / 'scripts' / script).is_file()


def test_readme_links_exist():
    text = README.read_text()
    links = re.findall(r'\]\(([^)#]+)\)', text)
    local = [link for link in links if '://' not in link]
    assert local
    for link in local:
        assert (REPO / link).exists(), link


def test_version_matches_pyproject():
    project = pyproject()['project']
    assert isinstance(pyg_orch.__version__, str)
    assert pyg_orch.__version__ == project['version']


def test_dependency_floors_are_the_tested_versions():
    deps = pyproject()['project']['dependencies']
    assert 'torch>=2.11' in deps
    assert 'torch-geometric>=2.8' in deps
    text = README.read_text()
    assert '`torch>=2.11`' in text and '`torch-geometric>=2.8`' in text


def test_py_typed_is_shipped():
    assert (REPO / 'pyg_orch' / 'py.typed').is_file()
    data = pyproject()['tool']['setuptools']['package-data']
    assert 'py.typed' in data['pyg_orch']
