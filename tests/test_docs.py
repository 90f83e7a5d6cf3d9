"""The Sphinx documentation builds without a single warning."""
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_docs_build_without_warnings(tmp_path):
    pytest.importorskip('sphinx')
    cmd = [
        sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-E', '-q',
        '-b', 'html', '-d', str(tmp_path / 'doctrees'),
        str(REPO / 'docs'), str(tmp_path / 'html')
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, (
        f'sphinx failed (exit code {proc.returncode}):\n'
        f'{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}')
    assert (tmp_path / 'html' / 'index.html').exists()
    assert (tmp_path / 'html' / 'api.html').exists()
