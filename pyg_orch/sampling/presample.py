"""Access statistics from pre-sampling: which nodes batches touch most."""
from typing import Dict, Optional, Union

import torch
from torch import Tensor
from torch_geometric.sampler import NodeSamplerInput


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
    r"""Counts how often every node appears in sampled batches.

    Args:
        sampler (HotNodeSampler): The sampler of the loader (see
            :class:`~pyg_orch.sampling.contract.HotNodeSampler`).
        input_nodes (torch.Tensor): The seed nodes (indices).
        batch_size (int): Seeds per batch.
        num_batches (int, optional): Batches to sample (from a shuffled order
            of the seeds, repeated as needed); one epoch if not set.
        hops (int, optional): Only count nodes of hops :obj:`0..hops-1`
            (e.g. the nodes whose bottom-layer output is needed); all hops if
            not set.
        generator (torch.Generator, optional): For the seed order.
        input_time (torch.Tensor, optional): The seeds' times, for temporal
            sampling.
        prune_hot (bool): Keep the sampler's hot-node pruning on (see
            :meth:`~pyg_orch.HybridNeighborSampler.set_hot_nodes`), to count
            the accesses of batches as training draws them with
            bottom-layer offload. (default: :obj:`False`)
        input_type (str, optional): The node type of the seeds, for
            heterogeneous graphs.

    Returns:
        An int64 tensor of counts per node, on the CPU; for heterogeneous
        graphs a dictionary of them per node type.

    Unless :obj:`prune_hot`, hot-node pruning is off while counting; the
    sampler's random
    generators are restored afterwards, so later batches are the same as
    without counting.
    """
    hetero = sampler.is_hetero
    if hetero and input_type is None:
        raise ValueError("'input_type' (the seeds' node type) is needed for "
                         "heterogeneous graphs")
    counts = {
        t: torch.zeros(n, dtype=torch.int64)
        for t, n in sampler.topology.num_nodes.items()
    }
    input_nodes = input_nodes.cpu()
    if input_nodes.numel() == 0:
        return counts if hetero else counts[None]
    if num_batches is None:
        num_batches = -(-input_nodes.numel() // batch_size)
    with sampler.presampling(prune_hot=prune_hot):
        _count(sampler, input_nodes, batch_size, num_batches, hops,
               generator, input_time, counts, input_type)
    return counts if hetero else counts[None]


def _count(sampler, input_nodes, batch_size, num_batches, hops, generator,
           input_time, counts, input_type) -> None:
    done = 0
    while done < num_batches:
        perm = torch.randperm(input_nodes.numel(), generator=generator)
        for start in range(0, perm.numel(), batch_size):
            if done == num_batches:
                break
            index = perm[start:start + batch_size]
            out = sampler.sample_from_nodes(
                NodeSamplerInput(
                    input_id=None, node=input_nodes[index],
                    time=None if input_time is None else input_time[index],
                    input_type=input_type))
            nodes, num = out.node, out.num_sampled_nodes
            if not isinstance(nodes, dict):
                nodes, num = {None: nodes}, {None: num}
            for t, node in nodes.items():
                if hops is not None and num is not None and \
                        num.get(t) is not None:
                    node = node[:sum(num[t][:hops])]
                counts[t] += torch.bincount(node.cpu(),
                                            minlength=counts[t].numel())
            done += 1
