"""Statistical tests of the one-hop sampler: subsets uniform without
replacement (Floyd and sort paths), independent uniform draws with
replacement. Every test uses a fixed seed, so it is deterministic; a biased
sampler fails it. Needs no scipy: the chi-square tail is computed here."""
import itertools
import math

import pytest
import torch

from pyg_orch.sampling.neighbors import (
    FLOYD_MAX_FANOUT,
    sample_neighbors,
    uniform_subsets_floyd,
    uniform_subsets_sort,
)

P_MIN = 1e-3  # Reject uniformity below this p-value.
Z_MAX = 5.0  # Largest |z| accepted for one of many binomial counts.


# Chi-square tail, without scipy ##############################################


def chi2_sf(x: float, df: int) -> float:
    r"""Survival function of the chi-square distribution, the regularized
    upper incomplete gamma function :obj:`Q(df / 2, x / 2)` (series below
    :obj:`a + 1`, Lentz's continued fraction above)."""
    if x <= 0:
        return 1.0
    a, x = df / 2.0, x / 2.0
    log_pre = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        ap = a
        for _ in range(100_000):
            ap += 1
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(log_pre))
    tiny = 1e-300
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 100_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return math.exp(log_pre) * h


def chi2_uniform_pvalue(counts: torch.Tensor) -> float:
    r"""p-value of the chi-square test of :obj:`counts` against the uniform
    distribution over its cells."""
    counts = counts.double()
    expected = counts.sum() / counts.numel()
    stat = float(((counts - expected)**2 / expected).sum())
    return chi2_sf(stat, counts.numel() - 1)


def test_chi2_sf_reference_values():
    # df = 2 is the exponential distribution:
    for x in (0.1, 1.0, 5.0, 30.0):
        assert chi2_sf(x, 2) == pytest.approx(math.exp(-x / 2), rel=1e-9)
    # Tabulated quantiles: chi2(55) 0.999 -> 93.17, chi2(7) 0.95 -> 14.067,
    # chi2(1) 0.95 -> 3.841:
    assert chi2_sf(93.17, 55) == pytest.approx(1e-3, rel=0.01)
    assert chi2_sf(14.067, 7) == pytest.approx(0.05, rel=1e-3)
    assert chi2_sf(3.841, 1) == pytest.approx(0.05, rel=1e-3)
    assert chi2_sf(0.0, 5) == 1.0


def test_chi2_detects_bias():
    # The test must be able to fail: a sampler that favors neighbor 0 a bit
    # (its random sort key shrunk by 30%) is rejected, exact uniform counts
    # are accepted.
    assert chi2_uniform_pvalue(torch.full((56, ), 20_000 / 56)) > 0.99
    keys = torch.rand(20_000, 8, generator=gen(100))
    keys[:, 0] *= 0.7
    picks = keys.argsort(dim=1)[:, :3]
    assert chi2_uniform_pvalue(subset_counts(picks, 8, 3)) < P_MIN


# Helpers #####################################################################


def subset_counts(picks: torch.Tensor, deg: int, k: int) -> torch.Tensor:
    r"""Counts of every :obj:`k`-subset of :obj:`range(deg)` among the rows
    of :obj:`picks`, after checking every row holds :obj:`k` distinct values
    in :obj:`range(deg)`."""
    assert picks.shape[1] == k
    assert ((picks >= 0) & (picks < deg)).all()
    rows = picks.sort(dim=1).values
    assert (rows[:, 1:] > rows[:, :-1]).all(), 'a repeated pick'
    code = (1 << rows).sum(dim=1)  # Bit mask of the subset.
    all_codes = torch.tensor(sorted(
        sum(1 << i for i in c)
        for c in itertools.combinations(range(deg), k)))
    assert all_codes.numel() == math.comb(deg, k)
    index = torch.searchsorted(all_codes, code)
    assert torch.equal(all_codes[index], code)
    return torch.bincount(index, minlength=all_codes.numel())


def one_node_csc(deg: int, start: int = 3):
    r"""A CSC layout whose node 1 has :obj:`deg` in-neighbors at positions
    :obj:`start, ..., start + deg - 1` (node 0 has :obj:`start`)."""
    return torch.tensor([0, start, start + deg, start + deg])


