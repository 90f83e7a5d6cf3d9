r"""The fused Triton kernels as the :obj:`'triton'` sampling backend."""
from typing import Optional, Tuple

from pyg_orch.sampling.interface import BackendConfig, SampleRequest
from pyg_orch.core.buffers import DenseBufferPool
from pyg_orch.sampling.output import MultiHopOutput
from pyg_orch.core.triton_util import triton_available
from pyg_orch.sampling.triton.fused_sampler import (
    FusedSampler,
    PendingFused,
    supports,
)
from pyg_orch.sampling.triton.hetero_fused import (
    HeteroFusedSampler,
    hetero_supports,
)


class TritonBackend:
    r"""Samples with the fused kernels; :meth:`launch` only queues."""
    name = 'triton'
    asynchronous = True

    def __init__(self, config: BackendConfig):
        self.config = config
        self.buffers = DenseBufferPool()
        self.hetero = config.topology.is_hetero
        self.fused = HeteroFusedSampler() if self.hetero else FusedSampler()

    @staticmethod
    def supports(config: BackendConfig) -> bool:
        if config.device.type != 'cuda' or not triton_available() or \
                config.relabel == 'sort':
            return False
        if config.topology.is_hetero:
            return hetero_supports(config.topology, config.num_neighbors,
                                   config.disjoint, config.induced,
                                   replace=config.replace)
        return supports(config.topology, config.num_neighbors,
                        config.disjoint, config.induced)

    def _args(self, request: SampleRequest) -> Tuple:
        config, topology = self.config, self.config.topology
        hot: Optional[dict] = request.hot_nodes
        if self.hetero:
            return (topology, config.num_neighbors, request.seeds,
                    config.replace, request.generator, self.buffers,
                    config.device, hot)
        return (topology.csc[None], topology.num_nodes[None],
                config.num_neighbors[None], request.seeds[None],
                config.replace, request.generator, self.buffers,
                config.device, None if hot is None else hot[None])

    def sample(self, request: SampleRequest) -> MultiHopOutput:
        return self.fused(*self._args(request))

    def launch(self, request: SampleRequest) -> PendingFused:
        return self.fused.launch(*self._args(request))
