import pytest
from koordcommon.durations import DurationError, parse_duration_ms


@pytest.mark.parametrize(
    "text, ms",
    [
        ("0", 0),
        ("300ms", 300),
        ("90s", 90_000),
        ("5m", 300_000),
        ("1h30m", 5_400_000),
        ("1.5h", 5_400_000),
        ("2h45m0.5s", 9_900_500),
        ("-1m30s", -90_000),
        ("+10s", 10_000),
        (".5s", 500),
        ("1500us", 1),  # below a millisecond truncates
        ("999999ns", 0),
        ("24h", 86_400_000),
    ],
)
def test_go_durations(text, ms):
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text, message", [("", "invalid"), ("5", "missing unit"), ("5x", "invalid"), ("m", "invalid"), ("1h 30m", "invalid")])
def test_bad_durations_say_why(text, message):
    with pytest.raises(DurationError, match=message):
        parse_duration_ms(text)
