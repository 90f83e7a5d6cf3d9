r"""The types shared by the PyTorch sampling path (:mod:`pyg_orch.sampling`)
and the Triton path (:mod:`pyg_orch.gpu`): the CSC topology, the sampled
output, reusable buffers, the backend interface and the helpers that present
tensors to Triton kernels. This package imports neither of them, nor Triton.
"""
from pyg_orch.sampling.interface import (
    BackendConfig,
    SampleRequest,
    SamplingBackend,
)
from pyg_orch.core.buffers import DenseBufferPool
from pyg_orch.topology.csc import CSCTopology, smallest_index_dtype
from pyg_orch.core.devices import with_index
from pyg_orch.sampling.output import MultiHopOutput
from pyg_orch.topology.graph import GraphTopology
from pyg_orch.core.triton_util import kernel_view, triton_available

__all__ = [
    'BackendConfig',
    'CSCTopology',
    'DenseBufferPool',
    'GraphTopology',
    'MultiHopOutput',
    'SampleRequest',
    'SamplingBackend',
    'kernel_view',
    'smallest_index_dtype',
    'triton_available',
    'with_index',
]
