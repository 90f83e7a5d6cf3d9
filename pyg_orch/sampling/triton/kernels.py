"""Triton kernels of the fused GPU sampling path (imports Triton)."""
import triton
import triton.language as tl


@triton.jit
def _random_below(seed, offset, bound):
    # 64 random bits from Philox, reduced modulo `bound` (bias < bound/2^64).
    r0, r1, _, _ = tl.randint4x(seed, offset)
    r = (r0.to(tl.uint64) << 32) | r1.to(tl.uint64)
    return (r % tl.maximum(bound, 1).to(tl.uint64)).to(tl.int64)


@triton.jit
def floyd_picks(seed, base, deg, K, col, KLOOP: tl.constexpr,
                BLOCK: tl.constexpr, KPAD: tl.constexpr):
    r"""Floyd's :obj:`K` distinct picks among :obj:`deg` per row (all where
    :obj:`deg <= K`); draw :obj:`t` uses Philox offset :obj:`base + t`."""
    floyd = tl.full((BLOCK, KPAD), -1, tl.int64)
    for t in tl.static_range(KLOOP):
        j = deg - K + t
        r = _random_below(seed, base + t, j + 1)
        prev = tl.where(col[None, :] < t, floyd, -1)
        dup = tl.sum((prev == r[:, None]).to(tl.int32), axis=1) > 0
        r = tl.where(dup, j, r)
        floyd = tl.where(col[None, :] == t, r[:, None], floyd)
    identity = tl.zeros((BLOCK, KPAD), tl.int64) + col[None, :]
    return tl.where((deg > K)[:, None], floyd, identity)


@triton.jit
def draw_picks(seed, i, deg, K: tl.constexpr, KPAD: tl.constexpr,
               REPLACE: tl.constexpr, BLOCK: tl.constexpr):
    r"""Offsets into each row's :obj:`deg` neighbors and how many count;
    draw :obj:`t` of row :obj:`i` uses Philox offset :obj:`i * KPAD + t`."""
    col = tl.arange(0, KPAD)
    if REPLACE:
        cnt = tl.where(deg > 0, K, 0)
        offs = i.to(tl.int64)[:, None] * KPAD + col[None, :]
        picks = _random_below(seed, offs, deg[:, None])
    else:
        cnt = tl.minimum(deg, K)
        picks = floyd_picks(seed, i.to(tl.int64) * KPAD, deg, K, col, K,
                            BLOCK, KPAD)
    return picks, cnt


@triton.jit
def _sharded_read(row_ptr, eid_ptr, shard_ptr, rep_start_ptr, rep_row_ptr,
                  rep_eid_ptr, reads_ptr, placed_ptr, v, valid, picks, pos,
                  ok, SHARDS: tl.constexpr, HAS_EID: tl.constexpr,
                  REPLICA: tl.constexpr, COUNT: tl.constexpr,
                  PLACED: tl.constexpr):
    # `shard_ptr`: [rank, 0..SHARDS edge bounds, row pointers, eid pointers].
    # The pointer types come from `row_ptr` / `eid_ptr` (the own shard).
    # With PLACED (lists split by a partition), the bounds are placed
    # positions and `placed_ptr` holds where each destination's list starts.
    at = pos
    if PLACED:
        ps = tl.load(placed_ptr + v, mask=valid, other=0).to(tl.int64)
        at = ps[:, None] + picks
    sid = tl.zeros(at.shape, tl.int32)
    for s in tl.static_range(1, SHARDS):
        sid += (at >= tl.load(shard_ptr + 1 + s)).to(tl.int32)
    base = tl.load(shard_ptr + 1 + sid, mask=ok, other=0)
    local = at - base
    remote = ok
    if REPLICA:
        rs = tl.load(rep_start_ptr + v, mask=valid, other=-1).to(tl.int64)
        is_rep = ok & (rs >= 0)[:, None]
        remote = ok & ~is_rep
        rpos = rs[:, None] + picks
    table = shard_ptr + 2 + SHARDS
    addr = tl.load(table + sid, mask=remote, other=0)
    rptr = addr.to(tl.pointer_type(row_ptr.dtype.element_ty))
    src = tl.load(rptr + local, mask=remote, other=-1).to(tl.int64)
    if REPLICA:
        rsrc = tl.load(rep_row_ptr + rpos, mask=is_rep, other=-1)
        src = tl.where(is_rep, rsrc.to(tl.int64), src)
    if HAS_EID:
        addr = tl.load(table + SHARDS + sid, mask=remote, other=0)
        eptr = addr.to(tl.pointer_type(eid_ptr.dtype.element_ty))
        eid = tl.load(eptr + local, mask=remote, other=-1).to(tl.int64)
        if REPLICA:
            reid = tl.load(rep_eid_ptr + rpos, mask=is_rep, other=-1)
            eid = tl.where(is_rep, reid.to(tl.int64), eid)
    else:
        eid = pos
    if COUNT:
        rank = tl.load(shard_ptr)
        own = remote & (sid == rank)
        tl.atomic_add(reads_ptr, tl.sum(tl.sum(own.to(tl.int64), 1), 0))
        if REPLICA:
            tl.atomic_add(reads_ptr + 1,
                          tl.sum(tl.sum(is_rep.to(tl.int64), 1), 0))
        peer = remote & (sid != rank)
        tl.atomic_add(reads_ptr + 2, tl.sum(tl.sum(peer.to(tl.int64), 1), 0))
    return src, eid


