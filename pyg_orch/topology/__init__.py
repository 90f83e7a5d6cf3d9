r"""Graph topology: one edge type's in-neighbor lists as CSC
(:mod:`~pyg_orch.topology.csc`), a graph's CSC per edge type
(:mod:`~pyg_orch.topology.graph`), adjacency inputs, fingerprints, the
topology cache shared by loaders, and neighbor lists sharded across a
machine's GPUs (:mod:`~pyg_orch.topology.sharded`). Its modules import only
:mod:`pyg_orch.core`, :mod:`pyg_orch.parallel` and :mod:`pyg_orch.partition`
of the rest; this package imports none of them."""
