import numpy as np
import pytest
from recommender.core.oracle import oracle_request, oracle_requests


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