@triton.jit(do_not_specialize=['capacity'])
def sample_hop_kernel(
    colptr_ptr,
    row_ptr,
    eid_ptr,
    node_ptr,
    state_ptr,  # int64 [3]: num_nodes, frontier start, frontier count.
    seed_ptr,
    out_src_ptr,
    out_eid_ptr,
    out_dst_ptr,
    hot_ptr,
    shard_ptr,  # int64 [2 + 3 * SHARDS]: `pyg_orch.core.ShardLayout.table`.
    rep_start_ptr,
    rep_row_ptr,
    rep_eid_ptr,
    reads_ptr,
    placed_ptr,
    capacity,
    K: tl.constexpr,
    KPAD: tl.constexpr,
    REPLACE: tl.constexpr,
    HAS_EID: tl.constexpr,
    PRUNE: tl.constexpr,
    BLOCK: tl.constexpr,
    SHARDS: tl.constexpr = 0,
    REPLICA: tl.constexpr = False,
    COUNT: tl.constexpr = False,
    PLACED: tl.constexpr = False,
):
    r"""Samples up to :obj:`K` in-neighbors per frontier node into slots
    :obj:`[i * K, (i + 1) * K)` (source :obj:`-1` where empty)."""
    pid = tl.program_id(0)
    i = pid * BLOCK + tl.arange(0, BLOCK)
    fstart = tl.load(state_ptr + 1)
    fcount = tl.load(state_ptr + 2)
    seed = tl.load(seed_ptr)
    in_cap = i < capacity
    valid = i < fcount
    v = tl.load(node_ptr + fstart + i, mask=valid, other=0)
    start = tl.load(colptr_ptr + v, mask=valid, other=0).to(tl.int64)
    end = tl.load(colptr_ptr + v + 1, mask=valid, other=0).to(tl.int64)
    if PRUNE:
        hot = tl.load(hot_ptr + v, mask=valid, other=0) != 0
        end = tl.where(hot, start, end)
    deg = end - start
    col = tl.arange(0, KPAD)
    picks, cnt = draw_picks(seed, i, deg, K, KPAD, REPLACE, BLOCK)
    ok = valid[:, None] & (col[None, :] < cnt[:, None])
    pos = start[:, None] + picks
    if SHARDS > 0:
        src, eid = _sharded_read(row_ptr, eid_ptr, shard_ptr, rep_start_ptr,
                                 rep_row_ptr, rep_eid_ptr, reads_ptr,
                                 placed_ptr, v, valid, picks, pos, ok,
                                 SHARDS, HAS_EID, REPLICA, COUNT, PLACED)
    else:
        src = tl.load(row_ptr + pos, mask=ok, other=-1).to(tl.int64)
        if HAS_EID:
            eid = tl.load(eid_ptr + pos, mask=ok, other=-1).to(tl.int64)
        else:
            eid = pos
    src = tl.where(ok, src, -1)
    dst = tl.zeros((BLOCK, KPAD), tl.int64) + (fstart + i)[:, None]
    out = i.to(tl.int64)[:, None] * K + col[None, :]
    store = in_cap[:, None] & (col[None, :] < K)
    tl.store(out_src_ptr + out, src, mask=store)
    tl.store(out_eid_ptr + out, eid, mask=store)
    tl.store(out_dst_ptr + out, dst, mask=store)


