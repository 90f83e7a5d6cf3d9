"""No module of the package reads or writes another module's private
attributes (``obj._name`` where ``_name`` is defined only in another
module of :mod:`pyg_orch`): modules talk through declared, public
interfaces. Private attributes of other libraries (PyTorch, PyG) are out
of scope here."""
import ast
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Set, Tuple

PACKAGE = Path(__file__).resolve().parents[1] / 'pyg_orch'

# Underscore names that belong to other libraries' interfaces, read on their
# objects: a namedtuple's `_replace`, a tensor's `_version` (in-place
# writes), a PyG `Data` object's `_store`.
EXTERNAL = {'_replace', '_asdict', '_fields', '_version', '_store'}


def _private(name: str) -> bool:
    return name.startswith('_') and not name.startswith('__')


def _defined(tree: ast.AST) -> Set[str]:
    # Private names a module defines: methods, functions, classes, class
    # attributes and attributes assigned on `self`/`cls`.
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                             ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        names.add(sub.id)
                    elif isinstance(sub, ast.Attribute) and isinstance(
                            sub.value, ast.Name) and sub.value.id in (
                                'self', 'cls'):
                        names.add(sub.attr)
    return {name for name in names if _private(name)}


def _accesses(tree: ast.AST) -> List[Tuple[int, str, str]]:
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _private(node.attr):
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id in ('self', 'cls'):
            continue
        if isinstance(value, ast.Call) and isinstance(
                value.func, ast.Name) and value.func.id == 'super':
            continue
        out.append((node.lineno, node.attr, ast.unparse(node)))
    return out


def find_violations(package: Path = PACKAGE) -> List[str]:
    trees = {path: ast.parse(path.read_text(), str(path))
             for path in sorted(package.rglob('*.py'))}
    defined: Dict[Path, Set[str]] = {p: _defined(t) for p, t in trees.items()}
    owners: Dict[str, Set[Path]] = defaultdict(set)
    for path, names in defined.items():
        for name in names:
            owners[name].add(path)
    problems = []
    for path, tree in trees.items():
        for line, name, text in _accesses(tree):
            if name in defined[path] or name in EXTERNAL or \
                    not owners.get(name):
                continue  # Its own module's, or another library's.
            where = ', '.join(str(p.relative_to(package.parent))
                              for p in sorted(owners[name]))
            problems.append(f'{path.relative_to(package.parent)}:{line}: '
                            f'{text} (private to {where})')
    return problems


def test_no_module_reads_another_modules_private_attributes():
    problems = find_violations()
    assert not problems, (
        'modules reach into private attributes of other modules; give the '
        'owner a public method or property instead:\n' +
        '\n'.join(problems))


def test_the_check_sees_a_violation(tmp_path):
    package = tmp_path / 'pkg'
    package.mkdir()
    (package / 'owner.py').write_text(
        'class Owner:\n    def __init__(self):\n        self._secret = 1\n')
    (package / 'reader.py').write_text(
        'def read(owner):\n    return owner._secret\n')
    (package / 'fine.py').write_text(
        'class Fine:\n    def __init__(self):\n        self._secret = 2\n\n'
        '    def same(self, other):\n        return other._secret\n')
    problems = find_violations(package)
    assert len(problems) == 1 and 'reader.py:2' in problems[0]
