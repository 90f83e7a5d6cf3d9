"""What partition_graph, load_partition and the partition command line
check: the loader's own input checks on write, names in meta.json that
stay inside the folder, per-file hashes, dtypes and shapes on read, and a
--data file that cannot run code."""
import hashlib
import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from conftest import paper_hetero_graph, random_graph
from torch_geometric.data import Data, HeteroData

from pyg_orch import HybridNeighborLoader
from pyg_orch.partition.partitioning import assign_parts
from pyg_orch.distributed import load_partition, partition_graph
from pyg_orch.partition import storage
from pyg_orch.partition.cli import main
from pyg_orch.partition.storage import PartitionFileError, verify_partition


def graph(seed=1):
    return random_graph(60, 300, seed=seed, num_features=3, num_classes=4,
                        edge_dim=2)


def write(data, tmp_path, name='parts', num_parts=2):
    return partition_graph(data, num_parts, tmp_path / name, 'contiguous',
                           progress=False).out_dir


def read_meta(out):
    return json.loads((out / 'meta.json').read_text())


def write_meta(out, meta):
    (out / 'meta.json').write_text(json.dumps(meta))


# Item 5: what the loader rejects, partition_graph rejects ###################

def _bad_graphs():
    base = graph()
    n = base.num_nodes
    ei = base.edge_index
    neg = ei.clone()
    neg[0, 5] = -1
    big = ei.clone()
    big[1, 7] = n
    yield 'negative', Data(x=base.x, edge_index=neg), 'negative'
    yield 'float', Data(x=base.x, edge_index=ei.float()), 'int32 or int64'
    yield 'three rows', Data(x=base.x, edge_index=torch.cat([ei, ei[:1]])), \
        r'shape \[2, num_edges\]'
    yield 'too large', Data(x=base.x, edge_index=big), \
        f'destination node {n}'
    yield 'x rows', Data(x=base.x, edge_index=ei, num_nodes=n - 5), \
        f'x has {n} rows'
    yield 'y rows', Data(x=base.x, y=base.y[:-3], edge_index=ei), \
        f'y has {n - 3} rows'


@pytest.mark.parametrize('case', list(_bad_graphs()), ids=lambda c: c[0])
def test_partition_rejects_what_the_loader_rejects(tmp_path, case):
    _, data, match = case
    with pytest.raises(ValueError, match=match):
        partition_graph(data, 2, tmp_path / 'out', 'contiguous',
                        progress=False)
    assert not (tmp_path / 'out').exists()  # Nothing written.
    with pytest.raises(ValueError, match=match):
        HybridNeighborLoader(data, [2], batch_size=4)


def test_partition_rejects_edge_attr_rows(tmp_path):
    data = graph()
    data.edge_attr = data.edge_attr[:-1]
    with pytest.raises(ValueError, match=r'edge_attr has shape \[299, 2\], '
                       r'but the graph has 300 edges'):
        partition_graph(data, 2, tmp_path / 'out', 'contiguous',
                        progress=False)
    assert not (tmp_path / 'out').exists()


def test_partition_rejects_bad_hetero_edges(tmp_path):
    data = paper_hetero_graph()
    et = data.edge_types[0]
    data[et].edge_index = data[et].edge_index.clone()
    data[et].edge_index[0, 0] = data[et[0]].num_nodes
    with pytest.raises(ValueError, match=r"edge_index.*source node"):
        partition_graph(data, 2, tmp_path / 'out', 'contiguous',
                        progress=False)


def test_assign_parts_checks_its_arguments():
    ei = torch.tensor([[0, 1], [1, 2]])
    assert assign_parts(ei, 3, 3, 'contiguous').tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="'edge_index'.*int32 or int64"):
        assign_parts(ei.float(), 3, 2, 'contiguous')
    with pytest.raises(ValueError, match="destination node 2"):
        assign_parts(ei, 2, 2, 'contiguous')
    with pytest.raises(ValueError, match="'num_parts'"):
        assign_parts(ei, 3, 4, 'contiguous')
    with pytest.raises(ValueError, match="'num_nodes'"):
        assign_parts(ei, 3.0, 2, 'contiguous')


