"""A/B probe of the fused homogeneous sampler: wall time per waited batch
(topology on the GPU and in pinned host memory) and kernel time per batch
(torch.profiler). Run it once per source tree, alternating, e.g. with the
previous commit exported to a folder: ``PYTHONPATH=<tree> python
benchmarks/probe_fused_sampler_ab.py <tag>``; writes ``$OUT/ab_<tag>_<pid>.json``
(results: ``results/fused_sampler_ab_2026-11-24.json``)."""
import json, os, sys, time
import torch
from torch_geometric.sampler import NodeSamplerInput
from pyg_orch import HybridNeighborSampler
from pyg_orch.datasets import power_law_graph
import pyg_orch
tag = sys.argv[1]
dev = torch.device('cuda')
data = power_law_graph(2_400_000, 120_000_000, 100, 47, device=dev, seed=0)
train = data.train_mask.nonzero().view(-1).cpu()
g = torch.Generator().manual_seed(1)
seeds = [train[torch.randint(0, train.numel(), (1024,), generator=g)] for _ in range(45)]
res = {'tag': tag, 'file': pyg_orch.__file__}
for name, topo in (('device', None), ('host', 'host')):
    kw = {}
    if topo == 'host':
        from pyg_orch.core.topology import GraphTopology
        kw['topology'] = GraphTopology.from_data(data, device=dev).pin_memory()
    s = HybridNeighborSampler(data, [15, 10, 5], device=dev, seed=0, backend='triton', **kw)
    for x in seeds[:5]:
        s.sample_from_nodes(NodeSamplerInput(None, x))
    torch.cuda.synchronize()
    t = time.perf_counter(); i = 0
    while time.perf_counter() - t < 1.0:
        s.sample_from_nodes(NodeSamplerInput(None, seeds[i % 5])); i += 1
    torch.cuda.synchronize()
    passes = []
    for r in range(7):
        t = time.perf_counter(); e = 0
        for x in seeds[5:] * 3:
            out = s.sample_from_nodes(NodeSamplerInput(None, x)); e += out.row.numel()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
        passes.append((1e3 * dt / 120, e / dt))
    passes.sort()
    res[name] = {'ms_per_batch': passes[3][0], 'edges_per_s': passes[3][1], 'passes': passes}
    if name == 'device':
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for x in seeds[5:25]:
                s.sample_from_nodes(NodeSamplerInput(None, x))
            torch.cuda.synchronize()
        tot = 0.0; rows = []
        for e in prof.key_averages():
            d = getattr(e, 'self_device_time_total', 0)
            if e.self_cpu_time_total == 0:
                tot += d
            rows.append((e.key[:60], e.count, round(d / 20, 2)))
        rows.sort(key=lambda r: -r[2])
        res['device_us_per_batch'] = tot / 20
        res['kernels'] = rows[:25]
    del s
print(json.dumps({k: (v if k not in ('device', 'host') else {'ms': v['ms_per_batch'], 'eps': v['edges_per_s']}) for k, v in res.items() if k != 'kernels'}))
with open(os.path.join(os.environ.get('OUT', '/tmp'), f'ab_{tag}_{os.getpid()}.json'), 'w') as f:
    json.dump(res, f, indent=1)
