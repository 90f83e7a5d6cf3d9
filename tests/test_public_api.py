"""The public API: the signatures of everything :mod:`pyg_orch` and its
public subpackages export (name, parameters, defaults), against the
snapshot ``tests/public_api.txt``; and the deprecated keywords, which keep
working for one release.

After an intended change of a public signature, regenerate the snapshot and
write the change into the changelog in the same commit::

    python tests/test_public_api.py --update
"""
import argparse
import difflib
import importlib
import inspect
import re
import sys
import warnings
from pathlib import Path
from typing import Any, List

import pytest
import torch
from torch_geometric.data import Data

REPO = Path(__file__).resolve().parents[1]
SNAPSHOT = REPO / 'tests' / 'public_api.txt'

#: The packages whose :obj:`__all__` is public.
PACKAGES = ('pyg_orch', 'pyg_orch.datasets', 'pyg_orch.distributed',
            'pyg_orch.gpu', 'pyg_orch.loader', 'pyg_orch.multigpu',
            'pyg_orch.offload', 'pyg_orch.sampling')


def _default(value: Any) -> str:
    # Object addresses differ from run to run.
    return re.sub(r' at 0x[0-9a-f]+', '', repr(value))


def _parameters(sig: inspect.Signature, drop_self: bool) -> str:
    out = []
    params = list(sig.parameters.values())
    if drop_self and params and params[0].name in ('self', 'cls'):
        params = params[1:]
    star = False
    for p in params:
        if p.kind == p.VAR_POSITIONAL:
            out.append(f'*{p.name}')
            star = True
            continue
        if p.kind == p.VAR_KEYWORD:
            out.append(f'**{p.name}')
            continue
        if p.kind == p.KEYWORD_ONLY and not star:
            out.append('*')
            star = True
        if p.default is p.empty:
            out.append(p.name)
        else:
            out.append(f'{p.name}={_default(p.default)}')
    return ', '.join(out)


def describe(name: str, obj: Any) -> str:
    r"""One line for the public object :obj:`name`: a class's or a
    function's parameters with their defaults (annotations left out: their
    spelling differs between Python and PyTorch versions), or a constant's
    value."""
    if inspect.isclass(obj):
        init = obj.__dict__.get('__init__') or next(
            (c.__dict__['__init__'] for c in obj.__mro__
             if '__init__' in c.__dict__), object.__init__)
        if init is object.__init__:
            return f'class {name}({_parameters(inspect.signature(obj), False)})'
        return f'class {name}({_parameters(inspect.signature(init), True)})'
    if callable(obj):
        return f'def {name}({_parameters(inspect.signature(obj), False)})'
    return f'{name} = {_default(obj)}'


def public_api() -> List[str]:
    r"""The lines of the snapshot: every name in the :obj:`__all__` of
    :obj:`PACKAGES` (dunder names such as :obj:`__version__` left out)."""
    lines = []
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in sorted(module.__all__):
            if not name.startswith('__'):
                lines.append(describe(f'{package}.{name}',
                                      getattr(module, name)))
    return lines


def test_public_api_matches_snapshot():
    lines = public_api()
    expected = SNAPSHOT.read_text().splitlines()
    if lines != expected:
        diff = '\n'.join(difflib.unified_diff(
            expected, lines, 'tests/public_api.txt (committed)',
            'the public API (now)', lineterm=''))
        pytest.fail(
            'The public API changed:\n' + diff + '\n\nIf this is intended, '
            'run `python tests/test_public_api.py --update` and describe the '
            'change in the changelog in the same commit (a renamed argument '
            'keeps its old name for one release, with a DeprecationWarning).',
            pytrace=False)


def test_describe_tells_changes_apart():
    def f(a, b=1, *args, c=None, **kwargs):
        pass

    def g(a, b=2, *args, c=None, **kwargs):
        pass

    def h(a, *, c=None):
        pass

    assert describe('f', f) == 'def f(a, b=1, *args, c=None, **kwargs)'
    assert describe('g', g) != describe('f', f)
    assert describe('h', h) == 'def h(a, *, c=None)'
    from pyg_orch import CacheOptions
    assert describe('C', CacheOptions).startswith(
        "class C(store='auto', gpu_memory_budget='auto', cache_ratio=None,")


# Deprecated keywords #########################################################

def _graph() -> Data:
    gen = torch.Generator().manual_seed(0)
    return Data(x=torch.randn(60, 4, generator=gen),
                edge_index=torch.randint(0, 60, (2, 400), generator=gen))


def _our_warnings(caught) -> List[str]:
    return [str(w.message) for w in caught
            if issubclass(w.category, DeprecationWarning)
            and 'is deprecated; pass' in str(w.message)]


def _batches(loader) -> List[tuple]:
    return [(b.n_id, b.edge_index, b.x) for b in loader]


def _same(a: List[tuple], b: List[tuple]) -> None:
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        for u, v in zip(x, y):
            assert torch.equal(u, v)


