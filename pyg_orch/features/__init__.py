r"""Feature stores: the tiered GPU cache of the hottest rows
(:mod:`~pyg_orch.features.tiered`, :mod:`~pyg_orch.features.hetero_tiered`),
one cache over a machine's GPUs (:mod:`~pyg_orch.features.sharded`), and a
partition's rows as PyG's remote backend
(:mod:`~pyg_orch.features.partition_stores`,
:mod:`~pyg_orch.features.partition_gather`). The public classes are exported
by :mod:`pyg_orch.gpu`, :mod:`pyg_orch.multigpu` and
:mod:`pyg_orch.distributed`; this package imports none of its
modules."""
