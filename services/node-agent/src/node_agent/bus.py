"""Bus adapter: what the agent publishes and the streams that must exist for it."""

from __future__ import annotations

from koordcommon import subjects
from koordcommon.bus import Bus
from koordcommon.schemas import Message

STREAMS = (subjects.METRICS_STREAM, subjects.NODEMETRIC_STREAM, subjects.NODETOPOLOGY_STREAM, subjects.EVENTS_STREAM)


def publisher(bus: Bus):
    async def publish(items: list[tuple[str, Message]]) -> None:
        await bus.publish_many([(subject, bus.stamp(msg)) for subject, msg in items])

    return publish
