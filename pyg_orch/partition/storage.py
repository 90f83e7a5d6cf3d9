r"""The on-disk layout of a partitioned graph, and loading one part of it.

.. code-block:: text

   out_dir/
     meta.json           format version, parts, method, counts, fingerprint,
                         edge cut, balance, and of every file its size in
                         bytes, SHA-256, dtype and shape
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

Tensor files are read back memory-mapped with :obj:`weights_only=True`;
format version 1 folders (no hashes) load with size, dtype and shape checks.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_orch.topology.csc import CSCTopology
from pyg_orch.topology.fingerprint import graph_fingerprint

__all__ = [
    'FORMAT_NAME',
    'FORMAT_VERSION',
    'GraphPartition',
    'PartitionFileError',
    'graph_fingerprint',
    'load_partition',
    'read_meta',
    'verify_partition',
]

FORMAT_NAME = 'pyg_orch.partition'
#: Version 2 records a SHA-256, dtype and shape per file; version 1 (sizes
#: only) is still read.
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
HASH_NAME = 'sha256'
#: :func:`load_partition` hashes the files it opens when they hold less
#: than this many bytes in all (:obj:`verify=None`).
VERIFY_AUTO_BYTES = 1 << 30
_SAFE_NAME = re.compile(r'[A-Za-z0-9_][A-Za-z0-9_.-]*')
META_FILE = 'meta.json'
NODE_PART_FILE = 'node_part.pt'
LOCAL_ID_FILE = 'local_id.pt'

PathLike = Union[str, os.PathLike]


class PartitionFileError(ValueError):
    r"""A file of a partition folder that cannot be loaded, or does not
    match :obj:`meta.json`; :obj:`file` is its path within the folder."""
    def __init__(self, out_dir: PathLike, file: str, reason: str):
        self.out_dir, self.file, self.reason = Path(out_dir), file, reason
        super().__init__(f"could not load {file}: {reason} (partition "
                         f"folder '{out_dir}')")


def check_name(name: Any, what: str) -> None:
    r"""Raises a :class:`ValueError` unless :obj:`name` (an attribute,
    node type or relation) can name a file."""
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name):
        raise ValueError(f"{what} {name!r} cannot name a file; rename it "
                         f"(letters, digits, '_', '.', '-')")


def file_hash(path: PathLike) -> str:
    r"""The SHA-256 of a file's bytes (hex)."""
    with open(path, 'rb', buffering=0) as f:
        return hashlib.file_digest(f, HASH_NAME).hexdigest()


def file_entry(path: PathLike, tensor: Tensor) -> Dict[str, Any]:
    r"""What :obj:`meta.json` records of a written tensor file: its size,
    hash, dtype and shape."""
    return {'bytes': os.stat(path).st_size, HASH_NAME: file_hash(path),
            'dtype': _dtype_name(tensor.dtype),
            'shape': list(tensor.shape)}


def part_dir_name(part: int) -> str:
    return f'part_{part}'


def edge_type_name(edge_type) -> str:
    r"""The folder name of an edge type: :obj:`'src__rel__dst'`."""
    return '__'.join(edge_type)


def node_path(part_dir: Path, node_type: Optional[str],
              key: Optional[str] = None) -> Path:
    r"""The file of the part's node ids, or of node attribute :obj:`key`."""
    folder = part_dir if node_type is None else \
        part_dir / 'node_types' / node_type
    if key is None:
        return folder / 'node_ids.pt'
    return folder / ('nodes' if node_type is None else 'attrs') / f'{key}.pt'


def edge_path(part_dir: Path, edge_type, name: str,
              attr: bool = False) -> Path:
    r"""The file of :obj:`colptr`, :obj:`row` or :obj:`edge_id`, or of edge
    attribute :obj:`name` with :obj:`attr`."""
    folder = part_dir if edge_type is None else \
        part_dir / 'edge_types' / edge_type_name(edge_type)
    if attr:
        folder = folder / ('edges' if edge_type is None else 'attrs')
    return folder / f'{name}.pt'


