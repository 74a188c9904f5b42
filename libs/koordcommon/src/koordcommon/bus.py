"""NATS/JetStream bus shared by every service (docs/architecture.md, section "Bus").

One `Bus` per process: JetStream publishes de-duplicated on `Nats-Msg-Id`, durable pull
consumers that hand whole batches to a handler and ack only after it returned, dead letters
for anything that does not decode, KV buckets, and ordered tails for in-memory replicas.
A namespace prefixes every subject, stream and bucket so tests and tenants never meet.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import logging
import math
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import nats
import nats.errors
import nats.js.errors
import orjson
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue
from prometheus_client import Counter

from . import bounds, subjects
from .natsauth import BusCredentials, redact_url
from .schemas import DeadLetter, Message, SchemaError, decode, now_ms
from .subjects import StreamSpec

log = logging.getLogger(__name__)

PUBLISHED = Counter(
    "koord_bus_published_total", "Messages published to JetStream and acknowledged by it", ["service", "stream"]
)
CONSUMED = Counter("koord_bus_consumed_total", "Messages handled and acknowledged", ["service", "stream"])
DEADLETTERED = Counter(
    "koord_bus_deadletter_total",
    "Messages that could not be decoded or validated, sent to koord.deadletter.<service>",
    ["service", "stream", "reason_kind"],
)
HANDLER_ERRORS = Counter(
    "koord_bus_handler_errors_total",
    "Batches whose handler raised; their messages are redelivered",
    ["service", "stream"],
)

M = TypeVar("M", bound=Message)
StreamRef = StreamSpec | str
Deliver = Literal["all", "last_per_subject", "new"]

MSG_ID_HEADER = "Nats-Msg-Id"
KV_OPERATION_HEADER = "KV-Operation"

# A dead letter must itself fit in one NATS message (1 MiB default max_payload, base64 adds 1/3).
_DEADLETTER_RAW_MAX = 256 * 1024
_PUBLISH_CHUNK = 256
_CHECK_INTERVAL_S = 5.0

_RETRYABLE: tuple[type[BaseException], ...] = (
    asyncio.TimeoutError,  # nats.errors.TimeoutError derives from it
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.StaleConnectionError,
    nats.errors.FlushTimeoutError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
)


class BusError(RuntimeError):
    """The bus could not do what was asked (after its retries)."""


@dataclass(frozen=True)
class Delivery(Generic[M]):
    """One decoded message as a handler sees it."""

    subject: str  # without the namespace prefix
    msg: M
    stream_seq: int
    num_delivered: int = 1
    headers: dict[str, str] = field(default_factory=dict)
    pending: int = 0  # messages still after this one for the consumer; 0 = caught up


Handler = Callable[[list[Delivery[M]]], Awaitable[Any]]


def reason_kind(schema: type[Message], data: bytes) -> str:
    """Low-cardinality class of a decoding failure, for the dead-letter counter."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return "undecodable"
    if isinstance(obj, dict) and isinstance(obj.get("schema"), dict):
        sid = obj["schema"]
        if sid.get("name") != schema.SCHEMA:
            return "wrong_schema"
        if isinstance(sid.get("version"), int) and sid["version"] > schema.VERSION:
            return "newer_version"
    return "invalid"


def decode_all(schema: type[M], payloads: Sequence[bytes]) -> list[M | SchemaError]:
    """Decode a batch; each item is the message or the SchemaError it raised.

    A decoded sample is hundreds of acyclic objects that all live until the batch is handled;
    with the cyclic GC running, each collection rescans them (4x slower on 30-pod samples).
    Reference counting frees them anyway, so the collector pauses for the loop.
    """
    out: list[M | SchemaError] = []
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        for data in payloads:
            try:
                out.append(decode(schema, data))
            except SchemaError as exc:
                out.append(exc)
    finally:
        if paused:
            gc.enable()
    return out


def _stream_name(stream: StreamRef) -> str:
    return stream.name if isinstance(stream, StreamSpec) else stream