# Item 10: names in meta.json stay in the folder #############################

@pytest.mark.parametrize('edit', [
    lambda m: m['node_attrs'].append('../../secret'),
    lambda m: m['edge_attrs'].append('/etc/passwd'),
    lambda m: m['files']['part_0'].update({'part_0/../../x.pt': 8}),
    lambda m: m['files']['part_0'].update({'part_1/nodes/x.pt': 8}),
    lambda m: m['files'].update({'../up': {}}),
], ids=['node attr', 'edge attr', 'dotdot file', 'other part', 'group'])
def test_meta_names_cannot_leave_the_folder(tmp_path, edit):
    out = write(graph(), tmp_path)
    (tmp_path / 'secret.pt').write_bytes(b'outside')
    meta = read_meta(out)
    edit(meta)
    write_meta(out, meta)
    with pytest.raises(ValueError, match='damaged or was not written by '
                       'partition_graph'):
        load_partition(out, 0)


@pytest.mark.parametrize('edit', [
    lambda m: m.update(num_parts='2'),
    lambda m: m.update(part_sizes=[3]),
    lambda m: m.update(part_num_edges=None),
    lambda m: m.update(node_attrs=5),
    lambda m: m['files']['part_0'].update({'part_0/nodes/x.pt': 'big'}),
], ids=['num_parts', 'part_sizes', 'part_num_edges', 'node_attrs', 'entry'])
def test_damaged_meta_values_give_clear_errors(tmp_path, edit):
    out = write(graph(), tmp_path)
    meta = read_meta(out)
    edit(meta)
    write_meta(out, meta)
    with pytest.raises(ValueError, match='meta.json'):
        load_partition(out, 1)


def test_hetero_meta_names_checked(tmp_path):
    out = partition_graph(paper_hetero_graph(), 2, tmp_path / 'h',
                          'contiguous', progress=False).out_dir
    assert load_partition(out, 1).is_hetero
    meta = read_meta(out)
    meta['node_types'][0] = '..'
    write_meta(out, meta)
    with pytest.raises(ValueError, match="node type '..' cannot name"):
        load_partition(out, 1)


# Item 11: content hashes, dtypes and shapes #################################

def test_meta_records_hash_dtype_and_shape(tmp_path):
    data = graph()
    out = write(data, tmp_path)
    meta = read_meta(out)
    assert meta['version'] == storage.FORMAT_VERSION == 2
    entry = meta['files']['part_1']['part_1/nodes/x.pt']
    blob = (out / 'part_1/nodes/x.pt').read_bytes()
    assert entry['sha256'] == hashlib.sha256(blob).hexdigest()
    assert entry['bytes'] == len(blob)
    part = load_partition(out, 1)
    assert entry['dtype'] == 'float32'
    assert entry['shape'] == [part.num_nodes, 3]
    assert torch.equal(part.x, data.x[part.node_ids])
    verify_partition(out)


def _flip(path: Path, at: int = -200) -> None:
    blob = bytearray(path.read_bytes())
    blob[at] ^= 0x01
    path.write_bytes(bytes(blob))


def test_flipped_byte_is_found(tmp_path):
    out = write(graph(), tmp_path)
    _flip(out / 'part_1' / 'nodes' / 'x.pt')
    match = r'could not load part_1/nodes/x.pt: its content does not match'
    with pytest.raises(PartitionFileError, match=match):
        load_partition(out, 1)  # Small folder: verified by default.
    with pytest.raises(PartitionFileError, match=match):
        verify_partition(out)
    with pytest.raises(PartitionFileError, match=match):
        verify_partition(out, part=1)
    verify_partition(out, part=0)
    load_partition(out, 0)
    with pytest.raises(ValueError, match=r"'part' must be in \[0, 2\)"):
        verify_partition(out, part=2)