def global_map_path(out_dir: Path, name: str,
                    node_type: Optional[str]) -> Path:
    r"""The :obj:`'node_part'` or :obj:`'local_id'` map of a node type."""
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
    if version not in READABLE_VERSIONS:
        raise ValueError(f"'{out_dir}' holds partition format version "
                         f"{version!r}, but this pyg_orch reads versions "
                         f"{list(READABLE_VERSIONS)}: partition the graph "
                         f"again")
    for key in ('num_parts', 'num_nodes', 'num_edges', 'fingerprint',
                'files', 'part_sizes', 'part_num_edges'):
        if key not in meta:
            raise ValueError(f"'{path}' lacks the entry {key!r}")
    num_parts = meta['num_parts']
    if isinstance(num_parts, bool) or not isinstance(num_parts, int) or \
            num_parts < 1:
        raise ValueError(f"'{path}' holds {num_parts!r} as 'num_parts' "
                         f"(expected a positive integer)")
    try:
        _check_meta_names(meta, version)
    except (ValueError, TypeError, AttributeError) as e:
        raise ValueError(f"'{path}' is damaged or was not written by "
                         f"partition_graph: {e}") from None
    return meta


def _check_meta_names(meta: Dict[str, Any], version: int) -> None:
    # Every name that becomes part of a path, checked as on write, so that
    # no entry of meta.json reads a file outside the folder.
    for nt in meta.get('node_types') or []:
        check_name(nt, 'node type')
    for et in meta.get('edge_types') or []:
        if not isinstance(et, list) or len(et) != 3:
            raise ValueError(f"edge type {et!r} is not [src, rel, dst]")
        for name in et:
            check_name(name, 'edge type part')
    node_attrs = meta.get('node_attrs') or []
    edge_attrs = meta.get('edge_attrs') or []
    node_keys = node_attrs.values() if isinstance(node_attrs, dict) else \
        [node_attrs]
    edge_keys = [keys for _, keys in edge_attrs] if meta.get('is_hetero') \
        else [edge_attrs]
    for keys in [*node_keys, *edge_keys]:
        for key in keys:
            check_name(key, 'attribute')
    files = meta['files']
    if not isinstance(files, dict):
        raise ValueError("'files' is not a mapping")
    for group, entries in files.items():
        if group != 'global' and not re.fullmatch(r'part_\d+', str(group)):
            raise ValueError(f"'files' has the unknown group {group!r}")
        if not isinstance(entries, dict):
            raise ValueError(f"'files'[{group!r}] is not a mapping")
        for rel, entry in entries.items():
            parts = rel.split('/') if isinstance(rel, str) else [rel]
            for name in parts:
                check_name(name, 'file path part')
            if group != 'global' and parts[0] != group:
                raise ValueError(f"file {rel!r} lies outside {group!r}")
            _check_entry(rel, entry, version)


def _check_entry(rel: str, entry: Any, version: int) -> None:
    if version == 1:
        ok = isinstance(entry, int) and not isinstance(entry, bool)
    else:
        ok = (isinstance(entry, dict)
              and isinstance(entry.get('bytes'), int)
              and isinstance(entry.get(HASH_NAME), str)
              and isinstance(entry.get('dtype'), str)
              and isinstance(entry.get('shape'), list))
    if not ok:
        raise ValueError(f"the entry of file {rel!r} is malformed "
                         f"({entry!r})")


