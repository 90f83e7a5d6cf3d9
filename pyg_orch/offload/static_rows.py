"""Rows computed once: when, how many, and in how much memory."""
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from pyg_orch.offload.aggregate_split import AGGREGATE, OUTPUT
from pyg_orch.offload.bottom_layer import BottomLayerComputer
from pyg_orch.offload.hetero_layer import HeteroBottomLayerComputer

Computer = Union[BottomLayerComputer, HeteroBottomLayerComputer]

#: The hot ratios tried for rows computed once, beside none: the CPU's speed no
#: longer bounds the hot set (see :doc:`/offload`).
STATIC_RATIOS = (0.25, 0.5, 0.7)
#: The largest share of the device's free memory one static table may take
#: (while a larger one replaces it, both are held).
TABLE_MEMORY_SHARE = 0.2
#: Vertices of highest in-degree the split is probed on.
PROBE_SIZE = 64


def _parts(computer: Computer) -> Sequence[BottomLayerComputer]:
    return getattr(computer, 'parts', None) or [computer]


def aggregates_only(computer: Computer) -> bool:
    r"""Whether the CPU computes weight-free aggregations only."""
    return {p.split for p in _parts(computer)} == {AGGREGATE}


def degree_probe(colptr: Tensor, num: int = PROBE_SIZE) -> Tensor:
    r"""The :obj:`num` vertices of highest in-degree."""
    deg = (colptr[1:] - colptr[:-1]).cpu()
    num = min(int(num), deg.numel())
    return torch.topk(deg, num, sorted=True).indices.to(torch.int64)


def hetero_degree_probe(csc_dict: Dict[Any, Any], node_types: Sequence[Any],
                        num: int = PROBE_SIZE) -> Dict[Any, Tensor]:
    r""":func:`degree_probe` per destination type."""
    out: Dict[Any, Tensor] = {}
    for et, csc in csc_dict.items():
        if et[-1] in node_types and et[-1] not in out:
            out[et[-1]] = degree_probe(csc.colptr, num)
    return out


def full_neighbors_reason(computer: Computer,
                          weighted: bool = False) -> Optional[str]:
    r"""Why hot rows must keep the fan-out, or :obj:`None`."""
    parts = _parts(computer)
    splits = sorted({p.split for p in parts} - {AGGREGATE})
    if OUTPUT in splits:
        return ("the CPU computes the first layer with its weights "
                "(split='output')")
    if splits:
        return (f"the first layer transforms the features before it "
                f"aggregates them (split {splits[0]!r})")
    modes = {p.bag_mode for p in parts}
    if modes != {'mean'}:
        return (f'the first layer\'s aggregation is not a plain mean of '
                f'the neighbors\' features (found: '
                f'{sorted(str(m) for m in modes)})')
    if weighted:
        return ('the loader samples neighbors by edge weight; the mean of '
                'all neighbors is not the expectation of such a sample')
    return None


def use_all_neighbors(computer: Computer) -> None:
    r"""Makes :obj:`computer` aggregate all in-neighbors."""
    for part in _parts(computer):
        part.num_neighbors = -1


def table_row_bytes(computer: Computer) -> int:
    r"""Bytes of one row of :obj:`computer`'s tables."""
    width = getattr(computer, 'width', None)
    if width:
        part = _parts(computer)[0]
        return int(width) * part.x.element_size()
    return int(computer.row_bytes)


def max_table_rows(row_bytes: int, device: Union[str, torch.device],
                   share: float = TABLE_MEMORY_SHARE) -> Optional[int]:
    r"""The most rows one table may hold on :obj:`device`."""
    device = torch.device(device)
    if device.type != 'cuda' or not torch.cuda.is_available():
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return int(share * free) // max(int(row_bytes), 1)


def cap_sizes(sizes: Sequence[int], ratios: Sequence[float],
              max_rows: Optional[int]) -> Tuple[list, list]:
    r"""The :obj:`sizes` and :obj:`ratios`, capped at :obj:`max_rows`."""
    if max_rows is None:
        return list(sizes), list(ratios)
    out_sizes, out_ratios = [], []
    for n, r in zip(sizes, ratios):
        capped = min(int(n), int(max_rows))
        if capped not in out_sizes:
            out_sizes.append(capped)
            out_ratios.append(r if capped == n else round(
                r * capped / max(int(n), 1), 6))
    return out_sizes, out_ratios