def gen(seed: int, device=torch.device('cpu')) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def one_node_draws(deg: int, k: int, n: int, device, seed: int,
                   replace: bool = False, colptr_dtype=torch.int64):
    r""":func:`sample_neighbors` of :obj:`k` neighbors for :obj:`n` copies of
    the node of :func:`one_node_csc`: the picks as an :obj:`[n, k]` tensor
    of neighbor indices :obj:`0, ..., deg - 1`, and :obj:`dst_index` (both
    on the CPU)."""
    colptr = one_node_csc(deg).to(device, colptr_dtype)
    nodes = torch.ones(n, dtype=torch.long, device=device)
    pos, dst_index = sample_neighbors(colptr, nodes, k, replace=replace,
                                      generator=gen(seed, device))
    return pos.cpu().view(n, k) - 3, dst_index.cpu()


# Without replacement: every subset equally likely ############################


@pytest.mark.parametrize('colptr_dtype', [torch.int64, torch.int32])
def test_sample_neighbors_subsets_uniform(device, colptr_dtype):
    deg, k, n = 8, 3, 20_000
    picks, dst_index = one_node_draws(deg, k, n, device, 0,
                                      colptr_dtype=colptr_dtype)
    assert torch.equal(dst_index, torch.arange(n).repeat_interleave(k))
    counts = subset_counts(picks, deg, k)
    assert (counts > 0).all(), 'a subset never drawn'
    assert chi2_uniform_pvalue(counts) > P_MIN


# Subset samplers and the seeds of their generators:
SUBSET_SAMPLERS = {
    'floyd': (uniform_subsets_floyd, 1),
    'sort': (uniform_subsets_sort, 2),
}


@pytest.mark.parametrize('method,deg,k', [
    ('floyd', 8, 3), ('floyd', 8, 6), ('floyd', 8, 7), ('floyd', 12, 5),
    ('sort', 8, 3), ('sort', 8, 7), ('sort', 12, 5),
])
def test_subsets_uniform(device, method, deg, k):
    sample, seed = SUBSET_SAMPLERS[method]
    n = max(20_000, 30 * math.comb(deg, k))
    degs = torch.full((n, ), deg, dtype=torch.long, device=device)
    picks = sample(degs, k, gen(seed, device)).cpu()
    counts = subset_counts(picks, deg, k)
    assert (counts > 0).all()
    assert chi2_uniform_pvalue(counts) > P_MIN


def test_sample_neighbors_large_fanout_subsets_uniform(device):
    # k above FLOYD_MAX_FANOUT takes the sort path inside sample_neighbors.
    k = FLOYD_MAX_FANOUT + 2
    deg, n = k + 2, 25_000
    picks, _ = one_node_draws(deg, k, n, device, 3)
    rows = picks.sort(dim=1).values
    assert (rows[:, 1:] > rows[:, :-1]).all()
    assert ((rows >= 0) & (rows < deg)).all()
    # A k-subset of k + 2 is given by the two neighbors left out:
    left_out = torch.ones(n, deg, dtype=torch.bool)
    left_out.scatter_(1, picks, False)
    a, b = left_out.nonzero()[:, 1].view(n, 2).unbind(1)
    counts = torch.bincount(a * deg + b, minlength=deg * deg)
    counts = counts.view(deg, deg)[torch.triu_indices(deg, deg, 1).unbind()]
    assert counts.numel() == math.comb(deg, k)
    assert (counts > 0).all()
    assert chi2_uniform_pvalue(counts) > P_MIN


# With replacement: independent uniform draws #################################


def test_with_replacement_uniform_and_independent(device):
    deg, k, n = 8, 3, 20_000
    draws, dst_index = one_node_draws(deg, k, n, device, 4, replace=True)
    assert torch.equal(dst_index, torch.arange(n).repeat_interleave(k))
    assert ((draws >= 0) & (draws < deg)).all()
    for j in range(k):  # Every output position uniform over the neighbors:
        counts = torch.bincount(draws[:, j], minlength=deg)
        assert chi2_uniform_pvalue(counts) > P_MIN, f'position {j}'
    # Pairs of positions uniform over all deg^2 pairs (independence):
    for i, j in ((0, 1), (1, 2), (0, 2)):
        counts = torch.bincount(draws[:, i] * deg + draws[:, j],
                                minlength=deg * deg)
        assert chi2_uniform_pvalue(counts) > P_MIN, (i, j)
    # Repeats happen as often as they should: P(all distinct) = 8*7*6/8^3.
    p = deg * (deg - 1) * (deg - 2) / deg**3
    distinct = draws.sort(dim=1).values
    num = int((distinct[:, 1:] != distinct[:, :-1]).all(dim=1).sum())
    z = (num - n * p) / math.sqrt(n * p * (1 - p))
    assert abs(z) < Z_MAX


