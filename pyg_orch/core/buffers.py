"""Dense arrays reused across batches: the relabel maps of the PyTorch path
and the claim arrays of the Triton path."""
import threading
from typing import Dict

import torch
from torch import Tensor


class DenseBufferPool:
    r"""One dense relabel array per (thread, node type), so that several
    threads can sample concurrently."""
    def __init__(self):
        self._local = threading.local()

    def __getstate__(self):  # Buffers are never pickled to workers.
        return {}

    def __setstate__(self, state):
        self._local = threading.local()

    def get(self, key, num_nodes: int, device: torch.device,
            fill: int = -1) -> Tensor:
        r"""The array for :obj:`key` in this thread; users must leave it as
        they found it (all :obj:`fill`)."""
        bufs: Dict = getattr(self._local, 'bufs', None)
        if bufs is None:
            bufs = self._local.bufs = {}
        buf = bufs.get((key, fill))
        if buf is None or buf.numel() != num_nodes or buf.device != device:
            dtype = torch.int32 if num_nodes < 2**31 - 1 else torch.int64
            buf = torch.full((num_nodes, ), fill, dtype=dtype, device=device)
            bufs[(key, fill)] = buf
        return buf
