"""A PyG :class:`~torch_geometric.sampler.BaseSampler` over the sampling
backends."""
import os
from typing import Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.sampler import (
    BaseSampler,
    EdgeSamplerInput,
    HeteroSamplerOutput,
    NegativeSampling,
    NodeSamplerInput,
    SamplerOutput,
)
from torch_geometric.sampler.base import SubgraphType
from torch_geometric.sampler.neighbor_sampler import node_sample

from pyg_orch.sampling.interface import BackendConfig, SampleRequest
from pyg_orch.topology.graph import GraphTopology
from pyg_orch.sampling.arguments import (
    as_subgraph_type,
    check_attr_names,
    check_bools,
    check_choice,
    check_placement,
    node_seed_times,
    parse_num_neighbors,
    parse_subgraph_type,
    resolve_device,
)
from pyg_orch.sampling.backends import (
    backend_names,
    choose_backend,
    create_backend,
)
from pyg_orch.sampling.contract import HotNodes, HotNodesMixin
from pyg_orch.sampling.edges import sample_from_edges
from pyg_orch.sampling.pending import PendingSample
from pyg_orch.topology.cache import topology_cache
from pyg_orch.typing import DeviceLike, GraphData, NumNeighborsType, SeedLike

__all__ = ['HybridNeighborSampler', 'SeedLike', 'resolve_device']


