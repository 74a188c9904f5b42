"""Who may do what on the bus: one table of roles, written once, turned into the NATS server's
authorization block (nkey users with publish / subscribe permissions) and into each client's
connection options (its nkey seed, its own reply inbox, TLS).

A role's permissions are templates over the installation's namespace and, for the node agent,
its node: a node agent may publish only `koord.metrics.<its node>`, `koord.nodemetric.<its
node>`, `koord.nodetopology.<its node>` and `koord.events.<kind>.<its node>`, and read only its own NodeSLO; nothing else a
forged message could be built from. Every identity receives replies only below its own inbox
prefix (`subjects.inbox_prefix`): JetStream acks, KV reads and pulled messages are replies, so
one client can never read another's.

The control-plane services (collector, slo-controller, recommender, descheduler) are trusted
with the JetStream API (they declare streams, durable consumers and the NodeSLO bucket); the
node agents, on every node of the cluster, and the read-only extender get only the few API
calls their code makes, on their own streams.

`koordctl secure init` (and the embedded demo) writes a server configuration from this table;
the Helm chart renders the same permissions from `permissions.json`, generated from here and
held equal by a test.

A cluster's servers talk to each other on their route port, where no nkey user applies: a
process that joins as a server would see and send every subject. The `cluster` block closes it:
routes only over TLS verified both ways against the installation's CA (each server presents a
certificate for client and server use) and only with the route credential (`RouteCredentials`).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from . import subjects
from .certs import write_secret

__all__ = [
    "ROLES",
    "ROUTE_USER",
    "BusCredentials",
    "Identity",
    "Role",
    "RouteCredentials",
    "cluster_config",
    "new_seed",
    "permissions",
    "public_key",
    "server_config",
]

NODE = "{node}"  # the node a node agent speaks for; `>` for a simulated agent that drives them all

# Streams and the bucket by their un-namespaced names (subjects.*_STREAM, NODESLO_BUCKET).
_METRICS, _NODEMETRIC, _EVENTS = subjects.METRICS_STREAM.name, subjects.NODEMETRIC_STREAM.name, subjects.EVENTS_STREAM.name
_NODERESOURCE, _RECOMMENDATION = subjects.NODERESOURCE_STREAM.name, subjects.RECOMMENDATION_STREAM.name
_NODETOPOLOGY = subjects.NODETOPOLOGY_STREAM.name
_DEADLETTER, _SIM = subjects.DEADLETTER_STREAM.name, subjects.SIM_STREAM.name
_KV_STREAM = "KV_{bucket}"


@dataclass(frozen=True)
class Role:
    """What one kind of client may do. Subjects are un-namespaced; `{node}` is the agent's node,
    `{bucket}` the NodeSLO bucket's wire name, `{ns}` the subject prefix ("" or "<namespace>.")."""

    name: str
    publish: tuple[str, ...] = ()  # message subjects it may publish (JetStream publishes included)
    jetstream_admin: bool = False  # the whole JetStream API and acks
    streams_declared: tuple[str, ...] = ()  # streams it may create and look up (not change)
    streams_read: tuple[str, ...] = ()  # streams it may read through its own ordered consumers
    kv_read: str = ""  # the NodeSLO keys it may read (a key or `>`); "" = none
    kv_write: bool = False  # writes NodeSLOs
    doc: str = ""


_PREFIX = subjects.PREFIX

ROLES: dict[str, Role] = {
    r.name: r
    for r in (
        Role(
            "node-agent",
            publish=(f"{_PREFIX}.metrics.{NODE}", f"{_PREFIX}.nodemetric.{NODE}", f"{_PREFIX}.nodetopology.{NODE}",
                     f"{_PREFIX}.events.*.{NODE}"),
            streams_declared=(_METRICS, _NODEMETRIC, _NODETOPOLOGY, _EVENTS),
            kv_read=NODE,
            doc="publishes its node's samples, NodeMetric, CPU topology and QoS events; reads its own NodeSLO",
        ),
        Role(
            "metrics-collector",
            jetstream_admin=True,
            doc="reads every stream into the database",
        ),
        Role(
            "slo-controller",
            publish=(f"{_PREFIX}.noderesource.*", f"{_PREFIX}.events.*.*"),
            jetstream_admin=True,
            kv_write=True,
            doc="publishes NodeResources and writes every NodeSLO; reads NodeMetrics",
        ),
        Role(
            "scheduler-extender",
            streams_declared=(_NODEMETRIC, _NODERESOURCE, _NODETOPOLOGY, _RECOMMENDATION),
            streams_read=(_NODEMETRIC, _NODERESOURCE, _NODETOPOLOGY, _RECOMMENDATION),
            doc="only reads (NodeMetrics, NodeResources, CPU topologies, recommendations)",
        ),
        Role(
            "descheduler",
            publish=(f"{_PREFIX}.events.deschedule.*",),
            jetstream_admin=True,
            doc="reads NodeMetrics, publishes its deschedule events",
        ),
        Role(
            "recommender",
            publish=(f"{_PREFIX}.recommendation.>",),
            jetstream_admin=True,
            doc="reads samples through its durable consumer, publishes recommendations",
        ),
        Role(
            "koordctl",
            streams_read=(_EVENTS, _NODEMETRIC),
            doc="the command line: follows events and NodeMetrics",
        ),
        Role(
            "sim-driver",
            streams_read=(_NODEMETRIC,),
            doc="plays kube-scheduler and the batch users for the simulated cluster",
        ),
    )
}