class Bus:
    def __init__(
        self,
        url: str,
        service: str,
        namespace: str = "",
        instance: str | None = None,
        *,
        publish_timeout_s: float = 5.0,
        reconnect_wait_s: float = 0.5,
        credentials: BusCredentials | None = None,
        node: str | None = None,
        stream_replicas: int = 1,
    ) -> None:
        """`url`: one server, or a cluster's servers separated by commas (the client fails over
        between them and learns the others from the cluster); `credentials`: the nkey seed and
        TLS files (natsauth); `node`: the node a node agent speaks for, which names its reply
        inbox (`subjects.inbox_prefix`); `stream_replicas`: copies JetStream keeps of every
        stream and bucket this process declares (3 on a 3-server cluster: one server may fail)."""
        subjects.validate_token(service)
        if namespace:
            subjects.validate_token(namespace)
        self.url = url
        self.credentials = credentials or BusCredentials()
        self.inbox = subjects.inbox_prefix(service, node)
        self.service = service
        self.namespace = namespace
        self.instance = instance or f"{socket.gethostname()}-{os.getpid()}"
        self.source = f"{service}/{self.instance}"
        self.publish_timeout_s = publish_timeout_s
        if stream_replicas < 1:
            raise ValueError(f"stream_replicas must be at least 1, not {stream_replicas}")
        self.stream_replicas = stream_replicas
        self.reconnect_wait_s = reconnect_wait_s
        # Starts at the wall clock in microseconds, not 1: a restarted container keeps its
        # hostname and pid 1, and a reused (source, seq) would be dropped as a duplicate.
        self._seq = time.time_ns() // 1000
        self._nc: NATS | None = None
        self._js: JetStreamContext | None = None
        self._consumers: set[Consumer] = set()
        self._kvs: dict[str, KeyValue] = {}
        self.reconnects = 0
        self._last_error_log = 0.0
        # The receiver's clock that measurement times are judged against (bounds.check): the
        # wall clock, or the simulated cluster's (wiring.start_cluster sets it).
        self.clock: Callable[[], int] = now_ms

    # ------------------------------------------------------------------ connection

    @property
    def connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected

    @property
    def _closed(self) -> bool:
        return self._nc is None or self._nc.is_closed

    @property
    def nc(self) -> NATS:
        if self._nc is None:
            raise BusError("bus is not connected; call connect() first")
        return self._nc

    @property
    def js(self) -> JetStreamContext:
        if self._js is None:
            raise BusError("bus is not connected; call connect() first")
        return self._js

    async def connect(self, timeout_s: float | None = None) -> Bus:
        """Connect, retrying forever (or up to timeout_s); later reconnects are automatic."""
        nc = NATS()
        opts: dict[str, Any] = {
            "servers": [u.strip() for u in self.url.split(",") if u.strip()],
            "name": self.source,
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": self.reconnect_wait_s,
            "connect_timeout": 2,
            "ping_interval": 10,  # a silent server is noticed in ~30 s, not the default 4 min
            "max_outstanding_pings": 3,
            "error_cb": self._on_error,
            "disconnected_cb": self._on_disconnected,
            "reconnected_cb": self._on_reconnected,
            "closed_cb": self._on_closed,
            **self.credentials.connect_options(self.inbox),
        }
        try:
            if timeout_s is None:
                await nc.connect(**opts)
            else:
                await asyncio.wait_for(nc.connect(**opts), timeout_s)
        except TimeoutError:
            await nc.close()
            raise BusError(f"NATS at {redact_url(self.url)} did not answer within {timeout_s} s") from None
        self._nc = nc
        self._js = nc.jetstream(timeout=self.publish_timeout_s)
        log.info("bus connected", extra={"url": redact_url(self.url), "namespace": self.namespace, "source": self.source})
        return self

    async def close(self) -> None:
        """Stop consumers (their in-flight batches finish), then drain the connection."""
        for consumer in list(self._consumers):
            await consumer.stop(timeout_s=30)
        nc, self._nc, self._js = self._nc, None, None
        self._kvs.clear()
        if nc is None or nc.is_closed:
            return
        try:
            if nc.is_connected:
                await nc.drain()
            else:
                await nc.close()
        except Exception as exc:  # noqa: BLE001 - draining a half-broken connection: closing is all that is left
            log.warning("bus drain failed, closing", extra={"error": repr(exc)})
            await nc.close()

    async def __aenter__(self) -> Bus:
        if self._nc is None:
            await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _on_error(self, exc: Exception) -> None:
        # While the server is away this fires on every reconnect attempt: log every 10 s at most.
        now = time.monotonic()
        if now - self._last_error_log >= 10:
            self._last_error_log = now
            log.warning("bus connection error", extra={"url": redact_url(self.url), "error": repr(exc)})

    async def _on_disconnected(self) -> None:
        if self._nc is not None:  # not a close() we asked for
            log.warning("bus disconnected", extra={"url": redact_url(self.url)})

    async def _on_reconnected(self) -> None:
        self.reconnects += 1
        log.info("bus reconnected", extra={"url": redact_url(self.url), "reconnects": self.reconnects})

    async def _on_closed(self) -> None:
        log.info("bus connection closed", extra={"url": redact_url(self.url)})

    # ------------------------------------------------------------------ namespacing

    def wire_subject(self, subject: str) -> str:
        return subjects.namespaced_subject(self.namespace, subject)

    def local_subject(self, subject: str) -> str:
        prefix = f"{self.namespace}."
        return subject[len(prefix) :] if self.namespace and subject.startswith(prefix) else subject

    def _delivery(self, m: Msg, msg: M, wire_subject: str | None = None) -> Delivery[M]:
        """A decoded JetStream message as its handler sees it (`wire_subject`: the subject it was
        published on, when the stream stored it under another)."""
        md = m.metadata
        return Delivery(
            subject=self.local_subject(wire_subject or m.subject),
            msg=msg,
            stream_seq=md.sequence.stream,
            num_delivered=md.num_delivered,
            headers=dict(m.headers or {}),
            pending=md.num_pending,
        )

    def wire_stream(self, stream: StreamRef) -> str:
        return subjects.namespaced_stream(self.namespace, _stream_name(stream))

    def local_stream(self, wire_name: str) -> str:
        prefix = f"{self.namespace}_"
        return wire_name[len(prefix) :] if self.namespace and wire_name.startswith(prefix) else wire_name

    def wire_bucket(self, bucket: str) -> str:
        return subjects.namespaced_bucket(self.namespace, bucket)

    # ------------------------------------------------------------------ streams

    async def ensure_stream(self, spec: StreamSpec) -> None:
        """Create the stream, or update it when its configuration differs; never fails if it exists.

        A server busy with many clients starting at once, or restarting while a service starts
        (its JetStream store still recovering), answers late or not at all: the whole check is
        asked again for about 15 s before the service gives up."""
        await self._retrying(lambda: self._ensure_stream_once(spec), f"ensuring stream {spec.name}", retries=12)

    async def _ensure_stream_once(self, spec: StreamSpec) -> None:
        name = self.wire_stream(spec)
        wanted_subjects = [self.wire_subject(s) for s in spec.subjects]
        max_age = float(spec.max_age_s or 0)
        # The server rejects a duplicate window longer than the retention.
        dup = min(spec.duplicate_window_s, max_age) if max_age else spec.duplicate_window_s
        try:
            info = await self.js.stream_info(name)
        except nats.js.errors.NotFoundError:
            config = api.StreamConfig(
                name=name,
                subjects=wanted_subjects,
                retention=api.RetentionPolicy.LIMITS,
                storage=api.StorageType.FILE,
                max_age=max_age,
                max_bytes=spec.max_bytes,
                duplicate_window=dup,
                num_replicas=self.stream_replicas,
            )
            try:
                await self.js.add_stream(config)
                log.info("stream created", extra={"stream": name, "subjects": wanted_subjects})
                return
            except nats.js.errors.BadRequestError:
                info = await self.js.stream_info(name)  # another process created it meanwhile
        current = info.config
        differs = (
            sorted(current.subjects or []) != sorted(wanted_subjects)
            or abs(float(current.max_age or 0) - max_age) > 1e-3
            or (current.max_bytes or -1) != spec.max_bytes
            or abs(float(current.duplicate_window or 0) - dup) > 1e-3
            or (current.num_replicas or 1) != self.stream_replicas
        )
        if differs:
            await self.js.update_stream(
                current.evolve(
                    subjects=wanted_subjects, max_age=max_age, max_bytes=spec.max_bytes, duplicate_window=dup,
                    num_replicas=self.stream_replicas,
                )
            )
            log.info("stream updated", extra={"stream": name, "subjects": wanted_subjects})

    async def ensure_streams(self, *specs: StreamSpec) -> None:
        for spec in specs:
            await self.ensure_stream(spec)

    async def stream_names(self) -> list[str]:
        """Wire names of every stream on the server (paged through the JetStream API)."""
        names: list[str] = []
        while True:
            resp = await self.nc.request(
                "$JS.API.STREAM.NAMES", json.dumps({"offset": len(names)}).encode(), timeout=self.publish_timeout_s
            )
            body = json.loads(resp.data)
            if "error" in body:
                raise BusError(f"listing streams failed: {body['error']}")
            page = body.get("streams") or []
            names.extend(page)
            if not page or len(names) >= body.get("total", 0):
                return names

    async def delete_namespace(self) -> list[str]:
        """Delete every stream and KV bucket of this bus's namespace (test teardown)."""
        if not self.namespace:
            raise BusError("refusing to delete the streams of the root namespace")
        mine = [n for n in await self.stream_names() if n.startswith((f"{self.namespace}_", f"KV_{self.namespace}-"))]
        for name in mine:
            try:
                await self.js.delete_stream(name)
            except nats.js.errors.NotFoundError:
                pass
        self._kvs.clear()
        return mine

    # ------------------------------------------------------------------ publishing

    def stamp(self, msg: M) -> M:
        """Fill source, a per-bus increasing seq and (when unset) ts; returns msg."""
        self._seq += 1
        msg.source = self.source
        msg.seq = self._seq
        if not msg.ts:
            msg.ts = now_ms()
        return msg

    def _encode(self, msg: Message) -> tuple[bytes, dict[str, str]]:
        # An unstamped message has msg_id ":0": all of them would be dropped as duplicates.
        if not msg.source:
            self.stamp(msg)
        return msg.encode(), {MSG_ID_HEADER: msg.msg_id}

    def _count_published(self, ack: api.PubAck) -> None:
        PUBLISHED.labels(self.service, self.local_stream(ack.stream)).inc()

    async def _publish_raw(
        self, wire_subject: str, data: bytes, headers: dict[str, str], retries: int, timeout_s: float | None = None
    ) -> api.PubAck:
        delay = 0.1
        for attempt in range(retries + 1):
            try:
                ack = await self.js.publish(
                    wire_subject, data, timeout=timeout_s or self.publish_timeout_s, headers=dict(headers)
                )
            except _RETRYABLE as exc:
                if attempt == retries:
                    raise BusError(f"publish to {wire_subject} failed after {retries + 1} attempts: {exc!r}") from exc
                log.warning(
                    "publish failed, retrying",
                    extra={"subject": wire_subject, "attempt": attempt + 1, "error": repr(exc)},
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
            else:
                self._count_published(ack)
                return ack
        raise AssertionError("unreachable")

    async def publish(self, subject: str, msg: Message, retries: int = 5) -> api.PubAck:
        """Publish to JetStream and wait for the ack. A retry carries the same Nats-Msg-Id, so the
        stream keeps one copy even when a first attempt was stored but its ack was lost."""
        data, headers = self._encode(msg)
        return await self._publish_raw(self.wire_subject(subject), data, headers, retries)

    async def publish_many(self, items: Iterable[tuple[str, Message]], retries: int = 5) -> list[api.PubAck]:
        """Publish many messages with acks in flight (two chunks of 256 at a time); returns acks in order."""
        prepared = []
        for subject, msg in items:
            data, headers = self._encode(msg)
            prepared.append((self.wire_subject(subject), data, headers))
        acks: list[api.PubAck | None] = [None] * len(prepared)
        if not hasattr(self.js, "publish_async"):  # nats-py before 2.10: concurrent requests instead
            for start in range(0, len(prepared), _PUBLISH_CHUNK):
                chunk = prepared[start : start + _PUBLISH_CHUNK]
                acks[start : start + len(chunk)] = await asyncio.gather(
                    *(self._publish_raw(s, d, h, retries) for s, d, h in chunk)
                )
            return acks  # type: ignore[return-value]

        in_flight: tuple[int, list[asyncio.Future | None]] | None = None
        for start in range(0, len(prepared), _PUBLISH_CHUNK):
            futures = await self._send_async(prepared[start : start + _PUBLISH_CHUNK])
            if in_flight is not None:
                await self._settle(prepared, acks, *in_flight, retries)
            in_flight = (start, futures)
        if in_flight is not None:
            await self._settle(prepared, acks, *in_flight, retries)
        return acks  # type: ignore[return-value]

    async def _send_async(self, chunk: list[tuple[str, bytes, dict[str, str]]]) -> list[asyncio.Future | None]:
        futures: list[asyncio.Future | None] = []
        for wire_subject, data, headers in chunk:
            try:
                # No wait_stall: at most two chunks are in flight, far below the context's
                # pending limit, and a wait_for per message would cost a task each.
                futures.append(await self.js.publish_async(wire_subject, data, headers=dict(headers)))
            except (*_RETRYABLE, nats.js.errors.TooManyStalledMsgsError):
                futures.append(None)  # settled by a synchronous retry
        return futures

    async def _settle(
        self,
        prepared: list[tuple[str, bytes, dict[str, str]]],
        acks: list[api.PubAck | None],
        start: int,
        futures: list[asyncio.Future | None],
        retries: int,
    ) -> None:
        live = [f for f in futures if f is not None]
        if live:
            _, not_done = await asyncio.wait(live, timeout=self.publish_timeout_s)
            for f in not_done:
                f.cancel()
        redo: list[int] = []
        for i, f in enumerate(futures):
            if f is not None and f.done() and not f.cancelled() and f.exception() is None:
                ack = f.result()
                acks[start + i] = ack
                self._count_published(ack)
            elif f is not None and f.done() and not f.cancelled() and not isinstance(f.exception(), _RETRYABLE):
                raise BusError(f"publish to {prepared[start + i][0]} rejected: {f.exception()!r}")
            else:
                redo.append(start + i)
        if redo:
            log.warning("publish acks missing, retrying", extra={"count": len(redo)})
            results = await asyncio.gather(*(self._publish_raw(*prepared[i], retries) for i in redo))
            for i, ack in zip(redo, results):
                acks[i] = ack

    async def publish_core(self, subject: str, msg: Message) -> None:
        """Plain NATS publish (not stored): for signals whose loss is harmless."""
        data, headers = self._encode(msg)
        await self.nc.publish(self.wire_subject(subject), data, headers=headers)

    async def subscribe_core(
        self, subject: str, schema: type[M], handler: Callable[[Delivery[M]], Awaitable[Any]], queue: str = ""
    ) -> Any:
        """Plain NATS subscription for publish_core signals; invalid messages are dead-lettered."""

        async def on_msg(m: Msg) -> None:
            try:
                msg = self._decode_judged(schema, m)
            except (SchemaError, bounds.OutOfRange) as exc:
                await self._dead_letter(m, exc, schema, stream="")
                return
            delivery = Delivery(
                subject=self.local_subject(m.subject), msg=msg, stream_seq=0, headers=dict(m.headers or {})
            )
            try:
                await handler(delivery)
            except Exception:
                log.exception("core subscription handler failed", extra={"subject": m.subject})

        await self.ensure_stream(subjects.DEADLETTER_STREAM)
        return await self.nc.subscribe(self.wire_subject(subject), queue=queue, cb=on_msg)

    def judge(self, msg: M, wire_subject: str) -> M:
        """`msg` when its values are possible (bounds.check), else OutOfRange."""
        bounds.check(msg, self.local_subject(wire_subject), self.clock())
        return msg

    def _decode_judged(self, schema: type[M], m: Msg) -> M:
        """Decode and judge one message: SchemaError or OutOfRange for a dead letter."""
        return self.judge(decode(schema, m.data), m.subject)

    async def _dead_letter(
        self, m: Msg, exc: SchemaError | bounds.OutOfRange, schema: type[Message], stream: str
    ) -> bool:
        """Send the raw message with the reason to koord.deadletter.<service>; False if that failed."""
        raw = m.data[:_DEADLETTER_RAW_MAX]
        reason = str(exc) if len(raw) == len(m.data) else f"{exc} (raw truncated from {len(m.data)} bytes)"
        letter = DeadLetter(
            service=self.service,
            subject=self.local_subject(m.subject),
            reason=reason,
            raw_b64=base64.b64encode(raw).decode(),
            headers={str(k): str(v) for k, v in (m.headers or {}).items()},
        )
        try:
            await self.publish(subjects.deadletter(self.service), self.stamp(letter), retries=3)
        except Exception as err:  # noqa: BLE001 - the caller keeps the message for redelivery instead
            log.error("dead letter not published", extra={"subject": m.subject, "reason": reason, "error": repr(err)})
            return False
        kind = exc.kind if isinstance(exc, bounds.OutOfRange) else reason_kind(schema, m.data)
        DEADLETTERED.labels(self.service, stream, kind).inc()
        log.warning("message dead-lettered", extra={"subject": letter.subject, "reason": reason, "kind": kind})
        return True

    # ------------------------------------------------------------------ consuming

    async def consume(
        self,
        stream: StreamRef,
        durable: str,
        filter_subject: str,
        schema: type[M],
        handler: Handler[M],
        batch: int = 256,
        max_wait_s: float = 1.0,
        ack_wait_s: float = 30,
        max_deliver: int = -1,
        nak_delay_s: float = 1.0,
    ) -> Consumer[M]:
        """Start a durable pull consumer; processes sharing `durable` split the messages."""
        subjects.validate_token(durable)
        if isinstance(stream, StreamSpec):
            await self.ensure_stream(stream)
        await self.ensure_stream(subjects.DEADLETTER_STREAM)
        consumer = Consumer(
            self,
            stream,
            durable,
            filter_subject,
            schema,
            handler,
            batch,
            max_wait_s,
            ack_wait_s,
            max_deliver,
            nak_delay_s,
        )
        await consumer.start()
        self._consumers.add(consumer)
        return consumer

    async def consume_group(
        self,
        stream: StreamSpec,
        group: str,
        per_node_subjects: str,
        schema: type[M],
        handler: Handler[M],
        member: int,
        members: int,
        partitions: int = 12,
        **options: Any,
    ) -> list[Consumer[M]]:
        """Member `member` of `members` of a partitioned consumer group: the messages of one node
        always go to the same member, in order, and the members split the nodes.

        `per_node_subjects` names one subject per node with a single wildcard (`koord.nodemetric.*`).
        The server does the partitioning: the group's work-queue stream `<stream>_<GROUP>` sources
        `stream` through a subject transform that appends `partition(partitions)` of the node
        token (a hash the server computes), so the source's subjects stay as they are. Each
        partition has one durable consumer, `<group>-p<i>`; member m pulls the partitions
        i with i % members == m. Handlers see the subjects as published. Needs NATS 2.10 or later.
        """
        subjects.validate_token(group)
        if not 0 <= member < members <= partitions:
            raise ValueError(f"member {member} of {members} over {partitions} partitions is not a group")
        if per_node_subjects.count("*") != 1 or not per_node_subjects.endswith(".*"):
            raise ValueError(f"{per_node_subjects!r}: one subject per node, the node its last token ('a.b.*')")
        await self.ensure_stream(stream)
        await self.ensure_stream(subjects.DEADLETTER_STREAM)
        work_name = f"{stream.name}_{group.upper().replace('-', '_')}"
        work = self.wire_stream(work_name)
        wire = self.wire_subject(per_node_subjects)
        source = api.StreamSource(name=self.wire_stream(stream), subject_transforms=[
            api.SubjectTransform(src=wire, dest=f"{wire[:-2]}.{{{{wildcard(1)}}}}.{{{{partition({partitions},1)}}}}")])
        config = api.StreamConfig(name=work, subjects=[], retention=api.RetentionPolicy.WORK_QUEUE,
                                  storage=api.StorageType.FILE, num_replicas=self.stream_replicas, sources=[source],
                                  max_age=float(stream.max_age_s or 0))  # fmt: skip
        try:
            info = await self.js.add_stream(config)
        except nats.js.errors.BadRequestError:
            info = await self.js.stream_info(work)  # it exists (another member created it)
        if not any(src.subject_transforms for src in info.config.sources or []):
            # A server before 2.10 stores the source without its transform: no message would carry
            # a partition, every member would wait for ever and its nodes degrade without a word.
            await _quietly(self.js.delete_stream(work))  # nor would it keep a copy of every message
            raise RuntimeError(
                f"consumer group {group!r} needs nats-server 2.10 or later (stream subject transforms); "
                f"the server at {redact_url(self.url)} is {_version(self.nc)} and kept "
                f"stream {work} without its partition transform"
            )
        out = []
        for p in range(member, partitions, members):
            consumer = Consumer(self, work_name, f"{group}-p{p}", f"{per_node_subjects[:-2]}.*.{p}", schema, handler,
                                partition_token=True, **_consumer_options(options))  # fmt: skip
            await consumer.start()
            self._consumers.add(consumer)
            out.append(consumer)
        return out

    async def tail(
        self, stream: StreamRef, filter_subject: str, schema: type[M], deliver: Deliver = "all", batch: int = 256
    ) -> AsyncIterator[Delivery[M]]:
        """Messages of the stream matching the filter in stream order, then new ones as they come;
        survives reconnects and server restarts without gaps or repeats. deliver: "all" from the
        start, "last_per_subject" the latest of each subject first, "new" only what is stored
        after the first iteration step (the consumer is created then)."""
        label = _stream_name(stream)
        if isinstance(stream, StreamSpec):
            await self.ensure_stream(stream)
        await self.ensure_stream(subjects.DEADLETTER_STREAM)
        async for m in self._ordered(self.wire_stream(stream), self.wire_subject(filter_subject), deliver, batch):
            try:
                msg = self._decode_judged(schema, m)
            except (SchemaError, bounds.OutOfRange) as exc:
                await self._dead_letter(m, exc, schema, label)
                continue
            yield self._delivery(m, msg)

    async def _ordered(self, wire_stream: str, wire_filter: str, deliver: Deliver, batch: int) -> AsyncIterator[Msg]:
        """Ephemeral ack-less pull consumer, re-created from the last stream sequence seen whenever
        it disappears (server restart, inactivity) or its consumer sequence shows a gap."""
        policies = {
            "all": api.DeliverPolicy.ALL,
            "last_per_subject": api.DeliverPolicy.LAST_PER_SUBJECT,
            "new": api.DeliverPolicy.NEW,
        }
        if deliver not in policies:
            raise ValueError(f"deliver must be one of {sorted(policies)}, not {deliver!r}")
        last_seq = 0
        started = False
        last_warning = -math.inf
        while not self._closed:
            name = self.nc._nuid.next().decode()
            config = api.ConsumerConfig(
                name=name,
                ack_policy=api.AckPolicy.NONE,
                filter_subject=wire_filter,
                inactive_threshold=60,
                mem_storage=True,
                num_replicas=1,
            )
            if started:
                config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
                config.opt_start_seq = last_seq + 1
            else:
                config.deliver_policy = policies[deliver]
            try:
                info = await self.js.add_consumer(wire_stream, config)
                sub = await self.js.pull_subscribe_bind(consumer=name, stream=wire_stream)
            except Exception as exc:  # noqa: BLE001 - the tail retries until the stream exists and the server answers
                _stop_if_cancelling()
                if time.monotonic() - last_warning >= 30:  # e.g. waiting for the stream's owner to create it
                    last_warning = time.monotonic()
                    log.warning(
                        "tail: cannot create consumer, retrying", extra={"stream": wire_stream, "error": repr(exc)}
                    )
                await asyncio.sleep(1.0)
                continue
            if not started:
                started = True
                if deliver == "new":
                    last_seq = info.delivered.stream_seq or 0
            expected_cseq = 1
            last_check, seen_reconnects = time.monotonic(), self.reconnects
            try:
                while True:
                    try:
                        msgs = await sub.fetch(batch, timeout=1.0)
                    except TimeoutError:
                        _stop_if_cancelling()
                        msgs = []
                    except Exception as exc:  # noqa: BLE001 - a failed fetch is retried; the tail must outlive server restarts
                        _stop_if_cancelling()
                        if self._closed:
                            return
                        log.warning("tail: fetch failed", extra={"stream": wire_stream, "error": repr(exc)})
                        msgs = []
                        await asyncio.sleep(0.5)
                    gap = False
                    for m in msgs:
                        md = m.metadata
                        if md.sequence.consumer != expected_cseq:
                            gap = True  # a pull answer was lost (ack-less: the server counts it delivered)
                            break
                        expected_cseq += 1
                        if md.sequence.stream <= last_seq:
                            continue
                        last_seq = md.sequence.stream
                        yield m
                    if gap or self._closed:
                        break
                    now = time.monotonic()
                    if seen_reconnects == self.reconnects and now - last_check < _CHECK_INTERVAL_S:
                        continue
                    last_check, seen_reconnects = now, self.reconnects
                    try:
                        await self.js.consumer_info(wire_stream, name, timeout=2)
                    except nats.js.errors.NotFoundError:
                        log.info("tail: consumer gone, re-creating", extra={"stream": wire_stream})
                        break
                    except Exception:  # noqa: BLE001 - a failed fetch is retried; the tail must outlive server restarts
                        _stop_if_cancelling()
                        continue
            finally:
                if self.connected:
                    await _quietly(sub.unsubscribe())
                    await _quietly(self.js.delete_consumer(wire_stream, name))

    # ------------------------------------------------------------------ KV

    async def ensure_kv(self, bucket: str, history: int = 1) -> KeyValue:
        name = self.wire_bucket(bucket)
        try:
            kv = await self.js.key_value(name)
        except nats.js.errors.BucketNotFoundError:
            try:
                kv = await self.js.create_key_value(bucket=name, history=history, replicas=self.stream_replicas)
            except nats.js.errors.BadRequestError:
                kv = await self.js.key_value(name)  # created concurrently
        self._kvs[bucket] = kv
        return kv

    async def _kv(self, bucket: str) -> KeyValue:
        kv = self._kvs.get(bucket)
        return kv if kv is not None else await self.ensure_kv(bucket)

    async def kv_put(self, bucket: str, key: str, value: bytes) -> int:
        """Store value under key (the bucket is created on first use); returns the revision."""
        kv = await self._kv(bucket)
        return await self._retrying(lambda: kv.put(key, value), f"kv put {bucket}/{key}")

    async def kv_get(self, bucket: str, key: str) -> bytes | None:
        kv = await self._kv(bucket)
        try:
            entry = await self._retrying(lambda: kv.get(key), f"kv get {bucket}/{key}")
        except nats.js.errors.KeyNotFoundError:
            return None
        return entry.value

    async def kv_delete(self, bucket: str, key: str) -> None:
        kv = await self._kv(bucket)
        await self._retrying(lambda: kv.delete(key), f"kv delete {bucket}/{key}")

    async def kv_watch(
        self, bucket: str, key: str = ">", create: bool = True
    ) -> AsyncIterator[tuple[str, bytes | None]]:
        """Current value of every key (or of `key` alone), then each change; None when a key is
        deleted. `create=False` leaves the bucket to its owner and waits until it exists (a
        reader whose identity may not create it)."""
        if create:
            await self._kv(bucket)
        wire = self.wire_bucket(bucket)
        prefix = f"$KV.{wire}."
        async for m in self._ordered(f"KV_{wire}", f"{prefix}{key}", "last_per_subject", 256):
            op = (m.headers or {}).get(KV_OPERATION_HEADER)
            yield m.subject[len(prefix) :], (None if op in ("DEL", "PURGE") else m.data)

    async def _retrying(self, op: Callable[[], Awaitable[Any]], what: str, retries: int = 5) -> Any:
        delay = 0.1
        for attempt in range(retries + 1):
            try:
                return await op()
            except _RETRYABLE as exc:
                if attempt == retries:
                    raise BusError(f"{what} failed after {retries + 1} attempts: {exc!r}") from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)


