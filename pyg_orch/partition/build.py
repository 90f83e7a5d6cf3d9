r"""Offline partitioning: :func:`partition_graph` splits a graph into parts
and writes each part's vertices, in-edges and attributes to its own folder
(layout in :mod:`pyg_orch.partition.storage`)."""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
from torch import Tensor

from pyg_orch.core.checks import check_data, check_int
from pyg_orch.topology.csc import check_edge_index
from pyg_orch.topology.sparse_adj import index_to_ptr
from pyg_orch.partition.partitioning import (
    assign_parts,
    balance,
    check_num_parts,
    edge_cut,
    resolve_method,
)
from pyg_orch.partition.storage import (
    FORMAT_NAME,
    FORMAT_VERSION,
    LOCAL_ID_FILE,
    META_FILE,
    NODE_PART_FILE,
    PathLike,
    check_name,
    edge_path,
    edge_type_name,
    file_entry,
    global_map_path,
    graph_fingerprint,
    node_path,
    part_dir_name,
)

__all__ = ['PartitionInfo', 'partition_graph']

@dataclass
class PartitionInfo:
    r"""What :func:`partition_graph` wrote (also in :obj:`meta.json`).

    Attributes:
        out_dir (pathlib.Path): The folder.
        num_parts (int): The number of parts.
        method (str): The method that ran (:obj:`'auto'` resolved).
        seed (int): The seed.
        num_nodes (int): The graph's number of vertices.
        num_edges (int): The graph's number of edges.
        fingerprint (str): The graph's fingerprint.
        edge_cut (float): The fraction of edges between parts.
        balance (float): The largest part's vertices over the mean.
        part_sizes (List[int]): The number of vertices of every part.
        part_num_edges (List[int]): The number of in-edges of every part.
        seconds (float): The time taken."""
    out_dir: Path
    num_parts: int
    method: str
    seed: int
    num_nodes: int
    num_edges: int
    fingerprint: str
    edge_cut: float
    balance: float
    part_sizes: List[int] = field(default_factory=list)
    part_num_edges: List[int] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        r"""One line: parts, method, edge cut and balance."""
        return (f'{self.num_nodes:,} vertices, {self.num_edges:,} edges -> '
                f'{self.num_parts} parts ({self.method}): edge cut '
                f'{self.edge_cut:.2%}, balance {self.balance:.3f}, in '
                f'{self.seconds:.1f} s -> {self.out_dir}')


def _prepare_out_dir(out_dir: Path, overwrite: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"'out_dir' {str(out_dir)!r} is not a folder")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        if not overwrite:
            raise ValueError(f"'out_dir' {str(out_dir)!r} is not empty; "
                             f"pass overwrite=True to replace a partition "
                             f"written there")
        if not (out_dir / META_FILE).is_file():
            raise ValueError(f"'out_dir' {str(out_dir)!r} is not empty and "
                             f"holds no partition ({META_FILE}); refusing to "
                             f"overwrite it")
        # Only what partition_graph writes, meta.json first (so that an
        # interrupted run leaves a folder load_partition rejects).
        (out_dir / META_FILE).unlink()
        for name in (NODE_PART_FILE, LOCAL_ID_FILE):
            if (out_dir / name).exists():
                (out_dir / name).unlink()
        for child in out_dir.iterdir():
            if child.is_dir() and (re.fullmatch(r'part_\d+', child.name)
                                   or child.name in ('node_part',
                                                     'local_id')):
                shutil.rmtree(child)
    out_dir.mkdir(parents=True, exist_ok=True)


def _save(t: Tensor, path: Path, base: Path,
          files: Dict[str, Dict[str, Any]]) -> None:
    # A copy, so that a slice never saves the storage it views.
    path.parent.mkdir(parents=True, exist_ok=True)
    t = t.detach().cpu().clone().contiguous()
    torch.save(t, path)
    files[path.relative_to(base).as_posix()] = file_entry(path, t)


#: Edge attributes that PyG's layers read per edge: one row per edge.
_PER_EDGE_KEYS = ('edge_attr', 'edge_weight', 'edge_time')