def test_verify_argument_and_threshold(tmp_path, monkeypatch):
    out = write(graph(), tmp_path)
    hashed = []
    real = storage.file_hash
    monkeypatch.setattr(storage, 'file_hash',
                        lambda p: hashed.append(p) or real(p))
    load_partition(out, 0)
    assert {Path(p).relative_to(out).parts[0] for p in hashed} == {
        'part_0', 'node_part.pt', 'local_id.pt'}
    hashed.clear()
    load_partition(out, 0, verify=False)
    assert hashed == []
    monkeypatch.setattr(storage, 'VERIFY_AUTO_BYTES', 10)  # A "big" one.
    load_partition(out, 0)
    assert hashed == []
    load_partition(out, 0, verify=True)
    assert len(hashed) > 0
    with pytest.raises(ValueError, match="'verify' must be None, True or "
                       "False"):
        load_partition(out, 0, verify='yes')


def test_wrong_dtype_found_without_hashing(tmp_path):
    out = write(graph(), tmp_path)
    colptr = out / 'part_0' / 'colptr.pt'
    torch.save(torch.load(colptr).to(torch.float64), colptr)
    with pytest.raises(ValueError, match='part_0/colptr.pt'):
        load_partition(out, 0, verify=False)
    # The same size in meta.json: the dtype check names it.
    meta = read_meta(out)
    meta['files']['part_0']['part_0/colptr.pt']['bytes'] = \
        colptr.stat().st_size
    write_meta(out, meta)
    with pytest.raises(PartitionFileError,
                       match=r'part_0/colptr.pt: it holds a tensor float64'):
        load_partition(out, 0, verify=False)


def test_wrong_shape_and_garbage_found_without_hashing(tmp_path):
    out = write(graph(), tmp_path)
    meta = read_meta(out)
    x_file = out / 'part_1' / 'nodes' / 'x.pt'
    x = torch.load(x_file)
    torch.save(x.t().contiguous(), x_file)  # Same bytes, another shape.
    meta['files']['part_1']['part_1/nodes/x.pt']['bytes'] = \
        x_file.stat().st_size
    write_meta(out, meta)
    with pytest.raises(PartitionFileError,
                       match=r'part_1/nodes/x.pt: it holds a tensor float32 '
                       r'\[3, \d+\], but meta.json says float32 \[\d+, 3\]'):
        load_partition(out, 1, verify=False)
    x_file.write_bytes(b'\0' * meta['files']['part_1'][
        'part_1/nodes/x.pt']['bytes'])
    with pytest.raises(PartitionFileError,
                       match=r'could not load part_1/nodes/x.pt: \w+'):
        load_partition(out, 1, verify=False)
    ids = out / 'part_1' / 'node_ids.pt'
    torch.save({'not': 'a tensor'}, ids)
    meta['files']['part_1']['part_1/node_ids.pt']['bytes'] = \
        ids.stat().st_size
    write_meta(out, meta)
    with pytest.raises(PartitionFileError, match='node_ids.pt: it holds a '
                       'dict, not a tensor'):
        load_partition(out, 1, verify=False)


def test_part_copied_from_another_graph_is_found(tmp_path):
    data = graph()
    other = data.clone()
    other.x = torch.randn_like(data.x)  # Same sizes, other content.
    out, out2 = write(data, tmp_path, 'a'), write(other, tmp_path, 'b')
    shutil.rmtree(out / 'part_1')
    shutil.copytree(out2 / 'part_1', out / 'part_1')
    with pytest.raises(PartitionFileError, match='part_1/nodes/x.pt: its '
                       'content does not match'):
        load_partition(out, 1)


