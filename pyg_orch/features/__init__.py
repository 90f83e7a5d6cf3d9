r"""Feature stores (exported by :mod:`pyg_orch.gpu`,
:mod:`pyg_orch.multigpu` and :mod:`pyg_orch.distributed`)."""
