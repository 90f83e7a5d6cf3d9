r"""The Triton sampling path (GPU): fused multi-hop kernels, one-hop draws,
hash relabeling and the :obj:`'triton'` backend, imported by the registry on
demand. Only the kernel modules import Triton; this package imports none of its
modules."""
