r"""Sparse adjacencies given as :obj:`adj_t` (see
:class:`torch_geometric.transforms.ToSparseTensor`): a
:class:`torch_sparse.SparseTensor` or a :class:`torch.sparse` tensor holding
the transposed adjacency. Edge ids are positions in the tensor's storage order,
as in PyG. Also the conversions between compressed pointers and indices."""
from typing import Any, Optional, Tuple

import torch
from torch import Tensor

_TORCH_LAYOUTS = (torch.sparse_csr, torch.sparse_csc, torch.sparse_coo)


def segment_ids(counts: Tensor, total: Optional[int] = None) -> Tensor:
    r"""For :obj:`counts = [2, 0, 3]` returns :obj:`[0, 0, 2, 2, 2]`."""
    return torch.repeat_interleave(
        torch.arange(counts.numel(), device=counts.device), counts,
        output_size=int(counts.sum()) if total is None else total)


def index_to_ptr(index: Tensor, size: int) -> Tensor:
    r"""The compressed :obj:`int64` pointer of :obj:`index` once sorted."""
    ptr = torch.zeros(size + 1, dtype=torch.int64, device=index.device)
    torch.cumsum(torch.bincount(index, minlength=size), 0, out=ptr[1:])
    return ptr


def is_torch_sparse_tensor(value: Any) -> bool:
    r"""Whether :obj:`value` is a :class:`torch.sparse` tensor."""
    return isinstance(value, Tensor) and value.layout != torch.strided


def is_sparse_tensor(value: Any) -> bool:
    r"""Whether :obj:`value` is a :class:`torch_sparse.SparseTensor`."""
    from torch_geometric.typing import WITH_TORCH_SPARSE
    if not WITH_TORCH_SPARSE:
        return False
    from torch_geometric.typing import SparseTensor
    return isinstance(value, SparseTensor)


def is_sparse(value: Any) -> bool:
    r"""Whether :obj:`value` is either kind of sparse matrix."""
    return is_torch_sparse_tensor(value) or is_sparse_tensor(value)


def has_adj_t(data: Any) -> bool:
    r"""Whether an edge store of :obj:`data` holds an :obj:`adj_t`."""
    stores = getattr(data, 'edge_stores', None)
    return stores is not None and any('adj_t' in s for s in stores)


def check_adj_t(adj_t: Any, num_src_nodes: int, num_dst_nodes: int,
                name: str = 'adj_t') -> None:
    r"""Raises naming :obj:`name` unless :obj:`adj_t` is a sparse matrix of
    shape :obj:`[num_dst_nodes, num_src_nodes]`."""
    if is_sparse_tensor(adj_t):
        shape = tuple(adj_t.sparse_sizes())
    elif is_torch_sparse_tensor(adj_t):
        if adj_t.layout not in _TORCH_LAYOUTS:
            raise ValueError(f"'{name}' must be a sparse CSR, CSC or COO "
                             f"tensor (got layout {adj_t.layout})")
        if adj_t.sparse_dim() != 2:
            raise ValueError(f"'{name}' must be a sparse matrix with two "
                             f"sparse dimensions (got shape "
                             f"{list(adj_t.shape)})")
        shape = tuple(adj_t.shape[:2])
    else:
        raise TypeError(f"'{name}' must be a torch_sparse.SparseTensor or a "
                        f"torch.sparse CSR/CSC/COO tensor holding the "
                        f"transposed adjacency (got {type(adj_t).__name__})")
    if shape != (num_dst_nodes, num_src_nodes):
        raise ValueError(f"'{name}' must have shape [num_dst_nodes, "
                         f"num_src_nodes] = [{num_dst_nodes}, "
                         f"{num_src_nodes}] (it is the transposed adjacency; "
                         f"got {list(shape)})")


