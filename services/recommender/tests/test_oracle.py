import numpy as np
import pytest
from recommender.core.oracle import (
    family_windows,
    oracle_request,
    oracle_requests,
    pooled_oracle_requests,
    pooled_window_choice,
    window_family,
)


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


# One container, refresh blocks of two intervals: usage 1 2 | 3 1 | 2 2 | 6 1, blocks 1-3 scored.
# Block peaks 2, 3, 2, 6.
USED = np.array([1.0, 2.0, 3.0, 1.0, 2.0, 2.0, 6.0, 1.0])
BLOCK = np.array([0, 0, 1, 1, 2, 2, 3, 3])
SCORED = BLOCK >= 1


@pytest.mark.parametrize(("windows", "margins", "requested", "over"), [
    # window 1 block: requests 2, 3, 2 over two intervals each = 14; above: the 3 (> 2) and the 6 (> 2)
    ([1], (0.0,), [14.0], [2]),
    # +50 %: 3, 4.5, 3 = 21; above: the 6 only
    ([1], (0.5,), [21.0], [1]),
    # 2 blocks: block 1 sees only block 0 (2), then max(2, 3) = 3, max(3, 2) = 3: 16; above: the
    # 3 (> 2) and the 6 (> 3). 9 blocks (all before): the same here
    ([2, 9], (0.0,), [16.0, 16.0], [2, 2]),
    # window major: [1 m0, 1 m100 %, 2 m0, 2 m100 %]; 1 block +100 %: 4, 6, 4 = 28, the 6 above
    # (> 4); 2 blocks +100 %: 4, 6, 6 = 32, none above (6 is not above 6)
    ([1, 2], (0.0, 1.0), [14.0, 28.0, 16.0, 32.0], [2, 1, 2, 0]),
])
def test_window_family_prices_each_window_and_margin(windows, margins, requested, over):
    req, above = window_family(USED, BLOCK, SCORED, windows, margins)
    assert req.tolist() == requested and above.tolist() == over


def test_window_family_requests_nothing_before_the_first_sample():
    # blocks 0, 2, 3 hold one sample each (1, 4, 2), block 1 none; blocks 2 and 3 scored. One
    # block: block 2 sees the empty block 1 (request 0, the 4 above), block 3 sees 4. Two
    # blocks: 1 (the 4 above), then 4.
    used, block = np.array([1.0, 4.0, 2.0]), np.array([0, 2, 3])
    req, above = window_family(used, block, block >= 2, [1, 2], (0.0,))
    assert req.tolist() == [0.0 + 4.0, 1.0 + 4.0] and above.tolist() == [1, 1]


# Two containers, three members each: (request summed over their scored intervals, intervals
# above). A: 100 / 0, 60 / 1, 20 / 5; B: 50 / 0, 45 / 1, 10 / 3; 200 intervals in all. A's first
# overrun saves 40 of request, its next four 10 each; B's three together save 40 (13.3 each),
# its first alone 5.
REQ = np.array([[100.0, 60.0, 20.0], [50.0, 45.0, 10.0]])
OVER = np.array([[0, 1, 5], [0, 1, 3]])


@pytest.mark.parametrize(("rate", "expected"), [
    (0.0, [0, 0]),  # nothing above: each its safest member
    (0.005, [1, 0]),  # 1 interval: A's, which saves 40
    (0.01, [1, 0]),  # 2: B's single overrun saves only 5, its three do not fit
    (0.02, [1, 2]),  # 4: A's one and B's three (40 + 40)
    (0.03, [1, 2]),  # 6: A's further four save 10 each, B's 13.3: A stays
    (0.04, [2, 2]),  # 8: everything at its cheapest
    (1.0, [2, 2]),
])
def test_pooled_window_choice_spends_the_budget_where_it_saves_most(rate, expected):
    assert pooled_window_choice(REQ, OVER, 200, rate).tolist() == expected


def test_pooled_window_choice_takes_the_fewest_overruns_when_the_budget_cannot_be_kept():
    # every member of the second container has an interval above: at rate 0 the first keeps
    # none above and the second takes its cheaper member of one
    choice = pooled_window_choice(np.array([[30.0, 10.0], [9.0, 7.0]]), np.array([[0, 2], [1, 1]]), 100, 0.0)
    assert choice.tolist() == [0, 1]


def test_family_windows_are_whole_refresh_intervals_counted_once():
    assert family_windows(3600.0) == [1, 2, 3, 6, 12, 24, 48, 96]  # 15 and 30 min round up to the hour
    assert family_windows(300.0)[:3] == [3, 6, 12]


def test_pooled_window_choice_is_never_worse_than_one_member_for_all():
    # any single member used for every container that keeps within the budget leaves at least
    # as much request as the pooled choice (the Lagrangian choice is optimal at its own spend)
    rng = np.random.default_rng(11)
    usage = [rng.lognormal(0, s, 24 * 12 * 4) for s in (0.2, 0.6, 1.2, 0.05)]
    block = np.repeat(np.arange(96), 12)
    family = [window_family(u, block, block >= 24, [1, 3, 12]) for u in usage]
    req = np.array([f[0] for f in family])
    over = np.array([f[1] for f in family])
    n = 4 * 72 * 12
    for rate in (0.001, 0.01, 0.05):
        j = pooled_window_choice(req, over, n, rate)
        spent = int(over[np.arange(4), j].sum())
        assert spent <= int(rate * n)
        for m in range(req.shape[1]):
            if over[:, m].sum() <= spent:
                assert req[np.arange(4), j].sum() <= req[:, m].sum() + 1e-9
