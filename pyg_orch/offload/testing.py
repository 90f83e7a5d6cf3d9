"""Instrumentation of :class:`~pyg_orch.offload.BottomLayerOffload` for
tests (no stable API):

.. code-block:: python

    with offload_hooks(work_hook=slow_down, autotune_clock=fake_clock):
        model = BottomLayerOffload(model, loader)
"""
import contextlib
from typing import Callable, Iterator, List, Optional, Tuple

from pyg_orch.offload.options import WorkHook

_Hooks = Tuple[Optional[WorkHook], Optional[Callable[[], float]]]

_active: List[_Hooks] = []


@contextlib.contextmanager
def offload_hooks(work_hook: Optional[WorkHook] = None,
                  autotune_clock: Optional[Callable[[], float]] = None
                  ) -> Iterator[None]:
    r"""Instrumentation hooks for the wrappers built in this context."""
    _active.append((work_hook, autotune_clock))
    try:
        yield
    finally:
        _active.pop()


def current_hooks() -> _Hooks:
    r"""The hooks of the innermost :func:`offload_hooks`."""
    return _active[-1] if _active else (None, None)
