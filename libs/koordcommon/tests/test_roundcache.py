"""RoundCache keeps what each round uses and forgets the rest one round later."""

import pytest
from koordcommon.roundcache import RoundCache

# each step: (op, key, value or expected); "round" starts a new round
CASES = [
    ("kept while read every round",
     [("put", "a", 1), ("round",), ("get", "a", 1), ("round",), ("get", "a", 1), ("round",), ("get", "a", 1)]),
    ("forgotten after a whole round unused",
     [("put", "a", 1), ("round",), ("round",), ("get", "a", None)]),
    ("one unused round is survived",
     [("put", "a", 1), ("round",), ("get", "a", 1), ("round",), ("get", "a", 1)]),
    ("a write replaces, and counts as use",
     [("put", "a", 1), ("round",), ("put", "a", 2), ("round",), ("get", "a", 2)]),
    ("each key on its own",
     [("put", "a", 1), ("put", "b", 2), ("round",), ("get", "b", 2), ("round",), ("get", "a", None), ("get", "b", 2)]),
]


@pytest.mark.parametrize("steps", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_round_cache(steps):
    cache: RoundCache[str, int] = RoundCache()
    for step in steps:
        if step[0] == "round":
            cache.new_round()
        elif step[0] == "put":
            cache.put(step[1], step[2])
        else:
            assert cache.get(step[1]) == step[2], step


def test_size_follows_the_live_set():
    cache: RoundCache[int, int] = RoundCache()
    for r in range(100):  # 10 live keys a round, each replaced by a new one every round
        cache.new_round()
        for k in range(r * 10, r * 10 + 10):
            cache.put(k, k)
    assert len(cache) == 20  # this round's and the last one's
