"""One part per machine, shared by the machine's ranks: 4 gloo processes act
as 2 machines of 2 ranks (LOCAL_WORLD_SIZE=2) over a folder of 2 parts.
Each rank takes every other seed of its machine's part; with
PlacementOptions(topology='sharded') the part's neighbor lists are split
across the machine's ranks (in /dev/shm on CPUs) and the batches are those of the
unsharded loader (and, with full fan-out, of the single-process loader);
DDP training over all 4 ranks ends with the same weights either way, and
with BottomLayerOffload per rank (full neighbors, max_staleness=0) too.
With feature_placement='sharded' the part's feature rows are split across
the machine's ranks as well (also for a heterogeneous part). PyG's sampling
modes (disjoint, replace, induced, weighted, temporal) give the same
batches over the split lists, whose times and weights are split with
them."""
import pytest
import torch
from conftest import random_graph, small_paper_graph, tiny_model, train_sgd
from multiproc import (
    check_full_fanout_batches,
    check_seeds_split_by_machine,
    run_machines,
    run_workers,
)
from torch.nn.parallel import DistributedDataParallel

from pyg_orch import (
    BottomLayerOffload,
    HybridNeighborLoader,
    PlacementOptions,
)
from pyg_orch.offload import OffloadOptions
from pyg_orch.distributed import partition_graph

#: The neighbor lists split across the machine's processes.
SHARDED = PlacementOptions(topology='sharded')

KEYS = ('n_id', 'e_id', 'edge_index', 'x', 'y', 'edge_attr')
MACHINES, PER_MACHINE = 2, 2
STEPS = 8


def graph():  # 8 features and 3 classes, as tiny_model() takes.
    data = random_graph(160, 900, seed=5, num_features=8, num_classes=3,
                        train_ratio=0.5, edge_dim=2)
    gen = torch.Generator().manual_seed(6)
    # Node times and edge weights (some zero) for temporal and weighted
    # sampling:
    data.time = torch.randint(0, 30, (160, ), generator=gen)
    w = torch.rand(900, generator=gen)
    data.w = torch.where(w < 0.2, 0.0, w)
    return data


def global_seeds():
    return torch.arange(0, 160, 2)


def _batches(loader):
    return [{k: b[k] for k in KEYS} | {'batch_size': b.batch_size}
            for b in loader]


def _machine_worker(rank, world_size, out_dir):
    from pyg_orch.topology.sharded import TopologySharding
    seeds = global_seeds()
    common = dict(input_nodes=seeds, batch_size=6, even='pad',
                  device='cpu', seed=1)
    sharded = HybridNeighborLoader(out_dir, [3, 2],
                                   placement=SHARDED, **common)
    plain = HybridNeighborLoader(out_dir, [3, 2], **common)
    # No copies: every list of the other rank's shard is read from it.
    no_copies = HybridNeighborLoader(
        out_dir, [3, 2],
        placement=PlacementOptions(topology=TopologySharding(0)),
        **common)
    full = HybridNeighborLoader(out_dir, [-1, -1],
                                placement=SHARDED, **common)
    # The part's feature rows split across the machine's ranks as well:
    both = HybridNeighborLoader(out_dir, [3, 2],
                                placement=SHARDED,
                                feature_placement='sharded', **common)
    out = {
        'part': sharded.partition_batches.partition.part,
        'layout': (sharded.partition_batches.layout.local_rank,
                   sharded.partition_batches.layout.local_world_size),
        'input_nodes': sharded.partition_batches.input_nodes,
        'len': len(sharded),
        'sharded': _batches(sharded),
        'plain': _batches(plain),
        'no_copies': _batches(no_copies),
        'full': _batches(full),
        'both': _batches(both),
        'row_reads': both.partition_batches.gather.row_reads(),
        'plain_row_reads': plain.partition_batches.gather.row_reads(),
        'reads': no_copies.node_sampler.topology_reads(),
        'plain_reads': plain.node_sampler.topology_reads(),
    }
    # PyG's sampling modes read the split lists too: the same batches.
    out['modes'] = []
    for options in ({'disjoint': True}, {'replace': True},
                    {'subgraph_type': 'induced'}, {'weight_attr': 'w'},
                    {'weight_attr': 'w', 'replace': True},
                    {'time_attr': 'time'},
                    {'time_attr': 'time', 'temporal_strategy': 'last'}):
        loaders = [HybridNeighborLoader(out_dir, [3, 2],
                                        placement=PlacementOptions(
                                            topology=placement),
                                        **common, **options)
                   for placement in ('sharded', 'auto')]
        pair = [[{k: b[k] for k in KEYS + ('batch', ) if k in b}
                 for b in loader] for loader in loaders]
        csc = loaders[0].node_sampler.topology[None]
        split = {a: type(getattr(csc, a)).__name__
                 for a in ('time', 'weight') if getattr(csc, a) is not None}
        out['modes'].append((options, *pair, split))
    # Training over all 4 ranks, with shuffling, sharded or not:
    shuffled = dict(common, shuffle=True)

    def train(model, fanout=(3, 2), **kwargs):
        loader = HybridNeighborLoader(out_dir, list(fanout), **shuffled,
                                      **kwargs)
        if model is not None:
            return train_sgd(DistributedDataParallel(model), loader, STEPS)
        # Offloaded, exact: all neighbors, no staleness.
        off = BottomLayerOffload(tiny_model(), loader, options=OffloadOptions(
            hot_ratio=0.2, max_staleness=0, full_neighbors=True))
        weights = train_sgd(DistributedDataParallel(off), loader, STEPS)
        out['offload_stats'] = off.stats()
        off.close()
        return weights

    out['weights_sharded'] = train(tiny_model(),
                                   placement=SHARDED)
    out['weights_plain'] = train(tiny_model())
    out['weights_both'] = train(tiny_model(), placement=SHARDED,
                                feature_placement='sharded')
    out['weights_full'] = train(tiny_model(), (-1, -1),
                                placement=SHARDED)
    out['weights_offload'] = train(None, (-1, -1),
                                   placement=SHARDED)
    return out


