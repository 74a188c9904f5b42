"""Bus throughput: NodeMetricSample messages through publish -> JetStream -> durable consumer.

Three paths carry the same payload bytes in one run:
  core        plain NATS publish to a subscriber on a second connection (no storage, no acks)
  jetstream   bare JetStream publish with acks in flight (stored, acknowledged, nobody reads)
  bus         Bus.publish_many -> stream -> Bus.consume durable, handler does nothing
              (includes encoding, Nats-Msg-Id de-duplication, decoding/validation and confirmed acks):
              publish alone, a durable draining the stored messages, and both at once (e2e)
The e2e row is what a collector can ingest in one process; the ratios say what the guarantees
cost. schemas.decode alone is the CPU bound of any consumer of these messages.

    python bench/bus_throughput.py [--url nats://...] [--messages 3000] [--pods 30]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import time
import uuid

import nats
from _payloads import node_sample
from koordcommon import subjects
from koordcommon.bus import Bus
from koordcommon.schemas import NodeMetricSample, decode
from koordcommon.testing.nats import NatsServer

GiB = 1 << 30


def make_sample(i: int, pods: int) -> NodeMetricSample:
    return node_sample(i, pods)


async def core_rate(url: str, subject: str, payloads: list[bytes]) -> float:
    pub, sub_nc = await nats.connect(url), await nats.connect(url)
    n = len(payloads)
    got = 0
    done = asyncio.Event()

    async def on_msg(_msg) -> None:
        nonlocal got
        got += 1
        if got == n:
            done.set()

    sub = await sub_nc.subscribe(subject, cb=on_msg, pending_msgs_limit=n + 10, pending_bytes_limit=-1)
    await sub_nc.flush()
    start = time.perf_counter()
    for data in payloads:
        await pub.publish(subject, data)
    await pub.flush()
    await asyncio.wait_for(done.wait(), 60)
    elapsed = time.perf_counter() - start
    await sub.unsubscribe()
    await pub.close()
    await sub_nc.close()
    return n / elapsed


async def jetstream_rate(bus: Bus, subject: str, payloads: list[bytes], window: int = 512) -> float:
    js = bus.nc.jetstream(timeout=10, publish_async_max_pending=window)
    wire = bus.wire_subject(subject)
    start = time.perf_counter()
    futures = [await js.publish_async(wire, data) for data in payloads]
    await asyncio.gather(*futures)
    return len(payloads) / (time.perf_counter() - start)


async def bus_rates(publisher: Bus, consumer_bus: Bus, msgs: list[NodeMetricSample]) -> dict[str, float]:
    """publish only; drain of the stored messages by a durable; both at once (end to end)."""
    n = len(msgs)
    items = [(subjects.metrics(m.node), m) for m in msgs]
    counts = {"drain": 0, "e2e": 0}
    done = {"drain": asyncio.Event(), "e2e": asyncio.Event()}

    def handler(key: str):
        async def handle(batch) -> None:
            counts[key] += len(batch)
            if counts[key] >= n:
                done[key].set()

        return handle

    await publisher.ensure_stream(subjects.METRICS_STREAM)
    start = time.perf_counter()
    await publisher.publish_many(items)
    publish = n / (time.perf_counter() - start)

    start = time.perf_counter()
    drain = await consumer_bus.consume(
        subjects.METRICS_STREAM, "drain", "koord.metrics.>", NodeMetricSample, handler("drain"), batch=500
    )
    await asyncio.wait_for(done["drain"].wait(), 60)
    drained = n / (time.perf_counter() - start)
    await drain.stop()

    # End to end: a fresh durable that only sees what is published from now on.
    for m in msgs:
        publisher.stamp(m)
    info = await publisher.js.stream_info(publisher.wire_stream(subjects.METRICS_STREAM))
    await publisher.js.purge_stream(info.config.name)
    live = await consumer_bus.consume(
        subjects.METRICS_STREAM, "live", "koord.metrics.>", NodeMetricSample, handler("e2e"), batch=500, max_wait_s=0.2
    )
    start = time.perf_counter()
    await publisher.publish_many(items)
    await asyncio.wait_for(done["e2e"].wait(), 60)
    end_to_end = n / (time.perf_counter() - start)
    await live.stop()
    return {"publish": publish, "drain": drained, "e2e": end_to_end}


def decode_rate(payloads: list[bytes]) -> float:
    start = time.perf_counter()
    for data in payloads:
        decode(NodeMetricSample, data)
    return len(payloads) / (time.perf_counter() - start)


async def run(url: str, n: int, pods: int) -> None:
    msgs = [make_sample(i, pods) for i in range(n)]
    namespace = "bench" + uuid.uuid4().hex[:8]
    publisher = await Bus(url, service="bench", namespace=namespace).connect(timeout_s=10)
    consumer_bus = await Bus(url, service="bench", namespace=namespace, instance="consumer").connect(timeout_s=10)
    try:
        for m in msgs:
            publisher.stamp(m)
        payloads = [m.encode() for m in msgs]
        size = sum(map(len, payloads)) / n
        # The prepared messages are the bench's own baggage (a collector holds a few at a time):
        # keep the cyclic GC from rescanning them on every collection.
        gc.freeze()
        decoding = decode_rate(payloads)

        core = await core_rate(url, f"{namespace}.core", payloads)
        await publisher.ensure_stream(subjects.StreamSpec("BENCH_JS", ("bench.js.>",)))
        bare = await jetstream_rate(publisher, "bench.js.x", payloads)
        bus = await bus_rates(publisher, consumer_bus, msgs)
    finally:
        await consumer_bus.close()
        with contextlib.suppress(Exception):
            await publisher.delete_namespace()
        await publisher.close()

    mb = size / 1e6
    print(f"{n} NodeMetricSample messages, {pods} pods each, {size / 1024:.1f} KiB per message, server {url}")
    print(f"{'path':<40}{'msg/s':>8}{'pod samples/s':>15}{'MB/s':>8}{'vs core':>9}{'vs js':>7}")
    rows = [
        ("core publish -> subscriber", core),
        ("jetstream publish, acks in flight", bare),
        ("bus publish_many (encode, acked)", bus["publish"]),
        ("bus durable drain (decode, acked)", bus["drain"]),
        ("bus publish -> durable consumer (e2e)", bus["e2e"]),
        ("schemas.decode alone (CPU bound)", decoding),
    ]
    for name, rate in rows:
        print(f"{name:<40}{rate:>8.0f}{rate * pods:>15.0f}{rate * mb:>8.1f}{rate / core:>9.2f}{rate / bare:>7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url", default=os.environ.get("NATS_URL"), help="NATS URL (default $NATS_URL, else a private server)"
    )
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--pods", type=int, default=30)
    args = parser.parse_args()
    if args.url:
        asyncio.run(run(args.url, args.messages, args.pods))
    else:
        with NatsServer() as server:
            asyncio.run(run(server.url, args.messages, args.pods))


if __name__ == "__main__":
    main()
