import pytest
from koordcommon.deferred import Deferred


@pytest.mark.parametrize(("read", "expected"), [
    (lambda d: d["a"], 1),
    (lambda d: list(d), ["a", "b"]),
    (lambda d: len(d), 2),
    (lambda d: d == {"a": 1, "b": 2}, True),
    (lambda d: repr(d), "{'a': 1, 'b': 2}"),
    (lambda d: d.get("c", 0), 0),
])
def test_built_on_first_read_and_once(read, expected):
    calls = []

    def build():
        calls.append(1)
        return {"a": 1, "b": 2}

    d = Deferred(build)
    assert calls == []  # nothing is built until read
    assert read(d) == expected
    assert read(d) == expected
    assert calls == [1]
