r"""Deprecated command line: :obj:`python -m pyg_orch.distributed.partition`
is :obj:`python -m pyg_orch.partition.cli` (same arguments); kept for one
release."""
import sys
import warnings

if __name__ == '__main__':
    warnings.warn("'python -m pyg_orch.distributed.partition' is deprecated; "
                  "run 'python -m pyg_orch.partition.cli' (same arguments)",
                  DeprecationWarning, stacklevel=1)
    from pyg_orch.partition.cli import main
    sys.exit(main())
