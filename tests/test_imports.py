"""Every module of :mod:`pyg_orch` imports on its own, importing
:mod:`pyg_orch` on a CPU never imports Triton, and no module imports a module
that imports it back, not even lazily inside a function.

The import graph is built statically: each module's source is parsed with
:mod:`ast` (imports inside functions included) and every import of a
:mod:`pyg_orch` module becomes an edge. :obj:`from pkg import name` is an
edge to :obj:`pkg.name` when that is a module, else to :obj:`pkg` (whose
``__init__`` provides the name). Importing :obj:`a.b.mod` also runs the
``__init__`` of the packages :obj:`a.b` and :obj:`a` where they are not
loaded yet: an edge too, except to the packages the importing module lies in
(they are always loaded first), else every module would form a cycle with
its own package.
"""
import ast
import json
import os
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = 'pyg_orch'

# Modules that need Triton to import (and so fail to where it is missing).
NEEDS_TRITON = {'pyg_orch.sampling.triton.kernels',
                'pyg_orch.sampling.triton.hetero_kernels'}


def find_modules(root: Path = REPO, package: str = PACKAGE
                 ) -> Dict[str, Path]:
    r"""Every module under :obj:`package` (found by
    :func:`pkgutil.walk_packages`) and its source file."""
    sys.path.insert(0, str(root))
    try:
        modules = {package: root / package / '__init__.py'}
        path = [str(root / package)]
        for info in pkgutil.walk_packages(path, prefix=f'{package}.'):
            rel = Path(*info.name.split('.'))
            if info.ispkg:
                modules[info.name] = root / rel / '__init__.py'
            else:
                modules[info.name] = root / rel.with_suffix('.py')
    finally:
        sys.path.remove(str(root))
    return modules