@triton.jit(do_not_specialize=['n'])
def draw_neighbors_kernel(
    colptr_ptr,
    node_ptr,
    time_ptr,
    bound_ptr,
    seed_ptr,
    out_ptr,
    n,
    K: tl.constexpr,
    KPAD: tl.constexpr,
    REPLACE: tl.constexpr,
    TEMPORAL: tl.constexpr,
    LAST: tl.constexpr,
    BLOCK: tl.constexpr,
):
    r"""CSC positions of up to :obj:`K` in-neighbors of :obj:`n` nodes into
    slots :obj:`[i * K, (i + 1) * K)` (:obj:`-1` where fewer)."""
    pid = tl.program_id(0)
    i = pid * BLOCK + tl.arange(0, BLOCK)
    valid = i < n
    seed = tl.load(seed_ptr)
    v = tl.load(node_ptr + i, mask=valid, other=0)
    start = tl.load(colptr_ptr + v, mask=valid, other=0).to(tl.int64)
    end = tl.load(colptr_ptr + v + 1, mask=valid, other=0).to(tl.int64)
    if TEMPORAL:
        bound = tl.load(bound_ptr + i, mask=valid, other=0)
        lo, hi = start, end
        active = lo < hi
        while tl.max(active.to(tl.int32), axis=0) > 0:  # Until all are done.
            mid = (lo + hi) // 2
            t = tl.load(time_ptr + mid, mask=active, other=0)
            right = active & (t <= bound)
            lo = tl.where(right, mid + 1, lo)
            hi = tl.where(active & ~right, mid, hi)
            active = lo < hi
        end = lo
        if LAST:
            start = tl.maximum(start, end - K)
    deg = end - start
    col = tl.arange(0, KPAD)
    picks, cnt = draw_picks(seed, i, deg, K, KPAD, REPLACE, BLOCK)
    ok = valid[:, None] & (col[None, :] < cnt[:, None])
    pos = tl.where(ok, start[:, None] + picks, -1)
    out = i.to(tl.int64)[:, None] * K + col[None, :]
    tl.store(out_ptr + out, pos, mask=valid[:, None] & (col[None, :] < K))


@triton.jit
def _hash_slot(key, mask_bits):
    h = (key * 2654435761) ^ (key >> 29)
    return h & mask_bits


@triton.jit(do_not_specialize=['n', 'mask_bits'])
def hash_slots_kernel(key_ptr, table_ptr, slot_ptr, n, mask_bits,
                      INSERT: tl.constexpr, BLOCK: tl.constexpr):
    r"""The slot of every key in an open-addressing table (:obj:`-1`:
    empty), inserting absent keys with :obj:`INSERT`."""
    p = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = p < n
    key = tl.load(key_ptr + p, mask=valid, other=-1)
    h = _hash_slot(key, mask_bits)
    slot = tl.full((BLOCK, ), -1, tl.int64)
    active = valid
    park = mask_bits + 1
    while tl.max(active.to(tl.int32), axis=0) > 0:
        at = tl.where(active, h, park)
        if INSERT:
            cur = tl.atomic_cas(table_ptr + at,
                                tl.where(active, -1, -2).to(tl.int64),
                                tl.where(active, key, -2))
        else:
            cur = tl.load(table_ptr + at, mask=active, other=-2)
        found = active & ((cur == key) | (cur == -1))
        if INSERT:
            slot = tl.where(found, h, slot)
        else:
            slot = tl.where(found & (cur == key), h, slot)
        active = active & ~found
        h = (h + 1) & mask_bits
    tl.store(slot_ptr + p, slot, mask=valid)


