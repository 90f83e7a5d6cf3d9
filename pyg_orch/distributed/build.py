r"""Offline partitioning: :func:`partition_graph` splits a graph into parts
and writes each part's vertices, in-edges and attributes to its own folder
(layout in :mod:`pyg_orch.distributed.storage`)."""
from __future__ import annotations

import json
import operator
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List

import torch
from torch import Tensor

from pyg_orch.distributed.methods import (
    assign_parts,
    balance,
    edge_cut,
    resolve_method,
)
from pyg_orch.distributed.storage import (
    FORMAT_NAME,
    FORMAT_VERSION,
    LOCAL_ID_FILE,
    META_FILE,
    NODE_PART_FILE,
    PathLike,
    graph_fingerprint,
    part_dir_name,
)

__all__ = ['PartitionInfo', 'partition_graph']

_SAFE_NAME = re.compile(r'[A-Za-z0-9_][A-Za-z0-9_.-]*')


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
        fingerprint (str): The graph's
            :func:`~pyg_orch.distributed.storage.graph_fingerprint`.
        edge_cut (float): The fraction of edges whose endpoints lie in
            different parts.
        balance (float): The largest part's number of vertices over the
            mean (:obj:`1.0`: perfectly balanced).
        part_sizes (List[int]): The number of vertices of every part.
        part_num_edges (List[int]): The number of in-edges of every part.
        seconds (float): The time taken.
    """
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


def _check_num_parts(num_parts, num_nodes: int) -> int:
    if isinstance(num_parts, bool):
        raise ValueError(f"'num_parts' must be an integer (got {num_parts!r})")
    try:
        num_parts = operator.index(num_parts)
    except TypeError:
        raise ValueError(f"'num_parts' must be an integer "
                         f"(got {num_parts!r})") from None
    if not 1 <= num_parts <= max(num_nodes, 1) or num_nodes == 0:
        raise ValueError(f"'num_parts' must be in [1, num_nodes] = [1, "
                         f"{num_nodes}] (got {num_parts})")
    return num_parts


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
            if child.is_dir() and re.fullmatch(r'part_\d+', child.name):
                shutil.rmtree(child)
    out_dir.mkdir(parents=True, exist_ok=True)


def _save(t: Tensor, path: Path, base: Path, files: Dict[str, int]) -> None:
    # A copy, so that a slice never saves the storage it views.
    torch.save(t.detach().cpu().clone().contiguous(), path)
    files[path.relative_to(base).as_posix()] = path.stat().st_size


def _attr_keys(data, edge_index: Tensor):
    node_keys, edge_keys = [], []
    for key in data.node_attrs():
        if key in ('num_nodes', 'edge_index'):
            continue
        if isinstance(data[key], Tensor):
            node_keys.append(key)
    for key in data.edge_attrs():
        if key in ('edge_index', 'adj_t', 'num_nodes'):
            continue
        if isinstance(data[key], Tensor) and (
                data[key].size(0) == edge_index.size(1)):
            edge_keys.append(key)
    node_keys, edge_keys = sorted(node_keys), sorted(edge_keys)
    for key in node_keys + edge_keys:
        if not _SAFE_NAME.fullmatch(key):
            raise ValueError(f"attribute {key!r} cannot name a file; rename "
                             f"it (letters, digits, '_', '.', '-')")
    return node_keys, edge_keys


def partition_graph(data, num_parts: int, out_dir: PathLike,
                    method: str = 'auto', seed: int = 0, *,
                    overwrite: bool = False,
                    progress: bool = True) -> PartitionInfo:
    r"""Splits :obj:`data` into :obj:`num_parts` parts and writes them to
    :obj:`out_dir`, one folder per part, for machines that each load only
    their part (:func:`~pyg_orch.distributed.load_partition`).

    Every vertex belongs to exactly one part. A part's folder holds its
    vertices' global ids (ascending: local id -> global id), their in-edges
    as a CSC over them (global source ids and global edge ids), their node
    attributes (:obj:`x`, :obj:`y`, masks, ...) and their in-edges' edge
    attributes. :obj:`out_dir` also holds the global vertex -> part and
    vertex -> local id maps and :obj:`meta.json` (format version, method,
    counts, graph fingerprint, edge cut, balance, file sizes), written last.

    Args:
        data (torch_geometric.data.Data): The graph (on any device; it is
            copied to the CPU part by part).
            :class:`~torch_geometric.data.HeteroData` is not supported yet.
        num_parts (int): The number of parts, in :obj:`[1, num_nodes]`.
        out_dir (str or os.PathLike): The folder to write (created; must be
            empty unless :obj:`overwrite`).
        method (str): :obj:`'metis'` (METIS through the optional package
            :obj:`pymetis`: few edges cut), :obj:`'random'` (seeded, balanced),
            :obj:`'contiguous'` (ranges of vertex ids) or :obj:`'auto'`
            (:obj:`'metis'` where :obj:`pymetis` is importable, else
            :obj:`'contiguous'`). (default: :obj:`'auto'`)
        seed (int): The seed of :obj:`'random'` and :obj:`'metis'`.
            (default: :obj:`0`)
        overwrite (bool): Replace a partition already in :obj:`out_dir`.
        progress (bool): Show a :mod:`tqdm` progress bar while writing.

    Returns:
        PartitionInfo: edge cut, balance, sizes and where it was written.
    """
    from torch_geometric.data import Data, HeteroData
    if isinstance(data, HeteroData):
        raise NotImplementedError(
            "partition_graph does not support HeteroData yet: partition a "
            "homogeneous Data (e.g. data.to_homogeneous()) for now")
    if not isinstance(data, Data):
        raise ValueError(f"'data' must be a torch_geometric Data "
                         f"(got {type(data).__name__})")
    edge_index = data.edge_index if 'edge_index' in data else None
    if edge_index is None:
        raise ValueError("'data' must have an 'edge_index' (sparse "
                         "adjacencies such as 'adj_t' are not supported)")
    num_nodes = int(data.num_nodes or 0)
    num_parts = _check_num_parts(num_parts, num_nodes)
    resolved = resolve_method(method)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"'seed' must be an integer (got {seed!r})")
    out_dir = Path(out_dir)
    start = time.perf_counter()

    edge_index = edge_index.detach().cpu().to(torch.int64)
    num_edges = int(edge_index.size(1))
    node_keys, edge_keys = _attr_keys(data, edge_index)
    fingerprint = graph_fingerprint(edge_index, num_nodes)

    node_part = assign_parts(edge_index, num_nodes, num_parts, resolved, seed)
    if node_part.numel() != num_nodes or (num_nodes and (
            int(node_part.min()) < 0 or int(node_part.max()) >= num_parts)):
        raise RuntimeError(f'{resolved} returned an invalid assignment')

    # Vertices ordered by part, ascending global id within a part:
    perm = torch.sort(node_part, stable=True).indices
    sizes = torch.bincount(node_part, minlength=num_parts)
    offsets = torch.zeros(num_parts + 1, dtype=torch.int64)
    offsets[1:] = sizes.cumsum(0)
    position = torch.empty(num_nodes, dtype=torch.int64)
    position[perm] = torch.arange(num_nodes)
    local_id = position - offsets[node_part]

    # Edges ordered by their destination's position (stable: edge ids
    # ascending within a neighborhood), so each part's in-edges are a slice:
    dst_pos = position[edge_index[1]]
    edge_order = torch.sort(dst_pos, stable=True).indices
    degree = torch.bincount(dst_pos, minlength=num_nodes)
    edge_ptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
    edge_ptr[1:] = degree.cumsum(0)
    row_all = edge_index[0, edge_order]

    _prepare_out_dir(out_dir, overwrite)
    files: Dict[str, Dict[str, int]] = {'global': {}}
    _save(node_part, out_dir / NODE_PART_FILE, out_dir, files['global'])
    _save(local_id, out_dir / LOCAL_ID_FILE, out_dir, files['global'])

    from tqdm.auto import tqdm
    part_num_edges = []
    for part in tqdm(range(num_parts), desc='writing parts', unit='part',
                     disable=not progress):
        name = part_dir_name(part)
        part_dir = out_dir / name
        (part_dir / 'nodes').mkdir(parents=True)
        if edge_keys:
            (part_dir / 'edges').mkdir()
        pf: Dict[str, int] = {}
        lo, hi = int(offsets[part]), int(offsets[part + 1])
        node_ids = perm[lo:hi]
        e_lo, e_hi = int(edge_ptr[lo]), int(edge_ptr[hi])
        colptr = edge_ptr[lo:hi + 1] - e_lo
        eids = edge_order[e_lo:e_hi]
        _save(node_ids, part_dir / 'node_ids.pt', out_dir, pf)
        _save(colptr, part_dir / 'colptr.pt', out_dir, pf)
        _save(row_all[e_lo:e_hi], part_dir / 'row.pt', out_dir, pf)
        _save(eids, part_dir / 'edge_id.pt', out_dir, pf)
        for key in node_keys:
            value = data[key]
            _save(value[node_ids.to(value.device)],
                  part_dir / 'nodes' / f'{key}.pt', out_dir, pf)
        for key in edge_keys:
            value = data[key]
            _save(value[eids.to(value.device)],
                  part_dir / 'edges' / f'{key}.pt', out_dir, pf)
        files[name] = pf
        part_num_edges.append(e_hi - e_lo)

    info = PartitionInfo(
        out_dir=out_dir, num_parts=num_parts, method=resolved,
        seed=int(seed), num_nodes=num_nodes, num_edges=num_edges,
        fingerprint=fingerprint, edge_cut=edge_cut(edge_index, node_part),
        balance=balance(node_part, num_parts),
        part_sizes=[int(s) for s in sizes], part_num_edges=part_num_edges,
        seconds=time.perf_counter() - start)
    meta = {
        'format': FORMAT_NAME,
        'version': FORMAT_VERSION,
        'requested_method': method,
        **{k: v for k, v in asdict(info).items() if k != 'out_dir'},
        'node_attrs': node_keys,
        'edge_attrs': edge_keys,
        'files': files,
    }
    tmp = out_dir / (META_FILE + '.tmp')
    with open(tmp, 'w') as f:
        json.dump(meta, f, indent=1)
    os.replace(tmp, out_dir / META_FILE)
    return info
