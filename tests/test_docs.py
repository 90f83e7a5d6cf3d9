"""The Sphinx documentation builds without a single warning, its pages come
in the order a user learns, and every page's runnable example runs on the
CPU as printed."""
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import List

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / 'docs'

# The toctree, in the order a user meets the pages: the swap, the GPU data
# path, offload, several GPUs, several machines, performance, then the
# reference pages.
ORDER = ['getting_started', 'gpu_data_path', 'offload', 'multi_gpu',
         'distributed', 'performance', 'checks', 'api', 'layout', 'scaling']
# The pages a user learns from, each with at least one runnable example.
WITH_EXAMPLES = ORDER[:6]
MARKER = '.. runnable-example'


def test_docs_build_without_warnings(tmp_path):
    pytest.importorskip('sphinx')
    cmd = [
        sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-E', '-q',
        '-b', 'html', '-d', str(tmp_path / 'doctrees'),
        str(DOCS), str(tmp_path / 'html')
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, (
        f'sphinx failed (exit code {proc.returncode}):\n'
        f'{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}')
    for page in ORDER + ['index']:
        assert (tmp_path / 'html' / f'{page}.html').exists(), page


def toctree(index: str) -> List[str]:
    r"""Returns the entries of the first toctree of :obj:`index`."""
    body = index[index.index('.. toctree::'):].splitlines()[1:]
    entries = []
    for line in body:
        if line and not line.startswith(' '):
            break
        line = line.strip()
        if line and not line.startswith(':'):
            entries.append(line)
    return entries


def test_toctree_in_learning_order():
    assert toctree((DOCS / 'index.rst').read_text()) == ORDER


def runnable_examples(text: str) -> List[str]:
    r"""Returns the Python code blocks of an reST page that follow a
    :obj:`.. runnable-example` comment, dedented."""
    blocks = []
    for match in re.finditer(rf'^{re.escape(MARKER)}\n\n'
                             r'\.\. code-block:: python\n\n', text,
                             flags=re.MULTILINE):
        lines = []
        for line in text[match.end():].splitlines():
            if line and not line.startswith(' '):
                break
            lines.append(line)
        blocks.append(textwrap.dedent('\n'.join(lines)).strip() + '\n')
    return blocks


def test_runnable_examples_are_found():
    text = (f'{MARKER}\n\n.. code-block:: python\n\n   x = 1\n\n   y = x\n'
            'Prose.\n\n.. code-block:: python\n\n   not_run()\n')
    assert runnable_examples(text) == ['x = 1\n\ny = x\n']


def run_example(code: str, name: str, tmp_path: Path) -> None:
    r"""Runs an example on the CPU: a script that starts processes (it has
    a :obj:`__main__` guard) in a fresh interpreter, anything else in this
    one, with CUDA hidden in both."""
    if "if __name__ == '__main__':" not in code:
        exec(compile(code, name, 'exec'), {'__name__': '__docs_example__'})
        return
    script = tmp_path / 'example.py'
    script.write_text(code)
    path = [str(REPO), os.environ.get('PYTHONPATH', '')]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES='',
               PYTHONPATH=os.pathsep.join(filter(None, path)))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path,
                          env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, (
        f'{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}')


@pytest.mark.parametrize('page', WITH_EXAMPLES)
def test_page_example_runs_on_cpu(page, tmp_path, monkeypatch):
    examples = runnable_examples((DOCS / f'{page}.rst').read_text())
    assert examples, f'docs/{page}.rst has no {MARKER!r} code block'
    monkeypatch.setattr('torch.cuda.is_available', lambda: False)
    monkeypatch.chdir(tmp_path)
    for i, code in enumerate(examples):
        run_example(code, f'docs/{page}.rst, example {i}', tmp_path)