def _store(data: Data):
    from pyg_orch.gpu import TieredFeatureStore
    return TieredFeatureStore(data.x, 'cpu', gpu_memory_budget=10**9,
                              cache_ratio=0.2, method='cpu')


# Old keyword, its value, the new spelling (keyword and option object), and
# the message's suggestion.
STORE = object()  # Stands for a TieredFeatureStore over the graph.
OLD_KEYWORDS = [
    ('backend', 'torch', 'placement', dict(backend='torch'),
     "placement=PlacementOptions(backend='torch')"),
    ('topology_placement', 'device', 'placement', dict(topology='device'),
     "placement=PlacementOptions(topology='device')"),
    ('feature_store', None, 'cache', dict(store=None),
     'cache=CacheOptions(store=None)'),
    ('feature_store', STORE, 'cache', dict(store=STORE),
     'cache=CacheOptions(store=...)'),
    ('gpu_memory_budget', 1000, 'cache', dict(gpu_memory_budget=1000),
     'cache=CacheOptions(gpu_memory_budget=1000)'),
    ('gpu_cache_ratio', 0.2, 'cache', dict(cache_ratio=0.2),
     'cache=CacheOptions(cache_ratio=0.2)'),
    ('cache_policy', 'degree', 'cache', dict(ranking='degree'),
     "cache=CacheOptions(ranking='degree')"),
    ('presample_batches', 3, 'cache', dict(num_presample_batches=3),
     'cache=CacheOptions(num_presample_batches=3)'),
]


def _options(group: str, fields: dict, store: Any) -> Any:
    from pyg_orch import CacheOptions, PlacementOptions
    fields = {k: store if v is STORE else v for k, v in fields.items()}
    return (PlacementOptions if group == 'placement' else CacheOptions)(
        **fields)


@pytest.mark.parametrize('link', [False, True])
@pytest.mark.parametrize('old,value,group,fields,message', OLD_KEYWORDS)
def test_deprecated_keyword_warns_once_and_gives_the_same_batches(
        link, old, value, group, fields, message):
    from pyg_orch import HybridLinkNeighborLoader, HybridNeighborLoader
    data = _graph()
    store = _store(data)
    value = store if value is STORE else value
    kwargs = dict(batch_size=16, seed=4, device='cpu', shuffle=True)
    if link:
        cls = HybridLinkNeighborLoader
        kwargs.update(edge_label_index=data.edge_index[:, :50],
                      neg_sampling='binary')
    else:
        cls = HybridNeighborLoader
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        old_loader = cls(data, [3, 2], **{old: value}, **kwargs)
    assert _our_warnings(caught) == [f"'{old}' is deprecated; pass "
                                     f"{message}"]
    # The warning points at the caller's line, not into the package:
    ours = [w for w in caught if 'is deprecated; pass' in str(w.message)]
    assert ours[0].filename == __file__
    new = _options(group, fields, store)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        new_loader = cls(data, [3, 2], **{group: new}, **kwargs)
    assert _our_warnings(caught) == []
    assert old_loader.cache_options == new_loader.cache_options
    if group == 'cache':
        assert old_loader.cache_options == new
    sampler = 'link_sampler' if link else 'node_sampler'
    old_sampler = getattr(old_loader, sampler)
    new_sampler = getattr(new_loader, sampler)
    assert old_sampler.backend == new_sampler.backend
    assert old_sampler.topology.device == new_sampler.topology.device
    _same(_batches(old_loader), _batches(new_loader))


@pytest.mark.parametrize('old,value,group,fields,message', OLD_KEYWORDS[:3])
def test_old_and_new_keyword_together_raise(old, value, group, fields,
                                            message):
    from pyg_orch import HybridLinkNeighborLoader, HybridNeighborLoader
    data = _graph()
    new = _options(group, {}, None)
    for cls in (HybridNeighborLoader, HybridLinkNeighborLoader):
        with pytest.raises(ValueError, match=f"'{old}' and '{group}' were "
                           f"both given; pass {re.escape(message)} only"):
            cls(data, [2], batch_size=8, device='cpu',
                **{old: value, group: new})


