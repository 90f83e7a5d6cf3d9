"""A sampled batch that may still be in flight on the device."""
from typing import Any, Callable, Optional


class PendingSample:
    r"""The result of :meth:`HybridNeighborSampler.launch_from_nodes`:
    :meth:`result` waits for the batch (once) and returns what
    :meth:`~HybridNeighborSampler.sample_from_nodes` would have (or raises its
    exception at every call)."""
    def __init__(self, finish: Optional[Callable[[], Any]] = None,
                 value: Any = None):
        self._finish = finish
        self._value = value
        self._error: Optional[BaseException] = None

    @classmethod
    def ready(cls, value: Any) -> 'PendingSample':
        return cls(value=value)

    @property
    def done(self) -> bool:
        return self._finish is None

    def result(self) -> Any:
        if self._finish is not None:
            finish, self._finish = self._finish, None
            try:
                self._value = finish()
            except BaseException as e:
                self._error = e
        if self._error is not None:
            raise self._error
        return self._value
