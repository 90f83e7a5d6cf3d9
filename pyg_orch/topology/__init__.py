r"""Graph topology: CSC per edge type, adjacency inputs, fingerprints, the
topology cache and neighbor lists sharded across a machine's GPUs. Imports only
:mod:`pyg_orch.core`, :mod:`pyg_orch.parallel` and :mod:`pyg_orch.partition` of
the rest; this package imports none of them."""
