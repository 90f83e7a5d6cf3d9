r"""Partition folders for training across machines: writing, reading and
opening them, the vertex assignment, and PyG's :class:`Partitioner` folders.
Its public names are exported by :mod:`pyg_orch.distributed`; this package
imports none of its modules."""
