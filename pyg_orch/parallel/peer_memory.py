r"""Memory that every process of one machine can read: one buffer per rank,
seen by all ranks. On CUDA PyTorch's symmetric memory (read over NVLink);
on the CPU files in :obj:`/dev/shm` mapped by every process."""
import math
import os
import uuid
import warnings
from dataclasses import dataclass
from typing import Any, List, Optional

import torch
import torch.distributed as dist
from torch import Tensor

from pyg_orch.core.devices import with_index
from pyg_orch.parallel.exchange import group_rank, group_size

#: Set in every process that uses peer memory: NVLink multicast stays off
#: (plain peer access does not need it, and the machines we run on must not
#: create multicast objects).
MULTICAST_OFF_ENV = {
    'NCCL_NVLS_ENABLE': '0',
    'TORCH_SYMM_MEM_DISABLE_MULTICAST': '1',
    'NVSHMEM_DISABLE_NVLS': '1',
}


def disable_multicast_env() -> None:
    r"""Sets :obj:`MULTICAST_OFF_ENV` in :obj:`os.environ` where not set
    (NCCL and symmetric memory read them when they start)."""
    for key, value in MULTICAST_OFF_ENV.items():
        os.environ.setdefault(key, value)


def _shm_dir() -> str:
    return os.environ.get('PYG_ORCH_SHM_DIR', '/dev/shm')


@dataclass
class PeerBuffers:
    r"""One buffer per rank of a :class:`PeerGroup`, all of the same shape.

    Attributes:
        buffers (List[torch.Tensor]): :obj:`buffers[r]` is rank :obj:`r`'s
            buffer as this process sees it (its own, or a view of a peer's).
        own (torch.Tensor): This rank's buffer (:obj:`buffers[rank]`).
        pointers (torch.Tensor): The buffers' addresses (:obj:`int64`, on
            the group's device) for kernels that pick a buffer per element.
    """
    buffers: List[Tensor]
    own: Tensor
    pointers: Tensor
    handle: Any = None  # Keeps the symmetric-memory handle alive.

    def gather(self, owner: Tensor, local: Tensor) -> Tensor:
        r"""Element (or row) :obj:`local[i]` of rank :obj:`owner[i]`'s
        buffer, for every :obj:`i`, on :obj:`local`'s device (the PyTorch
        path of the kernels that read through :obj:`pointers`)."""
        own = self.own
        out = torch.empty((local.numel(), ) + tuple(own.shape[1:]),
                          dtype=own.dtype, device=local.device)
        for r, buf in enumerate(self.buffers):
            idx = (owner == r).nonzero().view(-1)
            if idx.numel() > 0:
                at = local.index_select(0, idx).to(buf.device)
                out[idx] = buf.index_select(0, at).to(out.device)
        return out


