import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from multiproc import free_port, port_taken
from pyg_orch import HybridNeighborLoader
from pyg_orch.datasets import (
    papers_like_features,
    papers_like_graph,
    papers_like_node_data,
    papers_like_topology,
)
from pyg_orch.topology.csc import CSCTopology
from pyg_orch.topology.graph import GraphTopology

N, E = 3000, 40_000


def _edges(topo: GraphTopology):
    csc = topo.csc[None]
    deg = (csc.colptr[1:] - csc.colptr[:-1]).to(torch.int64)
    dst = torch.repeat_interleave(torch.arange(deg.numel()), deg)
    return csc.row.to(torch.int64), dst, deg


def test_shape_dtypes_and_symmetry():
    topo = papers_like_topology(N, E, seed=3, chunk_size=7000)
    csc = topo.csc[None]
    assert topo.num_nodes == {None: N}
    assert csc.colptr.shape == (N + 1, )
    assert int(csc.colptr[0]) == 0 and int(csc.colptr[-1]) == 2 * E
    assert csc.row.numel() == 2 * E and csc.row.dtype == torch.int32
    assert csc.edge_id is None
    src, dst, deg = _edges(topo)
    assert int(src.min()) >= 0 and int(src.max()) < N
    # Undirected: the multiset of (src, dst) equals that of (dst, src).
    fwd = torch.sort(src * N + dst).values
    bwd = torch.sort(dst * N + src).values
    assert torch.equal(fwd, bwd)
    # Every node's in-degree equals its out-degree.
    assert torch.equal(deg, torch.bincount(src, minlength=N))