@triton.jit(do_not_specialize=['n'])
def hash_claim_kernel(slot_ptr, local_ptr, first_ptr, n,
                      BLOCK: tl.constexpr):
    r"""Every key without a local id yet records its first position."""
    p = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = p < n
    slot = tl.load(slot_ptr + p, mask=m, other=0)
    local = tl.load(local_ptr + slot, mask=m, other=0)
    tl.atomic_min(first_ptr + slot, p.to(tl.int64), mask=m & (local < 0))


@triton.jit(do_not_specialize=['n'])
def hash_mark_kernel(slot_ptr, local_ptr, first_ptr, is_new_ptr, n,
                     BLOCK: tl.constexpr):
    p = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = p < n
    slot = tl.load(slot_ptr + p, mask=m, other=0)
    local = tl.load(local_ptr + slot, mask=m, other=0)
    first = tl.load(first_ptr + slot, mask=m, other=-1)
    new = m & (local < 0) & (first == p)
    tl.store(is_new_ptr + p, new.to(tl.int64), mask=m)


@triton.jit(do_not_specialize=['n', 'base'])
def hash_assign_kernel(key_ptr, slot_ptr, is_new_ptr, rank_ptr, local_ptr,
                       first_ptr, new_key_ptr, n, base,
                       BLOCK: tl.constexpr):
    r"""New keys get local ids :obj:`base + rank` by first appearance."""
    p = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = p < n
    new = tl.load(is_new_ptr + p, mask=m, other=0) != 0
    slot = tl.load(slot_ptr + p, mask=new, other=0)
    key = tl.load(key_ptr + p, mask=new, other=0)
    rank = tl.load(rank_ptr + p, mask=new, other=1) - 1
    tl.store(local_ptr + slot, base + rank, mask=new)
    tl.store(new_key_ptr + rank, key, mask=new)
    tl.store(first_ptr + slot, tl.full((BLOCK, ), 9223372036854775807,
                                       tl.int64), mask=new)


@triton.jit(do_not_specialize=['size'])
def claim_kernel(src_ptr, map_ptr, claim_ptr, size, BLOCK: tl.constexpr):
    r"""Every unseen node records the first slot it appears in."""
    p = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = p < size
    v = tl.load(src_ptr + p, mask=m, other=-1)
    ok = m & (v >= 0)
    seen = tl.load(map_ptr + v, mask=ok, other=0)
    tl.atomic_min(claim_ptr + v, p.to(tl.int32), mask=ok & (seen < 0))


@triton.jit(do_not_specialize=['size'])
def seed_assign_kernel(seed_ptr, node_ptr, map_ptr, claim_ptr, size,
                       BLOCK: tl.constexpr):
    r"""Lists the seeds; a seed's local id is its first position."""
    p = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = p < size
    v = tl.load(seed_ptr + p, mask=m, other=0)
    tl.store(node_ptr + p, v, mask=m)
    first = tl.load(claim_ptr + v, mask=m, other=-1)
    win = m & (first == p)
    tl.store(map_ptr + v, p.to(tl.int32), mask=win)
    tl.store(claim_ptr + v, tl.full((BLOCK, ), 2147483647, tl.int32),
             mask=win)


@triton.jit(do_not_specialize=['size'])
def mark_kernel(src_ptr, map_ptr, claim_ptr, is_new_ptr, count_ptr, size,
                COUNT: tl.constexpr, BLOCK: tl.constexpr):
    r"""Flags the slots holding a node's first appearance."""
    pid = tl.program_id(0)
    p = pid * BLOCK + tl.arange(0, BLOCK)
    m = p < size
    v = tl.load(src_ptr + p, mask=m, other=-1)
    ok = m & (v >= 0)
    seen = tl.load(map_ptr + v, mask=ok, other=0)
    first = tl.load(claim_ptr + v, mask=ok, other=-1)
    new = ok & (seen < 0) & (first == p)
    tl.store(is_new_ptr + p, new.to(is_new_ptr.dtype.element_ty), mask=m)
    if COUNT:
        tl.store(count_ptr + pid, tl.sum(new.to(tl.int32), axis=0))


