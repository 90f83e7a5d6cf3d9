r"""Link-level sampling (PyG's
:func:`~torch_geometric.sampler.neighbor_sampler.edge_sample`) on the
sampler's device."""
import math
from typing import (
    Any,
    Dict,
    Optional,
    Protocol,
    Tuple,
    Union,
    runtime_checkable,
)

import torch
from torch import Tensor
from torch_geometric.sampler import (
    EdgeSamplerInput,
    HeteroSamplerOutput,
    NegativeSampling,
    SamplerOutput,
)

from pyg_orch.sampling.negative import num_negatives, sample_negatives
from pyg_orch.typing import NodeType


@runtime_checkable
class SeedSampler(Protocol):
    r"""What :func:`sample_from_edges` needs from a sampler (node counts and
    times of the whole graph, global ids)."""
    device: torch.device

    @property
    def generator(self) -> Optional[torch.Generator]:
        r"""The generator of the draws (negatives included)."""

    @property
    def disjoint(self) -> bool:
        r"""Whether every seed gets its own subgraph."""

    @property
    def global_num_nodes(self) -> Dict[Optional[NodeType], int]:
        r"""The whole graph's number of vertices per node type."""

    @property
    def global_node_time(self) -> Optional[Dict[Optional[NodeType], Tensor]]:
        r"""The time of every vertex per node type, or :obj:`None`."""

    def sample_seeds(self, seed: Any, seed_time: Any = None) -> Any:
        r"""PyG's node samplers' :obj:`_sample` (not made bidirectional)."""


class _DeviceCache:
    r"""Device copies of what negative sampling reads every batch."""
    def __init__(self):
        self.tensors: Dict[Tuple, Tuple[Tensor, Tensor]] = {}

    def get(self, key: Tuple, value: Optional[Tensor],
            device: torch.device) -> Optional[Tensor]:
        if value is None:
            return None
        hit = self.tensors.get(key)
        if hit is not None and hit[0] is value:
            return hit[1]
        moved = value.to(device)
        if key[0] == 'weight' and not moved.is_floating_point():
            moved = moved.to(torch.float)  # For `torch.multinomial`.
        self.tensors[key] = (value, moved)
        return moved


def sample_from_edges(
    sampler: SeedSampler,
    inputs: EdgeSamplerInput,
    neg_sampling: Optional[NegativeSampling] = None,
) -> Union[SamplerOutput, HeteroSamplerOutput]:
    r"""Samples the subgraph around a batch of label edges with
    :obj:`sampler` (a :class:`SeedSampler`), with PyG's
    :func:`~torch_geometric.sampler.neighbor_sampler.edge_sample` semantics,
    everything on :obj:`sampler.device`."""
    device = sampler.device
    cache = sampler.__dict__.setdefault('_link_device_cache',
                                        _DeviceCache())
    disjoint = sampler.disjoint
    input_type = inputs.input_type
    src = inputs.row.to(device, torch.int64, non_blocking=True)
    dst = inputs.col.to(device, torch.int64, non_blocking=True)
    edge_label = None if inputs.label is None else inputs.label.to(
        device, non_blocking=True)
    edge_label_time = inputs.time
    if edge_label_time is not None:
        edge_label_time = edge_label_time.to(device, non_blocking=True)
        if not disjoint:
            raise ValueError("'edge_label_time' needs temporal sampling "
                             "('time_attr'), which samples disjoint "
                             "subgraphs")
    src_time = dst_time = edge_label_time

    num_nodes = sampler.global_num_nodes
    node_time = sampler.global_node_time
    src_type, dst_type = (None, None) if input_type is None else (
        input_type[0], input_type[-1])
    num_pos = src.numel()
    triplet = neg_sampling is not None and neg_sampling.is_triplet()
    if neg_sampling is not None:
        num_neg = num_negatives(num_pos, neg_sampling)

        def negatives(seed: Tensor, node_type, key: str,
                      weight: Optional[Tensor]) -> Tensor:
            time = None if node_time is None or edge_label_time is None \
                else cache.get(('time', node_type), node_time.get(node_type),
                               device)
            return sample_negatives(
                seed, neg_sampling, num_nodes[node_type],
                cache.get(('weight', key), weight, device), edge_label_time,
                time, sampler.generator)

        if not triplet:  # Binary: negative pairs.
            src = torch.cat([src, negatives(src, src_type, 'src',
                                            neg_sampling.src_weight)])
        # Triplet: negative destinations per positive.
        dst = torch.cat([dst, negatives(dst, dst_type, 'dst',
                                        neg_sampling.dst_weight)])
        if not triplet:
            if edge_label is None:
                edge_label = torch.ones(num_pos, device=device)
            size = (num_neg, ) + edge_label.size()[1:]
            edge_label = torch.cat([edge_label, edge_label.new_zeros(size)])
            if edge_label_time is not None:
                src_time = dst_time = edge_label_time.repeat(
                    1 + math.ceil(neg_sampling.amount))[:num_pos + num_neg]
        elif edge_label_time is not None:
            dst_time = edge_label_time.repeat(1 + neg_sampling.amount)

    # Each endpoint's position among the seeds:
    two_types = input_type is not None and src_type != dst_type
    if two_types:  # Seeds of each type.
        if not disjoint:
            src, inv_src = src.unique(return_inverse=True)
            dst, inv_dst = dst.unique(return_inverse=True)
        seeds = {src_type: src, dst_type: dst}
        seed_time = None if edge_label_time is None else {
            src_type: src_time, dst_type: dst_time}
    else:  # One node type: source and destination seeds merged.
        seeds = torch.cat([src, dst], dim=0)
        if not disjoint:
            seeds, inverse = seeds.unique(return_inverse=True)
            inv_src, inv_dst = inverse[:src.numel()], inverse[src.numel():]
        seed_time = None if edge_label_time is None else torch.cat(
            [src_time, dst_time])
        if input_type is not None:
            seeds = {src_type: seeds}
            seed_time = None if seed_time is None else {src_type: seed_time}
    if disjoint:  # Every endpoint roots its own subgraph.
        inv_src = torch.arange(src.numel(), device=device)
        inv_dst = torch.arange(dst.numel(), device=device)
        if not two_types:
            inv_dst += src.numel()
    out = sampler.sample_seeds(seeds, seed_time)
    if disjoint:
        out.batch = out.batch % num_pos if input_type is None else {
            k: v % num_pos for k, v in out.batch.items()}

    if not triplet:
        out.metadata = (inputs.input_id, torch.stack([inv_src, inv_dst]),
                        edge_label, src_time)
    else:
        dst_neg_index = inv_dst[num_pos:]
        if disjoint:
            dst_neg_index = dst_neg_index.view(-1, num_pos).t()
        dst_neg_index = dst_neg_index.reshape(num_pos, -1).squeeze(-1)
        out.metadata = (inputs.input_id, inv_src, inv_dst[:num_pos],
                        dst_neg_index, src_time)
    return out
