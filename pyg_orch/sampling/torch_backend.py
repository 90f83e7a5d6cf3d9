"""The reference sampling backend (vectorized PyTorch ops)."""
from pyg_orch.sampling.interface import BackendConfig, SampleRequest
from pyg_orch.core.buffers import DenseBufferPool
from pyg_orch.sampling.output import MultiHopOutput
from pyg_orch.sampling.multi_hop import sample_multi_hop
from pyg_orch.sampling.pending import PendingSample


class TorchBackend:
    r"""Samples with :func:`~pyg_orch.sampling.sample_multi_hop`."""
    name = 'torch'
    asynchronous = False

    def __init__(self, config: BackendConfig):
        self.config = config
        self.buffers = DenseBufferPool() if config.relabel != 'sort' else None
        #: A faster draw per hop and relabeler where the dense one does not
        #: apply (see :func:`sample_multi_hop`), or None.
        self.draw = None
        self.relabeler = None

    @staticmethod
    def supports(config: BackendConfig) -> bool:
        return True

    def sample(self, request: SampleRequest) -> MultiHopOutput:
        config = self.config
        topology = config.topology
        on_host = topology.device != config.device
        out = sample_multi_hop(
            topology, config.num_neighbors, request.seeds,
            replace=config.replace, disjoint=config.disjoint,
            induced=config.induced, generator=request.host_generator
            if on_host else request.generator, buffers=self.buffers,
            seed_time=request.seed_time,
            temporal_strategy=config.temporal_strategy, draw=self.draw,
            relabeler=self.relabeler, prune_last_hop=None
            if request.hot_nodes is None else {
                k: v.to(topology.device)
                for k, v in request.hot_nodes.items()})
        return out.to(config.device) if on_host else out

    def launch(self, request: SampleRequest) -> PendingSample:
        return PendingSample.ready(self.sample(request))