@triton.jit
def _blocks_before(count_ptr, pid, BLOCK: tl.constexpr):
    # The sum of the block counts of programs [0, pid).
    total = tl.zeros((BLOCK, ), tl.int64)
    c0 = 0
    while c0 < pid:  # Not `range`: the interpreter cannot run it.
        c = c0 + tl.arange(0, BLOCK)
        total += tl.load(count_ptr + c, mask=c < pid, other=0).to(tl.int64)
        c0 += BLOCK
    return tl.sum(total, axis=0)


@triton.jit(do_not_specialize=['size'])
def assign_block_kernel(src_ptr, is_new_ptr, count_ptr, map_ptr, claim_ptr,
                        node_ptr, state_ptr, size, BLOCK: tl.constexpr):
    r"""Gives new nodes local ids in order of first appearance."""
    pid = tl.program_id(0)
    p = pid * BLOCK + tl.arange(0, BLOCK)
    m = p < size
    new = tl.load(is_new_ptr + p, mask=m, other=0) != 0
    before = _blocks_before(count_ptr, pid, BLOCK)
    rank = before + tl.cumsum(new.to(tl.int32), axis=0).to(tl.int64)
    v = tl.load(src_ptr + p, mask=new, other=0)
    local = tl.load(state_ptr) + rank - 1
    tl.store(map_ptr + v, local.to(tl.int32), mask=new)
    tl.store(node_ptr + local, v, mask=new)
    tl.store(claim_ptr + v, tl.full((BLOCK, ), 2147483647, tl.int32),
             mask=new)


@triton.jit(do_not_specialize=['num_blocks'])
def advance_blocks_kernel(state_ptr, count_ptr, num_blocks, news_ptr,
                          BLOCK: tl.constexpr):
    r"""Ends a hop: :obj:`state = [n + new, n, new]`."""
    new = _blocks_before(count_ptr, num_blocks, BLOCK)
    n = tl.load(state_ptr)
    tl.store(state_ptr, n + new)
    tl.store(state_ptr + 1, n)
    tl.store(state_ptr + 2, new)
    tl.store(news_ptr, new)


@triton.jit
def finish_counts_kernel(state_ptr, news_ptr, rank_ptr, offset_ptr,
                         counts_ptr, H: tl.constexpr, HPAD: tl.constexpr):
    r"""The counts: :obj:`[nodes, new nodes per hop, edges per hop]`."""
    h = tl.arange(0, HPAD)
    m = h < H
    tl.store(counts_ptr, tl.load(state_ptr))
    tl.store(counts_ptr + 1 + h, tl.load(news_ptr + h, mask=m), mask=m)
    a = tl.load(offset_ptr + h, mask=m, other=0)
    b = tl.load(offset_ptr + h + 1, mask=m, other=0)
    edges = (tl.load(rank_ptr + b, mask=m, other=0) -
             tl.load(rank_ptr + a, mask=m, other=0)).to(tl.int64)
    tl.store(counts_ptr + 1 + H + h, edges, mask=m)


@triton.jit(do_not_specialize=['size'])
def resolve_kernel(src_ptr, map_ptr, out_ptr, size, BLOCK: tl.constexpr):
    p = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = p < size
    v = tl.load(src_ptr + p, mask=m, other=-1)
    ok = m & (v >= 0)
    local = tl.load(map_ptr + v, mask=ok, other=-1).to(tl.int64)
    tl.store(out_ptr + p, tl.where(ok, local, -1), mask=m)


@triton.jit(do_not_specialize=['capacity'])
def reset_kernel(node_ptr, map_ptr, state_ptr, capacity,
                 BLOCK: tl.constexpr):
    p = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = (p < capacity) & (p < tl.load(state_ptr))
    v = tl.load(node_ptr + p, mask=m, other=0)
    tl.store(map_ptr + v, tl.full((BLOCK, ), -1, tl.int32), mask=m)


def next_power_of_2(x: int) -> int:
    return triton.next_power_of_2(x)


