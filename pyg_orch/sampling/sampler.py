"""A PyG :class:`~torch_geometric.sampler.BaseSampler` over the vectorized
sampling core, usable wherever PyG takes a sampler."""
import numbers
import os
import warnings
from contextlib import contextmanager
from typing import Dict, Iterator, List, Optional, Tuple, Union

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
from torch_geometric.sampler.neighbor_sampler import edge_sample, node_sample

from pyg_orch.sampling.contract import preserved_generators
from pyg_orch.sampling.multi_hop import sample_multi_hop
from pyg_orch.sampling.pending import PendingSample
from pyg_orch.sampling.relabel import DenseBufferPool
from pyg_orch.sampling.topology import GraphTopology, topology_cache

SeedLike = Union[None, int, torch.Generator]


def resolve_device(device: Union[None, str, torch.device]) -> torch.device:
    r"""Returns :obj:`device`, defaulting to CUDA when available."""
    if device is None:
        device = 'cuda' if torch.cuda.is_available() else 'cpu'
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"'device' must be a torch.device or a string such "
                         f"as 'cpu' or 'cuda:0' (got {device!r})") from e
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise ValueError(f"'device' is {str(device)!r}, but CUDA is not "
                         f"available on this machine; use device='cpu'")
    if device.type not in ('cpu', 'cuda'):
        raise ValueError(f"'device' must be a CPU or CUDA device "
                         f"(got {str(device)!r})")
    if device.type == 'cuda' and device.index is None:
        device = torch.device('cuda', torch.cuda.current_device())
    return device


def parse_num_neighbors(num_neighbors, edge_types: List) -> Dict:
    r"""Validates :obj:`num_neighbors` (a list, or a dict per edge type) and
    returns the fan-out list of every edge type."""
    def check_list(values, where: str) -> List[int]:
        if not isinstance(values, (list, tuple)):
            raise ValueError(f"'num_neighbors'{where} must be a list of "
                             f"integers (got {type(values).__name__})")
        out = []
        for v in values:
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise ValueError(f"'num_neighbors'{where} must hold integers "
                                 f"(got {v!r})")
            if v < -1:
                raise ValueError(f"'num_neighbors'{where} must hold integers "
                                 f">= -1, where -1 takes all neighbors "
                                 f"(got {v})")
            out.append(int(v))
        return out

    from torch_geometric.sampler.base import NumNeighbors
    if isinstance(num_neighbors, NumNeighbors):
        if num_neighbors.default is not None:
            raise NotImplementedError(
                "'num_neighbors' with a 'default' is not supported yet; pass "
                "a dict with every edge type")
        num_neighbors = num_neighbors.values
    if isinstance(num_neighbors, dict):
        if edge_types == [None]:
            raise ValueError("'num_neighbors' must be a list for homogeneous "
                             "graphs (got a dict)")
        given = {}
        for key, values in num_neighbors.items():
            et = tuple(key.split('__')) if isinstance(key, str) else tuple(key)
            if et not in edge_types:
                raise ValueError(f"'num_neighbors' names the edge type {key!r}"
                                 f", which is not in the graph (edge types: "
                                 f"{edge_types})")
            given[et] = check_list(values, f"[{key!r}]")
        missing = [et for et in edge_types if et not in given]
        if missing:
            raise ValueError(f"'num_neighbors' misses the edge types "
                             f"{missing}; give a fan-out list for every edge "
                             f"type (0 to skip one)")
        hops = {len(v) for v in given.values()}
        if len(hops) > 1:
            raise ValueError(f"'num_neighbors' must give the same number of "
                             f"hops for every edge type (got {sorted(hops)})")
        return given
    values = check_list(num_neighbors, '')
    return {et: values for et in edge_types}