# The simulated cluster is itself carried on the bus: every process that holds a replica reads
# and writes its mutations. A deployment on the sim backend adds these to every role.
_SIM_PUBLISH = (f"{_PREFIX}.sim.>",)
_SIM_STREAMS = (_SIM,)


def _api(*parts: str) -> str:
    return "$JS.API." + ".".join(parts)


def permissions(role: str | Role, node: str | None = None, namespace: str = "", sim: bool = False) -> dict[str, Any]:
    """The NATS permissions map of one identity: {"publish": {"allow": [...]}, "subscribe": {...}}.

    `node` is the node agent's node (encoded as a subject token); None for a simulated agent,
    which speaks for every node.
    """
    r = ROLES[role] if isinstance(role, str) else role
    node_token = subjects.encode_token(node) if node else ">"
    ns = f"{namespace}." if namespace else ""
    bucket = subjects.namespaced_bucket(namespace, subjects.NODESLO_BUCKET)

    def stream(name: str) -> str:
        return subjects.namespaced_stream(namespace, name)

    publish = [ns + s.replace(NODE, node_token) for s in (*r.publish, *(_SIM_PUBLISH if sim else ()))]
    publish.append(ns + subjects.deadletter(r.name))
    if r.kv_write:
        publish.append(f"$KV.{bucket}.>")
    declared = {*r.streams_declared, _DEADLETTER, *(_SIM_STREAMS if sim else ())}
    read = {*r.streams_read, *(_SIM_STREAMS if sim else ())}
    if r.jetstream_admin:
        publish += ["$JS.API.>", "$JS.ACK.>"]
    else:
        for s in sorted(declared | read):
            publish.append(_api("STREAM", "INFO", stream(s)))
        for s in sorted(declared):
            publish.append(_api("STREAM", "CREATE", stream(s)))
        for s in sorted(read):
            publish.append(_api("CONSUMER", "CREATE", stream(s), "*", ">"))
        if r.kv_read:
            kv_stream = _KV_STREAM.format(bucket=bucket)
            key = r.kv_read.replace(NODE, node_token)
            read.add(kv_stream)
            publish.append(_api("STREAM", "INFO", kv_stream))
            # The filter is part of the create subject: the server refuses a consumer over any
            # other key (nats-server >= 2.10 checks the subject against the request's filter).
            publish.append(_api("CONSUMER", "CREATE", kv_stream, "*", f"$KV.{bucket}.{key}"))
        for s in sorted(read):
            s_wire = s if s.startswith("KV_") else stream(s)
            for verb in ("MSG.NEXT", "INFO", "DELETE"):
                publish.append(_api("CONSUMER", *verb.split("."), s_wire, "*"))
    inbox = subjects.inbox_prefix(r.name, node)
    return {
        "publish": {"allow": _unique(publish)},
        "subscribe": {"allow": [f"{inbox}.>"]},
    }


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


# --------------------------------------------------------------------------- nkeys


def new_seed() -> bytes:
    """A fresh user nkey seed (`SU...`), the secret a client signs the server's challenge with."""
    import nkeys

    return nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER)


def public_key(seed: bytes | str) -> str:
    """The public user key (`U...`) of a seed: what the server lists; not a secret."""
    import nkeys

    kp = nkeys.from_seed(seed.encode() if isinstance(seed, str) else bytes(seed))
    try:
        return kp.public_key.decode()
    finally:
        kp.wipe()


@dataclass(frozen=True)
class Identity:
    """One client of the bus: its role, the node it speaks for (agents) and its public key."""

    role: str
    public_key: str
    node: str | None = None

    def user(self, namespace: str = "", sim: bool = False) -> dict[str, Any]:
        return {"nkey": self.public_key, "permissions": permissions(self.role, self.node, namespace, sim)}


