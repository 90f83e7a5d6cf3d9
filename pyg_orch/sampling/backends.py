r"""The registry of sampling backends of
:class:`~pyg_orch.HybridNeighborSampler`: a name, a :obj:`supports_fn` (does it
handle a :class:`~pyg_orch.sampling.interface.BackendConfig`?) and a
:obj:`factory`. :obj:`'torch'` is the reference and handles every
configuration. :obj:`'triton'` and :obj:`'triton_draw'` are declared by module
path and imported only for a CUDA configuration with Triton installed, so
importing :mod:`pyg_orch` never imports Triton.

.. code-block:: python

    register_backend('mine', lambda config: not config.topology.is_hetero,
                     MyBackend)
    sampler = HybridNeighborSampler(data, [10, 5], backend='mine')"""
import importlib
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from pyg_orch.sampling.interface import BackendConfig, SamplingBackend
from pyg_orch.core.triton_util import triton_available
from pyg_orch.sampling.arguments import check_choice
from pyg_orch.sampling.torch_backend import TorchBackend

#: The backend of every configuration, :obj:`'auto'`'s fallback.
REFERENCE_BACKEND = 'torch'

SupportsFn = Callable[[BackendConfig], bool]
Factory = Callable[[BackendConfig], SamplingBackend]


@dataclass(frozen=True)
class _Registered:
    supports: SupportsFn
    factory: Factory


@dataclass(frozen=True)
class _Lazy:
    target: str  # 'module:Class'; the class is the factory, with `supports`.
    precondition: SupportsFn  # Checked before importing the module.
    requirement: str  # For the error message when it does not apply.


_registered: Dict[str, _Registered] = {}
_lazy: Dict[str, _Lazy] = {}
# Names in the order first registered or declared (as a set): 'auto' tries
# them in this order, whichever lazily declared backend was imported first.
_order: Dict[str, None] = {}


def _declare(name: str, lazy: _Lazy) -> None:
    _lazy[name] = lazy
    _order.setdefault(name)


def register_backend(name: str, supports_fn: SupportsFn,
                     factory: Factory) -> None:
    r"""Registers (or replaces) the backend :obj:`name`:
    :obj:`supports_fn(config)` tells whether it handles a
    :class:`~pyg_orch.sampling.interface.BackendConfig`, :obj:`factory(config)`
    builds it."""
    if not isinstance(name, str) or not name or name == 'auto':
        raise ValueError(f"a backend's name must be a non-empty string other "
                         f"than 'auto' (got {name!r})")
    _registered[name] = _Registered(supports_fn, factory)
    _order.setdefault(name)


def backend_names() -> List[str]:
    r"""The accepted backend names besides :obj:`'auto'`, reference first."""
    names = [n for n in _order if n in _registered or n in _lazy]
    return [REFERENCE_BACKEND] + [n for n in names if n != REFERENCE_BACKEND]


def _lookup(name: str, config: BackendConfig) -> Optional[_Registered]:
    # Registers a lazily declared backend if its precondition holds.
    lazy = _lazy.get(name)
    if name not in _registered and lazy is not None and \
            lazy.precondition(config):
        module, attr = lazy.target.split(':')
        factory = getattr(importlib.import_module(module), attr)
        register_backend(name, factory.supports, factory)
    return _registered.get(name)


def _supports(name: str, config: BackendConfig) -> bool:
    entry = _lookup(name, config)
    return entry is not None and bool(entry.supports(config))


def choose_backend(requested: str, config: BackendConfig) -> str:
    r"""The backend for :obj:`config`: :obj:`requested` if it handles it (else
    a :class:`ValueError`); for :obj:`'auto'`, the first other backend that
    handles it, else the reference."""
    names = backend_names()
    check_choice('backend', requested, ['auto'] + names)
    if requested == 'auto':
        return next((n for n in names[1:] if _supports(n, config)),
                    REFERENCE_BACKEND)
    if not _supports(requested, config):
        lazy = _lazy.get(requested)
        needs = lazy.requirement if lazy is not None else \
            'a configuration it supports'
        raise ValueError(f"backend={requested!r} needs {needs}; use "
                         f"backend='auto'")
    return requested


def create_backend(name: str, config: BackendConfig) -> SamplingBackend:
    r"""Builds the backend :obj:`name` for :obj:`config`."""
    entry = _lookup(name, config)
    if entry is None:
        raise ValueError(f"no sampling backend {name!r} is registered")
    return entry.factory(config)


def _cuda_with_triton(config: BackendConfig) -> bool:
    return config.device.type == 'cuda' and triton_available()


register_backend(REFERENCE_BACKEND, TorchBackend.supports, TorchBackend)
_declare('triton', _Lazy(
    target='pyg_orch.sampling.triton.backend:TritonBackend',
    precondition=_cuda_with_triton,
    requirement='a CUDA device, Triton, and uniform, non-disjoint, '
    'non-induced sampling with fan-outs in [0, 64] (of a homogeneous graph, '
    'or of a heterogeneous one whose topology is not sharded, where -1 '
    'works without replacement for edge types of in-degrees up to 64)'))
_declare('triton_draw', _Lazy(
    target='pyg_orch.sampling.draw_backend:TritonDrawBackend',
    precondition=_cuda_with_triton,
    requirement='a CUDA device, Triton, a topology on that device, and '
    'uniform or temporal (not weighted) sampling with a fan-out in [0, 64]'))
