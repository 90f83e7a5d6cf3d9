"""Instrumentation of :class:`~pyg_orch.offload.BottomLayerOffload` for
tests and experiments (internal: no stable API). Wrappers built inside
:func:`offload_hooks` use its hooks:

.. code-block:: python

    from pyg_orch.offload.testing import offload_hooks

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
    r"""Wrappers built in this context call :obj:`work_hook` from a worker
    thread before every CPU work item, with the item's cancellation event
    (a :class:`threading.Event`, set once the item is dropped), e.g. to
    time or to slow down the CPU side; and read :obj:`autotune_clock`
    instead of :func:`time.perf_counter` for the decision by measurement
    (e.g. a fake clock)."""
    _active.append((work_hook, autotune_clock))
    try:
        yield
    finally:
        _active.pop()


def current_hooks() -> _Hooks:
    r"""The hooks of the innermost :func:`offload_hooks` context
    (:obj:`(None, None)` outside)."""
    return _active[-1] if _active else (None, None)
