r"""The on-disk layout of a partitioned graph, and loading one part of it.

.. code-block:: text

   out_dir/
     meta.json           format version, parts, method, counts, fingerprint,
                         edge cut, balance, every file's size in bytes
     node_part.pt        global vertex id -> part          (int64, [N])
     local_id.pt         global vertex id -> id in its part (int64, [N])
     part_0/
       node_ids.pt       local -> global id of the part's vertices (sorted)
       colptr.pt         CSC over the part's vertices (its in-edges)
       row.pt            global source id of every in-edge
       edge_id.pt        global edge id of every in-edge
       nodes/x.pt, nodes/y.pt, ...   node attributes of the part's vertices
       edges/edge_attr.pt, ...       edge attributes of its in-edges
     part_1/ ...

Every tensor file is written by :func:`torch.save` and read back
memory-mapped (:obj:`torch.load(..., mmap=True)`).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Union

import torch
from torch import Tensor

from pyg_orch.core.csc import CSCTopology

__all__ = [
    'FORMAT_NAME',
    'FORMAT_VERSION',
    'GraphPartition',
    'graph_fingerprint',
    'load_partition',
    'read_meta',
]

FORMAT_NAME = 'pyg_orch.partition'
FORMAT_VERSION = 1
META_FILE = 'meta.json'
NODE_PART_FILE = 'node_part.pt'
LOCAL_ID_FILE = 'local_id.pt'
TOPOLOGY_FILES = ('node_ids.pt', 'colptr.pt', 'row.pt', 'edge_id.pt')

PathLike = Union[str, os.PathLike]

# Edge columns hashed into the fingerprint (evenly spaced, ends included).
_FINGERPRINT_SAMPLE = 4096


def part_dir_name(part: int) -> str:
    return f'part_{part}'


def graph_fingerprint(edge_index: Tensor, num_nodes: int) -> str:
    r"""A short hash of a graph: its number of vertices and edges and up to
    4,096 evenly spaced columns of :obj:`edge_index`. Two folders
    partitioned from the same graph have the same fingerprint;
    :func:`load_partition` compares it with :obj:`expected_fingerprint`.
    """
    num_edges = int(edge_index.size(1))
    h = hashlib.sha256()
    h.update(f'{int(num_nodes)}:{num_edges}:'.encode())
    if num_edges:
        count = min(num_edges, _FINGERPRINT_SAMPLE)
        cols = torch.linspace(0, num_edges - 1, count).round().long()
        sample = edge_index[:, cols].to(torch.int64).cpu().contiguous()
        h.update(sample.numpy().tobytes())
    return h.hexdigest()[:16]


def read_meta(out_dir: PathLike) -> Dict[str, Any]:
    r"""Reads and checks :obj:`out_dir/meta.json` (format name and
    version); raises :class:`ValueError` naming the folder otherwise."""
    out_dir = Path(out_dir)
    path = out_dir / META_FILE
    if not out_dir.is_dir():
        raise ValueError(f"partition folder '{out_dir}' does not exist")
    if not path.is_file():
        raise ValueError(f"'{out_dir}' is not a partition folder: it has no "
                         f"{META_FILE} (not written by partition_graph, or "
                         f"partitioning did not finish)")
    try:
        with open(path) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"'{path}' cannot be read as JSON: {e}") from None
    if not isinstance(meta, dict) or meta.get('format') != FORMAT_NAME:
        raise ValueError(f"'{path}' is not a pyg_orch partition description "
                         f"(its 'format' is not {FORMAT_NAME!r})")
    version = meta.get('version')
    if version != FORMAT_VERSION:
        raise ValueError(f"'{out_dir}' holds partition format version "
                         f"{version!r}, but this pyg_orch reads version "
                         f"{FORMAT_VERSION}: partition the graph again")
    for key in ('num_parts', 'num_nodes', 'num_edges', 'fingerprint',
                'files', 'part_sizes', 'part_num_edges'):
        if key not in meta:
            raise ValueError(f"'{path}' lacks the entry {key!r}")
    return meta


@dataclass
class GraphPartition:
    r"""One part of a partitioned graph, as :func:`load_partition` returns
    it; every tensor is memory-mapped from its file.

    Attributes:
        part (int): This part's number.
        num_parts (int): The number of parts.
        node_ids (torch.Tensor): The global ids of the vertices this part
            owns, ascending (local id -> global id).
        csc (CSCTopology): The in-edges of the owned vertices: column
            :obj:`i` holds the in-edges of :obj:`node_ids[i]`;
            :obj:`csc.row` holds global source ids, :obj:`csc.edge_id` global
            edge ids (:obj:`csc.num_src_nodes` is the global number of
            vertices).
        node_attrs (Dict[str, torch.Tensor]): Node attributes (:obj:`x`,
            :obj:`y`, masks, ...) of the owned vertices, row :obj:`i` for
            :obj:`node_ids[i]`.
        edge_attrs (Dict[str, torch.Tensor]): Edge attributes of the
            in-edges, in CSC order.
        node_part (torch.Tensor): The part of every global vertex id.
        local_id (torch.Tensor): The id of every global vertex within its
            own part.
        meta (dict): The folder's :obj:`meta.json`.
        out_dir (pathlib.Path): The folder.
    """
    part: int
    num_parts: int
    node_ids: Tensor
    csc: CSCTopology
    node_attrs: Dict[str, Tensor]
    edge_attrs: Dict[str, Tensor]
    node_part: Tensor
    local_id: Tensor
    meta: Dict[str, Any] = field(repr=False)
    out_dir: Path = field(repr=False)

    @property
    def x(self) -> Optional[Tensor]:
        r"""The node features of the owned vertices (or :obj:`None`)."""
        return self.node_attrs.get('x')

    @property
    def y(self) -> Optional[Tensor]:
        r"""The labels of the owned vertices (or :obj:`None`)."""
        return self.node_attrs.get('y')

    @property
    def num_nodes(self) -> int:
        r"""The number of vertices this part owns."""
        return int(self.node_ids.numel())

    @property
    def num_edges(self) -> int:
        r"""The number of in-edges of the owned vertices."""
        return int(self.csc.row.numel())

    @property
    def global_num_nodes(self) -> int:
        return int(self.meta['num_nodes'])

    def owner(self, global_ids: Tensor) -> Tensor:
        r"""The part owning each of :obj:`global_ids`."""
        return self.node_part[torch.as_tensor(global_ids, dtype=torch.int64)]

    def is_local(self, global_ids: Tensor) -> Tensor:
        r"""Whether this part owns each of :obj:`global_ids`."""
        return self.owner(global_ids) == self.part

    def to_local(self, global_ids: Tensor) -> Tensor:
        r"""The local ids of :obj:`global_ids`, which this part must own
        (:class:`ValueError` otherwise)."""
        global_ids = torch.as_tensor(global_ids, dtype=torch.int64)
        if not bool(self.is_local(global_ids).all()):
            raise ValueError(f"some vertices are not owned by part "
                             f"{self.part}; use owner() to find their part")
        return self.local_id[global_ids]


def _load(path: Path) -> Tensor:
    return torch.load(path, mmap=True, weights_only=True)


def _check_files(out_dir: Path, files: Dict[str, int], what: str) -> None:
    for rel, size in files.items():
        path = out_dir / rel
        if not path.is_file():
            raise ValueError(f"'{out_dir}' is incomplete: {what} file "
                             f"'{rel}' listed in {META_FILE} is missing")
        actual = path.stat().st_size
        if actual != size:
            raise ValueError(f"'{out_dir}': {what} file '{rel}' has "
                             f"{actual} bytes but {META_FILE} says {size} "
                             f"(truncated, or written by another run)")


def load_partition(out_dir: PathLike, part: int, *,
                   expected_num_parts: Optional[int] = None,
                   expected_fingerprint: Optional[str] = None
                   ) -> GraphPartition:
    r"""Loads part :obj:`part` of a graph partitioned by
    :func:`~pyg_orch.distributed.partition_graph` into :obj:`out_dir`.

    Only that part's files and the two global id maps (vertex -> part,
    vertex -> local id) are opened, all memory-mapped: the other parts are
    never read. :obj:`meta.json` is checked first (format version, part in
    range, the part's files present with the sizes it lists), then, where
    given, that the folder holds :obj:`expected_num_parts` parts of the
    graph with fingerprint :obj:`expected_fingerprint` (see
    :func:`graph_fingerprint`). Each check raises a :class:`ValueError`
    naming the folder and what does not match.

    Args:
        out_dir (str or os.PathLike): The folder.
        part (int): The part to load, in :obj:`[0, num_parts)`.
        expected_num_parts (int, optional): Reject a folder with another
            number of parts.
        expected_fingerprint (str, optional): Reject a folder partitioned
            from another graph.
    """
    out_dir = Path(out_dir)
    meta = read_meta(out_dir)
    num_parts = int(meta['num_parts'])
    if expected_num_parts is not None and num_parts != expected_num_parts:
        raise ValueError(f"'{out_dir}' holds a partition into {num_parts} "
                         f"parts, but {expected_num_parts} parts were "
                         f"expected (a folder of another partitioning?)")
    if (expected_fingerprint is not None
            and meta['fingerprint'] != expected_fingerprint):
        raise ValueError(f"'{out_dir}' was partitioned from another graph: "
                         f"its graph fingerprint is {meta['fingerprint']!r}, "
                         f"expected {expected_fingerprint!r}")
    if (isinstance(part, bool) or not isinstance(part, int)
            or not 0 <= part < num_parts):
        raise ValueError(f"'part' must be in [0, {num_parts}) for "
                         f"'{out_dir}', which holds {num_parts} parts "
                         f"(got {part!r})")
    name = part_dir_name(part)
    files = meta['files']
    if name not in files or 'global' not in files:
        raise ValueError(f"'{out_dir}/{META_FILE}' lists no files for "
                         f"{name!r}")
    _check_files(out_dir, files['global'], 'global')
    _check_files(out_dir, files[name], f'part {part}')

    part_dir = out_dir / name
    node_ids = _load(part_dir / 'node_ids.pt')
    colptr = _load(part_dir / 'colptr.pt')
    row = _load(part_dir / 'row.pt')
    edge_id = _load(part_dir / 'edge_id.pt')
    size = int(meta['part_sizes'][part])
    num_edges = int(meta['part_num_edges'][part])
    if (node_ids.numel() != size or colptr.numel() != size + 1
            or row.numel() != num_edges or edge_id.numel() != num_edges):
        raise ValueError(f"'{part_dir}': the tensors' lengths do not match "
                         f"{META_FILE} ({size} vertices, {num_edges} "
                         f"in-edges)")
    node_attrs = {
        key: _load(part_dir / 'nodes' / f'{key}.pt')
        for key in meta.get('node_attrs', [])
    }
    edge_attrs = {
        key: _load(part_dir / 'edges' / f'{key}.pt')
        for key in meta.get('edge_attrs', [])
    }
    node_part = _load(out_dir / NODE_PART_FILE)
    local_id = _load(out_dir / LOCAL_ID_FILE)
    csc = CSCTopology(colptr, row, edge_id, int(meta['num_nodes']))
    return GraphPartition(part, num_parts, node_ids, csc, node_attrs,
                          edge_attrs, node_part, local_id, meta, out_dir)