def adj_t_edge_index(adj_t: Any) -> Tuple[Tensor, bool]:
    r"""The edges of :obj:`adj_t` as a COO :obj:`edge_index` in storage order,
    and whether they are sorted by destination already (CSR layouts are)."""
    if is_sparse_tensor(adj_t):
        dst, src, _ = adj_t.coo()  # Row-major: sorted by destination.
        return torch.stack([src, dst]), True
    layout = adj_t.layout
    if layout in (torch.sparse_csr, torch.sparse_csc):
        # CSR compresses the destinations (rows of adj_t), CSC the sources.
        csr = layout == torch.sparse_csr
        ptr = adj_t.crow_indices() if csr else adj_t.ccol_indices()
        index = (adj_t.col_indices() if csr else adj_t.row_indices()).long()
        expanded = segment_ids(ptr.long().diff(), index.numel())
        pair = [index, expanded] if csr else [expanded, index]
        return torch.stack(pair), csr
    if not adj_t.is_coalesced():
        raise ValueError("'adj_t' is an uncoalesced sparse COO tensor; call "
                         "'adj_t.coalesce()' first")
    dst, src = adj_t.indices()
    return torch.stack([src, dst]), True


def edge_index_of(store: Any) -> Tensor:
    r"""The :obj:`edge_index` of an edge store (:obj:`None` if absent), or
    the edges of its :obj:`adj_t` in storage order (the edge ids)."""
    if 'adj_t' in store and is_sparse(store.adj_t):
        return adj_t_edge_index(store.adj_t)[0]
    return store.get('edge_index')


def adj_t_num_edges(adj_t: Any) -> int:
    r"""The number of edges (stored entries) of :obj:`adj_t`."""
    return int(adj_t.nnz()) if is_sparse_tensor(adj_t) else int(adj_t._nnz())


def adj_t_values(adj_t: Any) -> Optional[Tensor]:
    r"""The values of :obj:`adj_t` in storage order (may be :obj:`None`)."""
    if is_sparse_tensor(adj_t):
        return adj_t.storage.value()
    return adj_t.values()


def sampled_adj_t(like: Any, row: Tensor, col: Tensor,
                  value: Optional[Tensor], num_src_nodes: int,
                  num_dst_nodes: int) -> Any:
    r"""The :obj:`adj_t` of a sampled subgraph with edges :obj:`(row, col)` and
    values :obj:`value`, of the type and layout of :obj:`like`, as PyG's
    :func:`~torch_geometric.loader.utils.filter_data` builds it."""
    row, col = row.to(torch.int64), col.to(torch.int64)
    size = (num_dst_nodes, num_src_nodes)
    if is_sparse_tensor(like):
        from torch_geometric.typing import SparseTensor
        return SparseTensor(row=col, col=row, value=value, sparse_sizes=size,
                            is_sorted=False, trust_data=True)
    return _torch_sparse(like.layout, row, col, value, size)


def _torch_sparse(layout, row: Tensor, col: Tensor, value: Optional[Tensor],
                  size: Tuple[int, int]) -> Tensor:
    # Sorted by position without merging duplicate edges (a multigraph
    # keeps one entry per sampled edge, as a SparseTensor does).
    if value is None:
        value = torch.ones(row.numel(), device=row.device)
    num_dst, num_src = size
    if layout == torch.sparse_csc:
        key = row * max(num_dst, 1) + col
    else:
        key = col * max(num_src, 1) + row
    perm = torch.sort(key, stable=True)[1]
    row, col, value = row[perm], col[perm], value[perm]
    if layout == torch.sparse_csr:
        return torch.sparse_csr_tensor(index_to_ptr(col, num_dst), row, value,
                                       size + tuple(value.shape[1:]))
    if layout == torch.sparse_csc:
        return torch.sparse_csc_tensor(index_to_ptr(row, num_src), col, value,
                                       size + tuple(value.shape[1:]))
    key = key[perm]
    unique = key.numel() < 2 or bool((key[1:] != key[:-1]).all())
    return torch.sparse_coo_tensor(torch.stack([col, row]), value,
                                   size + tuple(value.shape[1:]),
                                   is_coalesced=unique)
