import math

import pytest

from mixbench.results.stats import excludes_zero, mean_std, t_quantile, welch_dof, welch_interval


@pytest.mark.parametrize(
    "p, dof, table_value",
    [
        (0.975, 1, 12.706),
        (0.975, 2, 4.303),
        (0.975, 4, 2.776),
        (0.975, 10, 2.228),
        (0.95, 30, 1.697),
        (0.995, 5, 4.032),
    ],
)
def test_t_quantile_matches_printed_tables(p, dof, table_value):
    assert t_quantile(p, dof) == pytest.approx(table_value, abs=5e-4)
    assert t_quantile(1 - p, dof) == pytest.approx(-table_value, abs=5e-4)


def test_t_quantile_lies_between_integer_dofs_and_rejects_bad_arguments():
    assert t_quantile(0.975, 4) > t_quantile(0.975, 4.5) > t_quantile(0.975, 5)
    for p, dof in ((0.0, 4), (1.0, 4), (0.975, 0)):
        with pytest.raises(ValueError):
            t_quantile(p, dof)


def test_mean_std():
    assert mean_std([1.0, 2.0, 3.0, 4.0]) == (2.5, pytest.approx(math.sqrt(5 / 3)))
    assert mean_std([7.0]) == (7.0, None) and mean_std([]) == (None, None)


def test_welch_interval_by_hand_equal_sizes():
    # a: mean 31, s² = 1; b: mean 28, s² = 1.  SE = sqrt(1/3 + 1/3) = 0.8165;
    # dof = (2/3)² / ((1/3)²/2 + (1/3)²/2) = 4 exactly; t_{0.975, 4} = 2.776 → half width 2.2666
    diff, low, high, dof = welch_interval([30.0, 31.0, 32.0], [27.0, 28.0, 29.0])
    assert diff == pytest.approx(3.0) and dof == pytest.approx(4.0)
    assert (low, high) == (pytest.approx(3 - 2.2666, abs=1e-3), pytest.approx(3 + 2.2666, abs=1e-3))
    assert welch_interval([30.0, 31.0, 32.0], [27.0, 28.0, 29.0]).significant
    # one unit closer: the interval [-0.27, 4.27] contains 0
    close = welch_interval([30.0, 31.0, 32.0], [28.0, 29.0, 30.0])
    assert close.low == pytest.approx(2 - 2.2666, abs=1e-3) and close.low < 0 < close.high and not close.significant


def test_welch_dof_unequal_variances_by_hand():
    # a = 1..4: s² = 5/3, s²/n = 5/12; b = 2, 4, 6: s² = 4, s²/n = 4/3.
    # dof = (5/12 + 4/3)² / ((5/12)²/3 + (4/3)²/2) = 3.0625 / 0.946759 = 3.2347 (not the pooled 5)
    interval = welch_interval([1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0])
    assert interval.diff == pytest.approx(-1.5)
    assert interval.dof == pytest.approx(3.2347, abs=1e-4)
    half = t_quantile(0.975, 3.2347) * math.sqrt(1.75)
    assert interval.high == pytest.approx(-1.5 + half, abs=1e-4) and interval.low == pytest.approx(-1.5 - half, abs=1e-4)
    # a wider confidence gives a wider interval
    assert welch_interval([1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0], confidence=0.99).high > interval.high


def test_welch_needs_two_per_side_and_degenerate_variance():
    with pytest.raises(ValueError, match="at least 2"):
        welch_interval([1.0], [1.0, 2.0])
    assert welch_dof(0.0, 3, 0.0, 3) == 4.0
    assert welch_interval([2.0, 2.0], [1.0, 1.0]) == (1.0, 1.0, 1.0, 2.0)


def test_excludes_zero():
    assert excludes_zero(0.1, 2.0) and excludes_zero(-2.0, -0.1)
    assert not excludes_zero(-0.1, 0.1) and not excludes_zero(0.0, 1.0)


def test_welch_interval_agrees_with_scipys_welch_test():
    from scipy.stats import ttest_ind

    a, b = [70.8, 71.4, 71.65], [70.5, 69.5, 70.0]  # the committed table4 vit_small proxy runs (mix, pre)
    ours = welch_interval(a, b)
    ref = ttest_ind(a, b, equal_var=False)
    ci = ref.confidence_interval(0.95)
    assert (ours.low, ours.high, ours.dof) == (pytest.approx(ci.low), pytest.approx(ci.high), pytest.approx(ref.df))


def test_an_interval_that_ends_at_zero_does_not_exclude_it_and_bad_arguments_are_named():
    """Mutation testing's survivors (bench/mutation): [−1, 0] contains 0 (a cell at the edge is not resolved); the
    ValueErrors say what is wrong, and the confidence level must lie strictly inside (0, 1)."""
    assert not excludes_zero(-1.0, 0.0) and not excludes_zero(0.0, 0.0)
    with pytest.raises(ValueError, match=r"^degrees of freedom must be > 0, got 0$"):
        t_quantile(0.975, 0)
    with pytest.raises(ValueError, match=r"^quantile level must be in \(0, 1\), got 1.0$"):
        t_quantile(1.0, 4)
    for confidence in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match=rf"^confidence must be in \(0, 1\), got {confidence}$"):
            welch_interval([1.0, 2.0], [3.0, 4.0], confidence=confidence)
