r"""Device helpers shared by the loaders and the samplers."""
import torch


def with_index(device: torch.device) -> torch.device:
    r"""Returns :obj:`device` with its index set (the current CUDA device for
    :obj:`'cuda'`). PyTorch looks up the current stream of an indexed device
    directly, without first finding the current device in Python, which a
    loader would otherwise do several times per batch."""
    if device.type == 'cuda' and device.index is None:
        return torch.device('cuda', torch.cuda.current_device())
    return device
