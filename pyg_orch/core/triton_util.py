"""What the Triton kernels need from the rest of :mod:`pyg_orch`, without
importing Triton: whether it is installed, and pinned host tensors presented
to kernels as device pointers."""
from typing import Union

from torch import Tensor


def triton_available() -> bool:
    r"""Whether Triton can be imported (it is only needed on GPUs)."""
    try:
        import triton  # noqa: F401
    except Exception:
        return False
    return True


class PinnedPointer:
    r"""Presents a pinned host tensor to Triton as a device pointer: under
    unified virtual addressing its host address is valid on the GPU."""
    def __init__(self, tensor: Tensor):
        self.tensor = tensor
        self.dtype = tensor.dtype

    def data_ptr(self) -> int:
        return self.tensor.data_ptr()


def kernel_view(t: Tensor) -> Union[Tensor, PinnedPointer]:
    r"""What to pass a Triton kernel for :obj:`t`: the tensor itself, or for
    a pinned host tensor a :class:`PinnedPointer` (read zero-copy)."""
    if t.is_cuda or not t.is_pinned():
        return t
    return PinnedPointer(t)
