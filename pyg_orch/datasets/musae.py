"""Reader for the MUSAE social networks (Facebook page-page, GitHub)."""

from __future__ import annotations

import csv
import os
import os.path as osp

import numpy as np
import torch
from torch_geometric.data import Data

__all__ = ['read_musae']


def _row_error(path: str, line: int, what: str) -> ValueError:
    return ValueError(f"'{path}', line {line}: {what}")


def _parse_id(value: str, path: str, line: int, column: str) -> int:
    try:
        out = int(value)
    except ValueError:
        raise _row_error(path, line, f"expected a non-negative integer "
                         f"node id in column '{column}' (got {value!r})"
                         ) from None
    if out < 0:
        raise _row_error(path, line, f"expected a non-negative integer "
                         f"node id in column '{column}' (got {out})")
    return out


def _first_bad_edge_line(path: str, has_header: bool) -> None:
    # Finds the first malformed line for the error message (the fast
    # reader does not name the file and counts rows differently).
    with open(path, newline='') as f:
        for line, text in enumerate(f, start=1):
            if line == 1 and has_header:
                continue
            values = text.strip().split(',')
            if values == ['']:
                continue  # Empty lines are skipped, as np.loadtxt does.
            if len(values) != 2:
                raise _row_error(path, line, f"expected two node ids "
                                 f"'id_1,id_2' (got {text.strip()!r})")
            for value, column in zip(values, ('id_1', 'id_2')):
                _parse_id(value.strip(), path, line, column)


def _read_edges(path: str) -> np.ndarray:
    with open(path, newline='') as f:
        header = f.readline()
        if not header.strip():
            return np.empty((0, 2), dtype=np.int64)
        has_header = True
        try:  # No header line, the first line is an edge already:
            [int(v) for v in header.strip().split(',')]
            f.seek(0)
            has_header = False
        except ValueError:
            pass
        try:
            edges = np.loadtxt(f, delimiter=',', dtype=np.int64, ndmin=2)
        except ValueError:
            edges = None
    if edges is None or (edges.size > 0 and
                         (edges.shape[1] != 2 or edges.min() < 0)):
        _first_bad_edge_line(path, has_header)
        raise ValueError(f"Expected two non-negative node ids 'id_1,id_2' "
                         f"per line in '{path}'")
    return edges if edges.size > 0 else np.empty((0, 2), dtype=np.int64)


def _read_targets(path: str) -> tuple[np.ndarray, np.ndarray]:
    with open(path, newline='', encoding='utf-8') as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or len(header) < 2:
            raise ValueError(f"Expected a header with at least two columns "
                             f"(node id, ..., label) in '{path}'")
        ids, labels, lines = [], [], []
        for row in reader:
            if not row:
                continue
            line = reader.line_num
            if len(row) != len(header):
                raise _row_error(
                    path, line, f"expected {len(header)} columns "
                    f"({','.join(header)}), as in the header (got "
                    f"{len(row)}: {','.join(row)!r})")
            ids.append(_parse_id(row[0].strip(), path, line, header[0]))
            label = row[-1].strip()
            if not label:
                raise _row_error(path, line, f"the label (column "
                                 f"'{header[-1]}') is empty")
            labels.append(label)
            lines.append(line)
    ids = np.array(ids, dtype=np.int64)
    _check_unique(ids, lines, path)
    return ids, _labels(labels, lines, path, header[-1])


def _check_unique(ids: np.ndarray, lines: list, path: str) -> None:
    _, first, counts = np.unique(ids, return_index=True, return_counts=True)
    if counts.size > 0 and counts.max() > 1:
        dup = int(np.argmax(counts > 1))
        i = int(first[dup])
        again = int(np.flatnonzero(ids == ids[i])[1])
        raise _row_error(path, lines[again], f"node id {ids[i]} is listed "
                         f"again (first on line {lines[i]}); every node "
                         f"needs exactly one row")


def _labels(labels: list, lines: list, path: str,
            column: str) -> np.ndarray:
    # Integer labels as they are (non-negative); otherwise categorical
    # strings (e.g., Facebook's `page_type`), numbered in sorted order.
    try:
        y = np.array([int(label) for label in labels], dtype=np.int64)
    except ValueError:
        names = sorted(set(labels))
        mapping = {name: i for i, name in enumerate(names)}
        return np.array([mapping[label] for label in labels],
                        dtype=np.int64)
    if y.size > 0 and y.min() < 0:
        i = int(np.argmax(y < 0))
        raise _row_error(path, lines[i], f"expected a non-negative integer "
                         f"label in column '{column}' (got {y[i]})")
    return y


def read_musae(root: str, name: str | None = None) -> Data:
    r"""Reads a graph of the `MUSAE <https://github.com/benedekrozemberczki/
    MUSAE>`_ collection (*e.g.*, Facebook page-page or GitHub developers) from
    its raw CSV files: ``edges.csv`` (header ``id_1,id_2``) and ``target.csv``
    (first column the node id, last column the label; string labels are mapped
    to integers in sorted order). Every undirected edge is stored in both
    directions; no node features are read.

    Args:
        root (str): The directory holding ``edges.csv`` and ``target.csv``, or,
            if :obj:`name` is given, its parent directory.
        name (str, optional): The name of the sub-directory of :obj:`root`,
            *e.g.*, :obj:`"facebook"` or :obj:`"github"`. (default:
            :obj:`None`)

    Raises:
        FileNotFoundError: If ``edges.csv`` or ``target.csv`` is missing.
        ValueError: If a line of either file is malformed (naming the file and
            the line), or ``target.csv`` does not list every node exactly once.
    """
    folder = osp.join(os.fspath(root), name) if name is not None else \
        os.fspath(root)
    if not osp.isdir(folder):
        raise FileNotFoundError(f"MUSAE directory not found: '{folder}'")
    edge_path, target_path = (osp.join(folder, name)
                              for name in ('edges.csv', 'target.csv'))
    for path in (edge_path, target_path):
        if not osp.isfile(path):
            raise FileNotFoundError(f"MUSAE file not found: '{path}'")

    edges = _read_edges(edge_path)
    ids, labels = _read_targets(target_path)

    num_nodes = int(max(
        ids.max() + 1 if ids.size > 0 else 0,
        edges.max() + 1 if edges.size > 0 else 0,
    ))
    if ids.size != num_nodes:
        listed = np.zeros(num_nodes, dtype=bool)
        listed[ids] = True
        missing = int(np.argmin(listed))
        raise ValueError(f"'{target_path}' must list every node id in "
                         f"[0, {num_nodes}) exactly once (found {ids.size} "
                         f"rows; node id {missing} has none)")

    y = np.empty(num_nodes, dtype=np.int64)
    y[ids] = labels

    edge_index = torch.from_numpy(np.ascontiguousarray(edges.T))
    edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)

    return Data(edge_index=edge_index.contiguous(), y=torch.from_numpy(y),
                num_nodes=num_nodes)