class Consumer(Generic[M]):
    """A running durable pull consumer (see Bus.consume)."""

    def __init__(
        self,
        bus: Bus,
        stream: StreamRef,
        durable: str,
        filter_subject: str,
        schema: type[M],
        handler: Handler[M],
        batch: int,
        max_wait_s: float,
        ack_wait_s: float,
        max_deliver: int,
        nak_delay_s: float,
        partition_token: bool = False,
    ) -> None:
        self._bus = bus
        self.partition_token = partition_token  # a consumer group's stream appends the partition
        self._spec = stream if isinstance(stream, StreamSpec) else None
        self.stream = _stream_name(stream)
        self._wire_stream = bus.wire_stream(stream)
        self.durable = durable
        self.filter_subject = filter_subject
        self.schema = schema
        self.handler = handler
        self.batch = batch
        self.max_wait_s = max_wait_s
        self.ack_wait_s = ack_wait_s
        self.max_deliver = max_deliver
        self.nak_delay_s = nak_delay_s
        self.healthy = False
        self.lag: int | None = None  # messages not yet delivered to this durable, refreshed every few s
        self.handled = 0
        self._sub: Any = None
        self._task: asyncio.Task | None = None
        self._running = asyncio.Event()
        self._running.set()
        self._stop = asyncio.Event()
        self._last_check = 0.0
        self._seen_reconnects = bus.reconnects
        self._consumed = CONSUMED.labels(bus.service, self.stream)

    def _config(self) -> api.ConsumerConfig:
        return api.ConsumerConfig(
            name=self.durable,
            durable_name=self.durable,
            deliver_policy=api.DeliverPolicy.ALL,
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait_s,
            max_deliver=self.max_deliver,
            filter_subject=self._bus.wire_subject(self.filter_subject),
            max_ack_pending=max(1000, 4 * self.batch),
        )

    async def _ensure(self) -> None:
        if self._spec is not None:
            await self._bus.ensure_stream(self._spec)
        # As the stream's check: a server restarting while the service starts answers late or not
        # at all, so the creation is asked again for about 15 s before the service gives up.
        await self._bus._retrying(self._add_consumer, f"creating consumer {self.durable}", retries=12)

    async def _add_consumer(self) -> None:
        js = self._bus.js
        try:
            await js.add_consumer(self._wire_stream, self._config())
        except nats.js.errors.BadRequestError as exc:
            # An existing durable whose settings cannot change in place: keep using it as it is.
            await js.consumer_info(self._wire_stream, self.durable)
            log.warning("durable kept with its existing settings", extra={"durable": self.durable, "error": str(exc)})

    async def start(self) -> None:
        await self._ensure()
        self._sub = await self._bus.js.pull_subscribe_bind(durable=self.durable, stream=self._wire_stream)
        self.healthy = True
        self._task = asyncio.create_task(self._run(), name=f"consume {self.stream}/{self.durable}")

    def pause(self) -> None:
        """No new batch is fetched until resume() (the current one finishes)."""
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    async def stop(self, timeout_s: float | None = None) -> None:
        """Finish the in-flight batch, then return; after timeout_s the batch is abandoned
        (its messages are redelivered once ack_wait expires)."""
        self._stop.set()
        self._running.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout_s)
            except TimeoutError:
                self._task.cancel()
                await asyncio.wait([self._task], timeout=5)
            except Exception:
                log.exception("consumer task failed", extra={"durable": self.durable})
        if self._sub is not None and self._bus.connected:
            await _quietly(self._sub.unsubscribe())
        self.healthy = False
        self._bus._consumers.discard(self)

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except TimeoutError:
            pass

    async def _run(self) -> None:
        backoff = 0.2
        while not self._stop.is_set():
            await self._running.wait()
            if self._stop.is_set():
                break
            try:
                msgs = await self._sub.fetch(self.batch, timeout=self.max_wait_s)
            except TimeoutError:
                _stop_if_cancelling()
                msgs = []
            except Exception as exc:  # noqa: BLE001 - a failed fetch marks the consumer unhealthy and is retried
                _stop_if_cancelling()
                self.healthy = False
                if self._bus._closed:
                    break
                log.warning("fetch failed", extra={"durable": self.durable, "stream": self.stream, "error": repr(exc)})
                await self._sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                await self._check(force=True)
                continue
            backoff = 0.2
            if msgs:
                try:
                    await self._process(msgs)
                except Exception:  # the loop must outlive any surprise; unacked messages come back
                    self.healthy = False
                    log.exception("batch processing failed", extra={"durable": self.durable, "stream": self.stream})
                    await self._sleep(1.0)
            await self._check(force=not msgs and self._bus.reconnects != self._seen_reconnects)

    async def _check(self, force: bool = False) -> None:
        """Refresh lag/health; re-create the durable if it vanished (e.g. server lost its store)."""
        now = time.monotonic()
        if not force and now - self._last_check < _CHECK_INTERVAL_S:
            return
        self._last_check, self._seen_reconnects = now, self._bus.reconnects
        try:
            info = await self._bus.js.consumer_info(self._wire_stream, self.durable, timeout=2)
            self.lag = info.num_pending
            self.healthy = self._bus.connected
        except nats.js.errors.NotFoundError:
            log.warning("durable consumer gone, re-creating", extra={"durable": self.durable, "stream": self.stream})
            try:
                await self._ensure()
                self.healthy = True
            except Exception as exc:  # noqa: BLE001 - reported through `healthy`, retried on the next check
                self.healthy = False
                log.warning("durable not re-created yet", extra={"durable": self.durable, "error": repr(exc)})
        except Exception:  # noqa: BLE001 - reported through `healthy`, retried on the next check
            self.healthy = False

    async def _process(self, msgs: list[Msg]) -> None:
        bus = self._bus
        good: list[Msg] = []
        retry: list[Msg] = []  # not dead-lettered (the bus failed): handed back after the pause
        deliveries: list[Delivery[M]] = []
        msgs = _latest_deliveries(msgs)
        for m, msg in zip(msgs, decode_all(self.schema, [m.data for m in msgs])):
            published = m.subject.rsplit(".", 1)[0] if self.partition_token else m.subject
            if not isinstance(msg, SchemaError):
                try:
                    bus.judge(msg, published)
                except bounds.OutOfRange as exc:
                    msg = exc
            if isinstance(msg, (SchemaError, bounds.OutOfRange)):
                if await bus._dead_letter(m, msg, self.schema, self.stream):
                    await _quietly(m.term())
                else:
                    retry.append(m)
                continue
            good.append(m)
            deliveries.append(bus._delivery(m, msg, published))
        if not deliveries:
            await self._hand_back(retry)
            return
        keepalive = asyncio.create_task(self._keep_in_progress(good))
        try:
            await self.handler(deliveries)
        except Exception:
            HANDLER_ERRORS.labels(bus.service, self.stream).inc()
            log.exception(
                "batch handler failed; messages will be redelivered",
                extra={"durable": self.durable, "stream": self.stream, "count": len(good)},
            )
            await self._hand_back(retry + good)
            return
        finally:
            keepalive.cancel()
        try:
            # The server applies one connection's acks to a consumer in order: the confirmed
            # last ack means the ones before it are applied too, for one round trip per batch.
            for m in good[:-1]:
                await m.ack()
            await good[-1].ack_sync(timeout=bus.publish_timeout_s)
        except Exception as exc:  # noqa: BLE001 - unconfirmed acks only mean a redelivery, which handlers tolerate
            log.warning(
                "acks not confirmed; the batch may be redelivered",
                extra={"durable": self.durable, "count": len(good), "error": repr(exc)},
            )
        self.handled += len(good)
        self._consumed.inc(len(good))
        await self._hand_back(retry)

    async def _hand_back(self, msgs: Sequence[Msg]) -> None:
        """Messages this process could not finish are redelivered after nak_delay_s.

        The consumer pauses for the delay, then naks without one: a failing handler or dead-letter
        publish means a dependency is down, so fetching more work meanwhile would only fail too.
        A NAK carrying a delay is not used because nats-server 2.9 (Debian 12's package) mixes up
        the delayed redeliveries of a batch: one message came back twice and another not until
        ack_wait expired, 30 s later.
        """
        if not msgs:
            return
        await self._sleep(self.nak_delay_s)
        await asyncio.gather(*(m.nak() for m in msgs), return_exceptions=True)

    async def _keep_in_progress(self, msgs: Sequence[Msg]) -> None:
        """A handler slower than ack_wait must not see its batch redelivered to another process."""
        while True:
            await asyncio.sleep(max(self.ack_wait_s / 3, 0.5))
            await asyncio.gather(*(m.in_progress() for m in msgs), return_exceptions=True)