def test_option_objects_are_frozen_and_compare_by_value():
    import dataclasses

    from pyg_orch import CacheOptions, PlacementOptions
    cache = CacheOptions(cache_ratio=1)
    assert cache.cache_ratio == 1.0 and isinstance(cache.cache_ratio, float)
    assert cache == CacheOptions(cache_ratio=1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cache.ranking = 'degree'
    assert PlacementOptions() == PlacementOptions(topology='auto',
                                                  backend='auto')


def test_num_presample_batches_sets_the_presampled_count(monkeypatch):
    # What ranks the cache: the batches counted for 'frequency'.
    import pyg_orch.loader.neighbor_loader as module
    from pyg_orch import CacheOptions, HybridNeighborLoader
    data = _graph()
    seen = []
    original = module.count_node_access

    def spy(*args, num_batches=None, **kwargs):
        seen.append(num_batches)
        return original(*args, num_batches=num_batches, **kwargs)

    monkeypatch.setattr(module, 'count_node_access', spy)
    loader = HybridNeighborLoader(data, [2], batch_size=8, device='cpu',
                                  cache=CacheOptions(num_presample_batches=2))
    assert int(loader._count_access().sum()) > 0
    HybridNeighborLoader(data, [2], batch_size=8, device='cpu')._count_access()
    assert seen == [2, 8]  # By default an epoch: 60 seeds in batches of 8.


# The partition folder ########################################################

@pytest.fixture(scope='module')
def part_dir(tmp_path_factory):
    from pyg_orch.distributed import partition_graph
    info = partition_graph(_graph(), 1, tmp_path_factory.mktemp('p') / 'p',
                           'contiguous', progress=False)
    return str(info.out_dir)


def _part_batches(loader) -> List[tuple]:
    return [(b.n_id, b.edge_index) for b in loader]


@pytest.mark.parametrize('old,value,new', [
    ('cache_policy', 'lru', dict(policy='lru')),
    ('cache_policy', 'degree', dict(ranking='degree')),
    ('presample_batches', 2, dict(num_presample_batches=2)),
])
def test_partition_folder_accepts_old_keywords(part_dir, old, value, new):
    from pyg_orch import CacheOptions, HybridNeighborLoader
    kw = dict(batch_size=8, device='cpu', shuffle=True, seed=1,
              cache_size=10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        a = HybridNeighborLoader(part_dir, [2, 2], **{old: value}, **kw)
    assert len(_our_warnings(caught)) == 1
    assert [w.filename for w in caught
            if 'is deprecated; pass' in str(w.message)] == [__file__]
    b = HybridNeighborLoader(part_dir, [2, 2], cache=CacheOptions(**new),
                             **kw)
    pa, pb = a.partition_batches, b.partition_batches
    assert (pa.gather.policy, pa.cache_ranking, pa.num_presample_batches) \
        == (pb.gather.policy, pb.cache_ranking, pb.num_presample_batches)
    _same(_part_batches(a), _part_batches(b))


def test_distributed_loader_is_a_deprecated_alias(part_dir):
    from pyg_orch import HybridNeighborLoader
    from pyg_orch.distributed import DistributedNeighborLoader
    kw = dict(batch_size=8, shuffle=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        old = DistributedNeighborLoader(part_dir, [2],
                                        num_presample_batches=3, **kw)
    assert [str(w.message) for w in caught
            if w.category is DeprecationWarning] == [
        "'DistributedNeighborLoader' is deprecated; pass the folder to "
        "HybridNeighborLoader('parts/', ...) (or the stores of "
        "open_stores())"]
    assert caught[-1].filename == __file__
    assert isinstance(old, HybridNeighborLoader)
    assert old.partition_batches.num_presample_batches == 3
    # The batches of the new spelling; seed=None is the default seed 0:
    new = HybridNeighborLoader(part_dir, [2], device='cpu', seed=0, **kw)
    _same(_part_batches(old), _part_batches(new))
    with pytest.raises(TypeError, match="frobnicate"), \
            pytest.warns(DeprecationWarning):
        DistributedNeighborLoader(part_dir, [2], frobnicate=3, **kw)
    import pyg_orch.distributed as distributed
    with pytest.warns(DeprecationWarning, match='PartitionFeatureStore'):
        assert distributed.DistributedFeatureGather is not None
    with pytest.raises(AttributeError, match='frobnicate'):
        distributed.frobnicate


def test_seed_none_is_the_shared_default_seed(tmp_path):
    # Where every rank must agree without an exchange, seed=None is the
    # fixed seed 0, as the old default was.
    from pyg_orch.distributed import load_partition, partition_graph
    from pyg_orch.multigpu import DistributedSeedSplit, split_positions
    for rank in range(3):
        assert torch.equal(split_positions(50, rank, 3),
                           split_positions(50, rank, 3, seed=0))
        assert not torch.equal(split_positions(50, rank, 3),
                               split_positions(50, rank, 3, seed=1))
    split = DistributedSeedSplit(50, 1, 3)
    assert torch.equal(split.positions(2),
                       DistributedSeedSplit(50, 1, 3, seed=0).positions(2))
    parts = []
    for seed, name in ((None, 'a'), (0, 'b')):
        info = partition_graph(_graph(), 2, tmp_path / name, 'random',
                               seed=seed, progress=False)
        parts.append(load_partition(info.out_dir, 0).node_ids)
    assert torch.equal(*parts)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--update', action='store_true',
                        help='rewrite tests/public_api.txt from the code')
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    lines = public_api()
    if args.update:
        SNAPSHOT.write_text('\n'.join(lines) + '\n')
        print(f'wrote {len(lines)} signatures to {SNAPSHOT}')
    else:
        print('\n'.join(lines))
    return 0


if __name__ == '__main__':
    sys.exit(main())