def test_unlisted_file_is_refused(tmp_path):
    out = write(graph(), tmp_path)
    meta = read_meta(out)
    del meta['files']['part_0']['part_0/nodes/x.pt']
    write_meta(out, meta)
    with pytest.raises(PartitionFileError, match='part_0/nodes/x.pt: it is '
                       'not listed in meta.json'):
        load_partition(out, 0)


def _as_version_1(out):
    meta = read_meta(out)
    meta['version'] = 1
    meta['files'] = {group: {rel: entry['bytes'] for rel, entry in
                             files.items()}
                     for group, files in meta['files'].items()}
    write_meta(out, meta)


def test_version_1_folder_loads_with_a_warning(tmp_path):
    data = graph()
    out = write(data, tmp_path)
    _as_version_1(out)
    with pytest.warns(UserWarning, match='cannot be verified'):
        part = load_partition(out, 1)
    assert torch.equal(part.x, data.x[part.node_ids])
    with pytest.raises(ValueError, match='records no content hashes'):
        load_partition(out, 1, verify=True)
    with pytest.raises(ValueError, match='records no content hashes'):
        verify_partition(out)
    # dtype and shape checks still apply:
    colptr = out / 'part_1' / 'colptr.pt'
    torch.save(torch.load(colptr).to(torch.float64), colptr)
    meta = read_meta(out)
    meta['files']['part_1']['part_1/colptr.pt'] = colptr.stat().st_size
    write_meta(out, meta)
    with pytest.warns(UserWarning), pytest.raises(
            PartitionFileError, match='colptr.pt: it holds a tensor float64'
            '.*expects int64'):
        load_partition(out, 1)


# Item 9: --data cannot run code #############################################

class _Crafted:
    r"""Unpickling it touches a file: code run by loading."""
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker, ))


def _cli(tmp_path, data_path, *extra):
    return main(['--data', str(data_path), '--parts', '2', '--out',
                 str(tmp_path / 'cli'), '--method', 'contiguous', '--quiet',
                 '--overwrite', *extra])


@pytest.mark.filterwarnings('ignore:Detected pickle protocol')
@pytest.mark.parametrize('how', ['torch.save', 'pickle'])
def test_cli_does_not_run_code_from_data(tmp_path, capsys, how):
    marker = tmp_path / 'ran'
    path = tmp_path / 'crafted.pt'
    if how == 'torch.save':
        torch.save({'x': _Crafted(marker)}, path)
    else:
        path.write_bytes(pickle.dumps(_Crafted(marker)))
    assert _cli(tmp_path, path) == 2
    err = capsys.readouterr().err
    assert "'--data'" in err and 'cannot be loaded safely' in err
    assert '--trust-pickle' in err
    assert not marker.exists()
    # The file does run code where the user says it is trusted:
    assert _cli(tmp_path, path, '--trust-pickle') == 2  # Not a Data.
    assert marker.exists()


def test_cli_loads_data_and_hetero_safely(tmp_path, capsys):
    data = graph()
    torch.save(data, tmp_path / 'g.pt')
    assert _cli(tmp_path, tmp_path / 'g.pt') == 0
    part = load_partition(tmp_path / 'cli', 1)
    assert torch.equal(part.x, data.x[part.node_ids])
    hetero = paper_hetero_graph()
    assert isinstance(hetero, HeteroData)
    torch.save([hetero], tmp_path / 'h.pt')
    assert _cli(tmp_path, tmp_path / 'h.pt') == 0
    assert load_partition(tmp_path / 'cli', 0).is_hetero
    (tmp_path / 'junk.pt').write_bytes(b'not a torch file')
    assert _cli(tmp_path, tmp_path / 'junk.pt') == 2
    assert "'--data'" in capsys.readouterr().err


def test_cli_help_names_the_risk(capsys):
    with pytest.raises(SystemExit):
        main(['--help'])
    out = ' '.join(capsys.readouterr().out.split())
    assert '--trust-pickle' in out and 'RUNS ANY CODE' in out
