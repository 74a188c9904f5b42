"""Every bus subject, stream and KV bucket of the system (DESIGN.md section 2), in one place."""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "koord"

_TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")


class InvalidToken(ValueError):
    pass


def encode_token(name: str) -> str:
    """A Kubernetes name as one subject token: dots (legal in node names) become `_d_`.

    Underscores are legal in tokens but not in Kubernetes names, so the encoding is
    reversible.
    """
    token = name.replace(".", "_d_")
    if not _TOKEN.match(token):
        raise InvalidToken(f"{name!r} cannot be a subject token (allowed: letters, digits, '-', '_', '.')")
    return token


def decode_token(token: str) -> str:
    return token.replace("_d_", ".")


def validate_token(token: str) -> str:
    if not _TOKEN.match(token):
        raise InvalidToken(f"{token!r} is not a valid subject token")
    return token


def metrics(node: str) -> str:
    return f"{PREFIX}.metrics.{encode_token(node)}"


def nodemetric(node: str) -> str:
    return f"{PREFIX}.nodemetric.{encode_token(node)}"


def noderesource(node: str) -> str:
    return f"{PREFIX}.noderesource.{encode_token(node)}"


def nodetopology(node: str) -> str:
    return f"{PREFIX}.nodetopology.{encode_token(node)}"


def nodeslo(node: str) -> str:
    return f"{PREFIX}.nodeslo.{encode_token(node)}"


def recommendation(namespace: str, owner: str) -> str:
    return f"{PREFIX}.recommendation.{encode_token(namespace)}.{encode_token(owner)}"


def event(kind: str, node: str) -> str:
    return f"{PREFIX}.events.{validate_token(kind)}.{encode_token(node)}"


def deadletter(service: str) -> str:
    return f"{PREFIX}.deadletter.{validate_token(service)}"


def sim(kind: str) -> str:
    """Mutations of the simulated cluster, replayed by every process that holds a replica."""
    return f"{PREFIX}.sim.{validate_token(kind)}"


def inbox_prefix(service: str, node: str | None = None) -> str:
    """Where a client's replies arrive: `_INBOX.<service>[.<node>]`. With authorization on, each
    identity may subscribe only below its own prefix, so no client reads another's replies
    (JetStream acks, KV reads and pulled messages all travel as replies)."""
    return f"_INBOX.{validate_token(service)}" + (f".{encode_token(node)}" if node else "")


def namespaced_subject(namespace: str, subject: str) -> str:
    """A subject as sent on the wire: `<namespace>.<subject>` (namespaces isolate tests and tenants)."""
    return f"{namespace}.{subject}" if namespace else subject


def namespaced_stream(namespace: str, name: str) -> str:
    return f"{namespace}_{name}" if namespace else name


def namespaced_bucket(namespace: str, bucket: str) -> str:
    return f"{namespace}-{bucket}" if namespace else bucket


def node_of(subject: str) -> str:
    """The node name a per-node subject is about (its last token, decoded)."""
    return decode_token(subject.rsplit(".", 1)[-1])


# Event kinds on koord.events.<kind>.<node>
EVENT_QOS = "qos"  # cgroup writes: suppress, burst, group identity, memory QoS
EVENT_EVICT = "evict"  # node-agent evictions (CPU satisfaction, memory)
EVENT_DESCHEDULE = "deschedule"
EVENT_MUTATE = "mutate"  # admission webhook
EVENT_SCHEDULE = "schedule"  # extender placements, reservations


@dataclass(frozen=True)
class StreamSpec:
    name: str
    subjects: tuple[str, ...]
    max_age_s: float = 0  # 0 = unlimited
    max_bytes: int = -1
    duplicate_window_s: float = 120


# Streams are declared idempotently by whoever consumes them (and by producers that want
# their messages kept before a consumer first appears).
METRICS_STREAM = StreamSpec("KOORD_METRICS", (f"{PREFIX}.metrics.>",), max_age_s=24 * 3600)
NODEMETRIC_STREAM = StreamSpec("KOORD_NODEMETRIC", (f"{PREFIX}.nodemetric.>",), max_age_s=24 * 3600)
NODERESOURCE_STREAM = StreamSpec("KOORD_NODERESOURCE", (f"{PREFIX}.noderesource.>",), max_age_s=7 * 24 * 3600)
NODETOPOLOGY_STREAM = StreamSpec("KOORD_NODETOPOLOGY", (f"{PREFIX}.nodetopology.>",), max_age_s=7 * 24 * 3600)
RECOMMENDATION_STREAM = StreamSpec("KOORD_RECOMMENDATION", (f"{PREFIX}.recommendation.>",), max_age_s=7 * 24 * 3600)
EVENTS_STREAM = StreamSpec("KOORD_EVENTS", (f"{PREFIX}.events.>",), max_age_s=7 * 24 * 3600)
DEADLETTER_STREAM = StreamSpec("KOORD_DEADLETTER", (f"{PREFIX}.deadletter.>",), max_age_s=7 * 24 * 3600)
SIM_STREAM = StreamSpec("KOORD_SIM", (f"{PREFIX}.sim.>",))
ALL_STREAMS = (
    METRICS_STREAM,
    NODEMETRIC_STREAM,
    NODERESOURCE_STREAM,
    NODETOPOLOGY_STREAM,
    RECOMMENDATION_STREAM,
    EVENTS_STREAM,
    DEADLETTER_STREAM,
    SIM_STREAM,
)

NODESLO_BUCKET = "koord-nodeslo"