# Sizes that change from batch to batch are not specialized on: Triton
# compiles a kernel per "divisible by 16" / "equal to 1" class of every
# integer argument, and a compile in the middle of training (a cold cache on
# a fresh machine) stalls the batch that meets a new class.
@triton.jit(do_not_specialize=['num_rows', 'num_iters'])
def gather_rows_kernel(
    index_ptr,
    slot_ptr,
    cache_ptr,
    prev_pos_ptr,
    prev_ptr,
    host_ptr,
    out_ptr,
    source_ptr,
    num_rows,
    num_iters,
    cache_table_ptr,
    capacity,
    rank,
    WIDTH: tl.constexpr,
    USE_PREV: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
    SHARDS: tl.constexpr = 0,
):
    r"""Gathers rows :obj:`index` from the GPU cache, the previous batch or
    host memory, recording each row's source (0, 1, 2; 3: a peer's cache).
    A cache split over :obj:`SHARDS` GPUs codes a slot as :obj:`owner *
    capacity + row`; entry :obj:`SHARDS` of :obj:`cache_table_ptr` holds
    this GPU's copies of other rows (codes from :obj:`SHARDS * capacity`
    on)."""
    it = 0
    while it < num_iters:  # Not `range`: the interpreter cannot run it.
        blk = it * tl.num_programs(0) + tl.program_id(0)
        r = blk * BLOCK_R + tl.arange(0, BLOCK_R)
        rmask = r < num_rows
        v = tl.load(index_ptr + r, mask=rmask, other=0).to(tl.int64)
        slot = tl.load(slot_ptr + v, mask=rmask, other=-1).to(tl.int64)
        in_cache = rmask & (slot >= 0)
        if USE_PREV:
            prev = tl.load(prev_pos_ptr + v, mask=rmask & ~in_cache,
                           other=-1).to(tl.int64)
            in_prev = rmask & ~in_cache & (prev >= 0)
        else:
            prev = tl.full((BLOCK_R, ), -1, tl.int64)
            in_prev = rmask & (prev >= 0)
        on_host = rmask & ~in_cache & ~in_prev
        source = tl.where(in_cache, 0, tl.where(in_prev, 1, 2))
        if SHARDS > 0:
            # Slots past the shards (owner SHARDS) are this GPU's own copies.
            owner = tl.where(in_cache, tl.minimum(slot // capacity, SHARDS),
                             rank)
            slot = slot - owner * capacity
            source = tl.where((owner != rank) & (owner < SHARDS), 3, source)
            addr = tl.load(cache_table_ptr + owner, mask=in_cache, other=0)
            base = addr.to(tl.pointer_type(cache_ptr.dtype.element_ty))
        else:
            base = cache_ptr + tl.zeros((BLOCK_R, ), tl.int64)
        tl.store(source_ptr + r, source.to(tl.int8), mask=rmask)
        for c0 in tl.static_range(0, WIDTH, BLOCK_C):
            c = c0 + tl.arange(0, BLOCK_C)
            m2 = (c < WIDTH)[None, :]
            a = tl.load(base[:, None] + slot[:, None] * WIDTH + c[None, :],
                        mask=in_cache[:, None] & m2, other=0.0)
            b = tl.load(prev_ptr + prev[:, None] * WIDTH + c[None, :],
                        mask=in_prev[:, None] & m2, other=0.0)
            h = tl.load(host_ptr + v[:, None] * WIDTH + c[None, :],
                        mask=on_host[:, None] & m2, other=0.0)
            val = tl.where(in_cache[:, None], a,
                           tl.where(in_prev[:, None], b, h))
            tl.store(out_ptr + r.to(tl.int64)[:, None] * WIDTH + c[None, :],
                     val, mask=rmask[:, None] & m2)
        it += 1


@triton.jit(do_not_specialize=['size'])
def compact_kernel(src_ptr, rank_ptr, map_ptr, dst_ptr, eid_ptr,
                   out_row_ptr, out_col_ptr, out_eid_ptr, size,
                   BLOCK: tl.constexpr):
    r"""Moves the filled slots to the front, relabeling their sources."""
    p = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = p < size
    v = tl.load(src_ptr + p, mask=m, other=-1)
    ok = m & (v >= 0)
    q = tl.load(rank_ptr + p, mask=ok, other=1) - 1
    tl.store(out_row_ptr + q, tl.load(map_ptr + v, mask=ok), mask=ok)
    tl.store(out_col_ptr + q, tl.load(dst_ptr + p, mask=ok), mask=ok)
    tl.store(out_eid_ptr + q, tl.load(eid_ptr + p, mask=ok), mask=ok)
