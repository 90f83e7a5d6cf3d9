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
from pyg_orch.core.fingerprint import graph_fingerprint

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

PathLike = Union[str, os.PathLike]


def part_dir_name(part: int) -> str:
    return f'part_{part}'


def edge_type_name(edge_type) -> str:
    r"""The folder name of an edge type: :obj:`'src__rel__dst'`."""
    return '__'.join(edge_type)


def node_ids_path(part_dir: Path, node_type: Optional[str]) -> Path:
    if node_type is None:
        return part_dir / 'node_ids.pt'
    return part_dir / 'node_types' / node_type / 'node_ids.pt'


def node_attr_path(part_dir: Path, node_type: Optional[str],
                   key: str) -> Path:
    if node_type is None:
        return part_dir / 'nodes' / f'{key}.pt'
    return part_dir / 'node_types' / node_type / 'attrs' / f'{key}.pt'


def edge_path(part_dir: Path, edge_type, name: str) -> Path:
    r"""The file of :obj:`colptr`, :obj:`row` or :obj:`edge_id`."""
    if edge_type is None:
        return part_dir / f'{name}.pt'
    return part_dir / 'edge_types' / edge_type_name(edge_type) / f'{name}.pt'


def edge_attr_path(part_dir: Path, edge_type, key: str) -> Path:
    if edge_type is None:
        return part_dir / 'edges' / f'{key}.pt'
    return (part_dir / 'edge_types' / edge_type_name(edge_type) / 'attrs' /
            f'{key}.pt')


