"""Access statistics from pre-sampling: which nodes batches touch most."""
import itertools
from typing import Any, Callable, Dict, Iterator, Optional, Union

import torch
from torch import Tensor
from torch_geometric.sampler import (
    EdgeSamplerInput,
    NegativeSampling,
    NodeSamplerInput,
)


def count_node_access(
    sampler,
    input_nodes: Tensor,
    batch_size: int,
    num_batches: Optional[int] = None,
    hops: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
    input_time: Optional[Tensor] = None,
    prune_hot: bool = False,
    input_type: Optional[str] = None,
) -> Union[Tensor, Dict[str, Tensor]]:
    r"""Counts how often every node appears in sampled batches (hot-node
    pruning off unless :obj:`prune_hot`; the sampler's generators are restored
    afterwards). Returns int64 counts per node on the CPU (a dict per node type
    for heterogeneous graphs).

    Args:
        sampler (HotNodeSampler): The sampler of the loader.
        input_nodes (torch.Tensor): The seed nodes (indices).
        batch_size (int): Seeds per batch.
        num_batches (int, optional): Batches to sample (from a shuffled order
            of the seeds, repeated as needed); one epoch if not set.
        hops (int, optional): Only count nodes of hops :obj:`0..hops-1`.
        generator (torch.Generator, optional): For the seed order.
        input_time (torch.Tensor, optional): The seeds' times.
        prune_hot (bool): Keep the sampler's hot-node pruning on. (default:
            :obj:`False`)
        input_type (str, optional): The node type of the seeds."""
    if sampler.is_hetero and input_type is None:
        raise ValueError("'input_type' (the seeds' node type) is needed for "
                         "heterogeneous graphs")
    input_nodes = input_nodes.cpu()

    def draw(index: Tensor) -> Any:
        return sampler.sample_from_nodes(
            NodeSamplerInput(
                input_id=None, node=input_nodes[index],
                time=None if input_time is None else input_time[index],
                input_type=input_type))

    return _count(sampler, draw, input_nodes.numel(), batch_size,
                  num_batches, hops, generator, prune_hot)


def count_link_access(
    sampler,
    inputs: EdgeSamplerInput,
    batch_size: int,
    num_batches: Optional[int] = None,
    neg_sampling: Optional[NegativeSampling] = None,
    hops: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
) -> Union[Tensor, Dict[str, Tensor]]:
    r"""Counts how often every node appears in link-level batches (both
    endpoints of :obj:`batch_size` label edges as seeds, with negatives), as
    :class:`~pyg_orch.HybridLinkNeighborLoader` draws them; see
    :func:`count_node_access`.

    Args:
        sampler (HotNodeSampler): The sampler of the loader.
        inputs (EdgeSamplerInput): The label edges.
        batch_size (int): Label edges per batch.
        num_batches (int, optional): Batches to sample; one epoch if not set.
        neg_sampling (NegativeSampling, optional): The negative sampling.
        hops (int, optional): Only count nodes of hops :obj:`0..hops-1`.
        generator (torch.Generator, optional): For the label edge order."""
    if not callable(getattr(sampler, 'sample_from_edges', None)):
        raise ValueError("'sampler' must implement 'sample_from_edges' to "
                         "pre-sample link-level batches")

    def draw(index: Tensor) -> Any:
        return sampler.sample_from_edges(inputs[index],
                                         neg_sampling=neg_sampling)

    return _count(sampler, draw, inputs.row.numel(), batch_size, num_batches,
                  hops, generator, False)


def _count(sampler, draw: Callable[[Tensor], Any], num_inputs: int,
           batch_size: int, num_batches: Optional[int], hops: Optional[int],
           generator: Optional[torch.Generator],
           prune_hot: bool) -> Union[Tensor, Dict[str, Tensor]]:
    # The node counts of `num_batches` batches `draw(index)` (default: an
    # epoch) over shuffled inputs, counted where the batches are.
    counts = {t: torch.zeros(n, dtype=torch.int64)
              for t, n in sampler.topology.num_nodes.items()}
    if num_inputs > 0:
        if num_batches is None:
            num_batches = -(-num_inputs // batch_size)
        batches = itertools.islice(
            _shuffled_batches(num_inputs, batch_size, generator), num_batches)
        found: Dict = {}
        with sampler.presampling(prune_hot=prune_hot):
            for index in batches:
                out = draw(index)
                nodes, num = out.node, out.num_sampled_nodes
                if not isinstance(nodes, dict):
                    nodes, num = {None: nodes}, {None: num}
                for t, node in nodes.items():
                    if hops is not None and num is not None and \
                            num.get(t) is not None:
                        node = node[:sum(num[t][:hops])]
                    found[t] = found.get(t, 0) + torch.bincount(
                        node.to(torch.int64), minlength=counts[t].numel())
        for t, c in found.items():
            counts[t] += c.cpu()
    return counts if sampler.is_hetero else counts[None]


def _shuffled_batches(num_inputs: int, batch_size: int,
                      generator: Optional[torch.Generator]
                      ) -> Iterator[Tensor]:
    # Batches of input positions over shuffled orders, one after another.
    while True:
        yield from torch.randperm(num_inputs,
                                  generator=generator).split(batch_size)
