"""Mann-Whitney U and A12 (bench/stats.py) on cases whose answers are known."""
import math

import pytest

from stats import a12_faster, mann_whitney


def test_fully_separated_samples_have_the_smallest_exact_p():
    u, p, method = mann_whitney([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
    assert method == "exact" and u == 0
    # Two of the C(10, 5) = 252 splits are as extreme.
    assert p == pytest.approx(2 / 252)


def test_identical_values_give_p_one_and_a12_one_half():
    assert mann_whitney([600, 600, 600], [600, 600]) == (3.0, 1.0, "exact")
    assert a12_faster([600, 600], [600, 600, 600]) == 0.5


def test_ties_take_mid_ranks_and_the_two_sided_p_is_off_the_centre():
    # Pooled ranks 2.0 -> 1, 50 -> 2, 100 -> 3.5 twice, 600 -> 5: U of x is 3.5 + 3.5 + 1
    # less 6. Of the ten splits, seven are at least 1 off the centre (3).
    u, p, _ = mann_whitney([100, 100, 2.0], [600, 50])
    assert u == 2.0
    assert p == pytest.approx(0.7)


def test_one_run_on_a_side_is_still_an_exact_test():
    u, p, method = mann_whitney([1], [2, 3, 4])
    assert (u, method) == (0.0, "exact")
    assert p == pytest.approx(0.5)


def test_large_samples_take_the_normal_approximation():
    x, y = list(range(20)), list(range(10, 30))
    u, p, method = mann_whitney(x, y)
    # 45 pairs where x is larger among the ten shared values, and ten ties.
    assert method == "normal" and u == 50.0
    # |U - 200| - 1/2 over the standard deviation with the tie correction (ten ties of
    # two: 10 * (2^3 - 2)), two-sided.
    z = (200 - 50 - 0.5) / math.sqrt(20 * 20 / 12 * (41 - 60 / (40 * 39)))
    assert p == pytest.approx(math.erfc(z / math.sqrt(2)), rel=1e-9)


def test_empty_samples_have_no_answer():
    assert mann_whitney([], [1, 2]) == (None, None, None)
    assert a12_faster([1], []) is None


def test_a12_is_the_chance_of_being_sooner():
    assert a12_faster([1, 2], [3, 4]) == 1.0
    assert a12_faster([3, 4], [1, 2]) == 0.0
    assert a12_faster([1, 3], [2, 3]) == pytest.approx((1 + 0 + 1 + 0.5) / 4)