def partition_of(node: str, partitions: int) -> int:
    """The partition the server's subject transform `partition(n, ...)` gives a node's subjects
    (FNV-1a 32 of the token, modulo n): a consumer group member knows the nodes it owns before
    any of their messages came (the slo-controller degrades a silent node it owns)."""
    h = 0x811C9DC5
    for byte in subjects.encode_token(node).encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h % partitions


def _consumer_options(options: dict[str, Any]) -> dict[str, Any]:
    """Consumer's tuning arguments, defaults as Bus.consume has them."""
    known = {"batch": 256, "max_wait_s": 1.0, "ack_wait_s": 30, "max_deliver": -1, "nak_delay_s": 1.0}
    unknown = set(options) - set(known)
    if unknown:
        raise TypeError(f"unknown consumer options: {sorted(unknown)}")
    return {**known, **options}


def _latest_deliveries(msgs: list[Msg]) -> list[Msg]:
    """One delivery per stream message: the newest (its ack token is the current one).

    Under load a pull request that timed out on the client is still served by the server and
    its messages arrive with the next fetch, beside their redelivery; without this a handler
    would see the same message twice in one batch.
    """
    by_seq: dict[int, Msg] = {}
    for m in msgs:
        seq = m.metadata.sequence.stream
        prev = by_seq.get(seq)
        if prev is None or m.metadata.num_delivered > prev.metadata.num_delivered:
            by_seq[seq] = m
    if len(by_seq) == len(msgs):
        return msgs
    return sorted(by_seq.values(), key=lambda m: m.metadata.sequence.stream)


def _stop_if_cancelling() -> None:
    """nats-py's fetch waits with asyncio.wait_for, which can turn a cancellation into a
    TimeoutError; a loop that retries on timeouts must still stop when its task is cancelled."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _version(nc: NATS) -> str:
    v = nc.connected_server_version
    return f"{v.major}.{v.minor}.{v.patch}"


async def _quietly(aw: Awaitable[Any]) -> None:
    try:
        await aw
    except Exception:  # noqa: BLE001, S110 - best-effort cleanup of something already failing
        pass