def _check_edge_rows(store, num_edges: int, edge_type) -> None:
    # They would otherwise be left out of the parts without a word.
    for key in _PER_EDGE_KEYS:
        value = store.get(key) if key in store else None
        if isinstance(value, Tensor) and (value.dim() == 0
                                          or value.size(0) != num_edges):
            where = 'data' if edge_type is None else f'data[{edge_type!r}]'
            raise ValueError(
                f"Edge attribute {where}.{key} has shape "
                f"{list(value.shape)}, but the graph has {num_edges} edges; "
                f"edge attributes need one row per edge")


def _attr_keys(node_stores, edge_stores):
    r"""The tensor attributes written, per node type and per edge type."""
    node_keys, edge_keys = {}, {}
    for nt, store in node_stores.items():
        keys = [
            key for key in store.node_attrs()
            if key not in ('num_nodes', 'edge_index')
            and isinstance(store[key], Tensor)
        ]
        node_keys[nt] = sorted(keys)
    for et, store in edge_stores.items():
        num_edges = store.edge_index.size(1)
        _check_edge_rows(store, num_edges, et)
        keys = [
            key for key in store.edge_attrs()
            if key not in ('edge_index', 'adj_t', 'num_nodes')
            and isinstance(store[key], Tensor)
            and store[key].size(0) == num_edges
        ]
        edge_keys[et] = sorted(keys)
    for keys in list(node_keys.values()) + list(edge_keys.values()):
        for key in keys:
            check_name(key, 'attribute')
    return node_keys, edge_keys


def _order(node_part: Tensor, num_parts: int):
    r"""Vertices by part (stable): permutation, part offsets, and every
    vertex's position and local id."""
    num_nodes = node_part.numel()
    perm = torch.sort(node_part, stable=True).indices
    sizes = torch.bincount(node_part, minlength=num_parts)
    offsets = torch.zeros(num_parts + 1, dtype=torch.int64)
    offsets[1:] = sizes.cumsum(0)
    position = torch.empty(num_nodes, dtype=torch.int64)
    position[perm] = torch.arange(num_nodes)
    return perm, offsets, position, position - offsets[node_part]


def _edge_order(edge_index: Tensor, dst_position: Tensor):
    r"""Edges by their destination's position (stable), so that each part's
    in-edges are a slice: the order, the CSC pointer and the sources."""
    dst_pos = dst_position[edge_index[1]]
    order = torch.sort(dst_pos, stable=True).indices
    ptr = index_to_ptr(dst_pos, dst_position.numel())
    return order, ptr, edge_index[0, order]


