r"""Feature stores: GPU caches of rows, sharded across GPUs, and a
partition's rows as PyG's remote backend; the public classes are exported
by :mod:`pyg_orch.gpu`, :mod:`pyg_orch.multigpu` and
:mod:`pyg_orch.distributed`."""
