r"""Process groups and launching, for the GPUs of one machine and for
several machines: DDP set-up and seed splits (:mod:`~pyg_orch.parallel.ddp`),
buffers every rank reads (:mod:`~pyg_orch.parallel.peer_memory`), one rank's
failure raised in all (:mod:`~pyg_orch.parallel.watchdog`), which part a rank
holds (:mod:`~pyg_orch.parallel.machines`) and variable-size exchanges
between ranks (:mod:`~pyg_orch.parallel.exchange`). The public names are
exported by :mod:`pyg_orch.multigpu`; this package imports none of its
modules."""