def test_in_degree_skew():
    exponent = 3.0
    topo = papers_like_topology(N, E, exponent=exponent, seed=1,
                                chunk_size=E // 3)
    _, _, deg = _edges(topo)
    top = deg.sort(descending=True).values
    # The top 1% of the nodes hold several times 1% of the edges: half the
    # endpoints are cited ones, of which the top ranks hold their weight.
    a = 1.0 / (exponent - 1.0)
    weight = torch.arange(1, N + 1, dtype=torch.float64)**-a
    total = float(weight.sum())
    expected_share = 0.5 * float(weight[:N // 100].sum()) / total + 0.005
    share = float(top[:N // 100].sum()) / (2 * E)
    assert expected_share > 0.04
    assert abs(share - expected_share) < 0.15 * expected_share
    # ...the most cited node about `E / sum_r r^(-1/(g-1))` citations:
    expected = E / total + E / N  # Cited, plus its uniform references.
    assert abs(float(top[0]) - expected) < 5 * math.sqrt(expected)
    # ...while the median node has about its uniform share, E / N:
    assert 0.5 * E / N < float(deg.median()) < 2.0 * E / N
    # A larger exponent is less skewed:
    flat = papers_like_topology(N, E, exponent=6.0, seed=1,
                                chunk_size=E // 3)
    assert int(_edges(flat)[2].max()) < int(top[0]) // 2


def test_reproducible_and_chunk_independent_degrees():
    a = papers_like_topology(N, E, seed=5, chunk_size=9000).csc[None]
    b = papers_like_topology(N, E, seed=5, chunk_size=9000).csc[None]
    c = papers_like_topology(N, E, seed=6, chunk_size=9000).csc[None]
    assert torch.equal(a.colptr, b.colptr) and torch.equal(a.row, b.row)
    assert not torch.equal(a.row, c.row)


class _LargestOutput(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in (out if isinstance(out, (tuple, list)) else (out, )):
            if isinstance(t, torch.Tensor):
                self.shapes.append((tuple(t.shape),
                                    t.untyped_storage().data_ptr()))
        return out


def test_never_builds_an_edge_index():
    with _LargestOutput() as mode:
        topo = papers_like_topology(N, E, seed=2, chunk_size=E // 4)
    row_ptr = topo.csc[None].row.untyped_storage().data_ptr()
    assert mode.shapes
    for shape, ptr in mode.shapes:
        assert len(shape) <= 1, shape  # No [2, *] edge tensor at all.
        if ptr != row_ptr:  # Only the result holds E or more entries.
            assert math.prod(shape) < E, shape


def test_cache_round_trip(tmp_path):
    first = papers_like_topology(N, E, seed=4, chunk_size=E // 2,
                                 cache_dir=tmp_path).csc[None]
    folders = list(tmp_path.iterdir())
    assert len(folders) == 1 and (folders[0] / 'meta.json').exists()
    # A poisoned row file shows that the second call reads the cache:
    row_file = folders[0] / 'row.bin'
    raw = bytearray(row_file.read_bytes())
    raw[:4] = (N - 1).to_bytes(4, 'little', signed=True)
    row_file.write_bytes(bytes(raw))
    again = papers_like_topology(N, E, seed=4, chunk_size=E // 2,
                                 cache_dir=tmp_path).csc[None]
    assert torch.equal(again.colptr, first.colptr)
    assert int(again.row[0]) == N - 1
    assert torch.equal(again.row[1:], first.row[1:])
    # Other arguments do not read it:
    other = papers_like_topology(N, E, seed=4, chunk_size=E // 4,
                                 cache_dir=tmp_path).csc[None]
    assert int(other.row.numel()) == 2 * E
    assert len(list(tmp_path.iterdir())) == 2
    # A truncated file is a clear error:
    row_file.write_bytes(bytes(raw[:100]))
    with pytest.raises(ValueError, match='truncated'):
        papers_like_topology(N, E, seed=4, chunk_size=E // 2,
                             cache_dir=tmp_path)


def test_graph_and_loader():
    data, topo = papers_like_graph(N, E, num_features=16, num_classes=7,
                                   num_train=200, seed=0, chunk_size=E // 2)
    assert data.x.shape == (N, 16) and data.x.dtype == torch.float32
    assert data.y.shape == (N, ) and int(data.y.max()) < 7
    assert int(data.train_mask.sum()) == 200
    assert 'edge_index' not in data
    loader = HybridNeighborLoader(data, [5, 3], batch_size=64,
                                  input_nodes=data.train_mask,
                                  topology=topo, device='cpu', seed=0)
    seen = 0
    for batch in loader:
        assert batch.x.shape[1] == 16
        n_id = batch.n_id
        src, dst = n_id[batch.edge_index[0]], n_id[batch.edge_index[1]]
        # Every sampled edge is an edge of the graph (in either direction).
        csc = topo.csc[None]
        lo, hi = csc.colptr[dst].long(), csc.colptr[dst + 1].long()
        for s, a, b in zip(src.tolist()[:50], lo.tolist(), hi.tolist()):
            assert s in csc.row[a:b].tolist()
        seen += batch.batch_size
    assert seen == 200


def test_int64_colptr_with_int32_row():
    # As at full scale (over 2^31 - 1 edges): colptr int64, row int32.
    topo = papers_like_topology(N, E, seed=0, chunk_size=E)
    csc = topo.csc[None]
    wide = GraphTopology({None: CSCTopology.from_csc(
        csc.colptr.to(torch.int64), csc.row, None, N)}, {None: N})
    data, _ = papers_like_graph(N, E, num_features=4, num_train=64,
                                chunk_size=E)
    out = []
    for t in (topo, wide):
        loader = HybridNeighborLoader(data, [4, 2], batch_size=64,
                                      input_nodes=data.train_mask,
                                      topology=t, device='cpu', seed=0)
        out.append(next(iter(loader)))
    assert torch.equal(out[0].n_id, out[1].n_id)
    assert torch.equal(out[0].edge_index, out[1].edge_index)


@pytest.mark.parametrize('kwargs, match', [
    (dict(num_nodes=0), "'num_nodes' must be an integer >= 1"),
    (dict(num_edges=-1), "'num_edges' must be an integer >= 0"),
    (dict(num_edges=2.5), "'num_edges' must be an integer"),
    (dict(exponent=1.0), "'exponent' must be a finite number > 1"),
    (dict(exponent='x'), "'exponent' must be a number > 1"),
    (dict(chunk_size=0), "'chunk_size' must be an integer >= 1"),
])
def test_bad_arguments(kwargs, match):
    args = dict(num_nodes=10, num_edges=10)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        papers_like_topology(**args)


def test_bad_device_and_cache_dir():
    with pytest.raises(ValueError, match="'device' must be"):
        papers_like_topology(10, 10, device='tpu')
    with pytest.raises(TypeError, match="'cache_dir' must be a path"):
        papers_like_topology(10, 10, cache_dir=3)


def test_bad_num_train():
    with pytest.raises(ValueError, match="'num_train' must be at most"):
        papers_like_graph(10, 10, num_features=0, num_train=11)


def test_features_equal_node_data_and_fill_out():
    x = papers_like_node_data(500, 6, num_train=10, seed=3).x
    assert torch.equal(papers_like_features(500, 6, seed=3), x)
    assert not torch.equal(papers_like_features(500, 6, seed=4), x)
    out = torch.full((500, 6), float('nan'))
    res = papers_like_features(500, 6, seed=3, out=out)
    assert res.data_ptr() == out.data_ptr() and torch.equal(out, x)


@pytest.mark.parametrize('out, match', [
    (torch.zeros(500, 5), r'shape \(500, 6\) \(got shape \(500, 5\)'),
    (torch.zeros(500, 6, dtype=torch.float64), 'dtype torch.float64'),
    ([0.0], r"'out' must be a float32 CPU tensor .* \(got list\)"),
])
def test_features_bad_out(out, match):
    with pytest.raises(ValueError, match=match):
        papers_like_features(500, 6, out=out)


# benchmarks/bench_epoch_scale.py on the CPU, at a tiny size ################


@pytest.fixture
def bench(monkeypatch):
    import importlib
    from pathlib import Path
    monkeypatch.syspath_prepend(
        str(Path(__file__).resolve().parents[1] / 'benchmarks'))
    return importlib.import_module('bench_epoch_scale')


def test_bench_epoch_scale_tiny(bench, tmp_path):
    out = tmp_path / 'r.json'
    res = bench.main([
        '--scale', 'tiny', '--nodes', '2000', '--edges', '10000', '--train',
        '200', '--batch-size', '64', '--hidden', '8', '--fanout', '3,2,1',
        '--num-features', '8', '--modes', 'trim', '--warmup', '1',
        '--bound-batches', '2', '--no-pyg', '--device', 'cpu', '--out',
        str(out)
    ])
    assert out.exists()
    gen = res['generate']
    assert gen['degree']['mean'] == pytest.approx(10.0)  # 2 * E / N.
    trim = res['modes']['trim']
    epoch = trim['epochs'][0]
    assert epoch['complete'] and epoch['batches'] == 4 == len(range(
        0, 200, 64))
    assert trim['epoch_s'] == pytest.approx(epoch['seconds'])
    assert epoch['triton_new_kernels'] == []  # No Triton kernel on the CPU.
    assert res['bounds']['nodes_per_batch'] > 64


def test_bench_epoch_scale_projects_a_cut_epoch(bench):
    class Loader(list):
        pass

    seen = []
    res = bench.run_epoch(Loader(range(10)), seen.append,
                          torch.device('cpu'), budget_s=float('inf'),
                          limit=4)
    assert seen == [0, 1, 2, 3] and not res['complete']
    assert res['epoch_s'] == pytest.approx(res['seconds'] * 10 / 4)


def test_bench_epoch_scale_bad_mode(bench):
    with pytest.raises(SystemExit):
        bench.parse_args(['--modes', 'eager,fast', '--device', 'cpu'])


def test_bench_epoch_scale_compiled_wrapper_mode_and_profile_default(bench):
    args = bench.parse_args(['--modes', 'offload_compiled,trim', '--device',
                             'cpu'])
    assert args.modes == 'offload_compiled,trim'
    assert args.profile_batches == 0  # One GPU: no profile unless asked.
    args = bench.parse_args(['--modes', 'trim', '--device', 'cpu',
                             '--profile-batches', '5'])
    assert args.profile_batches == 5
    with pytest.raises(SystemExit):  # Not with several GPUs (yet).
        bench.parse_args(['--gpus', '2', '--modes', 'offload_compiled',
                          '--device', 'cpu'])


def test_bench_epoch_scale_shared_features_are_reused(bench, tmp_path):
    args = bench.parse_args(['--scale', 'tiny', '--nodes', '300',
                             '--num-features', '4', '--device', 'cpu',
                             '--shm-dir', str(tmp_path)])
    first = bench.shared_features(args, torch.device('cpu'))
    second = bench.shared_features(args, torch.device('cpu'))
    assert not first['reused'] and second['reused']
    x = bench.map_features(first['path'], 300, 4, torch.device('cpu'))
    assert torch.equal(x, papers_like_features(300, 4))


def test_bench_epoch_scale_two_ranks(bench, tmp_path):
    # Two CPU ranks (gloo): replicated and sharded topology, one epoch
    # each, every training seed once across the ranks.
    argv = [
        '--gpus', '2', '--device', 'cpu', '--scale', 'tiny', '--nodes',
        '2000', '--edges', '10000', '--train', '256', '--batch-size', '64',
        '--hidden', '8', '--fanout', '3,2,1', '--num-features', '8',
        '--modes', 'trim', '--warmup', '1', '--bound-batches', '2',
        '--profile-batches', '1', '--shm-dir', str(tmp_path / 'shm'),
        '--out', str(tmp_path / 'r.json'), '--fit-gpu-cache',
        '--profile-build'
    ]
    for attempt in range(3):  # Again on a new port if it was taken.
        try:
            res = bench.main(argv + ['--port', str(free_port())])
            break
        except Exception as exc:
            if attempt == 2 or not port_taken(exc):
                raise
    assert (tmp_path / 'r.json').exists()
    assert sum(r['setup']['seeds'] for r in res['ranks']) == 256
    for placement in ('device', 'sharded'):
        for r in res['ranks']:
            trim = r['placements'][placement]['modes']['trim']
            assert trim['epoch']['complete'] and trim['epoch']['batches'] == 2
            # Asked on every rank; a CPU loader has no GPU cache:
            fit = trim['gpu_cache_fit']
            assert not fit['grew'] and 'no GPU feature store' in fit['reason']
        assert res['summary'][f'{placement}/trim']['epoch_s'] > 0
        for r in res['ranks']:
            steps = r['placements'][placement]['build_steps']
            build = r['placements'][placement]['build_s']
            # The sampler is built once per loader, within its build time:
            init = steps['HybridNeighborSampler.__init__']
            assert init['calls'] == 1 and 0 < init['seconds'] <= build
            assert ('shard_topology' in steps) == (placement == 'sharded')
    assert 'sharded_over_replicated_speed/trim' in res['summary']


def test_bench_epoch_scale_bad_multi_gpu_args(bench):
    with pytest.raises(SystemExit):
        bench.parse_args(['--gpus', '2', '--modes', 'fast', '--device',
                          'cpu'])
    with pytest.raises(SystemExit):  # Timed twice only with several GPUs.
        bench.parse_args(['--modes', 'trim,trim', '--device', 'cpu'])
    args = bench.parse_args(['--gpus', '2', '--modes', 'trim,offload,trim',
                             '--device', 'cpu'])
    assert args.modes == 'trim,offload,trim'
    assert args.offload_placements == 'device'
    with pytest.raises(SystemExit):
        bench.parse_args(['--gpus', '2', '--placements', 'host', '--device',
                          'cpu'])
    with pytest.raises(SystemExit):
        bench.parse_args(['--gpus', '0', '--device', 'cpu'])


def test_bench_epoch_scale_faster_blocks(bench):
    ms = {'66': 4.0, '264': 2.0, '528': 1.9, 'None': 1.95}
    assert bench.faster_blocks({'gather_blocks': 66,
                                'gather_ms_by_blocks': ms}) == \
        {'gather_blocks': 528}
    ms['None'] = 1.0
    assert bench.faster_blocks({'gather_blocks': 66,
                                'gather_ms_by_blocks': ms}) == \
        {'gather_blocks': None}
    # Within 10% of the store's own setting, or no sweep: keep it.
    assert bench.faster_blocks({'gather_blocks': 66, 'gather_ms_by_blocks':
                                {'66': 1.0, '264': 0.95}}) is None
    assert bench.faster_blocks({'gather_ms_per_batch': 1.0}) is None


def test_bench_epoch_scale_gpu_memory_budget(bench):
    def options(*extra):
        return bench.cache_options(bench.parse_args(['--device', 'cpu',
                                                     *extra]))
    assert options() is None  # The loader's defaults.
    assert options('--gpu-memory-budget', '0.7').gpu_memory_budget == 0.7
    assert options('--gpu-memory-budget', '2e9').gpu_memory_budget == \
        2_000_000_000
    assert options('--gpu-memory-budget', 'auto').gpu_memory_budget == 'auto'
    with pytest.raises(SystemExit):
        options('--gpu-memory-budget', 'most')


def test_bench_epoch_scale_timed_build_steps_restores(bench):
    from pyg_orch.features import gpu_cache, tiered
    before = (gpu_cache.hottest_first, tiered.hottest_first,
              tiered.TieredFeatureStore.__init__)
    with bench.timed_build_steps() as steps:
        assert tiered.hottest_first is not before[1]
        tiered.TieredFeatureStore(torch.randn(20, 3), 'cpu', cache_ratio=0.5)
    assert steps['TieredFeatureStore.__init__']['calls'] == 1
    assert steps['hottest_first']['calls'] == 1
    assert (gpu_cache.hottest_first, tiered.hottest_first,
            tiered.TieredFeatureStore.__init__) == before