def test_machines_share_a_sharded_part(tmp_path):
    data = graph()
    info, out = run_machines(_machine_worker, data, tmp_path / 'p', MACHINES,
                             PER_MACHINE, timeout=240)
    seeds = global_seeds()
    assert len({o['len'] for o in out}) == 1  # The same number of batches.
    for rank, o in enumerate(out):
        machine, local = divmod(rank, PER_MACHINE)
        assert o['part'] == machine
        assert o['layout'] == (local, PER_MACHINE)
        assert o['plain_reads'] is None
        # Sharding changes where lists are read, not what is sampled:
        assert len(o['sharded']) == len(o['plain']) == o['len'] > 1
        assert len(o['both']) == len(o['plain'])
        for a, b, c, d in zip(o['sharded'], o['plain'], o['no_copies'],
                              o['both']):
            assert a['batch_size'] == b['batch_size'] == c['batch_size'] \
                == d['batch_size']
            for key in KEYS:
                assert torch.equal(a[key], b[key]), key
                assert torch.equal(a[key], c[key]), key
                assert torch.equal(a[key], d[key]), key
        for options, sharded, plain, split in o['modes']:
            assert len(sharded) == len(plain) > 1, options
            # Times and weights are split with the lists they belong to:
            assert split == {
                a: 'ShardedValues' for a, key in (('time', 'time_attr'), (
                    'weight', 'weight_attr')) if key in options}, options
            for a, b in zip(sharded, plain):
                assert a.keys() == b.keys(), options
                for key in a:
                    assert torch.equal(a[key], b[key]), (options, key)
            if 'disjoint' in options or 'time_attr' in options:
                assert all('batch' in b for b in sharded)
        # Split feature rows: the rows of the graph, read from both shards.
        for b in o['both']:
            assert torch.equal(b['x'], data.x[b['n_id']])
            assert torch.equal(b['y'], data.y[b['n_id']])
        assert o['plain_row_reads'] is None
        assert o['row_reads']['local'] > 0 and o['row_reads']['peer'] > 0
        assert torch.equal(o['weights_both'], o['weights_plain'])
        # Full fan-out: the single-process loader's batches of these seeds.
        check_full_fanout_batches(data, o['full'], o['input_nodes'], 6, KEYS)
        assert torch.equal(o['weights_sharded'], o['weights_plain'])
        assert torch.equal(o['weights_sharded'], out[0]['weights_sharded'])
        assert o['offload_stats']['hot_rows_replaced'] > 0
        assert torch.allclose(o['weights_offload'], o['weights_full'],
                              atol=1e-5)
    # Both ranks of a machine read their own shard and the other's:
    assert all(o['reads']['peer'] > 0 and o['reads']['local'] > 0
               for o in out)
    # The machine's ranks split its part's seeds; every seed went to one
    # rank:
    check_seeds_split_by_machine(info.out_dir,
                                 [o['input_nodes'] for o in out], seeds,
                                 PER_MACHINE)


def _flat_sharded_worker(rank, world_size, out_dir):
    with pytest.raises(ValueError, match='one part per machine'):
        HybridNeighborLoader(out_dir, [2], batch_size=4, device='cpu',
                             placement=SHARDED)
    with pytest.raises(ValueError, match="feature_placement='sharded'.*"
                       "one part per machine"):
        HybridNeighborLoader(out_dir, [2], batch_size=4, device='cpu',
                             feature_placement='sharded')
    with pytest.raises(ValueError, match="'feature_placement' must be"):
        HybridNeighborLoader(out_dir, [2], batch_size=4, device='cpu',
                             feature_placement='gpu')
    return True