def partition_graph(data, num_parts: int, out_dir: PathLike,
                    method: str = 'auto', seed: Optional[int] = None, *,
                    overwrite: bool = False,
                    progress: bool = True) -> PartitionInfo:
    r"""Splits :obj:`data` into :obj:`num_parts` parts and writes them to
    :obj:`out_dir`, one folder per part (see :mod:`~pyg_orch.partition.storage`
    for the layout), for machines that each load only their part
    (:func:`~pyg_orch.distributed.load_partition`). For a
    :class:`~torch_geometric.data.HeteroData` everything is kept per node and
    edge type; :obj:`'metis'` partitions all vertices together,
    :obj:`'contiguous'` and :obj:`'random'` each node type on its own.

    Args:
        data (torch_geometric.data.Data or torch_geometric.data.HeteroData):
            The graph (with :obj:`edge_index` for every edge type).
        num_parts (int): The number of parts, in :obj:`[1, num_nodes]`.
        out_dir (str or os.PathLike): The folder to write (created; must be
            empty unless :obj:`overwrite`).
        method (str): :obj:`'metis'` (needs :obj:`pymetis`), :obj:`'random'`
            (seeded, balanced), :obj:`'contiguous'` (ranges of vertex ids) or
            :obj:`'auto'` (:obj:`'metis'` where :obj:`pymetis` is importable,
            else :obj:`'contiguous'`). (default: :obj:`'auto'`)
        seed (int, optional): The seed of :obj:`'random'` and :obj:`'metis'`;
            :obj:`None` is :obj:`0`. (default: :obj:`None`)
        overwrite (bool): Replace a partition already in :obj:`out_dir`.
        progress (bool): Show a :mod:`tqdm` progress bar while writing."""
    from torch_geometric.data import Data, HeteroData
    is_hetero = isinstance(data, HeteroData)
    if not is_hetero and not isinstance(data, Data):
        raise ValueError(f"'data' must be a torch_geometric Data or "
                         f"HeteroData (got {type(data).__name__})")
    if is_hetero:
        node_types, edge_types = list(data.node_types), list(data.edge_types)
        node_stores = {nt: data[nt] for nt in node_types}
        edge_stores = {et: data[et] for et in edge_types}
        for nt in node_types:
            check_name(nt, 'node type')
        for et in edge_types:
            check_name(et[1], 'relation')
    else:
        node_types, edge_types = [None], [None]
        node_stores, edge_stores = {None: data}, {None: data}
    for et, store in edge_stores.items():
        if 'edge_index' not in store:
            raise ValueError(f"'data' must have an 'edge_index'"
                             f"{'' if et is None else ' for ' + str(et)} "
                             f"(sparse adjacencies such as 'adj_t' are not "
                             f"supported)")
    check_data(data)  # One row per node in x, y, ...: as the loader.
    num_nodes_by_type = {nt: int(node_stores[nt].num_nodes or 0)
                         for nt in node_types}
    for et, store in edge_stores.items():
        src, dst = (None, None) if et is None else (et[0], et[-1])
        check_edge_index(store.edge_index, num_nodes_by_type[src],
                         num_nodes_by_type[dst],
                         'edge_index' if et is None else
                         f'data[{et!r}].edge_index')
    num_nodes = sum(num_nodes_by_type.values())
    num_parts = check_num_parts(num_parts, num_nodes, allow_empty=False)
    resolved = resolve_method(method)
    seed = check_int('seed', 0 if seed is None else seed, -2**63)
    out_dir = Path(out_dir)
    start = time.perf_counter()

    edge_index = {
        et: store.edge_index.detach().cpu().to(torch.int64)
        for et, store in edge_stores.items()
    }
    num_edges = sum(int(e.size(1)) for e in edge_index.values())
    node_keys, edge_keys = _attr_keys(node_stores, edge_stores)
    fingerprint = graph_fingerprint(data)

    # Assignment #############################################################
    if not is_hetero:
        node_part = {None: assign_parts(edge_index[None], num_nodes,
                                        num_parts, resolved, seed)}
    elif resolved == 'metis' and num_parts > 1:
        # All vertices in one id space, as in to_homogeneous():
        offset, total = {}, 0
        for nt in node_types:
            offset[nt], total = total, total + num_nodes_by_type[nt]
        homo = torch.cat([
            torch.stack([e[0] + offset[et[0]], e[1] + offset[et[-1]]])
            for et, e in edge_index.items()
        ], dim=1) if edge_index else torch.empty(2, 0, dtype=torch.int64)
        flat = assign_parts(homo, total, num_parts, resolved, seed)
        node_part = {
            nt: flat[offset[nt]:offset[nt] + num_nodes_by_type[nt]]
            for nt in node_types
        }
    else:
        empty = torch.empty(2, 0, dtype=torch.int64)
        node_part = {
            nt: assign_parts(empty, num_nodes_by_type[nt], num_parts,
                             resolved, seed + i)
            if num_nodes_by_type[nt] else torch.empty(0, dtype=torch.int64)
            for i, nt in enumerate(node_types)
        }
    for nt, np_ in node_part.items():
        if np_.numel() != num_nodes_by_type[nt] or (np_.numel() and (
                int(np_.min()) < 0 or int(np_.max()) >= num_parts)):
            raise RuntimeError(f'{resolved} returned an invalid assignment')

    order = {nt: _order(node_part[nt], num_parts) for nt in node_types}
    edges = {
        et: _edge_order(edge_index[et],
                        order[None if et is None else et[-1]][2])
        for et in edge_types
    }

    # Writing ################################################################
    _prepare_out_dir(out_dir, overwrite)
    files: Dict[str, Dict[str, Any]] = {'global': {}}
    for nt in node_types:
        for key, t in (('node_part', node_part[nt]), ('local_id',
                                                      order[nt][3])):
            _save(t, global_map_path(out_dir, key, nt), out_dir,
                  files['global'])

    from tqdm.auto import tqdm
    part_sizes = {nt: [] for nt in node_types}
    part_num_edges = {et: [] for et in edge_types}
    for part in tqdm(range(num_parts), desc='writing parts', unit='part',
                     disable=not progress):
        name = part_dir_name(part)
        part_dir = out_dir / name
        part_dir.mkdir(parents=True)
        pf: Dict[str, Dict[str, Any]] = {}
        node_ids = {}
        for nt in node_types:
            perm, offsets = order[nt][0], order[nt][1]
            lo, hi = int(offsets[part]), int(offsets[part + 1])
            node_ids[nt] = perm[lo:hi]
            part_sizes[nt].append(hi - lo)
            _save(node_ids[nt], node_path(part_dir, nt), out_dir, pf)
            for key in node_keys[nt]:
                value = node_stores[nt][key]
                _save(value[node_ids[nt].to(value.device)],
                      node_path(part_dir, nt, key), out_dir, pf)
        for et in edge_types:
            offsets = order[None if et is None else et[-1]][1]
            lo, hi = int(offsets[part]), int(offsets[part + 1])
            e_order, ptr, row_all = edges[et]
            e_lo, e_hi = int(ptr[lo]), int(ptr[hi])
            eids = e_order[e_lo:e_hi]
            for key, t in (('colptr', ptr[lo:hi + 1] - e_lo),
                           ('row', row_all[e_lo:e_hi]), ('edge_id', eids)):
                _save(t, edge_path(part_dir, et, key), out_dir, pf)
            for key in edge_keys[et]:
                value = edge_stores[et][key]
                _save(value[eids.to(value.device)],
                      edge_path(part_dir, et, key, True), out_dir, pf)
            part_num_edges[et].append(e_hi - e_lo)
        files[name] = pf

    # Quality: edges across parts, vertices per part over all types.
    cut = sum(
        edge_cut(edge_index[et], node_part[None if et is None else et[-1]],
                 node_part[None if et is None else et[0]]) *
        edge_index[et].size(1) for et in edge_types)
    totals = [sum(part_sizes[nt][k] for nt in node_types)
              for k in range(num_parts)]
    info = PartitionInfo(
        out_dir=out_dir, num_parts=num_parts, method=resolved,
        seed=int(seed), num_nodes=num_nodes, num_edges=num_edges,
        fingerprint=fingerprint,
        edge_cut=cut / num_edges if num_edges else 0.0,
        balance=max(totals) * num_parts / num_nodes,
        part_sizes=totals,
        part_num_edges=[sum(part_num_edges[et][k] for et in edge_types)
                        for k in range(num_parts)],
        seconds=time.perf_counter() - start)
    meta = {
        'format': FORMAT_NAME,
        'version': FORMAT_VERSION,
        'is_hetero': is_hetero,
        'requested_method': method,
        **{k: v for k, v in asdict(info).items() if k != 'out_dir'},
    }
    if is_hetero:
        meta.update({
            'node_types': node_types,
            'edge_types': [list(et) for et in edge_types],
            'num_nodes_by_type': num_nodes_by_type,
            'num_edges_by_type': {
                edge_type_name(et): int(edge_index[et].size(1))
                for et in edge_types
            },
            'part_sizes_by_type': part_sizes,
            'part_num_edges_by_type': {
                edge_type_name(et): part_num_edges[et]
                for et in edge_types
            },
            'balance_by_type': {nt: balance(node_part[nt], num_parts)
                                for nt in node_types},
            'node_attrs': node_keys,
            'edge_attrs': [[list(et), edge_keys[et]] for et in edge_types],
        })
    else:
        meta.update({'node_attrs': node_keys[None],
                     'edge_attrs': edge_keys[None]})
    meta['files'] = files
    tmp = out_dir / (META_FILE + '.tmp')
    with open(tmp, 'w') as f:
        json.dump(meta, f, indent=1)
    os.replace(tmp, out_dir / META_FILE)
    return info
