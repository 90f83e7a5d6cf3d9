"""Bottom-layer offload (NeutronOrch): the first GNN layer of hot vertices is
computed on CPU threads with bounded staleness, so that the device skips
sampling and gathering their bottom-hop neighbors (see :doc:`/offload`).

.. code-block:: python

    from pyg_orch.offload import BottomLayerOffload, OffloadOptions

    model = BottomLayerOffload(model, loader, options=OffloadOptions(
        hot_ratio=0.05, max_staleness=1))

The internals stay importable from their modules (see :doc:`/layout`).
"""
from pyg_orch.offload.hotness import (
    HotSet,
    count_bottom_accesses,
    select_cache_nodes,
    select_hetero_hot_nodes,
    select_hot_nodes,
)
from pyg_orch.offload.options import OffloadOptions
from pyg_orch.offload.planning import OffloadPlan, plan_offload
from pyg_orch.offload.protocol import OffloadableLoader
from pyg_orch.offload.tables import OffloadWorkerError
from pyg_orch.offload.workers import (
    default_intra_op_threads,
    default_num_threads,
)
from pyg_orch.offload.wrapper import BottomLayerOffload

__all__ = [
    'BottomLayerOffload',
    'HotSet',
    'OffloadOptions',
    'OffloadPlan',
    'OffloadWorkerError',
    'OffloadableLoader',
    'count_bottom_accesses',
    'default_intra_op_threads',
    'default_num_threads',
    'plan_offload',
    'select_cache_nodes',
    'select_hetero_hot_nodes',
    'select_hot_nodes',
]
