"""A/B probe of the fused homogeneous sampler: wall time per waited batch
(topology on the GPU and in pinned host memory, timed as
``bench_gpu_data_path.py`` times sampling) and kernel time per batch
(``torch.profiler``). Run it once per source tree, alternating, e.g. with
the previous commit exported to a folder::

    PYTHONPATH=<tree> python benchmarks/probe_fused_sampler_ab.py <tag>

It writes ``$OUT/ab_<tag>_<pid>.json`` (results:
``results/fused_sampler_ab_2026-11-24.json``)."""
import json
import os
import sys

import torch
from torch_geometric.sampler import NodeSamplerInput

# The tree under test first: bench_gpu_data_path puts this checkout on the
# path, which must not replace an already imported `pyg_orch`.
import pyg_orch
from pyg_orch import HybridNeighborSampler
from pyg_orch.datasets import power_law_graph
from pyg_orch.topology.graph import GraphTopology
from bench_gpu_data_path import time_sampling  # noqa: E402
from _bench_common import device_time  # noqa: E402

PROFILED_BATCHES = 20


def kernel_time(sampler, seeds) -> dict:
    r"""Kernel time per batch (events without host time: kernels and
    copies) and the 25 largest kernels."""
    def run():
        for s in seeds[:PROFILED_BATCHES]:
            sampler.sample_from_nodes(NodeSamplerInput(None, s))
    return device_time(run, PROFILED_BATCHES)


def main(tag: str) -> dict:
    dev = torch.device('cuda')
    data = power_law_graph(2_400_000, 120_000_000, 100, 47, device=dev,
                           seed=0)
    train = data.train_mask.nonzero().view(-1).cpu()
    g = torch.Generator().manual_seed(1)
    seeds = [train[torch.randint(0, train.numel(), (1024, ), generator=g)]
             for _ in range(45)]
    res = {'tag': tag, 'file': pyg_orch.__file__}
    host_topo = GraphTopology.from_data(data, device=dev).pin_memory()
    for name, topo in (('device', None), ('host', host_topo)):
        s = HybridNeighborSampler(data, [15, 10, 5], device=dev, seed=0,
                                  backend='triton', topology=topo)
        # 5 warm-up batches, 1 s of sampling, the median of 7 passes of
        # 3 x 40 waited batches.
        res[name] = time_sampling(s, seeds, 5, rounds=7)
        if name == 'device':
            res.update(kernel_time(s, seeds[5:]))
        del s
    print(json.dumps({'tag': tag, 'device_us_per_batch':
                      res['device_us_per_batch'], **{
                          k: res[k]['ms_per_batch']
                          for k in ('device', 'host')}}))
    out = os.path.join(os.environ.get('OUT', '/tmp'),
                       f'ab_{tag}_{os.getpid()}.json')
    with open(out, 'w') as f:
        json.dump(res, f, indent=1)
    return res


if __name__ == '__main__':
    main(sys.argv[1])