def server_config(
    identities: Iterable[Identity],
    namespace: str = "",
    sim: bool = False,
    tls: tuple[str, str] | None = None,
    store_dir: str | None = None,
    listen: str | None = None,
    cluster: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A nats-server configuration (JSON, which the server's parser reads) that admits exactly
    these identities with their roles' permissions; TLS when given (cert file, key file); the
    routes to the other servers of a cluster when given (`cluster_config`)."""
    conf: dict[str, Any] = {"authorization": {"users": [i.user(namespace, sim) for i in identities]}}
    if tls is not None:
        conf["tls"] = {"cert_file": tls[0], "key_file": tls[1]}
    if store_dir is not None:
        conf["jetstream"] = {"store_dir": store_dir}
    if listen is not None:
        conf["listen"] = listen
    if cluster is not None:
        conf["cluster"] = cluster
    return conf


ROUTE_USER = "koord-route"
ROUTE_PORT = 6222


@dataclass(frozen=True)
class RouteCredentials:
    """What one server of a cluster shows another on the route port: the shared route password
    and a certificate (client and server use) signed by the CA every server verifies against.
    Every server holds the same; a process without them is refused before it can subscribe."""

    password: str
    cert_file: str
    key_file: str
    ca_file: str
    user: str = ROUTE_USER

    def __repr__(self) -> str:  # never the password in a log line or a traceback
        return f"RouteCredentials(user={self.user!r}, cert_file={self.cert_file!r}, password=***)"


def route_address(host: str) -> str:
    """`host` or `host:port` as host:port (the route port by default)."""
    return host if ":" in host else f"{host}:{ROUTE_PORT}"


def cluster_config(
    name: str, routes: Iterable[str], credentials: RouteCredentials, listen: str = f"0.0.0.0:{ROUTE_PORT}"
) -> dict[str, Any]:
    """The `cluster` block of a server: listen on the route port, admit only the route user over
    mutually verified TLS, and route to every server in `routes` (host or host:port). One block
    serves every server: each may list itself, a route to itself is dropped by the server."""
    c = credentials
    userinfo = f"{quote(c.user, safe='')}:{quote(c.password, safe='')}@"
    return {
        "name": name,
        "listen": listen,
        "authorization": {"user": c.user, "password": c.password, "timeout": 2},
        "tls": {"cert_file": c.cert_file, "key_file": c.key_file, "ca_file": c.ca_file, "verify": True, "timeout": 2},
        "routes": [f"tls://{userinfo}{route_address(r)}" for r in routes],
    }


def permissions_table(sim: bool = False) -> dict[str, Any]:
    """Every role's permissions as templates (node `{node}`, namespace `{ns}`), for the Helm chart."""
    out = {}
    for name in ROLES:
        node = "NODE_PLACEHOLDER" if name == "node-agent" else None
        perms = permissions(name, node, "NS_PLACEHOLDER", sim)
        text = json.dumps(perms).replace("NODE_PLACEHOLDER", "{node}").replace("NS_PLACEHOLDER", "{ns}")
        out[name] = json.loads(text)
    return out


# --------------------------------------------------------------------------- client side


@dataclass(frozen=True)
class BusCredentials:
    """How a client proves who it is and checks the server: an nkey seed file, TLS files.

    Every field is optional: none at all is an open bus (the tests' default). `ca_file` makes the
    connection TLS (verifying the server against that CA); `cert_file` / `key_file` add a client
    certificate for servers that ask for one.
    """

    nkey_seed_file: str = ""
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> BusCredentials:
        env = os.environ if environ is None else environ
        return cls(
            nkey_seed_file=env.get("NATS_NKEY_SEED_FILE", ""),
            ca_file=env.get("NATS_CA_FILE", ""),
            cert_file=env.get("NATS_CERT_FILE", ""),
            key_file=env.get("NATS_KEY_FILE", ""),
        )

    @property
    def authenticated(self) -> bool:
        return bool(self.nkey_seed_file)

    def ssl_context(self) -> ssl.SSLContext | None:
        if not (self.ca_file or self.cert_file):
            return None
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca_file or None)
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file or None)
        return ctx

    def connect_options(self, inbox: str) -> dict[str, Any]:
        """nats-py connect() options: the seed (read by the client, never logged), TLS, the inbox."""
        opts: dict[str, Any] = {}
        if self.nkey_seed_file:
            opts["nkeys_seed"] = self.nkey_seed_file
            opts["inbox_prefix"] = inbox
        ctx = self.ssl_context()
        if ctx is not None:
            opts["tls"] = ctx
        return opts


def write_seed(path: Path, seed: bytes) -> Path:
    write_secret(path, seed + b"\n")
    return path


def redact_url(url: str) -> str:
    """A server URL fit for a log line: user and password (or token) replaced by `***`."""
    out = []
    for part in url.split(","):
        scheme, sep, rest = part.rpartition("://")
        if "@" in rest:
            rest = "***@" + rest.rsplit("@", 1)[1]
        out.append(f"{scheme}{sep}{rest}")
    return ",".join(out)


def token_urlsafe(nbytes: int = 32) -> str:
    """A random bearer token (static-token mode of the REST APIs)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(nbytes)).rstrip(b"=").decode()