class HybridNeighborSampler(HotNodesMixin, BaseSampler):
    r"""Neighbor sampler with the semantics of PyG's
    :class:`~torch_geometric.sampler.NeighborSampler`, running vectorized
    PyTorch ops (or Triton kernels) on the CPU or the GPU, without
    :obj:`pyg-lib` or :obj:`torch-sparse`.

    Args:
        data (Data or HeteroData or Tuple[FeatureStore, GraphStore]): The
            graph.
        num_neighbors (List[int] or Dict or NumNeighbors): The fan-out per hop
            (:obj:`-1` for all neighbors), or per edge type.
        subgraph_type (str): :obj:`'directional'`, :obj:`'bidirectional'` or
            :obj:`'induced'`. (default: :obj:`'directional'`)
        replace (bool): Sample with replacement. (default: :obj:`False`)
        disjoint (bool): Give every seed its own subgraph. (default:
            :obj:`False`)
        temporal_strategy (str): :obj:`'uniform'` or :obj:`'last'`. (default:
            :obj:`'uniform'`)
        time_attr (str, optional): A node-level or edge-level time attribute;
            sampled neighbors are never later than their seed's time. Implies
            :obj:`disjoint=True`, as in PyG.
        weight_attr (str, optional): An edge attribute of non-negative sampling
            weights (not for store pairs, as in PyG).
        is_sorted (bool): :obj:`edge_index` is sorted by destination (and by
            time within neighborhoods); checked. (default: :obj:`False`)
        share_memory (bool): Move the topology into shared memory (for
            :obj:`num_workers > 0`). (default: :obj:`False`)
        device (torch.device or str, optional): Where sampling runs; defaults
            to CUDA when available.
        seed (int or torch.Generator, optional): Makes sampling reproducible.
        topology (GraphTopology, optional): A topology built before, to share
            it between loaders.
        relabel (str): How global node ids become local ones: :obj:`'sort'`,
            :obj:`'dense'` (a dense array per node type, reused) or
            :obj:`'auto'`. (default: :obj:`'auto'`)
        backend (str): :obj:`'triton'`, :obj:`'torch'`, :obj:`'auto'` (Triton
            where installed and applicable), or the name of a backend
            registered with
            :func:`~pyg_orch.sampling.backends.register_backend`. (default:
            :obj:`'auto'`)
        topology_placement (str or TopologySharding): On CUDA, :obj:`'device'`
            (GPU memory), :obj:`'host'` (pinned host memory read zero-copy),
            :obj:`'auto'` (on the device if it takes under half of the free
            memory), or :obj:`'sharded'` (split across the machine's GPUs; a
            :class:`~pyg_orch.multigpu.TopologySharding` sets its options).
            (default: :obj:`'auto'`)"""
    def __init__(
        self,
        data: GraphData,
        num_neighbors: NumNeighborsType,
        subgraph_type: Union[SubgraphType, str] = 'directional',
        replace: bool = False,
        disjoint: bool = False,
        temporal_strategy: str = 'uniform',
        time_attr: Optional[str] = None,
        weight_attr: Optional[str] = None,
        is_sorted: bool = False,
        share_memory: bool = False,
        directed: bool = True,
        device: DeviceLike = None,
        seed: SeedLike = None,
        topology: Optional[GraphTopology] = None,
        relabel: str = 'auto',
        backend: str = 'auto',
        topology_placement: str = 'auto',
    ):
        check_choice('temporal_strategy', temporal_strategy,
                     ('uniform', 'last'))
        check_attr_names(time_attr=time_attr, weight_attr=weight_attr)
        check_bools(replace=replace, is_sorted=is_sorted,
                    share_memory=share_memory)
        self.subgraph_type = parse_subgraph_type(
            subgraph_type, directed, disjoint,
            temporal=time_attr is not None)
        check_choice('relabel', relabel, ('auto', 'dense', 'sort'))
        check_choice('backend', backend, ['auto'] + backend_names())
        topology_placement = check_placement(topology_placement)
        self.device = resolve_device(device)
        if topology is None:
            topology = topology_cache.get_or_build(data, is_sorted,
                                                   self.device, time_attr,
                                                   weight_attr)
        elif not isinstance(topology, GraphTopology):
            raise TypeError(f"'topology' must be a GraphTopology (got "
                            f"{type(topology).__name__})")
        elif (topology.time_attr != time_attr
              or topology.weight_attr != weight_attr):
            raise ValueError(
                f"'topology' was built with time_attr="
                f"{topology.time_attr!r} and weight_attr="
                f"{topology.weight_attr!r}, but the sampler asks for "
                f"{time_attr!r} and {weight_attr!r}")
        else:
            topology.check_graph(data)
        fanouts = parse_num_neighbors(num_neighbors, topology.edge_types)
        flat = [k for v in fanouts.values() for k in v]  # None: all read.
        self.topology = self._place(topology, topology_placement, None if any(
            k < 0 for k in flat) else max(flat, default=0))
        if share_memory:
            self.topology.share_memory_()
        topology = self.topology
        self.is_hetero = topology.is_hetero
        self.num_neighbors = fanouts
        self.replace = bool(replace)
        self.disjoint = bool(disjoint)
        self.temporal_strategy = temporal_strategy
        self.relabel = relabel
        self._set_seed(seed)
        config = BackendConfig(
            topology=topology, num_neighbors=self.num_neighbors,
            device=self.device, replace=self.replace,
            disjoint=self.disjoint,
            induced=self.subgraph_type == SubgraphType.induced,
            temporal_strategy=temporal_strategy, relabel=relabel)
        #: The name of the sampling backend (see
        #: :mod:`pyg_orch.sampling.backends`).
        self.backend: str = choose_backend(backend, config)
        self._backend = create_backend(self.backend, config)
        self._hot = HotNodes()

    # The contract of `pyg_orch.sampling.contract.HotNodeSampler` #############

    @property
    def num_hops(self) -> int:
        r"""The number of hops (layers) sampled."""
        return max((len(v) for v in self.num_neighbors.values()), default=0)

    def bottom_fanout(self, edge_type=None) -> int:
        r"""The fan-out of the last hop for :obj:`edge_type` (:obj:`None`
        for homogeneous graphs; :obj:`-1` for all neighbors)."""
        if edge_type not in self.num_neighbors:
            raise ValueError(f"'edge_type' {edge_type!r} is not an edge type "
                             f"of the graph ({list(self.num_neighbors)})")
        fanouts = self.num_neighbors[edge_type]
        if not fanouts:
            raise ValueError("the sampler samples no hop")
        return int(fanouts[-1])

    def _generators(self) -> List[Optional[torch.Generator]]:
        return [self._generator, self._host_generator]

    def _place(self, topology: GraphTopology, placement,
               max_fanout: Optional[int]) -> GraphTopology:
        if topology.is_sharded:
            return topology
        if not isinstance(placement, str):  # A `TopologySharding`.
            from pyg_orch.topology.sharded import \
                shard_graph_topology
            return shard_graph_topology(topology, self.device, placement,
                                        max_fanout)
        if self.device.type != 'cuda':
            return topology.to(self.device)
        if placement == 'auto':
            if topology.device.type == 'cuda':
                placement = 'device'
            else:
                free, _ = torch.cuda.mem_get_info(self.device)
                placement = 'device' if topology.nbytes() < free // 2 \
                    else 'host'
        if placement == 'device':
            return topology.to(self.device)
        return topology if topology.is_pinned else topology.pin_memory()

    @property
    def sample_device(self) -> torch.device:
        r"""Where the PyTorch sampling path runs: the topology's device."""
        return self.topology.device

    # Randomness ##############################################################

    def _set_seed(self, seed: SeedLike):
        self._generator: Optional[torch.Generator] = None
        self._seed: Optional[int] = None
        if isinstance(seed, torch.Generator):
            if seed.device.type != self.device.type:
                raise ValueError(f"'seed' is a generator on "
                                 f"{seed.device.type!r}, but sampling runs on "
                                 f"{self.device.type!r}")
            self._generator = seed
            self._seed = seed.initial_seed()
        elif seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, int):
                raise ValueError(f"'seed' must be an int or a torch.Generator "
                                 f"(got {type(seed).__name__})")
            self._seed = seed
            self._generator = torch.Generator(device=self.device)
            self._generator.manual_seed(seed)
        self._worker_generator: Optional[Tuple[int, torch.Generator]] = None
        self._host_generator: Optional[torch.Generator] = None
        if self._seed is not None and self.sample_device != self.device:
            self._host_generator = torch.Generator(device=self.sample_device)
            self._host_generator.manual_seed(self._seed)

    @property
    def generator(self) -> Optional[torch.Generator]:
        r"""The generator of the calling process (seeded per
        :class:`~torch.utils.data.DataLoader` worker)."""
        info = torch.utils.data.get_worker_info()
        if info is None or self._seed is None:
            return self._generator
        key = (os.getpid(), info.seed)
        if self._worker_generator is None or self._worker_generator[0] != key:
            gen = torch.Generator(device=self.device)
            gen.manual_seed((self._seed * 1_000_003 + info.seed) % 2**63)
            self._worker_generator = (key, gen)
        return self._worker_generator[1]

    def __getstate__(self):
        state = self.__dict__.copy()
        # Generators do not pickle; workers reseed (see `generator`).
        for key in ('_generator', '_worker_generator', '_host_generator'):
            state[key] = None
        return state

    # Sampling ################################################################

    @property
    def is_temporal(self) -> bool:
        return self.topology.is_temporal

    @property
    def disjoint(self) -> bool:
        # As in PyG, temporal sampling always samples disjoint subgraphs.
        return self._disjoint or self.is_temporal

    @disjoint.setter
    def disjoint(self, disjoint: bool):
        self._disjoint = disjoint

    @property
    def num_nodes(self):
        n = self.topology.num_nodes
        return n[None] if not self.is_hetero else n

    @property
    def edge_permutation(self):
        return None  # `edge` already holds original edge ids.

    # `pyg_orch.sampling.edges.SeedSampler`:

    @property
    def global_num_nodes(self) -> Dict:
        return self.topology.num_nodes

    @property
    def global_node_time(self) -> Optional[Dict]:
        return self.topology.node_time

    def sample_seeds(self, seed, seed_time=None):
        return self._sample(seed, seed_time)

    def sample_from_nodes(
        self,
        inputs: NodeSamplerInput,
    ) -> Union[SamplerOutput, HeteroSamplerOutput]:
        return as_subgraph_type(node_sample(inputs, self._sample),
                                self.subgraph_type)

    @property
    def launches_async(self) -> bool:
        r"""Whether :meth:`launch_from_nodes` returns before the batch is
        sampled."""
        return self._backend.asynchronous

    def launch_from_nodes(self, inputs: NodeSamplerInput) -> PendingSample:
        r"""Starts :meth:`sample_from_nodes` (on the fused GPU path, returns
        once the kernels are queued)."""
        if (not self.launches_async or self.is_temporal
                or self.is_hetero != (inputs.input_type is not None)):
            return PendingSample.ready(self.sample_from_nodes(inputs))
        pending = self._backend.launch(
            self._request({inputs.input_type: inputs.node}))

        def finish() -> SamplerOutput:
            out = pending.result().to_pyg(self.is_hetero)
            out.metadata = (inputs.input_id, inputs.time)
            return as_subgraph_type(out, self.subgraph_type)

        return PendingSample(finish)

    def sample_from_edges(
        self,
        inputs: EdgeSamplerInput,
        neg_sampling: Optional[NegativeSampling] = None,
    ) -> Union[SamplerOutput, HeteroSamplerOutput]:
        # PyG's `edge_sample`, with negatives drawn on `device`:
        return as_subgraph_type(sample_from_edges(self, inputs, neg_sampling),
                                self.subgraph_type)

    def _sample(
        self,
        seed: Union[Tensor, Dict[str, Tensor]],
        seed_time=None,
        **kwargs,
    ) -> Union[SamplerOutput, HeteroSamplerOutput]:
        seeds = seed if isinstance(seed, dict) else {None: seed}
        times = None
        if self.is_temporal:
            if seed_time is not None:
                times = seed_time if isinstance(seed_time, dict) else \
                    {None: seed_time}
            else:  # A seed's time bound is its node's own time:
                times = node_seed_times(self.topology.node_time,
                                        self.topology.time_attr, seeds)
        out = self._backend.sample(self._request(seeds, times))
        return out.to_pyg(self.is_hetero)

    def _request(self, seeds: Dict, seed_time: Optional[Dict] = None
                 ) -> SampleRequest:
        return SampleRequest(seeds=seeds, generator=self.generator,
                             host_generator=self._host_generator,
                             seed_time=seed_time, hot_nodes=self.hot_nodes)
