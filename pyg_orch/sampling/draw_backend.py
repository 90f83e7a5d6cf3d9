r"""The :obj:`'triton_draw'` backend: the PyTorch multi-hop path with Triton
draws and GPU hash relabeling (for what the fused sampler does not take)."""
import importlib
from types import ModuleType

from pyg_orch.sampling.interface import BackendConfig
from pyg_orch.core.triton_util import triton_available
from pyg_orch.sampling.torch_backend import TorchBackend


def _draw_module() -> ModuleType:
    # Imported lazily: importing pyg_orch never imports Triton.
    return importlib.import_module('pyg_orch.sampling.triton.neighbor_draw')


class TritonDrawBackend(TorchBackend):
    r""":class:`TorchBackend` with Triton draws and hash relabeling."""
    name = 'triton_draw'
    asynchronous = False

    def __init__(self, config: BackendConfig):
        super().__init__(config)
        self.draw = _draw_module().draw_neighbors
        self.relabeler = importlib.import_module(
            'pyg_orch.sampling.triton.hash_relabel').HashRelabeler

    @staticmethod
    def supports(config: BackendConfig) -> bool:
        topology = config.topology
        if config.device.type != 'cuda' or not triton_available() or \
                topology.device.type != 'cuda' or topology.is_weighted:
            return False
        if topology.is_sharded and topology.is_temporal:
            return False  # Times split across GPUs: read by PyTorch ops.
        max_fanout = _draw_module().MAX_FANOUT
        return any(0 <= k <= max_fanout for fanouts in
                   config.num_neighbors.values() for k in fanouts)
