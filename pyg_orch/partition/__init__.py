r"""Partition folders, for training across machines: writing them
(:mod:`~pyg_orch.partition.build`, the command line
:mod:`~pyg_orch.partition.cli`), their layout and reading them
(:mod:`~pyg_orch.partition.storage`), opening a rank's part on every rank
(:mod:`~pyg_orch.partition.opening`), the vertex assignment
(:mod:`~pyg_orch.partition.partitioning`) and folders of PyG's
:class:`Partitioner` (:mod:`~pyg_orch.partition.pyg_partition`). The public
names are exported by :mod:`pyg_orch.distributed`; this package imports
none of its modules."""
