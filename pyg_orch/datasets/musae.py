"""Reader for the MUSAE social networks (Facebook page-page, GitHub)."""

from __future__ import annotations

import csv
import os
import os.path as osp

import numpy as np
import torch
from torch_geometric.data import Data

__all__ = ['read_musae']


def _check_file(path: str) -> str:
    if not osp.isfile(path):
        raise FileNotFoundError(f"MUSAE file not found: '{path}'")
    return path


def _read_edges(path: str) -> np.ndarray:
    with open(path, newline='') as f:
        header = f.readline()
        if not header.strip():
            return np.empty((0, 2), dtype=np.int64)
        try:  # No header line, the first line is an edge already:
            [int(v) for v in header.strip().split(',')]
            f.seek(0)
        except ValueError:
            pass
        edges = np.loadtxt(f, delimiter=',', dtype=np.int64, ndmin=2)
    if edges.size == 0:
        return np.empty((0, 2), dtype=np.int64)
    if edges.shape[1] < 2:
        raise ValueError(f"Expected two columns 'id_1,id_2' in '{path}'")
    return edges[:, :2]


def _read_targets(path: str) -> tuple[np.ndarray, np.ndarray]:
    with open(path, newline='', encoding='utf-8') as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or len(header) < 2:
            raise ValueError(f"Expected a header with at least two columns "
                             f"(node id, ..., label) in '{path}'")
        rows = [row for row in reader if row]
    ids = np.array([int(row[0]) for row in rows], dtype=np.int64)
    labels = [row[-1].strip() for row in rows]
    try:
        y = np.array([int(label) for label in labels], dtype=np.int64)
    except ValueError:  # Categorical strings, e.g., Facebook's `page_type`:
        names = sorted(set(labels))
        mapping = {name: i for i, name in enumerate(names)}
        y = np.array([mapping[label] for label in labels], dtype=np.int64)
    return ids, y


def read_musae(root: str, name: str | None = None) -> Data:
    r"""Reads a graph of the `MUSAE <https://github.com/benedekrozemberczki/
    MUSAE>`_ collection (*e.g.*, Facebook page-page or GitHub developers)
    from its raw CSV files.

    The directory must contain ``edges.csv`` (header ``id_1,id_2``, one
    undirected edge per line) and ``target.csv`` (first column: the node id,
    last column: the label, *e.g.*, ``id,target``,
    ``id,facebook_id,page_name,page_type`` or ``id,name,ml_target``).
    Integer labels are used as they are; string labels (such as Facebook's
    ``page_type``) are mapped to integers in sorted order.

    Every undirected edge is stored in both directions, so
    :obj:`edge_index` has twice as many columns as ``edges.csv`` has edges
    (self-loops appear twice as well, and no edges are removed).
    No node features are read.

    Args:
        root (str): The directory holding ``edges.csv`` and ``target.csv``,
            or, if :obj:`name` is given, its parent directory.
        name (str, optional): The name of the sub-directory of :obj:`root`,
            *e.g.*, :obj:`"facebook"` or :obj:`"github"`.
            (default: :obj:`None`)

    Returns:
        torch_geometric.data.Data: A graph with ``edge_index``
        (:obj:`[2, 2 * num_undirected_edges]`, :obj:`torch.int64`), ``y``
        (:obj:`[num_nodes]`, :obj:`torch.int64`) and ``num_nodes``.

    Raises:
        FileNotFoundError: If ``edges.csv`` or ``target.csv`` is missing.
    """
    folder = osp.join(os.fspath(root), name) if name is not None else \
        os.fspath(root)
    if not osp.isdir(folder):
        raise FileNotFoundError(f"MUSAE directory not found: '{folder}'")
    edge_path = _check_file(osp.join(folder, 'edges.csv'))
    target_path = _check_file(osp.join(folder, 'target.csv'))

    edges = _read_edges(edge_path)
    ids, labels = _read_targets(target_path)

    num_nodes = int(max(
        ids.max() + 1 if ids.size > 0 else 0,
        edges.max() + 1 if edges.size > 0 else 0,
    ))
    if (ids.size > 0 and ids.min() < 0) or (edges.size > 0
                                            and edges.min() < 0):
        raise ValueError(f"Negative node ids in '{folder}'")
    if ids.size != num_nodes or np.unique(ids).size != ids.size:
        raise ValueError(f"'{target_path}' must list every node id in "
                         f"[0, {num_nodes}) exactly once "
                         f"(found {ids.size} rows)")

    y = np.empty(num_nodes, dtype=np.int64)
    y[ids] = labels

    edge_index = torch.from_numpy(np.ascontiguousarray(edges.T))
    edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)

    return Data(edge_index=edge_index.contiguous(), y=torch.from_numpy(y),
                num_nodes=num_nodes)
