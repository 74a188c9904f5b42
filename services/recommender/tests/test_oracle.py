import numpy as np
import pytest
from recommender.core.oracle import oracle_request, oracle_requests, pooled_oracle_requests


@pytest.mark.parametrize(
    ("usage", "rate", "expected"),
    [
        # 10 intervals, 20 %: two may be above; the third largest (8) leaves only 9 and 10 above
        ([1, 5, 2, 8, 3, 9, 4, 7, 6, 10], 0.2, 8.0),
        # 19 %: floor(1.9) = 1 above: the second largest
        ([1, 5, 2, 8, 3, 9, 4, 7, 6, 10], 0.19, 9.0),
        ([1, 5, 2, 8, 3, 9, 4, 7, 6, 10], 0.0, 10.0),  # none above: the peak
        ([1, 5, 2, 8, 3, 9, 4, 7, 6, 10], 1.0, 0.0),  # all may be above
        ([3, 3, 3, 1], 0.25, 3.0),  # ties: at 3 no interval is strictly above
    ],
)
def test_oracle_is_the_smallest_fixed_request_at_the_rate(usage, rate, expected):
    assert oracle_request(np.array(usage, dtype=float), rate) == expected
    assert oracle_requests([np.sort(np.array(usage, dtype=float))], rate)[0] == expected


def test_oracle_rejects_a_rate_outside_0_1():
    with pytest.raises(ValueError, match="rate"):
        oracle_request(np.ones(3), 1.5)


# Two containers of four intervals. Per container at rate 1/8 no interval may be above, so each
# gets its peak: 10 and 6. Pooled, one of the 8 may be above: A's single spike is worth 36 of
# request (4 x (10 - 1)), B's top step 12 (4 x (6 - 3)), so the one overrun goes to A.
A = [1.0, 1.0, 1.0, 10.0]
B = [1.0, 2.0, 3.0, 6.0]


@pytest.mark.parametrize(
    "rate, expected",
    [
        (0.0, [10.0, 6.0]),  # no interval above: each its peak, as the per-container oracle
        (0.125, [1.0, 6.0]),  # 1 of 8: the spike of A, not B's step
        (0.25, [1.0, 3.0]),  # 2 of 8: then B's top step
        (0.5, [1.0, 1.0]),  # 4 of 8: B down to its lowest too (3 above), 4 in all
        (1.0, [1.0, 1.0]),  # every interval may be above: the lowest usage is the lowest candidate
    ],
)
def test_pooled_oracle_spends_the_budget_where_it_saves_most(rate, expected):
    assert pooled_oracle_requests([np.array(A), np.array(B)], rate).tolist() == expected


def test_pooled_oracle_is_never_above_the_per_container_one():
    rng = np.random.default_rng(7)
    usage = [np.sort(rng.lognormal(0, s, 200)) for s in (0.1, 0.5, 1.5)]
    for rate in (0.0, 0.01, 0.05):
        pooled, each = pooled_oracle_requests(usage, rate), oracle_requests(usage, rate)
        n = sum(u.size for u in usage)
        over = sum(int(np.count_nonzero(u > r)) for u, r in zip(usage, pooled))
        assert over <= int(rate * n)
        assert (pooled * 200).sum() <= (each * 200).sum() + 1e-9


def test_pooled_oracle_gives_a_container_without_intervals_nothing():
    assert pooled_oracle_requests([np.array([]), np.array(A)], 0.25).tolist() == [0.0, 1.0]
