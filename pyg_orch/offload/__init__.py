"""Bottom-layer offload (NeutronOrch): the first GNN layer of hot vertices is
computed on CPU threads with bounded staleness, so that the device skips
sampling and gathering their bottom-hop neighbors.

.. code-block:: python

    from pyg_orch.offload import BottomLayerOffload

    model = BottomLayerOffload(model, loader, hot_ratio=0.05,
                               max_staleness=1)
"""
from pyg_orch.offload.bottom_layer import (
    BipartiteLayerComputer,
    BottomLayerComputer,
    find_first_layer,
)
from pyg_orch.offload.embedding_pipeline import (
    BatchEmbeddingCache,
    EmbeddingPipeline,
    EmbeddingTable,
    OffloadWorkerError,
    default_chunk_size,
    default_super_batch_size,
)
from pyg_orch.offload.hetero_layer import (
    HeteroBottomLayerComputer,
    find_hetero_first_layer,
)
from pyg_orch.offload.hotness import (
    HotSet,
    count_bottom_accesses,
    select_cache_nodes,
    select_hetero_hot_nodes,
    select_hot_nodes,
)
from pyg_orch.offload.step_counter import StepCounter
from pyg_orch.offload.workers import THREAD_NAME_PREFIX, WorkerPool
from pyg_orch.offload.wrapper import (
    BottomLayerOffload,
    default_intra_op_threads,
    default_num_threads,
)

__all__ = [
    'BatchEmbeddingCache',
    'BipartiteLayerComputer',
    'BottomLayerOffload',
    'BottomLayerComputer',
    'EmbeddingPipeline',
    'EmbeddingTable',
    'HeteroBottomLayerComputer',
    'HotSet',
    'OffloadWorkerError',
    'StepCounter',
    'THREAD_NAME_PREFIX',
    'WorkerPool',
    'count_bottom_accesses',
    'default_chunk_size',
    'default_intra_op_threads',
    'default_num_threads',
    'default_super_batch_size',
    'find_first_layer',
    'find_hetero_first_layer',
    'select_cache_nodes',
    'select_hetero_hot_nodes',
    'select_hot_nodes',
]
