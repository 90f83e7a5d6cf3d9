"""One part per machine on GPUs: 4 processes, one GPU each, act as 2
machines of 2 GPUs (LOCAL_WORLD_SIZE=2) over a folder of 2 parts, joined by
NCCL. Within a machine the part's neighbor lists and feature rows are split
across its two GPUs (``topology_placement='sharded'``,
``feature_placement='sharded'``: symmetric memory, read by the fused kernels
over NVLink); between machines the ranks exchange over NCCL. The batches
must be the unsharded loader's (and, with full fan-out, the single-process
loader's), and DDP training over the 4 GPUs must end with the same weights
either way. Runs where four CUDA devices are available
(``nvidia-h100-x4``/``nvidia-h200-x4``);
``tests/test_distributed_machines.py`` checks the same layout with gloo on
CPU processes."""
import pytest
import torch
from conftest import random_graph, tiny_model, train_sgd
from multiproc import (
    check_full_fanout_batches,
    check_seeds_split_by_machine,
    run_machines,
)

from pyg_orch import PlacementOptions
from pyg_orch.multigpu import MULTICAST_OFF_ENV

#: The neighbor lists split across the machine's processes.
SHARDED = PlacementOptions(topology='sharded')

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.device_count() < 4,
        reason='needs 4 CUDA devices'),
]

KEYS = ('n_id', 'e_id', 'edge_index', 'x', 'y', 'edge_attr')
MACHINES, PER_MACHINE = 2, 2
STEPS = 6


def graph():  # 8 features and 3 classes, as tiny_model() takes.
    return random_graph(400, 3000, seed=5, num_features=8, num_classes=3,
                        train_ratio=0.5, edge_dim=2)


def _cpu(loader, devices=None):
    out = []
    for b in loader:  # One epoch: the next one draws other neighbors.
        if devices is not None:
            devices.update(b[k].device.index for k in KEYS)
        out.append({k: b[k].cpu() for k in KEYS}
                   | {'batch_size': b.batch_size})
    return out


def _machine_worker(rank, world_size, out_dir):
    from torch.nn.parallel import DistributedDataParallel

    from pyg_orch import HybridNeighborLoader
    torch.cuda.set_device(rank)
    device = torch.device('cuda', rank)
    common = dict(batch_size=8, even='pad', device=device,
                  sampling_device=device, seed=3)
    sharded = HybridNeighborLoader(out_dir, [4, 3],
                                   placement=SHARDED, **common)
    plain = HybridNeighborLoader(out_dir, [4, 3], **common)
    both = HybridNeighborLoader(out_dir, [4, 3],
                                placement=SHARDED,
                                feature_placement='sharded',
                                feature_device=device, **common)
    full = HybridNeighborLoader(out_dir, [-1, -1],
                                placement=SHARDED,
                                feature_placement='sharded',
                                feature_device=device, **common)
    devices = set()
    out = {
        'part': sharded.partition_batches.partition.part,
        'layout': (sharded.partition_batches.layout.local_rank,
                   sharded.partition_batches.layout.local_world_size),
        'input_nodes': sharded.partition_batches.input_nodes.cpu(),
        'sharded': _cpu(sharded, devices),
        'devices': devices,
        'plain': _cpu(plain),
        'both': _cpu(both),
        'full': _cpu(full),
        'reads': sharded.node_sampler.topology_reads(),
        'row_reads': both.partition_batches.gather.row_reads(),
    }

    def train(**kwargs):
        loader = HybridNeighborLoader(out_dir, [4, 3], **common,
                                      shuffle=True, **kwargs)
        model = DistributedDataParallel(tiny_model().to(device),
                                        device_ids=[rank])
        return train_sgd(model, loader, STEPS).cpu()

    out['weights_plain'] = train()
    out['weights_sharded'] = train(placement=SHARDED,
                                   feature_placement='sharded',
                                   feature_device=device)
    torch.cuda.synchronize()
    return out


def test_two_machines_of_two_gpus_share_their_parts(tmp_path):
    data = graph()
    info, out = run_machines(_machine_worker, data, tmp_path / 'p', MACHINES,
                             PER_MACHINE, backend='nccl',
                             start_method='spawn', timeout=400,
                             env=MULTICAST_OFF_ENV)
    for rank, o in enumerate(out):
        machine, local = divmod(rank, PER_MACHINE)
        assert o['part'] == machine
        assert o['layout'] == (local, PER_MACHINE)
        assert o['devices'] == {rank}
        # Splitting the part across the machine's GPUs changes where lists
        # and rows are read, not what is sampled:
        assert len(o['sharded']) == len(o['plain']) == len(o['both']) > 1
        for a, b, c in zip(o['sharded'], o['plain'], o['both']):
            assert a['batch_size'] == b['batch_size'] == c['batch_size']
            for key in KEYS:
                assert torch.equal(a[key], b[key]), key
                assert torch.equal(a[key], c[key]), key
        for b in o['both']:
            assert torch.equal(b['x'], data.x[b['n_id']])
        assert o['reads']['local'] > 0 and o['reads']['peer'] > 0
        assert o['row_reads']['local'] > 0 and o['row_reads']['peer'] > 0
        # Full fan-out: the single-process loader's batches of these seeds.
        check_full_fanout_batches(data, o['full'], o['input_nodes'], 8, KEYS)
        # DDP: the same weights on every rank, sharded or not.
        assert torch.equal(o['weights_sharded'], out[0]['weights_sharded'])
        assert torch.allclose(o['weights_sharded'], o['weights_plain'],
                              rtol=1e-4, atol=1e-5)
    # The machine's ranks split its part's training nodes; every one went
    # to one rank:
    check_seeds_split_by_machine(info.out_dir,
                                 [o['input_nodes'] for o in out],
                                 data.train_mask.nonzero().view(-1),
                                 PER_MACHINE)