def global_map_path(out_dir: Path, name: str,
                    node_type: Optional[str]) -> Path:
    r"""The vertex -> part (:obj:`name='node_part'`) or vertex -> local id
    (:obj:`'local_id'`) map of a node type."""
    if node_type is None:
        return out_dir / f'{name}.pt'
    return out_dir / name / f'{node_type}.pt'


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

    For a graph partitioned from a :class:`~torch_geometric.data.HeteroData`
    (:obj:`is_hetero`), :obj:`node_ids`, :obj:`node_attrs`,
    :obj:`node_part` and :obj:`local_id` are dictionaries keyed by node
    type, and :obj:`csc` and :obj:`edge_attrs` by edge type (the in-edges
    of the part's vertices of the edge type's destination type).

    Attributes:
        part (int): This part's number.
        num_parts (int): The number of parts.
        node_ids (torch.Tensor): The global ids of the vertices this part
            owns, ascending (local id -> global id).
        csc (CSCTopology): The in-edges of the owned vertices: column
            :obj:`i` holds the in-edges of :obj:`node_ids[i]`;
            :obj:`csc.row` holds global source ids, :obj:`csc.edge_id` global
            edge ids (:obj:`csc.num_src_nodes` is the global number of
            source vertices).
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
    node_ids: Any
    csc: Any
    node_attrs: Dict[Any, Any]
    edge_attrs: Dict[Any, Any]
    node_part: Any
    local_id: Any
    meta: Dict[str, Any] = field(repr=False)
    out_dir: Path = field(repr=False)

    @property
    def is_hetero(self) -> bool:
        return bool(self.meta.get('is_hetero'))

    @property
    def fingerprint(self) -> str:
        r"""The :func:`graph_fingerprint` of the graph this part was cut
        from."""
        return str(self.meta['fingerprint'])

    @property
    def partitioning_id(self) -> str:
        r"""A short hash of how the graph was cut (graph fingerprint,
        number of parts, method, seed, part sizes and edge counts): equal
        for every part of one partitioning (and for folders written again
        by the same call), different for another graph or another cut."""
        keys = ('version', 'fingerprint', 'num_parts', 'method', 'seed',
                'part_sizes', 'part_num_edges', 'part_sizes_by_type',
                'part_num_edges_by_type')
        text = json.dumps({k: self.meta.get(k) for k in keys},
                          sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def type_view(self, node_type: Optional[str] = None,
                  edge_type: Optional[tuple] = None) -> 'GraphPartition':
        r"""A heterogeneous part seen as a homogeneous one: the vertices,
        node attributes and maps of :obj:`node_type`, and, where
        :obj:`edge_type` is given (then :obj:`node_type` is its
        destination type), that edge type's in-edges and edge attributes
        (else no edges: :obj:`csc` is :obj:`None`)."""
        if not self.is_hetero:
            raise ValueError('type_view() is for heterogeneous partitions')
        if edge_type is not None:
            edge_type = tuple(edge_type)
            if edge_type not in self.csc:
                raise ValueError(f"'edge_type' must be one of "
                                 f"{list(self.csc)} (got {edge_type!r})")
            node_type = edge_type[-1]
        if node_type not in self.node_ids:
            raise ValueError(f"'node_type' must be one of "
                             f"{list(self.node_ids)} (got {node_type!r})")
        return GraphPartition(
            self.part, self.num_parts, self.node_ids[node_type],
            None if edge_type is None else self.csc[edge_type],
            self.node_attrs[node_type],
            {} if edge_type is None else self.edge_attrs[edge_type],
            self.node_part[node_type], self.local_id[node_type],
            {**self.meta, 'is_hetero': False, 'view_of':
             [node_type, None if edge_type is None else list(edge_type)]},
            self.out_dir)

    def _node_attr(self, key: str):
        if self.is_hetero:
            return {nt: attrs[key] for nt, attrs in self.node_attrs.items()
                    if key in attrs} or None
        return self.node_attrs.get(key)

    @property
    def x(self):
        r"""The node features of the owned vertices (:obj:`None` if
        absent; per node type for a heterogeneous graph)."""
        return self._node_attr('x')

    @property
    def y(self):
        r"""The labels of the owned vertices (:obj:`None` if absent; per
        node type for a heterogeneous graph)."""
        return self._node_attr('y')

    @property
    def num_nodes(self) -> int:
        r"""The number of vertices this part owns (of all types)."""
        if self.is_hetero:
            return sum(int(t.numel()) for t in self.node_ids.values())
        return int(self.node_ids.numel())

    @property
    def num_edges(self) -> int:
        r"""The number of in-edges of the owned vertices (of all types)."""
        if self.is_hetero:
            return sum(int(t.row.numel()) for t in self.csc.values())
        return 0 if self.csc is None else int(self.csc.row.numel())

    def _map(self, maps, node_type: Optional[str]) -> Tensor:
        if not self.is_hetero:
            if node_type is not None:
                raise ValueError("'node_type' is only for heterogeneous "
                                 "graphs")
            return maps
        if node_type not in maps:
            raise ValueError(f"'node_type' must be one of {list(maps)} "
                             f"(got {node_type!r})")
        return maps[node_type]

    def owner(self, global_ids: Tensor,
              node_type: Optional[str] = None) -> Tensor:
        r"""The part owning each of :obj:`global_ids` (of
        :obj:`node_type` for a heterogeneous graph)."""
        node_part = self._map(self.node_part, node_type)
        return node_part[torch.as_tensor(global_ids, dtype=torch.int64)]

    def is_local(self, global_ids: Tensor,
                 node_type: Optional[str] = None) -> Tensor:
        r"""Whether this part owns each of :obj:`global_ids`."""
        return self.owner(global_ids, node_type) == self.part

    def to_local(self, global_ids: Tensor,
                 node_type: Optional[str] = None) -> Tensor:
        r"""The local ids of :obj:`global_ids`, which this part must own
        (:class:`ValueError` otherwise)."""
        global_ids = torch.as_tensor(global_ids, dtype=torch.int64)
        if not bool(self.is_local(global_ids, node_type).all()):
            raise ValueError(f"some vertices are not owned by part "
                             f"{self.part}; use owner() to find their part")
        return self._map(self.local_id, node_type)[global_ids]


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
    if meta.get('is_hetero'):
        node_types = list(meta['node_types'])
        edge_types = [tuple(et) for et in meta['edge_types']]
        node_attr_keys = meta['node_attrs']
        edge_attr_keys = {tuple(et): keys
                          for et, keys in meta['edge_attrs']}
        sizes = {nt: meta['part_sizes_by_type'][nt][part]
                 for nt in node_types}
        num_edges = {et: meta['part_num_edges_by_type'][edge_type_name(
            et)][part] for et in edge_types}
        num_src = {et: meta['num_nodes_by_type'][et[0]]
                   for et in edge_types}
    else:
        node_types, edge_types = [None], [None]
        node_attr_keys = {None: meta.get('node_attrs', [])}
        edge_attr_keys = {None: meta.get('edge_attrs', [])}
        sizes = {None: meta['part_sizes'][part]}
        num_edges = {None: meta['part_num_edges'][part]}
        num_src = {None: meta['num_nodes']}

    node_ids, node_attrs, node_part, local_id = {}, {}, {}, {}
    for nt in node_types:
        node_ids[nt] = _load(node_ids_path(part_dir, nt))
        if node_ids[nt].numel() != int(sizes[nt]):
            raise ValueError(f"'{part_dir}': {nt or 'the part'} holds "
                             f"{node_ids[nt].numel()} vertices, but "
                             f"{META_FILE} says {sizes[nt]}")
        node_attrs[nt] = {
            key: _load(node_attr_path(part_dir, nt, key))
            for key in node_attr_keys.get(nt, [])
        }
        node_part[nt] = _load(global_map_path(out_dir, 'node_part', nt))
        local_id[nt] = _load(global_map_path(out_dir, 'local_id', nt))
    csc, edge_attrs = {}, {}
    for et in edge_types:
        colptr = _load(edge_path(part_dir, et, 'colptr'))
        row = _load(edge_path(part_dir, et, 'row'))
        edge_id = _load(edge_path(part_dir, et, 'edge_id'))
        size = node_ids[None if et is None else et[-1]].numel()
        if (colptr.numel() != size + 1 or row.numel() != num_edges[et]
                or edge_id.numel() != num_edges[et]):
            raise ValueError(f"'{part_dir}': the in-edges"
                             f"{'' if et is None else ' of ' + str(et)} do "
                             f"not match {META_FILE} ({size} vertices, "
                             f"{num_edges[et]} in-edges)")
        csc[et] = CSCTopology(colptr, row, edge_id, int(num_src[et]))
        edge_attrs[et] = {
            key: _load(edge_attr_path(part_dir, et, key))
            for key in edge_attr_keys.get(et, [])
        }
    if not meta.get('is_hetero'):
        return GraphPartition(part, num_parts, node_ids[None], csc[None],
                              node_attrs[None], edge_attrs[None],
                              node_part[None], local_id[None], meta, out_dir)
    return GraphPartition(part, num_parts, node_ids, csc, node_attrs,
                          edge_attrs, node_part, local_id, meta, out_dir)