class HybridNeighborSampler(BaseSampler):
    r"""Neighbor sampler with the semantics of PyG's
    :class:`~torch_geometric.sampler.NeighborSampler`, running vectorized
    PyTorch ops on the CPU or the GPU, without :obj:`pyg-lib` or
    :obj:`torch-sparse`.

    Args:
        data (Data or HeteroData or Tuple[FeatureStore, GraphStore]): The
            graph.
        num_neighbors (List[int] or Dict[Tuple[str, str, str], List[int]]):
            The fan-out per hop (:obj:`-1` for all neighbors), or per edge
            type.
        subgraph_type (str): :obj:`'directional'`, :obj:`'bidirectional'` or
            :obj:`'induced'`. (default: :obj:`'directional'`)
        replace (bool): Sample with replacement. (default: :obj:`False`)
        disjoint (bool): Give every seed its own subgraph.
            (default: :obj:`False`)
        temporal_strategy (str): :obj:`'uniform'` samples uniformly among
            the neighbors not later than the seed; :obj:`'last'` takes the
            most recent ones. (default: :obj:`'uniform'`)
        time_attr (str, optional): A node-level or edge-level time attribute;
            sampled neighbors (or edges) are never later than their seed's
            time (:obj:`input_time`, or the seed node's own time). Implies
            :obj:`disjoint=True`, as in PyG.
        weight_attr (str, optional): An edge attribute of non-negative
            weights; neighbors are drawn with probability proportional to
            them, zero-weight edges never.
        is_sorted (bool): :obj:`edge_index` is sorted by destination (and by
            time within neighborhoods for temporal sampling); checked.
            (default: :obj:`False`)
        share_memory (bool): Move the topology into shared memory (for
            :obj:`num_workers > 0`). (default: :obj:`False`)
        device (torch.device or str, optional): Where sampling runs; defaults
            to CUDA when available.
        seed (int or torch.Generator, optional): Makes sampling reproducible.
        topology (GraphTopology, optional): A topology built before, to share
            it between loaders.
        backend (str): :obj:`'triton'` for the fused GPU kernels,
            :obj:`'torch'` for the vectorized PyTorch path, :obj:`'auto'`
            for Triton where it is installed and handles the configuration
            (CUDA, homogeneous, uniform, fan-outs in :obj:`[0, 64]`).
            (default: :obj:`'auto'`)
        topology_placement (str): On CUDA, :obj:`'device'` keeps the topology
            in GPU memory, :obj:`'host'` in pinned host memory read zero-copy
            by the Triton kernels, :obj:`'auto'` on the device if it takes
            under half of the free GPU memory. (default: :obj:`'auto'`)
    """
    def __init__(
        self,
        data,
        num_neighbors,
        subgraph_type: Union[SubgraphType, str] = 'directional',
        replace: bool = False,
        disjoint: bool = False,
        temporal_strategy: str = 'uniform',
        time_attr: Optional[str] = None,
        weight_attr: Optional[str] = None,
        is_sorted: bool = False,
        share_memory: bool = False,
        directed: bool = True,
        device: Union[None, str, torch.device] = None,
        seed: SeedLike = None,
        topology: Optional[GraphTopology] = None,
        relabel: str = 'auto',
        backend: str = 'auto',
        topology_placement: str = 'auto',
    ):
        if temporal_strategy not in ('uniform', 'last'):
            raise ValueError(f"'temporal_strategy' must be 'uniform' or "
                             f"'last' (got {temporal_strategy!r})")
        for name, value in (('time_attr', time_attr),
                            ('weight_attr', weight_attr)):
            if value is not None and not isinstance(value, str):
                raise ValueError(f"'{name}' must be the name of an attribute "
                                 f"(got {type(value).__name__})")
        if not directed:
            warnings.warn(
                "The usage of the 'directed' argument is deprecated. Use "
                "`subgraph_type='induced'` instead.", stacklevel=2)
            subgraph_type = SubgraphType.induced
        try:
            self.subgraph_type = SubgraphType(subgraph_type)
        except ValueError:
            raise ValueError(f"'subgraph_type' must be one of 'directional', "
                             f"'bidirectional' or 'induced' (got "
                             f"{subgraph_type!r})") from None
        if disjoint and self.subgraph_type == SubgraphType.induced:
            raise ValueError("'disjoint' sampling is not supported with "
                             "subgraph_type='induced'")
        if relabel not in ('auto', 'dense', 'sort'):
            raise ValueError(f"'relabel' must be 'auto', 'dense' or 'sort' "
                             f"(got {relabel!r})")

        if backend not in ('auto', 'torch', 'triton'):
            raise ValueError(f"'backend' must be 'auto', 'torch' or 'triton' "
                             f"(got {backend!r})")
        if topology_placement not in ('auto', 'device', 'host'):
            raise ValueError(f"'topology_placement' must be 'auto', 'device' "
                             f"or 'host' (got {topology_placement!r})")
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
        self.topology = self._place(topology, topology_placement)
        if share_memory:
            self.topology.share_memory_()
        topology = self.topology
        self.is_hetero = topology.is_hetero
        self.num_neighbors = parse_num_neighbors(num_neighbors,
                                                 topology.edge_types)
        self.replace = bool(replace)
        self.disjoint = bool(disjoint)
        self.temporal_strategy = temporal_strategy
        if self.is_temporal and self.subgraph_type == SubgraphType.induced:
            raise ValueError("subgraph_type='induced' is not supported with "
                             "temporal sampling ('time_attr'), which always "
                             "samples disjoint subgraphs, as in PyG")
        self.relabel = relabel
        self._buffers = DenseBufferPool() if relabel != 'sort' else None
        self._set_seed(seed)
        self.backend = self._choose_backend(backend)
        if self.backend == 'triton':
            from pyg_orch.gpu.fused_sampler import FusedSampler
            self._fused = FusedSampler()
        self._hot_nodes: Optional[Dict] = None

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

    @property
    def hot_nodes(self) -> Optional[Dict]:
        r"""The masks of hot nodes per node type (:obj:`None` for
        homogeneous graphs) that the last hop does not expand, or
        :obj:`None` if pruning is off; see :meth:`set_hot_nodes`."""
        return self._hot_nodes

    @contextmanager
    def presampling(self, prune_hot: bool = False) -> Iterator[None]:
        r"""A context for drawing batches that do not change later ones:
        the random generators and the hot nodes are restored on exit, and
        hot-node pruning is off inside unless :obj:`prune_hot`."""
        saved = self._hot_nodes
        if not prune_hot:
            self._hot_nodes = None
        try:
            with preserved_generators(self._generator, self._host_generator):
                yield
        finally:
            self._hot_nodes = saved

    def set_hot_nodes(self, hot_nodes) -> None:
        r"""Marks hot nodes (a boolean mask over the nodes, or a dict of masks
        per node type; :obj:`None` to clear): in the last hop, hot nodes are
        not expanded, since their bottom-layer output is computed elsewhere.
        """
        if hot_nodes is None:
            self._hot_nodes = None
            return
        masks = hot_nodes if isinstance(hot_nodes, dict) else {
            None: hot_nodes
        }
        out = {}
        for t, mask in masks.items():
            n = self.topology.num_nodes.get(t)
            if n is None:
                raise ValueError(f"'hot_nodes' names the node type {t!r}, "
                                 f"which is not in the graph")
            if (not isinstance(mask, Tensor) or mask.dtype != torch.bool
                    or mask.shape != (n, )):
                raise ValueError(f"'hot_nodes' must be a boolean mask of "
                                 f"shape [{n}] for node type {t!r}")
            out[t] = mask.to(self.device)
        self._hot_nodes = out

    def _place(self, topology: GraphTopology,
               placement: str) -> GraphTopology:
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

    def _choose_backend(self, backend: str) -> str:
        from pyg_orch.gpu.fused_sampler import supports, triton_available
        fused_ok = (self.device.type == 'cuda' and triton_available()
                    and self.relabel != 'sort' and supports(
                        self.topology, self.num_neighbors, self.disjoint,
                        self.subgraph_type == SubgraphType.induced))
        if backend == 'triton' and not fused_ok:
            raise ValueError(
                "backend='triton' needs a CUDA device, Triton, and a "
                "homogeneous graph with uniform, non-disjoint, non-induced "
                "sampling and fan-outs in [0, 64]; use backend='auto'")
        if backend == 'auto':
            return 'triton' if fused_ok else 'torch'
        return backend

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
        r"""The generator for the calling process. Inside a
        :class:`~torch.utils.data.DataLoader` worker, a generator seeded from
        the worker's seed, so workers draw different neighbors."""
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
        state['_generator'] = None
        state['_worker_generator'] = None
        state['_host_generator'] = None
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

    def sample_from_nodes(
        self,
        inputs: NodeSamplerInput,
    ) -> Union[SamplerOutput, HeteroSamplerOutput]:
        out = node_sample(inputs, self._sample)
        if self.subgraph_type == SubgraphType.bidirectional:
            out = out.to_bidirectional()
        return out

    def launch_from_nodes(self, inputs: NodeSamplerInput) -> PendingSample:
        r"""Starts :meth:`sample_from_nodes`. On the fused GPU path the
        kernels are queued on the current stream and this returns at once,
        so the host can queue more work (e.g. a training step) before the
        batch is read; elsewhere the batch is sampled now.
        :meth:`PendingSample.result` returns the
        :class:`~torch_geometric.sampler.SamplerOutput`."""
        if (self.backend != 'triton' or self.is_hetero
                or inputs.input_type is not None or self.is_temporal):
            return PendingSample.ready(self.sample_from_nodes(inputs))
        pending = self._fused.launch(
            self.topology.csc[None], self.topology.num_nodes[None],
            self.num_neighbors[None], inputs.node, self.replace,
            self.generator, self._buffers, self.device,
            None if self.hot_nodes is None else self.hot_nodes[None])

        def finish() -> SamplerOutput:
            out = self._wrap(pending.result())
            out.metadata = (inputs.input_id, inputs.time)
            if self.subgraph_type == SubgraphType.bidirectional:
                out = out.to_bidirectional()
            return out

        return PendingSample(finish)

    def sample_from_edges(
        self,
        inputs: EdgeSamplerInput,
        neg_sampling: Optional[NegativeSampling] = None,
    ) -> Union[SamplerOutput, HeteroSamplerOutput]:
        node_time = self.topology.node_time
        if node_time is not None and not self.is_hetero:
            node_time = node_time[None]
        out = edge_sample(inputs, self._sample, self.num_nodes, self.disjoint,
                          node_time, neg_sampling)
        if self.subgraph_type == SubgraphType.bidirectional:
            out = out.to_bidirectional()
        return out

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
            elif self.topology.node_time is not None:
                times = {
                    t: self.topology.node_time[t].index_select(
                        0, s.to(self.sample_device, torch.int64))
                    for t, s in seeds.items()
                }
            else:
                raise ValueError(
                    "Edge-level temporal sampling needs a time per seed: "
                    "pass 'input_time'")
        if self.backend == 'triton':
            out = self._fused(
                self.topology.csc[None], self.topology.num_nodes[None],
                self.num_neighbors[None], seeds[None], self.replace,
                self.generator, self._buffers, self.device,
                None if self.hot_nodes is None else self.hot_nodes[None])
        else:
            on_host = self.sample_device != self.device
            out = sample_multi_hop(
                self.topology,
                self.num_neighbors,
                seeds,
                replace=self.replace,
                disjoint=self.disjoint,
                induced=self.subgraph_type == SubgraphType.induced,
                generator=self._host_generator if on_host else self.generator,
                buffers=self._buffers,
                seed_time=times,
                temporal_strategy=self.temporal_strategy,
                prune_last_hop=None if self.hot_nodes is None else {
                    k: v.to(self.sample_device)
                    for k, v in self.hot_nodes.items()
                },
            )
            if on_host:
                out = _move(out, self.device)
        return self._wrap(out)

    def _wrap(self, out) -> Union[SamplerOutput, HeteroSamplerOutput]:
        if not self.is_hetero:
            return SamplerOutput(
                node=out.node[None],
                row=out.row[None],
                col=out.col[None],
                edge=out.edge[None],
                batch=None if out.batch is None else out.batch[None],
                num_sampled_nodes=out.num_sampled_nodes[None],
                num_sampled_edges=None if out.num_sampled_edges is None else
                out.num_sampled_edges[None],
            )
        return HeteroSamplerOutput(
            node=out.node,
            row=out.row,
            col=out.col,
            edge=out.edge,
            batch=out.batch,
            num_sampled_nodes=out.num_sampled_nodes,
            num_sampled_edges=out.num_sampled_edges,
        )


def _move(out, device: torch.device):
    def mv(d):
        return None if d is None else {
            k: v.to(device) if isinstance(v, Tensor) else v
            for k, v in d.items()
        }

    out.node, out.row, out.col, out.edge = (mv(out.node), mv(out.row),
                                            mv(out.col), mv(out.edge))
    out.batch = mv(out.batch)
    return out
