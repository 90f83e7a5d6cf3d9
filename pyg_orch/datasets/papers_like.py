r"""A synthetic graph shaped like :obj:`ogbn-papers100M`, built straight into
the CSC layout in chunks."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import Data

from pyg_orch.topology.csc import CSCTopology, smallest_index_dtype
from pyg_orch.topology.graph import GraphTopology
from pyg_orch.core.checks import check_int, check_real, resolve_device

#: The sizes of :obj:`ogbn-papers100M`: nodes, undirected edges, features,
#: classes and training nodes.
PAPERS100M: Dict[str, int] = dict(
    num_nodes=111_059_956,
    num_edges=1_615_685_872,
    num_features=128,
    num_classes=172,
    num_train=1_207_179,
)

_CACHE_VERSION = 1


def _chunk_generator(device: torch.device, seed: int,
                     chunk: int) -> torch.Generator:
    # One stream per chunk: both passes draw the same edges.
    return torch.Generator(device=device).manual_seed(seed * 1_000_003 +
                                                      chunk + 1)


def _cumulative_weights(num_nodes: int, exponent: float, seed: int,
                        device: torch.device) -> Tensor:
    # Popularity `rank^(-1 / (exponent - 1))` with ranks spread over the node
    # ids by a random permutation, accumulated in node order (float64).
    gen = torch.Generator(device=device).manual_seed(seed)
    rank = torch.randperm(num_nodes, generator=gen, device=device)
    weight = rank.add_(1).to(torch.float64).pow_(-1.0 / (exponent - 1.0))
    return weight.cumsum_(0)


def _draw_chunk(cum_weight: Tensor, num: int, gen: torch.Generator,
                dtype: torch.dtype) -> Tuple[Tensor, Tensor]:
    # Undirected edges: the cited end drawn by popularity, the citing one not.
    num_nodes, device = cum_weight.numel(), cum_weight.device
    u = torch.rand(num, dtype=torch.float64, generator=gen, device=device)
    u.mul_(cum_weight[-1])
    cited = torch.searchsorted(cum_weight, u, right=True,
                               out_int32=dtype == torch.int32)
    cited.clamp_(max=num_nodes - 1)
    del u
    citing = torch.randint(num_nodes, (num, ), generator=gen, device=device,
                           dtype=dtype)
    return cited, citing


def _fill_chunk(row: Tensor, cursor: Tensor, dst: Tensor,
                src: Tensor) -> None:
    # Appends `src` to the lists of `dst` at `cursor` (advanced).
    dst_sorted, perm = torch.sort(dst)
    first = torch.searchsorted(dst_sorted, dst_sorted)
    pos = torch.arange(dst.numel(), device=dst.device).sub_(first)
    del first
    dst_long = dst_sorted.to(torch.int64)
    pos.add_(cursor.index_select(0, dst_long))
    row.index_copy_(0, pos, src.index_select(0, perm).to(row.dtype))
    del pos, perm
    cursor.index_add_(0, dst_long, torch.ones_like(dst_long))


def _build_csc(num_nodes: int, num_edges: int, exponent: float, seed: int,
               device: torch.device, chunk_size: int,
               progress: bool) -> Tuple[Tensor, Tensor]:
    from tqdm.auto import tqdm

    node_dtype = smallest_index_dtype(num_nodes)
    cum_weight = _cumulative_weights(num_nodes, exponent, seed, device)
    sizes = [min(chunk_size, num_edges - start)
             for start in range(0, num_edges, chunk_size)]
    bar = tqdm(total=2 * num_edges, desc='papers-like CSC', unit='edge',
               unit_scale=True, disable=not progress)

    # Pass 1: degrees (each undirected edge is an in-edge of both ends).
    degree = torch.zeros(num_nodes, dtype=torch.int64, device=device)
    for i, num in enumerate(sizes):
        gen = _chunk_generator(device, seed, i)
        for end in _draw_chunk(cum_weight, num, gen, node_dtype):
            end = end.to(torch.int64)
            degree.index_add_(0, end, torch.ones_like(end))
        bar.update(num)
    colptr = torch.zeros(num_nodes + 1, dtype=torch.int64, device=device)
    torch.cumsum(degree, 0, out=colptr[1:])
    del degree

    # Pass 2: the same draws, written into the neighbor lists.
    row = torch.empty(2 * num_edges, dtype=node_dtype, device=device)
    cursor = colptr[:-1].clone()
    for i, num in enumerate(sizes):
        gen = _chunk_generator(device, seed, i)
        cited, citing = _draw_chunk(cum_weight, num, gen, node_dtype)
        _fill_chunk(row, cursor, cited, citing)
        _fill_chunk(row, cursor, citing, cited)
        del cited, citing
        bar.update(num)
    bar.close()
    colptr = colptr.to(smallest_index_dtype(2 * num_edges))
    return colptr, row


def _write_tensor(path: Path, tensor: Tensor, chunk: int = 1 << 26) -> None:
    with open(path, 'wb') as f:
        for start in range(0, tensor.numel(), chunk):
            part = tensor[start:start + chunk].cpu()
            f.write(memoryview(part.numpy()).cast('B'))


def _read_tensor(path: Path, numel: int, dtype: torch.dtype,
                 device: torch.device, chunk: int = 1 << 26) -> Tensor:
    cuda = device.type == 'cuda'
    out = torch.empty(numel, dtype=dtype, device=device)
    staging = torch.empty(min(chunk, max(numel, 1)), dtype=dtype,
                          pin_memory=cuda)
    with open(path, 'rb') as f:
        for start in range(0, numel, chunk):
            part = staging[:min(chunk, numel - start)]
            view = memoryview(part.numpy()).cast('B')
            if f.readinto(view) != len(view):
                raise ValueError(f"cache file '{path}' is truncated; delete "
                                 f"its folder to regenerate it")
            out[start:start + part.numel()].copy_(part)
            if cuda:  # The staging buffer is refilled next.
                torch.cuda.current_stream(device).synchronize()
    return out


def _save_cache(folder: Path, colptr: Tensor, row: Tensor,
                meta: Dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    _write_tensor(folder / 'colptr.bin', colptr)
    _write_tensor(folder / 'row.bin', row)
    meta = dict(meta, colptr_dtype=str(colptr.dtype), row_dtype=str(
        row.dtype), version=_CACHE_VERSION)
    tmp = folder / 'meta.json.tmp'
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, folder / 'meta.json')  # Written last: marks it complete.


def _load_cache(folder: Path, meta: Dict,
                device: torch.device) -> Optional[Tuple[Tensor, Tensor]]:
    try:
        stored = json.loads((folder / 'meta.json').read_text())
    except (OSError, ValueError):
        return None
    if stored.get('version') != _CACHE_VERSION or any(
            stored.get(k) != v for k, v in meta.items()):
        return None
    dtypes = {str(d): d for d in (torch.int32, torch.int64)}
    colptr = _read_tensor(folder / 'colptr.bin', meta['num_nodes'] + 1,
                          dtypes[stored['colptr_dtype']], device)
    row = _read_tensor(folder / 'row.bin', 2 * meta['num_edges'],
                       dtypes[stored['row_dtype']], device)
    return colptr, row


def papers_like_topology(
    num_nodes: int = PAPERS100M['num_nodes'],
    num_edges: int = PAPERS100M['num_edges'],
    exponent: float = 3.0,
    device: Union[torch.device, str] = 'cpu',
    seed: int = 0,
    chunk_size: int = 1 << 27,
    cache_dir: Optional[Union[str, os.PathLike]] = None,
    progress: bool = False,
) -> GraphTopology:
    r"""Generates the topology of an undirected citation-like graph directly in
    the CSC layout, in chunks of :obj:`chunk_size` edges (no :obj:`edge_index`
    is held). Each edge joins a cited node, drawn with probability :math:`p_v
    \propto r_v^{-1 / (\gamma - 1)}` for a random popularity rank :math:`r_v`
    (citation counts :math:`\propto k^{-\gamma}`), and a uniformly drawn citing
    node; both directions are stored. Duplicate edges and self-loops are kept.
    The result depends on :obj:`seed`, :obj:`chunk_size` and the device type.

    Args:
        num_nodes (int): The number of nodes. (default: :obj:`111_059_956`)
        num_edges (int): The number of undirected edges. (default:
            :obj:`1_615_685_872`)
        exponent (float): The power-law exponent :math:`\gamma > 1` of the
            citation counts. (default: :obj:`3.0`)
        device (torch.device or str): Where the topology is generated and
            returned. (default: :obj:`'cpu'`)
        seed (int): The random seed. (default: :obj:`0`)
        chunk_size (int): Undirected edges drawn at a time. (default:
            :obj:`2**27`)
        cache_dir (str or os.PathLike, optional): A folder where the topology
            is saved once generated and loaded from by a later call with the
            same arguments.
        progress (bool): Show a :mod:`tqdm` progress bar. (default:
            :obj:`False`)"""
    num_nodes = check_int('num_nodes', num_nodes, 1)
    num_edges = check_int('num_edges', num_edges, 0)
    seed = check_int('seed', seed, 0)
    chunk_size = check_int('chunk_size', chunk_size, 1)
    exponent = check_real('exponent', exponent, 1.0, exclusive=True)
    device = resolve_device(device, 'device', default='cpu')
    if cache_dir is not None and not isinstance(cache_dir,
                                                (str, os.PathLike)):
        raise TypeError(f"'cache_dir' must be a path (str or os.PathLike) "
                        f"or None (got {type(cache_dir).__name__})")

    meta = dict(num_nodes=num_nodes, num_edges=num_edges, exponent=exponent,
                seed=seed, chunk_size=chunk_size, device_type=device.type)
    folder = None if cache_dir is None else Path(cache_dir) / (
        'papers_like_n{num_nodes}_e{num_edges}_x{exponent:g}_s{seed}_'
        'c{chunk_size}_{device_type}'.format(**meta))
    loaded = None if folder is None else _load_cache(folder, meta, device)
    if loaded is not None:
        colptr, row = loaded
    else:
        colptr, row = _build_csc(num_nodes, num_edges, exponent, seed,
                                 device, chunk_size, progress)
        if folder is not None:
            _save_cache(folder, colptr, row, meta)
    csc = CSCTopology.from_csc(colptr, row, None, num_nodes)
    return GraphTopology({None: csc}, {None: num_nodes})


def papers_like_node_data(
    num_nodes: int = PAPERS100M['num_nodes'],
    num_features: int = PAPERS100M['num_features'],
    num_classes: int = PAPERS100M['num_classes'],
    num_train: int = PAPERS100M['num_train'],
    device: Union[torch.device, str] = 'cpu',
    seed: int = 0,
    progress: bool = False,
) -> Data:
    r"""The node data of :func:`papers_like_graph` in host memory: random
    features :obj:`x` (drawn on :obj:`device` in chunks, pinned when it is
    CUDA), random labels :obj:`y` and a :obj:`train_mask` of :obj:`num_train`
    random nodes."""
    num_nodes = check_int('num_nodes', num_nodes, 1)
    num_features = check_int('num_features', num_features, 0)
    num_classes = check_int('num_classes', num_classes, 1)
    num_train = check_int('num_train', num_train, 0)
    seed = check_int('seed', seed, 0)
    if num_train > num_nodes:
        raise ValueError(f"'num_train' must be at most 'num_nodes' "
                         f"({num_nodes}) (got {num_train})")
    gen = torch.Generator().manual_seed(seed + 1)
    y = torch.randint(num_classes, (num_nodes, ), generator=gen)
    train_mask = torch.zeros(num_nodes, dtype=torch.bool)
    train_mask[torch.randperm(num_nodes, generator=gen)[:num_train]] = True
    data = Data(y=y, train_mask=train_mask, num_nodes=num_nodes)
    if num_features > 0:
        data.x = papers_like_features(num_nodes, num_features, device, seed,
                                      progress=progress)
    return data


def papers_like_graph(
    num_nodes: int = PAPERS100M['num_nodes'],
    num_edges: int = PAPERS100M['num_edges'],
    num_features: int = PAPERS100M['num_features'],
    num_classes: int = PAPERS100M['num_classes'],
    num_train: int = PAPERS100M['num_train'],
    exponent: float = 3.0,
    device: Union[torch.device, str] = 'cpu',
    seed: int = 0,
    chunk_size: int = 1 << 27,
    cache_dir: Optional[Union[str, os.PathLike]] = None,
    progress: bool = False,
) -> Tuple[Data, GraphTopology]:
    r"""A graph shaped like :obj:`ogbn-papers100M` (by default its sizes,
    :obj:`PAPERS100M`): the topology of :func:`papers_like_topology` and the
    node data of :func:`papers_like_node_data`, without :obj:`edge_index` (pass
    the topology to the loader).

    Args:
        num_features (int): Feature columns; :obj:`0` for no :obj:`x`.
            (default: :obj:`128`)
        num_classes (int): Label classes. (default: :obj:`172`)
        num_train (int): Training nodes, at most :obj:`num_nodes`. (default:
            :obj:`1_207_179`)
        **others: As in :func:`papers_like_topology`."""
    data = papers_like_node_data(num_nodes, num_features, num_classes,
                                 num_train, device, seed, progress)
    return data, papers_like_topology(num_nodes, num_edges, exponent, device,
                                      seed, chunk_size, cache_dir, progress)


def papers_like_features(
    num_nodes: int = PAPERS100M['num_nodes'],
    num_features: int = PAPERS100M['num_features'],
    device: Union[torch.device, str] = 'cpu',
    seed: int = 0,
    out: Optional[Tensor] = None,
    progress: bool = False,
) -> Tensor:
    r"""The features :obj:`x` of :func:`papers_like_node_data` for the same
    :obj:`seed` and device type.

    Args:
        num_nodes (int): The number of rows. (default: :obj:`111_059_956`)
        num_features (int): The number of columns. (default: :obj:`128`)
        device (torch.device or str): Where the rows are drawn. (default:
            :obj:`'cpu'`)
        seed (int): The random seed. (default: :obj:`0`)
        out (torch.Tensor, optional): A :obj:`float32` CPU tensor of shape
            :obj:`[num_nodes, num_features]` to write into (e.g. shared
            memory); else a new tensor, pinned when :obj:`device` is CUDA.
        progress (bool): Show a :mod:`tqdm` progress bar. (default:
            :obj:`False`)"""
    num_nodes = check_int('num_nodes', num_nodes, 1)
    num_features = check_int('num_features', num_features, 0)
    seed = check_int('seed', seed, 0)
    device = resolve_device(device, 'device', default='cpu')
    if out is not None:
        shape = (num_nodes, num_features)
        if (not isinstance(out, Tensor) or out.dtype != torch.float32
                or out.device.type != 'cpu' or tuple(out.shape) != shape):
            got = (f'{type(out).__name__}' if not isinstance(out, Tensor)
                   else f'shape {tuple(out.shape)}, dtype {out.dtype} on '
                   f'{out.device}')
            raise ValueError(f"'out' must be a float32 CPU tensor of shape "
                             f"{shape} (got {got})")
    from tqdm.auto import tqdm

    x = out if out is not None else torch.empty(
        (num_nodes, num_features), dtype=torch.float32,
        pin_memory=device.type == 'cuda')
    gen = torch.Generator(device=device).manual_seed(seed + 2)
    chunk_rows = 1 << 22
    for start in tqdm(range(0, num_nodes, chunk_rows), desc='features',
                      unit='chunk', disable=not progress):
        end = min(start + chunk_rows, num_nodes)
        x[start:end].copy_(
            torch.randn(end - start, num_features, generator=gen,
                        device=device), non_blocking=False)
    return x
