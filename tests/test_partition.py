"""Offline partitioning (pyg_orch.distributed): partition_graph writes one
folder per part, load_partition reads one part back, memory-mapped, and
rejects folders that do not match."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO, paper_hetero_graph, random_graph
from torch_geometric.data import Data

from pyg_orch.distributed import (
    graph_fingerprint,
    load_partition,
    partition_graph,
)
from pyg_orch.partition.partitioning import balance, edge_cut, metis_available

METHODS = ['contiguous', 'random',
           pytest.param('metis', marks=pytest.mark.skipif(
               not metis_available(), reason='needs pymetis'))]


def graph(**kwargs):
    kwargs.setdefault('num_features', 3)
    kwargs.setdefault('num_classes', 4)
    kwargs.setdefault('train_ratio', 0.5)
    kwargs.setdefault('edge_dim', 2)
    return random_graph(300, 2000, seed=1, **kwargs)


def write(data, tmp_path, num_parts=4, method='contiguous', seed=0,
          name='parts'):
    return partition_graph(data, num_parts, tmp_path / name, method, seed,
                           progress=False)


def load_all(out_dir, num_parts):
    return [load_partition(out_dir, k) for k in range(num_parts)]


@pytest.mark.parametrize('method', METHODS)
def test_parts_cover_graph(tmp_path, method):
    data = graph()
    info = write(data, tmp_path, 4, method)
    assert info.method == method and info.num_parts == 4
    parts = load_all(info.out_dir, 4)

    # Every vertex in exactly one part, and the maps agree:
    ids = torch.cat([p.node_ids for p in parts])
    assert sorted(ids.tolist()) == list(range(data.num_nodes))
    for p in parts:
        assert p.node_ids.tolist() == sorted(p.node_ids.tolist())
        assert (p.owner(p.node_ids) == p.part).all()
        assert p.is_local(p.node_ids).all()
        assert p.to_local(p.node_ids).tolist() == list(range(p.num_nodes))
    assert info.part_sizes == [p.num_nodes for p in parts]

    # The union of the in-edges is the graph's edges, as (src, dst, eid):
    triples = []
    for p in parts:
        deg = p.csc.colptr[1:] - p.csc.colptr[:-1]
        dst = p.node_ids.repeat_interleave(deg)
        triples += zip(p.csc.row.tolist(), dst.tolist(),
                       p.csc.edge_id.tolist())
    expected = zip(*data.edge_index.tolist(), range(data.num_edges))
    assert sorted(triples) == sorted(expected)
    assert sum(p.num_edges for p in parts) == data.num_edges

    # Node and edge attributes follow the vertices and in-edges:
    for p in parts:
        assert torch.equal(p.x, data.x[p.node_ids])
        assert torch.equal(p.y, data.y[p.node_ids])
        assert torch.equal(p.node_attrs['train_mask'],
                           data.train_mask[p.node_ids])
        assert torch.equal(p.edge_attrs['edge_attr'],
                           data.edge_attr[p.csc.edge_id])
        assert p.csc.num_src_nodes == data.num_nodes

    # Edge cut and balance as reported, in meta.json too:
    node_part = parts[0].node_part
    assert info.edge_cut == pytest.approx(edge_cut(data.edge_index,
                                                   node_part))
    assert info.balance == pytest.approx(balance(node_part, 4))
    meta = json.loads((info.out_dir / 'meta.json').read_text())
    assert meta['edge_cut'] == info.edge_cut
    assert meta['balance'] == info.balance
    assert meta['fingerprint'] == graph_fingerprint(data.edge_index,
                                                    data.num_nodes)


def test_edge_cut_and_balance_by_hand(tmp_path):
    # 6 vertices, contiguous into 2 parts: {0, 1, 2} and {3, 4, 5}.
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 0, 5, 2],
                               [1, 2, 0, 4, 5, 3, 1, 2]])
    data = Data(edge_index=edge_index, num_nodes=6)
    info = write(data, tmp_path, 2, 'contiguous')
    assert info.edge_cut == pytest.approx(2 / 8)  # 0->3 and 5->1
    assert info.balance == pytest.approx(1.0)
    assert info.part_sizes == [3, 3]
    assert info.part_num_edges == [5, 3]

    # 7 vertices into 3 parts: sizes 2, 2, 3 (contiguous), max 3 / mean 7/3.
    data = Data(edge_index=torch.tensor([[0, 6], [6, 0]]), num_nodes=7)
    info = write(data, tmp_path, 3, 'contiguous', name='b')
    assert sorted(info.part_sizes) == [2, 2, 3]
    assert info.balance == pytest.approx(3 / (7 / 3))
    assert info.edge_cut == pytest.approx(1.0)

    assert edge_cut(torch.empty(2, 0, dtype=torch.long),
                    torch.zeros(3, dtype=torch.long)) == 0.0
    node_part = torch.tensor([0, 0, 0, 1])
    assert balance(node_part, 2) == pytest.approx(3 / 2)


@pytest.mark.parametrize('method', ['contiguous', 'random'])
def test_deterministic_with_seed(tmp_path, method):
    data = graph()
    a = write(data, tmp_path, 3, method, seed=5, name='a')
    b = write(data, tmp_path, 3, method, seed=5, name='b')
    pa = load_all(a.out_dir, 3)
    pb = load_all(b.out_dir, 3)
    assert torch.equal(pa[0].node_part, pb[0].node_part)
    for x, y in zip(pa, pb):
        assert torch.equal(x.node_ids, y.node_ids)
        assert torch.equal(x.csc.row, y.csc.row)
    if method == 'random':
        c = write(data, tmp_path, 3, method, seed=6, name='c')
        assert not torch.equal(load_partition(c.out_dir, 0).node_part,
                               pa[0].node_part)
        assert a.balance == pytest.approx(1.0)
    else:
        assert pa[0].node_ids.tolist() == list(range(100))


def test_load_reads_only_its_part(tmp_path, monkeypatch):
    data = graph()
    info = write(data, tmp_path, 4)
    opened = []
    real_load = torch.load

    def spy(path, *args, **kwargs):
        opened.append((Path(path), kwargs.get('mmap')))
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(torch, 'load', spy)
    p = load_partition(info.out_dir, 2)
    monkeypatch.undo()
    rel = {path.relative_to(info.out_dir).parts[0] for path, _ in opened}
    assert rel == {'part_2', 'node_part.pt', 'local_id.pt'}
    assert all(mmap for _, mmap in opened)

    # Without the other parts' folders, part 2 still loads:
    for k in (0, 1, 3):
        shutil.rmtree(info.out_dir / f'part_{k}')
    q = load_partition(info.out_dir, 2)
    assert torch.equal(q.x, data.x[p.node_ids])
    with pytest.raises(ValueError, match='missing'):
        load_partition(info.out_dir, 0)


def test_mismatched_folders_rejected(tmp_path):
    data = graph()
    info = write(data, tmp_path, 4)
    out = info.out_dir
    fp = graph_fingerprint(data.edge_index, data.num_nodes)
    assert load_partition(out, 0, expected_num_parts=4,
                          expected_fingerprint=fp).part == 0

    with pytest.raises(ValueError, match=r'4 parts.*8 parts were expected'):
        load_partition(out, 0, expected_num_parts=8)
    other = random_graph(300, 2000, seed=2)
    with pytest.raises(ValueError, match='another graph'):
        load_partition(out, 0, expected_fingerprint=graph_fingerprint(
            other.edge_index, other.num_nodes))
    for part in (4, -1, 1.0, True):
        with pytest.raises(ValueError, match=r"'part' must be in \[0, 4\)"):
            load_partition(out, part)
    with pytest.raises(ValueError, match='does not exist'):
        load_partition(tmp_path / 'nowhere', 0)
    (tmp_path / 'empty').mkdir()
    with pytest.raises(ValueError, match='no meta.json'):
        load_partition(tmp_path / 'empty', 0)

    # Truncated and missing files:
    x_file = out / 'part_1' / 'nodes' / 'x.pt'
    blob = x_file.read_bytes()
    x_file.write_bytes(blob[:-10])
    with pytest.raises(ValueError, match=r"could not load part_1/nodes/x.pt: "
                       r"it has .* bytes but meta.json says"):
        load_partition(out, 1)
    x_file.unlink()
    with pytest.raises(ValueError, match=r"part_1/nodes/x.pt: it is missing"):
        load_partition(out, 1)
    (out / 'node_part.pt').unlink()
    with pytest.raises(ValueError, match=r"load node_part.pt: it is missing"):
        load_partition(out, 0)

    # Another format version:
    meta = json.loads((out / 'meta.json').read_text())
    meta['version'] = 99
    (out / 'meta.json').write_text(json.dumps(meta))
    with pytest.raises(ValueError, match='format version 99'):
        load_partition(out, 0)
    (out / 'meta.json').write_text('{not json')
    with pytest.raises(ValueError, match='cannot be read as JSON'):
        load_partition(out, 0)


def test_bad_arguments(tmp_path):
    data = graph()
    for num_parts in (0, -1, 301, 2.5, True):
        with pytest.raises(ValueError, match="'num_parts'"):
            partition_graph(data, num_parts, tmp_path / 'a', progress=False)
    with pytest.raises(ValueError, match="'method'"):
        partition_graph(data, 2, tmp_path / 'a', method='kmeans')
    with pytest.raises(ValueError, match="'seed'"):
        partition_graph(data, 2, tmp_path / 'a', 'random', seed=1.5)
    with pytest.raises(ValueError, match="'data'"):
        partition_graph(data.edge_index, 2, tmp_path / 'a')
    hetero = paper_hetero_graph()
    with pytest.raises(ValueError, match=r"'num_parts'.*\[1, 520\]"):
        partition_graph(hetero, 521, tmp_path / 'a')
    assert not (tmp_path / 'a').exists()

    # A non-empty folder needs overwrite=True, and only a partition's:
    write(data, tmp_path, 4, name='a')
    with pytest.raises(ValueError, match='overwrite=True'):
        write(data, tmp_path, 2, name='a')
    info = partition_graph(data, 2, tmp_path / 'a', 'contiguous',
                           overwrite=True, progress=False)
    assert sorted(p.name for p in info.out_dir.glob('part_*')) == [
        'part_0', 'part_1']
    assert load_partition(info.out_dir, 1, expected_num_parts=2).part == 1
    (tmp_path / 'b').mkdir()
    (tmp_path / 'b' / 'keep.txt').write_text('mine')
    with pytest.raises(ValueError, match='holds no partition'):
        partition_graph(data, 2, tmp_path / 'b', overwrite=True)
    assert (tmp_path / 'b' / 'keep.txt').exists()


def test_one_part_and_no_attributes(tmp_path):
    data = random_graph(50, 0)
    info = write(data, tmp_path, 1, 'random')
    p = load_partition(info.out_dir, 0)
    assert p.num_nodes == 50 and p.num_edges == 0
    assert p.x is None and p.y is None
    assert info.edge_cut == 0.0 and info.balance == 1.0


def test_auto_method(tmp_path):
    info = write(graph(), tmp_path, 2, 'auto')
    assert info.method == ('metis' if metis_available() else 'contiguous')
    meta = json.loads((info.out_dir / 'meta.json').read_text())
    assert meta['requested_method'] == 'auto'


def test_metis_missing_message(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, 'pymetis', None)  # import fails
    with pytest.raises(ImportError, match="pip install pymetis"):
        write(graph(), tmp_path, 2, 'metis')
    assert write(graph(), tmp_path, 2, 'auto', name='b').method == \
        'contiguous'


def clustered_graph(num_blocks=4, block=50, inner=800, links=20, seed=0):
    # Dense random blocks and a few random links between them; the block
    # ids are shuffled so that contiguous ranges do not find them.
    gen = torch.Generator().manual_seed(seed)
    n = num_blocks * block
    blk = torch.randint(0, num_blocks, (num_blocks * inner, ), generator=gen)
    src = blk * block + torch.randint(0, block, blk.shape, generator=gen)
    dst = blk * block + torch.randint(0, block, blk.shape, generator=gen)
    cross = torch.randint(0, n, (2, links), generator=gen)
    edge_index = torch.cat([torch.stack([src, dst]), cross], dim=1)
    perm = torch.randperm(n, generator=gen)
    return Data(edge_index=perm[edge_index], num_nodes=n)


def test_metis_cuts_fewer_edges_than_random(tmp_path):
    pytest.importorskip('pymetis')
    data = clustered_graph()
    metis = write(data, tmp_path, 4, 'metis', name='m')
    rand = write(data, tmp_path, 4, 'random', name='r')
    assert metis.edge_cut < 0.05 < 0.5 < rand.edge_cut
    assert metis.balance < 1.2


def test_old_command_line_warns_and_runs():
    # `python -m pyg_orch.distributed.partition` stays one release.
    cmd = [sys.executable, '-W', 'always::DeprecationWarning', '-m',
           'pyg_orch.distributed.partition', '--help']
    out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                         env={'PYTHONPATH': str(REPO),
                              'PATH': '/usr/bin:/bin'})
    assert '--parts' in out.stdout
    assert "run 'python -m pyg_orch.partition.cli'" in out.stderr


def test_command_line(tmp_path):
    env_path = str(REPO)
    cmd = [sys.executable, '-m', 'pyg_orch.partition.cli']
    env = {'PYTHONPATH': env_path, 'PATH': '/usr/bin:/bin'}
    help_out = subprocess.run(cmd + ['--help'], capture_output=True,
                              text=True, env=env, check=True)
    assert '--parts' in help_out.stdout and '--data' in help_out.stdout

    data = graph()
    torch.save(data, tmp_path / 'g.pt')
    out = subprocess.run(
        cmd + ['--data', str(tmp_path / 'g.pt'), '--parts', '3', '--out',
               str(tmp_path / 'cli'), '--method', 'random', '--quiet'],
        capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert 'edge cut' in out.stdout and 'balance' in out.stdout
    p = load_partition(tmp_path / 'cli', 2, expected_num_parts=3,
                       expected_fingerprint=graph_fingerprint(
                           data.edge_index, data.num_nodes))
    assert torch.equal(p.x, data.x[p.node_ids])

    out = subprocess.run(
        cmd + ['--nodes', '200', '--edges', '1000', '--parts', '2', '--out',
               str(tmp_path / 'syn'), '--method', 'contiguous', '--quiet'],
        capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert load_partition(tmp_path / 'syn', 1).num_nodes == 100


# HeteroData #################################################################


@pytest.mark.parametrize('method', METHODS)
def test_hetero_parts_cover_graph(tmp_path, method):
    data = paper_hetero_graph()
    info = write(data, tmp_path, 3, method)
    assert info.num_nodes == 520 and info.method == method
    parts = load_all(info.out_dir, 3)
    assert all(p.is_hetero for p in parts)
    for nt in data.node_types:
        ids = torch.cat([p.node_ids[nt] for p in parts])
        assert sorted(ids.tolist()) == list(range(data[nt].num_nodes))
        for p in parts:
            assert (p.owner(p.node_ids[nt], nt) == p.part).all()
            assert p.to_local(p.node_ids[nt], nt).tolist() == list(
                range(p.node_ids[nt].numel()))
            assert torch.equal(p.x[nt], data[nt].x[p.node_ids[nt]])
    for p in parts:
        assert torch.equal(p.y['paper'], data['paper'].y[p.node_ids['paper']])
        assert set(p.y) == {'paper'}
    for et in data.edge_types:
        triples = []
        for p in parts:
            csc = p.csc[et]
            assert csc.num_src_nodes == data[et[0]].num_nodes
            deg = csc.colptr[1:] - csc.colptr[:-1]
            dst = p.node_ids[et[-1]].repeat_interleave(deg)
            triples += zip(csc.row.tolist(), dst.tolist(),
                           csc.edge_id.tolist())
        ei = data[et].edge_index
        assert sorted(triples) == sorted(
            zip(*ei.tolist(), range(ei.size(1))))
    cites = ('paper', 'cites', 'paper')
    for p in parts:
        assert torch.equal(p.edge_attrs[cites]['edge_attr'],
                           data[cites].edge_attr[p.csc[cites].edge_id])
    assert sum(p.num_nodes for p in parts) == 520
    assert sum(p.num_edges for p in parts) == info.num_edges == 3400

    # Edge cut over all edge types, balance over all vertices:
    cut = sum(
        int((parts[0].node_part[et[0]][data[et].edge_index[0]] !=
             parts[0].node_part[et[-1]][data[et].edge_index[1]]).sum())
        for et in data.edge_types)
    assert info.edge_cut == pytest.approx(cut / 3400)
    assert info.balance == pytest.approx(max(info.part_sizes) * 3 / 520)
    with pytest.raises(ValueError, match="'node_type'"):
        parts[0].owner(torch.tensor([0]), 'venue')
    with pytest.raises(ValueError, match="'node_type'"):
        load_partition(write(graph(), tmp_path, 2, name='homo').out_dir,
                       0).owner(torch.tensor([0]), 'paper')


def test_hetero_load_and_reject(tmp_path, monkeypatch):
    data = paper_hetero_graph()
    info = write(data, tmp_path, 3, 'random', seed=3)
    assert info.fingerprint == graph_fingerprint(data)
    other = paper_hetero_graph(seed=1)
    with pytest.raises(ValueError, match='another graph'):
        load_partition(info.out_dir, 0,
                       expected_fingerprint=graph_fingerprint(other))
    opened = []
    real_load = torch.load

    def spy(path, *args, **kwargs):
        opened.append(Path(path).relative_to(info.out_dir).parts[0])
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(torch, 'load', spy)
    load_partition(info.out_dir, 1)
    monkeypatch.undo()
    assert set(opened) == {'part_1', 'node_part', 'local_id'}
    shutil.rmtree(info.out_dir / 'part_0')
    shutil.rmtree(info.out_dir / 'part_2')
    p = load_partition(info.out_dir, 1, expected_num_parts=3)
    assert torch.equal(p.x['author'], data['author'].x[p.node_ids['author']])
    f = info.out_dir / 'part_1' / 'edge_types' / 'paper__cites__paper'
    (f / 'row.pt').write_bytes((f / 'row.pt').read_bytes()[:-1])
    with pytest.raises(ValueError, match='paper__cites__paper/row.pt'):
        load_partition(info.out_dir, 1)


def test_hetero_metis_cuts_fewer_edges_than_random(tmp_path):
    pytest.importorskip('pymetis')
    data = paper_hetero_graph()
    # Papers cite within 4 blocks; authors write for papers of their block.
    gen = torch.Generator().manual_seed(0)
    blk_p = torch.arange(300) % 4
    cites_dst = torch.randint(0, 300, (1200, ), generator=gen)
    cites_src = (torch.randint(0, 75, (1200, ), generator=gen) * 4 +
                 blk_p[cites_dst])
    data['paper', 'cites', 'paper'].edge_index = torch.stack(
        [cites_src, cites_dst])
    metis = write(data, tmp_path, 4, 'metis', name='m')
    rand = write(data, tmp_path, 4, 'random', name='r')
    assert metis.edge_cut < rand.edge_cut
