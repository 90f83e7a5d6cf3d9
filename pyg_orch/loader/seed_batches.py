"""Seed batches as tensors and slices of PyG's sampler inputs."""
from typing import Any, Iterator, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.sampler import EdgeSamplerInput, NodeSamplerInput


def slice_node_input(inputs: NodeSamplerInput,
                     index: Tensor) -> NodeSamplerInput:
    r""":obj:`inputs[index]` by :meth:`~torch.Tensor.index_select`."""
    index = index.to(torch.int64)

    def take(t: Optional[Tensor]) -> Optional[Tensor]:
        return None if t is None else t.index_select(0, index.to(t.device))

    input_id = take(inputs.input_id) if inputs.input_id is not None else index
    return NodeSamplerInput(input_id, take(inputs.node), take(inputs.time),
                            inputs.input_type)


def tensor_index_batches(batch_sampler: Any) -> Optional[Iterator[Tensor]]:
    r"""The index batches of a plain :obj:`batch_sampler` as tensors, drawn
    as it draws them; :obj:`None` for other samplers."""
    from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler
    if type(batch_sampler) is not BatchSampler:
        return None
    sampler = batch_sampler.sampler
    if type(sampler) is SequentialSampler:
        n, generator = len(sampler.data_source), None
    elif (type(sampler) is RandomSampler and not sampler.replacement
          and sampler.generator is not None
          and sampler.num_samples == len(sampler.data_source)):
        n, generator = sampler.num_samples, sampler.generator
    else:
        return None
    return _index_batches(n, generator, batch_sampler.batch_size,
                          batch_sampler.drop_last)


def _index_batches(n: int, generator: Optional[torch.Generator],
                   batch_size: int, drop_last: bool) -> Iterator[Tensor]:
    order = torch.arange(n) if generator is None else torch.randperm(
        n, generator=generator)
    end = n - n % batch_size if drop_last else n
    for start in range(0, end, batch_size):
        yield order[start:start + batch_size]
    if generator is not None:  # As RandomSampler once it runs out.
        torch.randperm(n, generator=generator)


def input_seeds(inputs: Any, batch_size: int,
                nodes: Optional[Tensor] = None) -> Tuple[Any, int]:
    r"""The seeds of batches of :obj:`batch_size` sampler inputs (per node
    type where typed; of label edges their endpoints) and how many a batch
    holds; :obj:`nodes` replaces :obj:`inputs.node`."""
    types = inputs.input_type
    if not isinstance(inputs, EdgeSamplerInput):
        nodes = inputs.node if nodes is None else nodes
        return nodes if types is None else {types: nodes}, batch_size
    if types is not None and types[0] != types[-1]:
        return {types[0]: inputs.row, types[-1]: inputs.col}, batch_size
    seeds = torch.cat([inputs.row, inputs.col])
    return seeds if types is None else {types[0]: seeds}, 2 * batch_size
