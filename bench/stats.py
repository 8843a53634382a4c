"""The benchmarks' statistics, on scipy: the two-sided Mann-Whitney U test and the
Vargha-Delaney A12 effect size, as bench/bugs.py and bench/cluster.py report them."""
import math

import numpy as np
from scipy import stats

# Up to this many ways to split the pooled runs into the two samples, the p-value is
# the exact permutation one (every split enumerated); beyond, the normal
# approximation.
EXACT_SPLITS = 200_000


def _u_of_first(x, y):
    """U of the first sample: its rank sum over the pooled values (mid-ranks for
    ties) less its least possible."""
    ranks = stats.rankdata(np.concatenate([x, y]))
    return ranks[: len(x)].sum() - len(x) * (len(x) + 1) / 2


def _u_off_centre(x, y):
    """How far U of the first sample is from its mean under the null, n1 n2 / 2: the
    two-sided statistic (with ties the null distribution of U need not be symmetric,
    so the p-value is taken on this, not as twice a one-sided one)."""
    return abs(_u_of_first(x, y) - len(x) * len(y) / 2)


def mann_whitney(x, y):
    """Two-sided Mann-Whitney U test of samples x and y: (U of x, p, method).
    Exact (the permutation distribution of U with mid-ranks for ties, over every split
    of the pooled values) when there are at most EXACT_SPLITS splits, else the normal
    approximation with the tie and continuity corrections. (None, None, None) when a
    sample is empty; p = 1 when every value is the same."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if not len(x) or not len(y):
        return None, None, None
    u = float(_u_of_first(x, y))
    if np.all(np.concatenate([x, y]) == x[0]):
        return u, 1.0, "exact"
    if min(len(x), len(y)) == 1:
        # permutation_test wants two runs a side; with one, each pooled value in turn
        # is the lone sample (how far U is off the centre is the same from either side).
        pooled = np.concatenate([x, y])
        offs = [_u_off_centre(pooled[i:i + 1], np.delete(pooled, i)) for i in range(len(pooled))]
        return u, float(np.mean(np.asarray(offs) >= _u_off_centre(x, y) - 1e-9)), "exact"
    if math.comb(len(x) + len(y), len(x)) <= EXACT_SPLITS:
        r = stats.permutation_test((x, y), _u_off_centre, permutation_type="independent", alternative="greater",
                                   n_resamples=np.inf, vectorized=False)
        return u, min(1.0, float(r.pvalue)), "exact"
    r = stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic", use_continuity=True)
    return float(r.statistic), min(1.0, float(r.pvalue)), "normal"


def a12_faster(x, y):
    """Vargha-Delaney A12 for times: the probability that a run of x finds it sooner
    than one of y, plus half the ties. Above 0.5: x is faster. None when a sample is
    empty."""
    if not len(x) or not len(y):
        return None
    # mannwhitneyu's U of its first sample counts the pairs where it is the larger.
    return float(stats.mannwhitneyu(y, x, method="asymptotic").statistic) / (len(x) * len(y))