@dataclass
class GraphPartition:
    r"""One part of a partitioned graph, as :func:`load_partition` returns it,
    every tensor memory-mapped. For a heterogeneous graph (:obj:`is_hetero`),
    the node fields are dicts per node type and :obj:`csc` and
    :obj:`edge_attrs` dicts per edge type.

    Attributes:
        part (int): This part's number.
        num_parts (int): The number of parts.
        node_ids (torch.Tensor): The global ids of the owned vertices,
            ascending (local id -> global id).
        csc (CSCTopology): The in-edges of the owned vertices (column :obj:`i`
            for :obj:`node_ids[i]`; global source and edge ids).
        node_attrs (Dict[str, torch.Tensor]): Node attributes of the owned
            vertices.
        edge_attrs (Dict[str, torch.Tensor]): Edge attributes of the in-edges,
            in CSC order.
        node_part (torch.Tensor): The part of every global vertex id.
        local_id (torch.Tensor): The id of every global vertex within its own
            part.
        meta (dict): The folder's :obj:`meta.json`.
        out_dir (pathlib.Path): The folder."""
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
        r"""A short hash of how the graph was cut: equal for every part of one
        partitioning, different for another graph or another cut."""
        keys = ('version', 'fingerprint', 'num_parts', 'method', 'seed',
                'part_sizes', 'part_num_edges', 'part_sizes_by_type',
                'part_num_edges_by_type')
        text = json.dumps({k: self.meta.get(k) for k in keys},
                          sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def type_view(self, node_type: Optional[str] = None,
                  edge_type: Optional[tuple] = None) -> 'GraphPartition':
        r"""A heterogeneous part seen as a homogeneous one: the vertices of
        :obj:`node_type` and, with :obj:`edge_type` (whose destination type is
        :obj:`node_type`), its in-edges (else :obj:`csc` is :obj:`None`)."""
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


def _entry_bytes(entry: Any) -> int:
    return entry if isinstance(entry, int) else int(entry['bytes'])


def _check_files(out_dir: Path, files: Dict[str, Any],
                 verify: bool = False) -> None:
    for rel, entry in files.items():
        path = out_dir / rel
        if not path.is_file():
            raise PartitionFileError(out_dir, rel, f"it is missing (listed "
                                     f"in {META_FILE}: the folder is "
                                     f"incomplete)")
        actual, size = path.stat().st_size, _entry_bytes(entry)
        if actual != size:
            raise PartitionFileError(out_dir, rel, f"it has {actual} bytes "
                                     f"but {META_FILE} says {size} "
                                     f"(truncated, or written by another "
                                     f"run)")
    for rel, entry in files.items() if verify else ():
        actual = file_hash(out_dir / rel)
        if actual != entry[HASH_NAME]:
            raise PartitionFileError(
                out_dir, rel, f"its content does not match {META_FILE} "
                f"({HASH_NAME} {actual[:12]}..., expected "
                f"{entry[HASH_NAME][:12]}...): damaged, or copied from "
                f"another partition")


def _groups(meta: Dict[str, Any], out_dir: Path,
            part: Optional[int]) -> List[Tuple[str, Dict[str, Any]]]:
    files = meta['files']
    parts = range(int(meta['num_parts'])) if part is None else [part]
    names = ['global'] + [part_dir_name(k) for k in parts]
    for name in names:
        if name not in files:
            raise ValueError(f"'{out_dir / META_FILE}' lists no files for "
                             f"{name!r}")
    return [(name, files[name]) for name in names]


def verify_partition(out_dir: PathLike, part: Optional[int] = None) -> None:
    r"""Hashes every file of :obj:`out_dir` (or the global maps and part
    :obj:`part`'s files) and compares it with :obj:`meta.json`: a
    :class:`PartitionFileError` names the first file that differs, is missing
    or truncated; a :class:`ValueError` for a format version 1 folder (no
    hashes)."""
    out_dir = Path(out_dir)
    meta = read_meta(out_dir)
    if meta['version'] == 1:
        raise _version_1_error(out_dir, 'it cannot be verified')
    if part is not None:
        _check_part(part, int(meta['num_parts']), out_dir)
    for _, files in _groups(meta, out_dir, part):
        _check_files(out_dir, files, verify=True)


def _version_1_error(out_dir: Path, what: str) -> ValueError:
    return ValueError(f"'{out_dir}' holds partition format version 1, which "
                      f"records no content hashes, so {what}: partition the "
                      f"graph again")


def _check_part(part: Any, num_parts: int, out_dir: Path) -> None:
    if (isinstance(part, bool) or not isinstance(part, int)
            or not 0 <= part < num_parts):
        raise ValueError(f"'part' must be in [0, {num_parts}) for "
                         f"'{out_dir}', which holds {num_parts} parts "
                         f"(got {part!r})")


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace('torch.', '')


class _Reader:
    # Loads the files meta.json lists, each checked against its entry (and
    # the dtype and shape the layout expects), errors naming the file.
    def __init__(self, out_dir: Path, listed: Dict[str, Any]):
        self.out_dir, self.listed = out_dir, listed

    def __call__(self, path: Path, dtype: Optional[torch.dtype] = None,
                 shape: Optional[Iterable[int]] = None,
                 rows: Optional[int] = None) -> Tensor:
        rel = path.relative_to(self.out_dir).as_posix()
        if rel not in self.listed:
            raise PartitionFileError(self.out_dir, rel,
                                     f"it is not listed in {META_FILE}")
        try:
            t = torch.load(path, mmap=True, weights_only=True)
        except Exception as e:  # Any damage: name the file.
            raise PartitionFileError(self.out_dir, rel,
                                     f'{type(e).__name__}: {e}') from e
        if not isinstance(t, Tensor):
            raise PartitionFileError(self.out_dir, rel,
                                     f'it holds a {type(t).__name__}, not '
                                     f'a tensor')
        got = f'{_dtype_name(t.dtype)} {list(t.shape)}'
        entry = self.listed[rel]
        if isinstance(entry, dict) and (
                _dtype_name(t.dtype) != entry['dtype']
                or list(t.shape) != entry['shape']):
            raise PartitionFileError(
                self.out_dir, rel, f"it holds a tensor {got}, but "
                f"{META_FILE} says {entry['dtype']} {entry['shape']}")
        if ((dtype is not None and t.dtype != dtype)
                or (shape is not None and list(t.shape) != list(shape))
                or (rows is not None and (t.dim() == 0
                                          or t.size(0) != rows))):
            want = (f"{'' if dtype is None else _dtype_name(dtype) + ' '}"
                    f"{list(shape) if shape is not None else ''}"
                    f"{'' if rows is None else f'{rows} rows'}")
            raise PartitionFileError(
                self.out_dir, rel, f"it holds a tensor {got}, but the "
                f"partition expects {want.strip()}")
        return t


def _resolve_verify(verify: Optional[bool], meta: Dict[str, Any],
                    groups, out_dir: Path) -> bool:
    if verify is not None and not isinstance(verify, bool):
        raise ValueError(f"'verify' must be None, True or False (got "
                         f"{verify!r})")
    if meta['version'] == 1:
        if verify:
            raise _version_1_error(out_dir, 'verify=True cannot be honored')
        warnings.warn(f"'{out_dir}' holds partition format version 1, which "
                      f"records no content hashes: its files are checked "
                      f"for size, dtype and shape only and cannot be "
                      f"verified; partition the graph again to verify them",
                      stacklevel=3)
        return False
    if verify is None:
        total = sum(_entry_bytes(e) for _, files in groups
                    for e in files.values())
        return total < VERIFY_AUTO_BYTES
    return verify


def _layout(meta: Dict[str, Any], part: int) -> tuple:
    # Node and edge types, attribute names and this part's counts, from
    # meta.json (keyed by None for a homogeneous graph).
    if meta.get('is_hetero'):
        node_types = list(meta['node_types'])
        edge_types = [tuple(et) for et in meta['edge_types']]
        node_attr_keys = dict(meta['node_attrs'])
        edge_attr_keys = {tuple(et): keys
                          for et, keys in meta['edge_attrs']}
        sizes = {nt: int(meta['part_sizes_by_type'][nt][part])
                 for nt in node_types}
        num_edges = {et: int(meta['part_num_edges_by_type'][edge_type_name(
            et)][part]) for et in edge_types}
        num_all = {nt: int(meta['num_nodes_by_type'][nt])
                   for nt in node_types}
        for et in edge_types:
            if len(et) != 3 or et[0] not in num_all or et[-1] not in num_all:
                raise ValueError(f"edge type {et!r} is not between two of "
                                 f"its node types {node_types}")
    else:
        node_types, edge_types = [None], [None]
        node_attr_keys = {None: meta.get('node_attrs', [])}
        edge_attr_keys = {None: meta.get('edge_attrs', [])}
        sizes = {None: int(meta['part_sizes'][part])}
        num_edges = {None: int(meta['part_num_edges'][part])}
        num_all = {None: int(meta['num_nodes'])}
    return (node_types, edge_types, node_attr_keys, edge_attr_keys, sizes,
            num_edges, num_all)


def load_partition(out_dir: PathLike, part: int, *,
                   expected_num_parts: Optional[int] = None,
                   expected_fingerprint: Optional[str] = None,
                   verify: Optional[bool] = None) -> GraphPartition:
    r"""Loads part :obj:`part` of a graph partitioned by
    :func:`~pyg_orch.distributed.partition_graph` into :obj:`out_dir`,
    memory-mapped, opening only that part's files and the global id maps.
    :obj:`meta.json` and every tensor's dtype and shape are checked; a
    :class:`ValueError` or :class:`PartitionFileError` names what does not
    match.

    Args:
        out_dir (str or os.PathLike): The folder.
        part (int): The part to load, in :obj:`[0, num_parts)`.
        expected_num_parts (int, optional): Reject a folder with another number
            of parts.
        expected_fingerprint (str, optional): Reject a folder partitioned from
            another graph.
        verify (bool, optional): Hash the opened files (see
            :func:`verify_partition`); :obj:`None` does so under 1 GiB."""
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
    _check_part(part, num_parts, out_dir)
    name = part_dir_name(part)
    groups = _groups(meta, out_dir, part)
    verify = _resolve_verify(verify, meta, groups, out_dir)
    for _, files in groups:
        _check_files(out_dir, files, verify)
    read = _Reader(out_dir, {**groups[0][1], **groups[1][1]})

    part_dir = out_dir / name
    try:
        (node_types, edge_types, node_attr_keys, edge_attr_keys, sizes,
         num_edges, num_all) = _layout(meta, part)
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise ValueError(f"'{out_dir / META_FILE}' is damaged or was not "
                         f"written by partition_graph: "
                         f"{type(e).__name__}: {e}") from None

    node_ids, node_attrs, node_part, local_id = {}, {}, {}, {}
    for nt in node_types:
        size, total = int(sizes[nt]), int(num_all[nt])
        node_ids[nt] = read(node_path(part_dir, nt), torch.int64,
                            [size])
        node_attrs[nt] = {
            key: read(node_path(part_dir, nt, key), rows=size)
            for key in node_attr_keys.get(nt, [])
        }
        node_part[nt], local_id[nt] = (
            read(global_map_path(out_dir, key, nt), torch.int64, [total])
            for key in ('node_part', 'local_id'))
    csc, edge_attrs = {}, {}
    for et in edge_types:
        size = node_ids[None if et is None else et[-1]].numel()
        count = int(num_edges[et])
        path = edge_path(part_dir, et, 'colptr')
        colptr = read(path, torch.int64, [size + 1])
        if int(colptr[0]) != 0 or int(colptr[-1]) != count:
            raise PartitionFileError(
                out_dir, path.relative_to(out_dir).as_posix(), f"it spans "
                f"in-edges [{int(colptr[0])}, {int(colptr[-1])}), but "
                f"{META_FILE} says {count}")
        row, edge_id = (read(edge_path(part_dir, et, key), torch.int64,
                             [count]) for key in ('row', 'edge_id'))
        num_src = int(num_all[None if et is None else et[0]])
        csc[et] = CSCTopology(colptr, row, edge_id, num_src)
        edge_attrs[et] = {
            key: read(edge_path(part_dir, et, key, attr=True), rows=count)
            for key in edge_attr_keys.get(et, [])
        }
    fields = (node_ids, csc, node_attrs, edge_attrs, node_part, local_id)
    if not meta.get('is_hetero'):
        fields = tuple(f[None] for f in fields)
    return GraphPartition(part, num_parts, *fields, meta, out_dir)