def test_sharded_needs_ranks_that_share_a_part(tmp_path):
    # 2 ranks on one machine, 2 parts: every rank holds its own part.
    info = partition_graph(graph(), 2, tmp_path / 'p', 'random',
                           progress=False)
    assert run_workers(_flat_sharded_worker, 2, args=(str(info.out_dir), ),
                       timeout=60) == [True, True]


def _one_machine_worker(rank, world_size, out_dir):
    from pyg_orch.topology.sharded import TopologySharding
    loader = HybridNeighborLoader(out_dir, [3, 2], batch_size=6, seed=2,
                                  device='cpu', placement=SHARDED,
                                  feature_placement='sharded')
    plain = HybridNeighborLoader(out_dir, [3, 2], batch_size=6, seed=2,
                                 device='cpu')
    # The part is the partition; its lists are split by ranges only:
    with pytest.raises(NotImplementedError, match="split_by='ranges'"):
        HybridNeighborLoader(out_dir, [3, 2], batch_size=6, device='cpu',
                             placement=PlacementOptions(
                                 topology=TopologySharding(
                                     split_by='random')))
    # Worker threads read the shards at once: each batch's count of rows
    # read from the peer's shard is its own, and no read goes uncounted.
    full = dict(num_neighbors=[-1, -1], batch_size=3, device='cpu',
                placement=SHARDED, feature_placement='sharded')
    threads = HybridNeighborLoader(out_dir, num_workers=3, **full)
    alone = HybridNeighborLoader(out_dir, **full)
    counted = []
    for ldr in (threads, alone):
        batches = _batches(ldr)
        counted.append((batches, [s['peer_rows'] for s in ldr.batch_stats],
                        ldr.node_sampler.topology_reads(),
                        ldr.partition_batches.gather.row_reads()))
    return (loader.partition_batches.partition.part, loader.partition_batches.input_nodes, _batches(loader),
            _batches(plain), loader.node_sampler.topology_reads(),
            loader.partition_batches.gather.row_reads(), counted)


def test_one_part_shared_by_one_machine(tmp_path):
    # One part, the 2 ranks of one machine: no exchange between machines,
    # the part's lists split across the two.
    data = graph()
    info = partition_graph(data, 1, tmp_path / 'p', 'contiguous',
                           progress=False)
    out = run_workers(_one_machine_worker, 2, args=(str(info.out_dir), ),
                      timeout=120)
    train = data.train_mask.nonzero().view(-1)
    assert torch.equal(torch.sort(torch.cat([o[1] for o in out])).values,
                       train)
    for part, seeds, sharded, plain, reads, row_reads, counted in out:
        assert part == 0 and reads['peer'] > 0 and row_reads['peer'] > 0
        assert len(sharded) == len(plain) > 1
        for a, b in zip(sharded, plain):
            for key in KEYS:
                assert torch.equal(a[key], b[key]), key
        (ours, peer, reads, row_reads), (ref, ref_peer, ref_reads,
                                         ref_row_reads) = counted
        assert len(ours) == len(ref) > 3
        for a, b in zip(ours, ref):
            for key in KEYS:
                assert torch.equal(a[key], b[key]), key
        assert peer == ref_peer and sum(peer) > 0
        assert reads == ref_reads and row_reads == ref_row_reads


def _hetero_one_machine_worker(rank, world_size, out_dir):
    common = dict(input_nodes=('paper', None), batch_size=8, seed=3,
                  device='cpu')
    loader = HybridNeighborLoader(out_dir, [3, 2],
                                  feature_placement='sharded', **common)
    plain = HybridNeighborLoader(out_dir, [3, 2], **common)
    batches = [{t: (b[t].n_id, b[t].x) for t in b.node_types}
               for b in loader]
    plain_batches = [{t: (b[t].n_id, b[t].x) for t in b.node_types}
                     for b in plain]
    return batches, plain_batches, loader.partition_batches.gather.row_reads()


def test_hetero_feature_rows_shared_by_one_machine(tmp_path):
    # A heterogeneous part on the 2 ranks of one machine: every node type's
    # rows split across them; batches as with whole rows, rows as the
    # graph's.
    data = small_paper_graph()
    info = partition_graph(data, 1, tmp_path / 'p', 'contiguous',
                           progress=False)
    out = run_workers(_hetero_one_machine_worker, 2,
                      args=(str(info.out_dir), ), timeout=120)
    for batches, plain, reads in out:
        assert reads['local'] > 0 and reads['peer'] > 0
        assert len(batches) == len(plain) > 1
        for b, p in zip(batches, plain):
            assert b.keys() == p.keys()
            for t, (n_id, x) in b.items():
                assert torch.equal(n_id, p[t][0])
                assert torch.equal(x, data[t].x[n_id])
