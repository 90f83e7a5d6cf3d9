"""A part that one rank cannot load is reported on every rank, naming the
rank and the file (two gloo processes). Named test_distributed_* so that
conftest runs it in the multi-process xdist group."""
import time

import pytest
import torch

from conftest import random_graph
from multiproc import run_workers

from pyg_orch import HybridNeighborLoader
from pyg_orch.distributed import partition_graph
from pyg_orch.features.partition_stores import open_partition


def _open_worker(rank, world_size, folders):
    messages = []
    for out_dir, verify in folders:
        try:
            open_partition(out_dir, verify=verify)
        except ValueError as exc:
            messages.append(str(exc))
        else:
            messages.append(None)
    # The group still works after the failures: a good folder loads.
    loader = HybridNeighborLoader(folders[-1][0], [2], batch_size=8,
                                  device='cpu')
    return messages, len(list(loader))


def _write(tmp_path, name):
    data = random_graph(80, 400, seed=3, num_features=4, num_classes=3)
    return partition_graph(data, 2, tmp_path / name, 'contiguous',
                           progress=False).out_dir


def test_bad_part_named_on_every_rank(tmp_path):
    flipped, garbage, missing, good = (
        _write(tmp_path, n) for n in ('flipped', 'garbage', 'missing',
                                      'good'))
    (missing / 'part_1' / 'node_ids.pt').unlink()
    x_file = flipped / 'part_1' / 'nodes' / 'x.pt'
    blob = bytearray(x_file.read_bytes())
    blob[-200] ^= 0x01
    x_file.write_bytes(bytes(blob))
    colptr = garbage / 'part_1' / 'colptr.pt'
    colptr.write_bytes(b'\0' * colptr.stat().st_size)  # Same size.
    start = time.monotonic()
    out = run_workers(_open_worker, 2,
                      args=([(str(flipped), None), (str(garbage), False),
                             (str(missing), None), (str(good), None)], ),
                      timeout=90, pg_timeout=30)
    assert time.monotonic() - start < 60.0  # No rank waited out a timeout.
    for messages, num_batches in out:
        flip_msg, garbage_msg, missing_msg, good_msg = messages
        assert flip_msg.startswith('rank 1 could not load '
                                   'part_1/nodes/x.pt: its content does not '
                                   'match meta.json'), flip_msg
        assert garbage_msg.startswith('rank 1 could not load '
                                      'part_1/colptr.pt: '), garbage_msg
        assert str(garbage) in garbage_msg
        assert missing_msg.startswith('rank 1 could not load '
                                      'part_1/node_ids.pt: it is missing')
        assert good_msg is None
        assert num_batches > 0


def test_store_placement_checked(tmp_path):
    # One process, one part: the placement is checked where it lives (the
    # stores), and a pair of stores refuses it at the loader.
    from pyg_orch.distributed import open_stores
    data = random_graph(40, 160, seed=1, num_features=4, num_classes=3,
                        train_ratio=0.5)
    out_dir = partition_graph(data, 1, tmp_path / 'one', 'contiguous',
                              progress=False).out_dir
    with pytest.raises(ValueError, match="'topology_placement' must be "
                       "'auto' or 'sharded'.*got 'device'"):
        open_stores(out_dir, topology_placement='device')
    with pytest.raises(ValueError, match="'feature_placement' must be"):
        open_stores(out_dir, feature_placement='spread')
    for name in ('topology_placement', 'feature_placement'):
        with pytest.raises(ValueError, match=f"{name}='sharded' splits a "
                           f"part's .* here every rank holds its own part"):
            open_stores(out_dir, **{name: 'sharded'})
    fs, gs = open_stores(out_dir, cache_size=7, edge_cache_size=3,
                         policy='lru', sampling_device='cpu')
    assert (fs.cache_size, fs.edge_cache_size) == (7, 3)
    assert fs.feature_gather.policy == 'lru'
    assert gs.sampling_device == torch.device('cpu')
    assert gs.sampler([2]).device == torch.device('cpu')
    with pytest.raises(ValueError, match=r"\['cache_size'\] place the "
                       r"stores: pass them to open_stores\(\)"):
        HybridNeighborLoader((fs, gs), [2], batch_size=4, device='cpu',
                             cache_size=5)
    # The pair's batches: its seeds as given, the default 'train_mask'.
    loader = HybridNeighborLoader((fs, gs), [2], batch_size=4,
                                  device='cpu')
    seeds = loader.partition_batches.input_nodes
    assert torch.equal(seeds, data.train_mask.nonzero().view(-1))
    assert sum(b.batch_size for b in loader) == seeds.numel()
    assert len(loader.batch_stats) == len(loader) == \
        (seeds.numel() + 3) // 4
    assert loader.stats()['batches'] == loader.batch_stats
    assert all(s['remote_rows'] == 0 for s in loader.batch_stats)