def test_with_replacement_fanout_above_degree(device):
    # k > deg: still k draws, every neighbor equally likely.
    deg, k, n = 3, 10, 6_000
    draws, _ = one_node_draws(deg, k, n, device, 5, replace=True)
    for j in range(k):
        counts = torch.bincount(draws[:, j], minlength=deg)
        assert counts.numel() == deg
        assert chi2_uniform_pvalue(counts) > P_MIN


# Inclusion probability k / deg, for both subset paths ########################


def inclusion_z(counts: torch.Tensor, trials: int, p: float) -> torch.Tensor:
    return (counts.double() - trials * p) / math.sqrt(trials * p * (1 - p))


def test_both_paths_same_inclusion_distribution(device):
    deg, k, n = 8, 3, 20_000
    p = k / deg
    degs = torch.full((n, ), deg, dtype=torch.long, device=device)
    inc = {}
    for name, fn in (('floyd', uniform_subsets_floyd),
                     ('sort', uniform_subsets_sort)):
        picks = fn(degs, k, gen(6, device)).cpu()
        inc[name] = torch.bincount(picks.view(-1), minlength=deg)
        assert (inclusion_z(inc[name], n, p).abs() < Z_MAX).all(), name
    # The two paths agree with each other (two-sample z on each neighbor):
    diff = (inc['floyd'] - inc['sort']).double()
    assert (diff.abs() / math.sqrt(2 * n * p * (1 - p)) < Z_MAX).all()


@pytest.mark.parametrize('k', [3, FLOYD_MAX_FANOUT + 2])
def test_inclusion_probability_mixed_degrees(device, k):
    # Nodes of degrees from 0 to k + 12 in one call, each repeated: neighbor
    # j of a node of degree d is picked with probability min(k, d) / d.
    degs = torch.tensor(sorted({0, 1, 2, k - 1, k, k + 1, k + 2, k + 5,
                                k + 12}))
    reps = 3_000
    colptr = torch.cat([torch.zeros(1, dtype=torch.long),
                        degs.cumsum(0)]).to(device)
    nodes = torch.arange(degs.numel()).repeat(reps)
    nodes = nodes[torch.randperm(nodes.numel(), generator=gen(7))]
    pos, dst_index = sample_neighbors(colptr, nodes.to(device), k,
                                      generator=gen(8, device))
    pos, dst_index = pos.cpu(), dst_index.cpu()
    # Grouped by node, in the order of `nodes`, min(k, deg) each:
    want = degs[nodes].clamp(max=k)
    assert torch.equal(dst_index,
                       torch.arange(nodes.numel()).repeat_interleave(want))
    owner = nodes[dst_index]
    colptr = colptr.cpu()
    assert ((pos >= colptr[owner]) & (pos < colptr[owner + 1])).all()
    counts = torch.bincount(pos, minlength=int(colptr[-1]))
    d = degs.repeat_interleave(degs).double()  # Degree of each position.
    p = (d.clamp(max=k) / d)
    full = p == 1
    assert torch.equal(counts[full], torch.full_like(counts[full], reps))
    z = (counts[~full].double() - reps * p[~full]) / (
        reps * p[~full] * (1 - p[~full])).sqrt()
    assert (~full).sum() > 0
    assert (z.abs() < Z_MAX).all()


def test_sort_path_vectorized_over_degrees(device):
    # uniform_subsets_sort over nodes of different degrees: each row a
    # uniform k-subset of its own range(deg).
    k = 2
    degs = torch.tensor([3, 5, 4]).repeat(8_000)
    picks = uniform_subsets_sort(degs.to(device), k, gen(9, device)).cpu()
    for d in (3, 5, 4):
        rows = picks[degs == d]
        counts = subset_counts(rows, d, k)
        assert chi2_uniform_pvalue(counts) > P_MIN, d
