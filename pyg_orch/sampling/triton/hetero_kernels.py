r"""Triton kernels of the fused heterogeneous sampling path."""
import triton
import triton.language as tl

from pyg_orch.sampling.triton.kernels import _random_below, floyd_picks

#: Columns of the per-hop edge type table of :func:`hetero_sample_kernel`.
TABLE_COLUMNS = 6


@triton.jit
def hetero_sample_kernel(
    colptr_ptr,  # All edge types' colptrs, back to back.
    row_ptr,  # Global source ids.
    eid_ptr,  # Edge ids within each edge type.
    node_ptr,  # The node buffer: one region per node type (global ids).
    state_ptr,  # int64 [3, T]: nodes so far, frontier start, count.
    seed_ptr,
    table_ptr,  # int64 [E, 6]: slot start, fan-out, dst type, region,
    #             colptr shift (colptr base - dst offset), frontier cap.
    out_src_ptr,
    out_eid_ptr,
    out_dst_ptr,
    hot_ptr,
    num_types,
    KMAX: tl.constexpr,
    KPAD: tl.constexpr,
    REPLACE: tl.constexpr,
    PRUNE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    r"""Samples every edge type of a hop: program :obj:`(b, e)` samples edge
    type :obj:`e` for frontier block :obj:`b`."""
    pid = tl.program_id(0)
    tab = table_ptr + tl.program_id(1) * 6
    slot0 = tl.load(tab)
    K = tl.load(tab + 1)
    dt = tl.load(tab + 2)
    region = tl.load(tab + 3)
    shift = tl.load(tab + 4)
    cap = tl.load(tab + 5)
    i = (pid * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    fstart = tl.load(state_ptr + num_types + dt)
    fcount = tl.load(state_ptr + 2 * num_types + dt)
    seed = tl.load(seed_ptr)
    in_cap = i < cap
    valid = in_cap & (i < fcount)
    v = tl.load(node_ptr + region + fstart + i, mask=valid, other=0)
    start = tl.load(colptr_ptr + shift + v, mask=valid, other=0).to(tl.int64)
    end = tl.load(colptr_ptr + shift + v + 1, mask=valid,
                  other=0).to(tl.int64)
    if PRUNE:
        hot = tl.load(hot_ptr + v, mask=valid, other=0) != 0
        end = tl.where(hot, start, end)
    deg = end - start
    col = tl.arange(0, KPAD).to(tl.int64)
    base = slot0 + i * K  # Distinct Philox offsets per slot.

    if REPLACE:
        cnt = tl.where(deg > 0, K, 0)
        picks = _random_below(seed, base[:, None] + col[None, :],
                              deg[:, None])
    else:
        cnt = tl.minimum(deg, K)
        picks = floyd_picks(seed, base, deg, K, col, KMAX, BLOCK, KPAD)

    ok = valid[:, None] & (col[None, :] < cnt[:, None])
    pos = start[:, None] + picks
    src = tl.load(row_ptr + pos, mask=ok, other=-1).to(tl.int64)
    eid = tl.load(eid_ptr + pos, mask=ok, other=-1).to(tl.int64)
    src = tl.where(ok, src, -1)
    dst = tl.zeros((BLOCK, KPAD), tl.int64) + (fstart + i)[:, None]
    out = base[:, None] + col[None, :]
    store = in_cap[:, None] & (col[None, :] < K)
    tl.store(out_src_ptr + out, src, mask=store)
    tl.store(out_eid_ptr + out, eid, mask=store)
    tl.store(out_dst_ptr + out, dst, mask=store)


@triton.jit
def _node_type(v, type_ptr, T: tl.constexpr):
    # The node type of global ids `v`: offsets are row 0 of `type_ptr`.
    t = tl.zeros(v.shape, tl.int64)
    for s in tl.static_range(1, T):
        t += (v >= tl.load(type_ptr + s)).to(tl.int64)
    return t


@triton.jit(do_not_specialize=['size'])
def hetero_assign_kernel(src_ptr, is_new_ptr, rank_ptr, lo_ptr, map_ptr,
                         claim_ptr, node_ptr, state_ptr, type_ptr, size,
                         T: tl.constexpr, BLOCK: tl.constexpr):
    r"""Gives new nodes local ids of their type by first appearance;
    :obj:`type_ptr`: offsets (row 0) and regions (row 1)."""
    p = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = p < size
    new = tl.load(is_new_ptr + p, mask=m, other=0) != 0
    v = tl.load(src_ptr + p, mask=new, other=0)
    t = _node_type(v, type_ptr, T)
    rank = tl.load(rank_ptr + p + 1, mask=new, other=1)
    lo = tl.load(lo_ptr + t, mask=new, other=0)
    local = tl.load(state_ptr + t, mask=new, other=0) + rank - lo - 1
    region = tl.load(type_ptr + T + t, mask=new, other=0)
    tl.store(map_ptr + v, local.to(tl.int32), mask=new)
    tl.store(node_ptr + region + local, v, mask=new)
    tl.store(claim_ptr + v, tl.full((BLOCK, ), 2147483647, tl.int32),
             mask=new)


@triton.jit(do_not_specialize=['size'])
def hetero_compact_kernel(src_ptr, rank_ptr, seg_ptr, shift_ptr, type_ptr,
                          row_ptr, dst_ptr, eid_ptr, out_ptr, total_ptr,
                          size, BLOCK: tl.constexpr):
    r"""Moves filled slots to their edge type's outputs."""
    p = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = p < size
    ok = m & (tl.load(src_ptr + p, mask=m, other=-1) >= 0)
    seg = tl.load(seg_ptr + p, mask=ok, other=0)
    q = tl.load(shift_ptr + seg, mask=ok, other=0) + tl.load(
        rank_ptr + p + 1, mask=ok, other=1) - 1
    o = tl.load(type_ptr + 2 * seg, mask=ok, other=0)
    n = tl.load(type_ptr + 2 * seg + 1, mask=ok, other=0)
    total = tl.load(total_ptr)
    tl.store(out_ptr + o + q, tl.load(row_ptr + p, mask=ok), mask=ok)
    tl.store(out_ptr + o + q + n, tl.load(dst_ptr + p, mask=ok), mask=ok)
    tl.store(out_ptr + 2 * total + q, tl.load(eid_ptr + p, mask=ok),
             mask=ok)


@triton.jit
def hetero_advance_kernel(lohi_ptr, state_ptr, news_ptr, T: tl.constexpr,
                          TP: tl.constexpr):
    r"""Ends a hop: :obj:`state = [nodes + news, nodes, news]`."""
    t = tl.arange(0, TP)
    m = t < T
    new = tl.load(lohi_ptr + T + t, mask=m, other=0) - tl.load(
        lohi_ptr + t, mask=m, other=0)
    nodes = tl.load(state_ptr + t, mask=m, other=0)
    tl.store(news_ptr + t, new, mask=m)
    tl.store(state_ptr + T + t, nodes, mask=m)
    tl.store(state_ptr + 2 * T + t, new, mask=m)
    tl.store(state_ptr + t, nodes + new, mask=m)


@triton.jit(do_not_specialize=['num_segments'])
def hetero_counts_kernel(rank_ptr, start_ptr, end_ptr, before_ptr, shift_ptr,
                         type_out_ptr, total_ptr, state_ptr, news_ptr,
                         counts_ptr, num_segments, T: tl.constexpr,
                         HT: tl.constexpr, SP: tl.constexpr,
                         TP: tl.constexpr, HTP: tl.constexpr):
    r"""The batch's counts and each segment's output offsets."""
    s = tl.arange(0, SP)
    ms = s < num_segments
    lo = tl.load(rank_ptr + tl.load(start_ptr + s, mask=ms, other=0),
                 mask=ms, other=0)
    cnt = tl.load(rank_ptr + tl.load(end_ptr + s, mask=ms, other=0),
                  mask=ms, other=0) - lo
    pair = s[:, None] * SP + s[None, :]
    before = tl.sum(tl.load(before_ptr + pair) * cnt[None, :], axis=1)
    tl.store(shift_ptr + s, before - lo, mask=ms)
    type_before = tl.sum(
        tl.load(before_ptr + SP * SP + pair) * cnt[None, :], axis=1)
    same_type = tl.sum(
        tl.load(before_ptr + 2 * SP * SP + pair) * cnt[None, :], axis=1)
    tl.store(type_out_ptr + 2 * s, type_before, mask=ms)
    tl.store(type_out_ptr + 2 * s + 1, same_type, mask=ms)
    tl.store(total_ptr, tl.sum(cnt, axis=0))
    tl.store(counts_ptr + T + HT + s, cnt, mask=ms)
    t = tl.arange(0, TP)
    tl.store(counts_ptr + t, tl.load(state_ptr + t, mask=t < T), mask=t < T)
    if HT > 0:
        h = tl.arange(0, HTP)
        tl.store(counts_ptr + T + h, tl.load(news_ptr + h, mask=h < HT),
                 mask=h < HT)


@triton.jit(do_not_specialize=['capacity'])
def hetero_reset_kernel(node_ptr, map_ptr, state_ptr, type_ptr, packed_ptr,
                        capacity, T: tl.constexpr, BLOCK: tl.constexpr):
    r"""Clears the relabel map; packs local ids by node type."""
    p = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    t = tl.zeros(p.shape, tl.int64)
    for s in tl.static_range(1, T):
        t += (p >= tl.load(type_ptr + T + s)).to(tl.int64)
    region = tl.load(type_ptr + T + t)
    m = (p < capacity) & (p - region < tl.load(state_ptr + t))
    v = tl.load(node_ptr + p, mask=m, other=0)
    tl.store(map_ptr + v, tl.full((BLOCK, ), -1, tl.int32), mask=m)
    before = tl.zeros(p.shape, tl.int64)  # Nodes of the types before t.
    for s in tl.static_range(1, T):
        before += tl.where(t >= s, tl.load(state_ptr + s - 1), 0)
    tl.store(packed_ptr + before + p - region, v - tl.load(type_ptr + t),
             mask=m)
