"""Multi-hop sampling on the GPU with fused Triton kernels and no host
synchronization until the batch is complete.

Every hop writes into buffers sized by an upper bound (frontier size times
fan-out), so no kernel waits for the host to learn a size; the one
synchronization per batch reads the node and edge counts at the end. The
output equals :func:`pyg_orch.sampling.sample_multi_hop` (same hop order,
same edge order); only the random draws differ.
"""
from typing import List, Optional

import torch
from torch import Tensor

from pyg_orch.sampling.multi_hop import MultiHopOutput
from pyg_orch.sampling.relabel import DenseBufferPool
from pyg_orch.sampling.topology import CSCTopology

_INT32_MAX = 2**31 - 1
_FLAT_BLOCK = 1024


def triton_available() -> bool:
    r"""Whether Triton can be imported (it is only needed on GPUs)."""
    try:
        import triton  # noqa: F401
    except Exception:
        return False
    return True


def supports(topology, num_neighbors: dict, disjoint: bool, induced: bool,
             max_fanout: int = 64) -> bool:
    r"""Whether the fused path handles this configuration; others use the
    vectorized PyTorch path."""
    if topology.is_hetero or topology.is_temporal or topology.is_weighted:
        return False
    if disjoint or induced:
        return False
    fanouts = num_neighbors[None]
    if any(k < 0 or k > max_fanout for k in fanouts):
        return False
    n = topology.num_nodes[None]
    return n < _INT32_MAX and topology.num_edges < 2**40


def fused_sample_multi_hop(
    topo: CSCTopology,
    num_nodes: int,
    fanouts: List[int],
    seeds: Tensor,
    replace: bool,
    generator: Optional[torch.Generator],
    buffers: DenseBufferPool,
    device: torch.device,
    hot_nodes: Optional[Tensor] = None,
) -> MultiHopOutput:
    r"""Samples :obj:`len(fanouts)` hops from :obj:`seeds` of a homogeneous
    graph with the Triton kernels. The topology may live on the GPU or in
    pinned host memory (read zero-copy). Nodes flagged in the boolean mask
    :obj:`hot_nodes` are not expanded in the last hop."""
    from pyg_orch.gpu import triton_kernels as tk

    seeds = seeds.to(device, torch.int64)
    B = seeds.numel()
    caps = [B]
    for k in fanouts:
        caps.append(min(caps[-1] * max(k, 0), num_nodes))
    node_buf = torch.empty(B + sum(caps[1:]), dtype=torch.int64,
                           device=device)
    node_buf[:B] = seeds
    map_buf = buffers.get(None, num_nodes, device, fill=-1)
    claim_buf = buffers.get(None, num_nodes, device, fill=_INT32_MAX)
    if map_buf.dtype != torch.int32:
        raise RuntimeError('the fused sampler needs int32 relabel buffers')
    map_buf.scatter_reduce_(
        0, seeds, torch.arange(B, dtype=torch.int32, device=device), 'amin',
        include_self=False)
    # Device-side state: [num_nodes so far, frontier start, frontier count].
    state = torch.tensor([B, 0, B], dtype=torch.int64, device=device)
    hop_seeds = torch.randint(_INT32_MAX, (max(len(fanouts), 1), ),
                              dtype=torch.int64, device=device,
                              generator=generator)
    colptr, row = _kernel_view(topo.colptr), _kernel_view(topo.row)
    eid = _kernel_view(topo.edge_id) if topo.edge_id is not None else row

    outs, new_counts, edge_counts = [], [], []
    try:
        for h, k in enumerate(fanouts):
            F = caps[h]
            if k == 0 or F == 0:
                state[1:2].copy_(state[0:1])
                state[2:3].zero_()
                new_counts.append(state.new_zeros(1))
                edge_counts.append(state.new_zeros(1))
                continue
            M = F * k
            out_src = torch.empty(M, dtype=torch.int64, device=device)
            out_eid = torch.empty_like(out_src)
            out_dst = torch.empty_like(out_src)
            kpad = max(tk.next_power_of_2(k), 2)
            block = max(2048 // kpad, 16)
            prune = hot_nodes is not None and h == len(fanouts) - 1
            tk.sample_hop_kernel[(triton_cdiv(F, block), )](
                colptr, row, eid, node_buf, state, hop_seeds[h:h + 1],
                out_src, out_eid, out_dst,
                hot_nodes if prune else out_src, F, K=k, KPAD=kpad,
                REPLACE=bool(replace), HAS_EID=topo.edge_id is not None,
                PRUNE=prune, BLOCK=block)
            grid = (triton_cdiv(M, _FLAT_BLOCK), )
            is_new = torch.empty(M, dtype=torch.int32, device=device)
            tk.claim_kernel[grid](out_src, map_buf, claim_buf, M,
                                  BLOCK=_FLAT_BLOCK)
            tk.mark_kernel[grid](out_src, map_buf, claim_buf, is_new, M,
                                 BLOCK=_FLAT_BLOCK)
            rank = torch.cumsum(is_new, 0)
            tk.assign_kernel[grid](out_src, is_new, rank, map_buf, claim_buf,
                                   node_buf, state, M, BLOCK=_FLAT_BLOCK)
            out_row = torch.empty_like(out_src)
            tk.resolve_kernel[grid](out_src, map_buf, out_row, M,
                                    BLOCK=_FLAT_BLOCK)
            total = rank[-1:]
            state[1:2].copy_(state[0:1])
            state[2:3].copy_(total)
            state[0:1].add_(total)
            new_counts.append(total)
            edge_counts.append((out_src >= 0).sum().view(1))
            outs.append((out_src, out_row, out_dst, out_eid))

        # The one synchronization of the batch:
        counts = torch.cat([state[0:1]] + new_counts + edge_counts).tolist()
    finally:
        cap = node_buf.numel()
        tk.reset_kernel[(triton_cdiv(cap, _FLAT_BLOCK), )](
            node_buf, map_buf, state, cap, BLOCK=_FLAT_BLOCK)

    n_total = counts[0]
    num_hops = len(fanouts)
    num_sampled_nodes = [B] + counts[1:1 + num_hops]
    num_sampled_edges = counts[1 + num_hops:]
    node = node_buf[:n_total]
    if outs:
        src = torch.cat([o[0] for o in outs])
        keep = (src >= 0).nonzero().view(-1)
        row_local = torch.cat([o[1] for o in outs]).index_select(0, keep)
        col_local = torch.cat([o[2] for o in outs]).index_select(0, keep)
        edge = torch.cat([o[3] for o in outs]).index_select(0, keep)
    else:
        row_local = col_local = edge = node.new_empty(0)
    return MultiHopOutput({None: node}, {None: row_local}, {None: col_local},
                          {None: edge}, None, {None: num_sampled_nodes},
                          {None: num_sampled_edges})


def triton_cdiv(a: int, b: int) -> int:
    return max((a + b - 1) // b, 1)


class _PinnedPointer:
    r"""Presents a pinned host tensor to Triton as a device pointer: under
    unified virtual addressing its host address is valid on the GPU."""
    def __init__(self, tensor: Tensor):
        self.tensor = tensor
        self.dtype = tensor.dtype

    def data_ptr(self) -> int:
        return self.tensor.data_ptr()


def _kernel_view(t: Tensor):
    if t.is_cuda or not t.is_pinned():
        return t
    return _PinnedPointer(t)
