r"""Reading the folders that PyG's
:class:`torch_geometric.distributed.Partitioner` writes (homogeneous only;
labels and masks are passed as :obj:`node_attrs`). The pickles are read by an
unpickler that resolves tensors, dtypes, sizes and dicts only, so a file that
would run code is refused."""
import json
import os
import pickle
import types
from pathlib import Path
from typing import Any, Dict, Optional, Union

import torch
from torch import Tensor

from pyg_orch.partition.build import PartitionInfo, partition_graph

__all__ = ['read_pyg_partition', 'convert_pyg_partition']

PathLike = Union[str, os.PathLike]


# PyG saves some dicts as defaultdicts, which `weights_only=True` refuses.
_BUILTINS = ('dict', 'list', 'set', 'tuple')
_ALLOWED = {('collections', 'defaultdict'), ('collections', 'OrderedDict'),
            ('torch', 'Size')} | {(m, n) for m in ('builtins', '__builtin__')
                                  for n in _BUILTINS} | {
    ('torch._utils', n) for n in ('_rebuild_tensor', '_rebuild_tensor_v2',
                                  '_rebuild_sparse_tensor',
                                  '_rebuild_parameter')}


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED or (module == 'torch' and isinstance(
                getattr(torch, name, None), torch.dtype)):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"refusing to load '{module}.{name}': PyG partition files hold "
            f"only tensors, dtypes, sizes and dicts")


_PICKLE = types.ModuleType('pyg_orch_restricted_pickle')
_PICKLE.Unpickler = _RestrictedUnpickler  # type: ignore[attr-defined]
_PICKLE.load = pickle.load  # type: ignore[attr-defined]


def _load(path: Path) -> Any:
    try:
        return torch.load(path, weights_only=False, pickle_module=_PICKLE)
    except pickle.UnpicklingError as e:
        raise ValueError(f"Could not load {str(path)!r} as a file of PyG's "
                         f"Partitioner: {e}") from None


def _read_meta(root: Path) -> Dict[str, Any]:
    meta_path = root / 'META.json'
    if not meta_path.is_file():
        raise ValueError(f"'root' must be a folder written by PyG's "
                         f"Partitioner, with a META.json (got {str(root)!r}, "
                         f"which has none)")
    meta = json.loads(meta_path.read_text())
    if meta.get('is_hetero'):
        raise NotImplementedError(
            f"Heterogeneous partitions of PyG's Partitioner are not "
            f"supported yet (got {str(root)!r}); partition the HeteroData "
            f"with pyg_orch.distributed.partition_graph instead")
    return meta


def _put(out: Optional[Tensor], ids: Tensor, rows: Tensor,
         size: int) -> Tensor:
    if out is None:
        out = rows.new_zeros((size, ) + tuple(rows.shape[1:]))
    out[ids] = rows
    return out


def read_pyg_partition(root: PathLike,
                       node_attrs: Optional[Dict[str, Tensor]] = None):
    r"""The homogeneous graph stored in a folder written by PyG's
    :class:`~torch_geometric.distributed.Partitioner`, as a
    :class:`~torch_geometric.data.Data` in PyG's global ids and edge order.

    Args:
        root (str or os.PathLike): The folder.
        node_attrs (Dict[str, torch.Tensor], optional): Node attributes the
            folder does not hold (:obj:`y`, :obj:`train_mask`, ...), one row
            per global node id."""
    from torch_geometric.data import Data

    root = Path(root)
    meta = _read_meta(root)
    node_map = _load(root / 'node_map.pt')
    edge_map = _load(root / 'edge_map.pt')
    num_nodes, num_edges = int(node_map.numel()), int(edge_map.numel())
    data = Data(num_nodes=num_nodes)
    edge_index = torch.empty((2, num_edges), dtype=torch.long)
    attrs: Dict[str, Optional[Tensor]] = {}
    for pid in range(int(meta['num_parts'])):
        part = root / f'part_{pid}'
        graph = _load(part / 'graph.pt')
        edge_index[:, graph['edge_id']] = torch.stack([graph['row'],
                                                       graph['col']])
        nfeat = _load(part / 'node_feats.pt')
        for key, rows in nfeat.get('feats', {}).items():
            if rows is not None:
                attrs[key] = _put(attrs.get(key), nfeat['global_id'], rows,
                                  num_nodes)
        if nfeat.get('time') is not None:  # All nodes' times, in every part.
            data.time = nfeat['time']
        efeat = _load(part / 'edge_feats.pt') or {}
        for key, rows in efeat.get('feats', {}).items():
            attrs[key] = _put(attrs.get(key), efeat['global_id'], rows,
                              num_edges)
        if efeat.get('edge_time') is not None:
            attrs['edge_time'] = _put(attrs.get('edge_time'),
                                      graph['edge_id'], efeat['edge_time'],
                                      num_edges)
    data.edge_index = edge_index
    for key, value in attrs.items():
        data[key] = value
    for key, value in (node_attrs or {}).items():
        if not isinstance(value, Tensor) or value.size(0) != num_nodes:
            got = tuple(value.shape) if isinstance(value, Tensor) else value
            raise ValueError(
                f"'node_attrs[{key!r}]' must be a tensor with one row per "
                f"node ({num_nodes}) (got {got!r})")
        data[key] = value
    return data


def convert_pyg_partition(root: PathLike, out_dir: PathLike,
                          num_parts: Optional[int] = None,
                          method: str = 'auto',
                          node_attrs: Optional[Dict[str, Tensor]] = None,
                          **kwargs) -> PartitionInfo:
    r"""Converts a folder written by PyG's
    :class:`~torch_geometric.distributed.Partitioner` into a
    :func:`~pyg_orch.distributed.partition_graph` folder (same global ids;
    parts assigned anew by :obj:`method`).

    Args:
        root (str or os.PathLike): PyG's folder.
        out_dir (str or os.PathLike): The folder to write.
        num_parts (int, optional): The number of parts (default: as many as
            PyG's folder has).
        method (str): As in :func:`partition_graph`.
        node_attrs (Dict[str, torch.Tensor], optional): As in
            :func:`read_pyg_partition`.
        **kwargs: Further arguments of :func:`partition_graph`."""
    data = read_pyg_partition(root, node_attrs)
    if num_parts is None:
        num_parts = int(_read_meta(Path(root))['num_parts'])
    return partition_graph(data, num_parts, out_dir, method=method, **kwargs)
