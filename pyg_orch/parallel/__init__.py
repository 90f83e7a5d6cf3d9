r"""Process groups and launching: DDP set-up and seed splits, buffers every
rank of a machine reads, one rank's failure raised in all, which part a rank
holds, and exchanges between ranks. Its public names are exported by
:mod:`pyg_orch.multigpu`; this package imports none of its modules."""
