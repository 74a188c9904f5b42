"""The Reservation vocabulary every part reads the object by."""

import pytest
from koordcommon import reservations


@pytest.mark.parametrize(
    "obj, phase",
    [
        ({}, "Pending"),  # no status yet: Koordinator's default
        ({"status": None}, "Pending"),
        ({"status": {"phase": ""}}, "Pending"),
        ({"status": {"phase": "Available", "nodeName": "n1"}}, "Available"),
        ({"status": {"phase": "Waiting"}}, "Waiting"),
        ({"status": {"phase": "Succeeded"}}, "Succeeded"),
        ({"status": {"phase": "Failed"}}, "Failed"),
    ],
)
def test_phase(obj, phase):
    assert reservations.phase(obj) == phase


def test_ended_phases_are_the_two_that_hold_nothing():
    assert set(reservations.ENDED) == {"Succeeded", "Failed"}
    assert reservations.AVAILABLE not in reservations.ENDED and reservations.WAITING not in reservations.ENDED