class PeerGroup:
    r"""The processes of one machine that share memory with each other.

    Args:
        group (ProcessGroup, optional): The processes of this machine
            (default: :func:`machine_group`; one process without a process
            group).
        device (torch.device, optional): :obj:`'cuda'` devices share buffers
            through symmetric memory, others through :obj:`/dev/shm`."""
    def __init__(self, group: Optional[Any] = None,
                 device: Optional[torch.device] = None):
        self.device = with_index(torch.device(device or 'cpu'))
        initialized = dist.is_available() and dist.is_initialized()
        self.group = None if not initialized else (
            group if group is not None else machine_group())
        self.rank = group_rank(self.group)
        self.world_size = group_size(self.group)
        self._name = None
        self._count = 0
        if self.device.type == 'cuda':
            disable_multicast_env()

    @property
    def kind(self) -> str:
        r""":obj:`'symmetric'` (CUDA) or :obj:`'shm'`."""
        return 'symmetric' if self.device.type == 'cuda' else 'shm'

    def barrier(self) -> None:
        if self.group is not None:
            if self.device.type == 'cuda' and \
                    dist.get_backend(self.group) == 'nccl':
                dist.barrier(self.group, device_ids=[self.device.index])
            else:
                dist.barrier(self.group)

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        r"""Rank :obj:`src`'s :obj:`obj` (a group rank) on every rank."""
        if self.group is None:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=dist.get_global_rank(
            self.group, src), group=self.group,
            device=self.device if self.device.type == 'cuda' else None)
        return box[0]

    def all_gather_object(self, obj: Any) -> List[Any]:
        if self.group is None:
            return [obj]
        out = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def all_reduce_sum(self, tensor: Tensor) -> Tensor:
        r"""The element-wise sum of :obj:`tensor` over the group (a new
        tensor on :obj:`tensor`'s device)."""
        if self.group is None:
            return tensor.clone()
        backend = dist.get_backend(self.group)
        work = tensor.to(self.device if backend == 'nccl' else 'cpu').clone()
        dist.all_reduce(work, group=self.group)
        return work.to(tensor.device)

    def _next_name(self) -> str:
        if self._name is None:
            self._name = self.broadcast_object(
                f'pyg_orch-{uuid.uuid4().hex[:12]}')
        self._count += 1
        return f'{self._name}-{self._count}'

    def allocate(self, shape, dtype: torch.dtype) -> PeerBuffers:
        r"""Allocates a buffer of :obj:`shape` on every rank (a collective
        call) and returns every rank's buffer as this process sees it."""
        shape = tuple(int(s) for s in shape)
        numel = math.prod(shape)
        if self.device.type == 'cuda':
            return self._allocate_symmetric(shape, numel, dtype)
        return self._allocate_shm(shape, numel, dtype)

    def _allocate_shm(self, shape, numel, dtype) -> PeerBuffers:
        name = self._next_name()
        path = os.path.join(_shm_dir(), f'{name}-{{}}')
        size = max(numel, 1)
        own = torch.from_file(path.format(self.rank), shared=True, size=size,
                              dtype=dtype)
        self.barrier()  # Every file exists ...
        buffers = [
            own if r == self.rank else torch.from_file(
                path.format(r), shared=True, size=size, dtype=dtype)
            for r in range(self.world_size)
        ]
        self.barrier()  # ... and is mapped everywhere: the names can go.
        os.unlink(path.format(self.rank))
        buffers = [b[:numel].view(shape) for b in buffers]
        pointers = torch.tensor([b.data_ptr() for b in buffers],
                                dtype=torch.int64)
        return PeerBuffers(buffers, buffers[self.rank], pointers)

    def _allocate_symmetric(self, shape, numel, dtype) -> PeerBuffers:
        import torch.distributed._symmetric_memory as symm_mem

        own = symm_mem.empty(max(numel, 1), dtype=dtype, device=self.device)
        if self.group is None:
            buffers = [own[:numel].view(shape)]
            handle = None
        else:
            group_name = self.group.group_name
            enable = getattr(symm_mem, 'enable_symm_mem_for_group', None)
            with warnings.catch_warnings():
                # Needed before torch 2.11, which warns that it no longer is
                # ("no need to call this function anymore"); still called.
                warnings.simplefilter('ignore', FutureWarning)
                if enable is not None and \
                        not symm_mem.is_symm_mem_enabled_for_group(group_name):
                    enable(group_name)
            handle = symm_mem.rendezvous(own, group_name)
            buffers = [
                own[:numel].view(shape) if r == self.rank else
                handle.get_buffer(r, (max(numel, 1), ), dtype)[:numel].view(
                    shape) for r in range(self.world_size)
            ]
        pointers = torch.tensor([b.data_ptr() for b in buffers],
                                dtype=torch.int64, device=self.device)
        return PeerBuffers(buffers, buffers[self.rank], pointers, handle)

    def share_host(self, tensor: Optional[Tensor], shape, dtype: torch.dtype,
                   src: int = 0) -> Tensor:
        r"""One host copy per machine: rank :obj:`src` writes :obj:`tensor`
        into shared memory, every rank maps it (a collective; on CUDA
        registered as pinned memory)."""
        shape = tuple(int(s) for s in shape)
        numel = math.prod(shape)
        if self.group is None:
            out = tensor.contiguous().view(shape) if tensor is not None else \
                torch.empty(shape, dtype=dtype)
            if self.device.type == 'cuda' and not out.is_pinned():
                out = out.pin_memory()
            return out
        path = os.path.join(_shm_dir(), self._next_name() + '-host')
        size = max(numel, 1)
        if self.rank == src:
            if tensor is None:
                raise ValueError("the source rank must pass 'tensor'")
            out = torch.from_file(path, shared=True, size=size, dtype=dtype)
            out[:numel].copy_(tensor.reshape(-1))
        self.barrier()
        if self.rank != src:
            out = torch.from_file(path, shared=True, size=size, dtype=dtype)
        self.barrier()
        if self.rank == src:
            os.unlink(path)
        out = out[:numel].view(shape)
        if self.device.type == 'cuda':
            register_pinned(out)
        return out


_REGISTERED: List[Tensor] = []


def register_pinned(tensor: Tensor) -> None:
    r"""Page-locks :obj:`tensor`'s host memory in place for zero-copy reads
    (:obj:`cudaHostRegister`), for the life of the process."""
    if tensor.numel() == 0 or tensor.is_pinned():
        return
    cudart = torch.cuda.cudart()
    err = cudart.cudaHostRegister(tensor.data_ptr(),
                                  tensor.numel() * tensor.element_size(), 0)
    if int(err) != 0:
        raise RuntimeError(f'cudaHostRegister failed ({err}): cannot pin the '
                           f'shared host rows')
    _REGISTERED.append(tensor)


def machine_group() -> Any:
    r"""The process group of this machine's ranks (blocks of
    :obj:`LOCAL_WORLD_SIZE` ranks)."""
    world = dist.get_world_size()
    local = int(os.environ.get('LOCAL_WORLD_SIZE', world))
    if local >= world:
        return dist.group.WORLD
    global _SUBGROUP
    if _SUBGROUP is None:
        _SUBGROUP, _ = dist.new_subgroups(group_size=local)
    return _SUBGROUP


_SUBGROUP = None