def _resolve(importer: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ''
    parts = importer.split('.')
    base = parts if is_pkg else parts[:-1]
    base = base[:len(base) - (node.level - 1)]
    return '.'.join(base + ([node.module] if node.module else []))


def _owner(name: str, modules: Iterable[str]) -> Optional[str]:
    # The longest module that `name` names or lies in.
    parts = name.split('.')
    for end in range(len(parts), 0, -1):
        candidate = '.'.join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def _packages_run(importer: str, imported: str) -> List[str]:
    # The packages above `imported` whose `__init__` importing it may run:
    # those above `importer` are loaded already.
    parts = imported.split('.')
    above = [('.'.join(parts[:i])) for i in range(1, len(parts))]
    mine = importer.split('.')
    mine = {'.'.join(mine[:i]) for i in range(1, len(mine) + 1)}
    return [p for p in above if p not in mine]


def import_graph(modules: Dict[str, Path],
                 package: str = PACKAGE) -> Dict[str, Set[str]]:
    r"""The modules each module imports, anywhere in its source."""
    graph: Dict[str, Set[str]] = {}
    for name, path in modules.items():
        is_pkg = path.name == '__init__.py'
        edges: Set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: List[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_pkg, node)
                targets = [
                    f'{base}.{alias.name}'
                    if f'{base}.{alias.name}' in modules else base
                    for alias in node.names
                ]
            for target in targets:
                if target == package or target.startswith(f'{package}.'):
                    owner = _owner(target, modules)
                    if owner is not None:
                        edges.add(owner)
                        edges.update(_packages_run(name, owner))
        edges.discard(name)
        graph[name] = edges
    return graph


def find_cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    r"""One cycle (a list of modules, the first repeated at the end) per
    strongly connected component of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    components: List[List[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return [_a_cycle(graph, set(c)) for c in components]


def _a_cycle(graph: Dict[str, Set[str]], component: Set[str]) -> List[str]:
    # The shortest way back to the component's first module.
    start = min(component)
    parent: Dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [start] + path[::-1][1:] + [start]
                if w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f'no cycle through {start}')


def without(graph: Dict[str, Set[str]],
            edges: Iterable[Tuple[str, str]]) -> Dict[str, Set[str]]:
    out = {k: set(v) for k, v in graph.items()}
    for src, dst in edges:
        out.get(src, set()).discard(dst)
    return out


def format_cycles(cycles: List[List[str]]) -> str:
    return '\n'.join(' -> '.join(c) for c in cycles)


# The static check ############################################################


def test_import_graph_has_no_cycles():
    graph = import_graph(find_modules())
    cycles = find_cycles(graph)
    assert not cycles, ('import cycles (a module imports, maybe lazily, a '
                        'module that imports it back):\n' +
                        format_cycles(cycles))


def _reach(graph: Dict[str, Set[str]], start: str) -> Set[str]:
    seen, todo = set(), [start]
    while todo:
        for w in graph[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return seen


#: The Triton sampling path, and the types it shares with the PyTorch path.
TRITON = 'pyg_orch.sampling.triton'
SHARED_SAMPLING = {'pyg_orch.sampling.interface', 'pyg_orch.sampling.output'}


def _in(name: str, package: str) -> bool:
    return name == package or name.startswith(f'{package}.')


def test_layers():
    # Core sits below every concept, topology below sampling, features,
    # loaders and offload. The shared sampling types sit below both sampling
    # paths, which reach each other only through the registry (by module
    # name): the Triton path imports no module of the PyTorch path, and the
    # PyTorch path no module of the Triton path.
    graph = import_graph(find_modules())
    for name in graph:
        reach = _reach(graph, name)
        if _in(name, 'pyg_orch.core'):
            assert all(_in(m, 'pyg_orch.core') or m == 'pyg_orch.typing'
                       for m in reach), (name, reach)
        if _in(name, 'pyg_orch.topology'):
            assert not any(
                _in(m, f'pyg_orch.{above}') for m in reach
                for above in ('sampling', 'features', 'loader', 'offload')
            ), (name, reach)
        if name in SHARED_SAMPLING:
            assert all(m in SHARED_SAMPLING or m == 'pyg_orch.typing'
                       or _in(m, 'pyg_orch.core')
                       or _in(m, 'pyg_orch.topology')
                       for m in reach), (name, reach)
        if _in(name, TRITON):
            assert not any(
                _in(m, 'pyg_orch.sampling') and not _in(m, TRITON)
                and m not in SHARED_SAMPLING for m in reach), (name, reach)
        elif _in(name, 'pyg_orch.sampling'):
            assert not any(_in(m, TRITON) for m in reach), (name, reach)


def _imports_triton_eagerly(path: Path) -> bool:
    # Whether the module imports Triton outside any function or class.
    def triton(node: ast.AST) -> bool:
        if isinstance(node, ast.Import):
            return any(a.name.split('.')[0] == 'triton' for a in node.names)
        if isinstance(node, ast.ImportFrom):
            return (node.module or '').split('.')[0] == 'triton'
        return False

    todo = list(ast.parse(path.read_text()).body)
    while todo:
        node = todo.pop()
        if triton(node):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                 ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))
    return False


def test_only_the_kernels_import_triton_eagerly():
    eager = {name for name, path in find_modules().items()
             if _imports_triton_eagerly(path)}
    assert eager == NEEDS_TRITON, eager


def test_cycle_check_sees_lazy_imports(tmp_path):
    pkg = tmp_path / 'demo_pkg'
    (pkg / 'sub').mkdir(parents=True)
    (pkg / '__init__.py').write_text('')
    (pkg / 'sub' / '__init__.py').write_text('from .a import f\n')
    (pkg / 'sub' / 'a.py').write_text('from demo_pkg.b import g\n'
                                      'def f():\n    return g()\n')
    (pkg / 'b.py').write_text('def g():\n'
                              '    from demo_pkg.sub import a\n'
                              '    return a\n')
    (pkg / 'c.py').write_text('from . import b\n')
    (pkg / 'sub' / 'd.py').write_text('def h():\n'
                                      '    import demo_pkg.c\n')
    modules = find_modules(tmp_path, 'demo_pkg')
    assert set(modules) == {'demo_pkg', 'demo_pkg.sub', 'demo_pkg.sub.a',
                            'demo_pkg.sub.d', 'demo_pkg.b', 'demo_pkg.c'}
    graph = import_graph(modules, 'demo_pkg')
    assert graph['demo_pkg.c'] == {'demo_pkg.b'}
    assert graph['demo_pkg.sub'] == {'demo_pkg.sub.a'}
    assert graph['demo_pkg.sub.d'] == {'demo_pkg.c'}
    # b imports sub.a lazily, which runs sub/__init__ too:
    assert graph['demo_pkg.b'] == {'demo_pkg.sub', 'demo_pkg.sub.a'}
    assert find_cycles(graph) == [['demo_pkg.b', 'demo_pkg.sub.a',
                                   'demo_pkg.b']]
    assert find_cycles(without(graph, [('demo_pkg.b', 'demo_pkg.sub.a')
                                       ])) == [['demo_pkg.b', 'demo_pkg.sub',
                                                'demo_pkg.sub.a',
                                                'demo_pkg.b']]
    assert find_cycles(without(graph, [('demo_pkg.sub.a', 'demo_pkg.b')
                                       ])) == []


# Importing every module alone ################################################

# Imports the heavy third-party packages once, then forks one child per
# module: each child starts without any pyg_orch module loaded and imports
# just the one (a fresh interpreter per module would take minutes).
_DRIVER = textwrap.dedent('''
    import json, os, shutil, sys, tempfile, traceback
    import torch, torch_geometric, torch_geometric.loader, torch_geometric.nn
    import torch_geometric.sampler
    jobs = json.loads(sys.argv[1])
    assert not any(m.startswith('pyg_orch') for m in sys.modules)
    # PyG imports Triton itself where it is installed: nothing to check then.
    pyg_triton = 'triton' in sys.modules
    report = {}
    running = {}  # pid -> (module, file of its message)
    width = max(1, min(4, os.cpu_count() or 1))  # Children at once.
    tmp = tempfile.mkdtemp()

    def reap():
        pid, status = os.wait()
        name, path = running.pop(pid)
        with open(path) as f:
            msg = f.read()
        if status != 0 and not msg:
            msg = f'exit status {status}'
        report[name] = msg

    for i, (name, needs_triton) in enumerate(jobs):
        if len(running) >= width:
            reap()
        path = os.path.join(tmp, f'{i}.txt')
        open(path, 'w').close()
        pid = os.fork()
        if pid == 0:  # A fresh interpreter state for one module.
            msg = ''
            try:
                __import__(name)
                if ('triton' in sys.modules and not needs_triton
                        and not pyg_triton):
                    msg = 'imported triton'
            except ModuleNotFoundError as e:
                if not (needs_triton and e.name == 'triton'):
                    msg = traceback.format_exc()
            except BaseException:
                msg = traceback.format_exc()
            with open(path, 'w') as f:
                f.write(msg)
            os._exit(0)
        running[pid] = (name, path)
    while running:
        reap()
    shutil.rmtree(tmp)
    print(json.dumps(report))
''')


@pytest.mark.skipif(not hasattr(os, 'fork'), reason='needs os.fork')
def test_every_module_imports_alone():
    names = sorted(find_modules())
    jobs = [(name, name in NEEDS_TRITON) for name in names]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, '-c', _DRIVER,
                           json.dumps(jobs)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-5000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(report) == set(names)
    failed = {name: msg for name, msg in report.items() if msg}
    assert not failed, '\n\n'.join(f'{name}:\n{msg}'
                                   for name, msg in failed.items())


def test_cpu_sampling_never_imports_triton():
    code = textwrap.dedent('''
        import sys
        import pytest
        import torch
        import torch_geometric  # Imports Triton where it is installed.
        pyg_triton = 'triton' in sys.modules
        from torch_geometric.data import Data
        from pyg_orch import HybridNeighborSampler
        data = Data(edge_index=torch.randint(0, 50, (2, 200)), num_nodes=50)
        sampler = HybridNeighborSampler(data, [3, 2], device='cpu')
        assert sampler.backend == 'torch', sampler.backend
        assert not sampler.launches_async
        with pytest.raises(ValueError, match="backend='triton' needs"):
            HybridNeighborSampler(data, [3, 2], device='cpu',
                                  backend='triton')
        with pytest.raises(ValueError, match="'backend' must be 'auto', "
                           "'torch', 'triton' or 'triton_draw'"):
            HybridNeighborSampler(data, [3, 2], device='cpu', backend='x')
        loaded = [m for m in sys.modules
                  if (not pyg_triton and m == 'triton')
                  or m == 'pyg_orch.sampling.triton.backend'
                  or m == 'pyg_orch.sampling.draw_backend'
                  or m == 'pyg_orch.sampling.triton.neighbor_draw'
                  or m == 'pyg_orch.sampling.triton.kernels']
        assert not loaded, loaded
    ''')
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, '-c', code], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-5000:]


def test_registered_backend_is_chosen(monkeypatch):
    import torch
    from torch_geometric.data import Data
    from torch_geometric.sampler import NodeSamplerInput

    from pyg_orch import HybridNeighborSampler
    from pyg_orch.sampling import backends
    from pyg_orch.sampling.torch_backend import TorchBackend

    class Counting(TorchBackend):
        name = 'counting'
        calls = 0

        def sample(self, request):
            Counting.calls += 1
            return super().sample(request)

    monkeypatch.setattr(backends, '_registered', dict(backends._registered))
    backends.register_backend('counting',
                              lambda c: not c.topology.is_hetero, Counting)
    data = Data(edge_index=torch.randint(0, 50, (2, 200)), num_nodes=50)
    sampler = HybridNeighborSampler(data, [3, 2], device='cpu', seed=0)
    assert sampler.backend == 'counting'  # 'auto' prefers it to 'torch'.
    ref = HybridNeighborSampler(data, [3, 2], device='cpu', seed=0,
                                backend='torch')
    inputs = NodeSamplerInput(input_id=None, node=torch.arange(10))
    out, expected = (s.sample_from_nodes(inputs) for s in (sampler, ref))
    assert Counting.calls == 1
    assert torch.equal(out.node, expected.node)
    with pytest.raises(ValueError, match="'auto'"):
        backends.register_backend('auto', lambda c: True, Counting)


def test_lazy_backend_is_registered_on_demand(monkeypatch):
    import torch
    from torch_geometric.data import Data

    from pyg_orch.sampling.interface import BackendConfig
    from pyg_orch.topology.graph import GraphTopology
    from pyg_orch.sampling import backends

    monkeypatch.setattr(backends, '_registered', dict(backends._registered))
    monkeypatch.setattr(backends, '_lazy', dict(backends._lazy))
    backends._registered.pop('triton', None)
    lazy = backends._lazy['triton']
    assert lazy.target == 'pyg_orch.sampling.triton.backend:TritonBackend'
    edge_index = torch.randint(0, 50, (2, 200))
    topology = GraphTopology.from_data(Data(edge_index=edge_index,
                                            num_nodes=50))
    config = BackendConfig(topology, {None: [3, 2]}, torch.device('cpu'))
    assert not lazy.precondition(config)  # A CPU: nothing is imported.
    assert backends.choose_backend('auto', config) == 'torch'
    assert 'triton' not in backends._registered
    # As on a CUDA device with Triton: imported and registered, but the
    # backend itself still declines a CPU device.
    monkeypatch.setitem(backends._lazy, 'triton',
                        backends._Lazy(lazy.target, lambda c: True,
                                       lazy.requirement))
    assert backends.choose_backend('auto', config) == 'torch'
    from pyg_orch.sampling.triton.backend import TritonBackend
    assert backends._registered['triton'].factory is TritonBackend
    with pytest.raises(ValueError, match="backend='triton' needs a CUDA"):
        backends.choose_backend('triton', config)


def test_backend_order_does_not_follow_import_order(monkeypatch):
    # 'auto' tries the fused kernels before the draw kernel, even where the
    # latter was imported (registered) first, e.g. by asking for it by name.
    from pyg_orch.sampling import backends
    monkeypatch.setattr(backends, '_registered', dict(backends._registered))
    monkeypatch.setattr(backends, '_lazy', dict(backends._lazy))
    backends._registered.pop('triton', None)
    backends._registered.pop('triton_draw', None)
    draw = backends._lazy['triton_draw']
    monkeypatch.setitem(backends._lazy, 'triton_draw', backends._Lazy(
        draw.target, lambda c: True, draw.requirement))
    assert backends._lookup('triton_draw', None) is not None
    assert list(backends._registered)[-1] == 'triton_draw'
    names = backends.backend_names()
    assert names.index('triton') < names.index('triton_draw')


def _private_names(tree: ast.AST) -> Tuple[Set[str], List[Tuple[int, str]]]:
    # The private names a module defines (assigned to `self.`/`cls.`, or
    # defined in a class body) and the private attributes it reads or sets
    # on anything else (`obj._name`; `self`, `cls` and `super()` excluded).
    defined, used = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    defined.add(item.name)
                for target in getattr(item, 'targets', [getattr(item, 'target',
                                                                 None)]):
                    if isinstance(target, ast.Name):
                        defined.add(target.id)
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith('_') or name.startswith('__'):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ('self', 'cls'):
            if isinstance(node.ctx, ast.Store):
                defined.add(name)
            continue
        if isinstance(owner, ast.Call) and getattr(owner.func, 'id',
                                                    None) == 'super':
            continue
        used.append((node.lineno, name))
    return defined, used


# Private attributes of torch and PyG objects that share a name with one of
# ours: PyG's `Data._store` and the in-place counter `Tensor._version`.
FOREIGN_PRIVATE = {'_store', '_version'}


def test_no_module_reaches_into_another_modules_private_attributes():
    # A private attribute is read only by the module that defines it; what
    # another module needs is declared public.
    parsed = {name: _private_names(ast.parse(path.read_text()))
              for name, path in find_modules().items()}
    ours = {}
    for module, (defined, _) in parsed.items():
        for name in defined:
            ours.setdefault(name, set()).add(module)
    reaches = [f'{module}:{line} reads {name} of {sorted(ours[name])}'
               for module, (defined, used) in parsed.items()
               for line, name in used
               if name in ours and name not in defined
               and name not in FOREIGN_PRIVATE]
    assert not reaches, '\n'.join(reaches)


def test_private_attribute_check_sees_a_reach():
    a = textwrap.dedent('''
        class A:
            def __init__(self):
                self._secret = 1
    ''')
    b = 'def peek(a):\n    return a._secret\n'
    defined_a, _ = _private_names(ast.parse(a))
    defined_b, used_b = _private_names(ast.parse(b))
    assert '_secret' in defined_a and '_secret' not in defined_b
    assert used_b == [(2, '_secret')]
