r"""The Triton sampling path (GPU): fused multi-hop kernels
(:mod:`~pyg_orch.sampling.triton.fused_sampler`), one-hop draws, hash
relabeling, and the :obj:`'triton'` backend
(:mod:`~pyg_orch.sampling.triton.backend`), which the registry
(:mod:`pyg_orch.sampling.backends`) imports by module name, on demand. Only
the kernel modules import Triton, and only when they are imported; this path
imports no module of the PyTorch sampling path, only the types both share
(:mod:`~pyg_orch.sampling.interface`, :mod:`~pyg_orch.sampling.output`).
This package imports none of its modules."""
