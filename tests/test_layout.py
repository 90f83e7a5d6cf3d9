"""docs/layout.rst names every module of the package, each once, and no
module that does not exist."""
import re
from collections import Counter
from pathlib import Path
from typing import List, Set

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / 'pyg_orch'
LAYOUT = REPO / 'docs' / 'layout.rst'

# A module is named by its path from the repository root, e.g.
# ``pyg_orch/topology/csc.py``; a package by its ``__init__.py``.
MODULE_PATH = re.compile(
    r'(?<![\w/.])pyg_orch/(?:[A-Za-z_]\w*/)*[A-Za-z_]\w*\.py\b')
# Sphinx roles naming a module of the package, e.g. :mod:`pyg_orch.core`.
MOD_ROLE = re.compile(r':mod:`~?(pyg_orch(?:\.\w+)*)`')


def package_modules() -> Set[str]:
    return {
        path.relative_to(REPO).as_posix()
        for path in PACKAGE.rglob('*.py') if '__pycache__' not in path.parts
    }


def named_modules(text: str) -> List[str]:
    return MODULE_PATH.findall(text)


def module_exists(dotted: str) -> bool:
    path = REPO.joinpath(*dotted.split('.'))
    return path.with_suffix('.py').is_file() or (path /
                                                   '__init__.py').is_file()


def test_module_path_pattern():
    text = ('pyg_orch/topology/csc.py  CSC\n   pyg_orch/__init__.py the API\n'
            'not_pyg_orch/x.py, docs/pyg_orch/y.py, pyg_orch/core/ folder')
    assert named_modules(text) == ['pyg_orch/topology/csc.py',
                                   'pyg_orch/__init__.py']


def test_every_module_listed_once():
    named = Counter(named_modules(LAYOUT.read_text()))
    missing = sorted(package_modules() - set(named))
    assert not missing, (
        f'docs/layout.rst does not list these modules: {missing}')
    twice = sorted(path for path, count in named.items() if count > 1)
    assert not twice, f'docs/layout.rst lists these modules twice: {twice}'


def test_no_listed_module_is_missing():
    stale = sorted(set(named_modules(LAYOUT.read_text())) - package_modules())
    assert not stale, (
        f'docs/layout.rst lists modules that do not exist: {stale}')


def test_module_roles_resolve():
    stale = sorted({
        name
        for name in MOD_ROLE.findall(LAYOUT.read_text())
        if not module_exists(name)
    })
    assert not stale, f'docs/layout.rst refers to missing modules: {stale}'


def package_folders() -> Set[str]:
    return {
        path.parent.relative_to(PACKAGE).as_posix() + '/'
        for path in PACKAGE.rglob('__init__.py')
        if path.parent != PACKAGE and '__pycache__' not in path.parts
    }


def test_folder_table_lists_every_folder():
    # The folder table names each subpackage as ``folder/``.
    named = set(re.findall(r'^``([\w/]+/)``', LAYOUT.read_text(), re.M))
    assert package_folders() - named == set(), (
        f'docs/layout.rst has no row for these folders: '
        f'{sorted(package_folders() - named)}')
    assert named - package_folders() == set(), (
        f'docs/layout.rst has rows for missing folders: '
        f'{sorted(named - package_folders())}')
