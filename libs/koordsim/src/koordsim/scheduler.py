"""Drives a scheduler extender exactly as kube-scheduler does (k8s-protocols.md section 1).

One cycle per pending pod: in-tree filter -> POST <urlPrefix>/filter -> (two or more nodes
left) in-tree LeastAllocated + POST <urlPrefix>/prioritize x weight x 10 -> highest total
(ties: lowest name, where kube-scheduler picks at random) -> bind through the cluster port.

The extender is reached over HTTP, or in the same process through a `Transport` (verb, request
body) -> (status, reply body), which carries the same bytes without a socket: a replay on
simulated time drives the extender's own verb handlers that way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Self

import httpx
import numpy as np
import orjson
from koordcommon.deferred import Deferred
from koordcommon.kube_codec import node_to_k8s, pod_to_k8s
from koordcommon.records import NodeRecord, PodRecord, ResourceList

from . import fit

log = logging.getLogger(__name__)
MAX_EXTENDER_PRIORITY = 10
# (verb, request body) -> (HTTP status, reply body): the extender without HTTP in between
Transport = Callable[[str, bytes], Awaitable[tuple[int, bytes]]]


class ExtenderError(RuntimeError):
    """The extender failed in a way that fails the scheduling attempt (not 'unschedulable')."""


@dataclass(frozen=True)
class ScheduleResult:
    namespace: str
    name: str
    node: str | None = None
    reasons: Mapping[str, str] = field(default_factory=dict)  # node -> why it was filtered
    message: str = ""
    error: str = ""  # an extender/bind failure: the pod stays in the queue
    scores: Mapping[str, int] = field(default_factory=dict)

    @property
    def scheduled(self) -> bool:
        return self.node is not None


def _go_json(obj: Any) -> bytes:
    """encoding/json style: compact separators, non-ASCII kept (as UTF-8)."""
    return orjson.dumps(obj)


def _ci(obj: Any, key: str) -> Any:
    """Go decodes JSON keys case-insensitively: an exact match first, then any casing."""
    if not isinstance(obj, dict):
        return None
    if key in obj:
        return obj[key]
    low = key.lower()
    for k, v in obj.items():
        if isinstance(k, str) and k.lower() == low:
            return v
    return None


def pod_json(pod: PodRecord) -> dict[str, Any]:
    """The pod as kube-scheduler holds it in memory: no TypeMeta."""
    obj = pod_to_k8s(pod)
    obj.pop("apiVersion", None)
    obj.pop("kind", None)
    return obj


def node_json(node: NodeRecord) -> dict[str, Any]:
    obj = node_to_k8s(node)
    obj.pop("apiVersion", None)
    obj.pop("kind", None)
    return obj


def extender_args(pod: PodRecord, nodes: list[NodeRecord] | None, node_cache_capable: bool,
                  pod_obj: dict[str, Any] | None = None, names: list[str] | None = None) -> dict[str, Any]:
    """ExtenderArgs: `Pod` (`pod_obj` when the caller holds it already), and `NodeNames`
    (cache-capable: `names`, or the nodes') or `Nodes`, the other null."""
    obj = pod_json(pod) if pod_obj is None else pod_obj
    if node_cache_capable:
        return {"Pod": obj, "Nodes": None, "NodeNames": [n.name for n in nodes or ()] if names is None else names}
    return {"Pod": obj, "Nodes": {"metadata": {}, "items": [node_json(n) for n in nodes or ()]}, "NodeNames": None}


class ExtenderScheduler:
    def __init__(
        self,
        cluster: Any,
        extender_url: str,
        node_cache_capable: bool = True,
        timeout_s: float = 5.0,
        weight: int = 1,
        filter_verb: str = "filter",
        prioritize_verb: str = "prioritize",
        managed_resources: tuple[str, ...] = (),
        ignorable: bool = False,
        scheduler_name: str = "default-scheduler",
        percentage_of_nodes_to_score: int = 0,
        client: httpx.AsyncClient | None = None,
        transport: Transport | None = None,
        skip_dominated: bool = False,
        bind_verb: str = "",
    ):
        """`skip_dominated`: in one pass over the queue, a pod asking at least as much as a pod
        of its class found unschedulable in that pass (every request and limit, nothing else
        about the pods differs in this simulation) is not tried: nothing it could use has freed
        since. The outcome is the same; a replay with a long backlog saves the attempts.
        `bind_verb` (kube-scheduler's bindVerb): the extender binds the pods it is interested in
        (`POST <urlPrefix>/<bindVerb>`, ExtenderBindingArgs), as it must to record an allocation
        on the pod; otherwise the scheduler binds through the cluster port."""
        self.cluster = cluster
        self.url_prefix = extender_url.rstrip("/")
        self.node_cache_capable = node_cache_capable
        self.timeout_s = timeout_s or 5.0  # DefaultExtenderTimeout
        self.weight = weight
        self.filter_verb = filter_verb
        self.prioritize_verb = prioritize_verb
        self.managed_resources = set(managed_resources)
        self.ignorable = ignorable
        self.scheduler_name = scheduler_name
        self.percentage = percentage_of_nodes_to_score
        self.transport = transport
        self.skip_dominated = skip_dominated
        self.bind_verb = bind_verb
        self._asks: dict[tuple[str, str], _Asks] = {}
        self._json: dict[tuple[str, str], dict[str, Any]] = {}  # pending pods' JSON, by uid and resourceVersion
        self._client = client or (None if transport is not None else httpx.AsyncClient(timeout=self.timeout_s))
        self._own_client = client is None and transport is None
        self._next_start = 0
        self._cache = _Cache()  # what each node's pods request, kept from pass to pass

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ transport

    async def _send(self, verb: str, args: dict[str, Any]) -> Any:
        url = f"{self.url_prefix}/{verb}"
        if self.transport is not None:
            status, raw = await self.transport(verb, _go_json(args))
        else:
            try:
                resp = await self._client.post(
                    url, content=_go_json(args), headers={"Content-Type": "application/json"}, timeout=self.timeout_s
                )
            except httpx.HTTPError as exc:
                raise ExtenderError(f"failed {verb} with extender at URL {url}: {exc!r}") from exc
            status, raw = resp.status_code, resp.content
        if status != 200:
            raise ExtenderError(f"failed {verb} with extender at URL {url}, code {status}")
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # Go reads one value and ignores what follows it: so does the slower path below
        try:
            return json.JSONDecoder().raw_decode(raw.decode().lstrip())[0]
        except ValueError as exc:
            raise ExtenderError(f"failed {verb} with extender at URL {url}: invalid JSON: {exc}") from exc

    def _args(self, pod: PodRecord, names: list[str], nodes: Callable[[], list[NodeRecord]]) -> dict[str, Any]:
        """The pod's JSON is built once per version while it waits (filter, prioritize, retries);
        the candidates' JSON (`nodes()`) only when the extender is not cache-capable."""
        listed = None if self.node_cache_capable else nodes()
        key = (pod.uid, pod.resource_version)
        if not (pod.uid and pod.resource_version):
            return extender_args(pod, listed, self.node_cache_capable, names=names)
        obj = self._json.get(key)
        if obj is None:
            obj = self._json[key] = pod_json(pod)
        return extender_args(pod, listed, self.node_cache_capable, obj, names)

    def is_interested(self, pod: PodRecord) -> bool:
        if not self.managed_resources:
            return True
        for c in pod.containers + pod.init_containers:
            if self.managed_resources & (set(c.requests) | set(c.limits)):
                return True
        return False

    # ------------------------------------------------------------------ verbs

    async def extender_filter(
        self, pod: PodRecord, nodes: list[NodeRecord]
    ) -> tuple[list[NodeRecord], dict[str, str], dict[str, str]]:
        """(feasible nodes, FailedNodes, FailedAndUnresolvableNodes) as the extender answered."""
        by_name = {n.name: n for n in nodes}
        kept, failed, unresolvable = await self._filter(pod, list(by_name), lambda: nodes)
        return [by_name[k] for k in kept], failed, unresolvable

    async def _filter(self, pod: PodRecord, names: list[str], nodes: Callable[[], list[NodeRecord]]
                      ) -> tuple[list[str], dict[str, str], dict[str, str]]:  # fmt: skip
        """The filter verb over the candidates `names`: (the names kept, FailedNodes,
        FailedAndUnresolvableNodes)."""
        reply = await self._send(self.filter_verb, self._args(pod, names, nodes))
        if not isinstance(reply, dict):
            raise ExtenderError(f"failed {self.filter_verb} with extender at URL {self.url_prefix}: not an object")
        error = _ci(reply, "Error")
        if error:
            raise ExtenderError(str(error))
        sent = set(names)
        got = _ci(reply, "NodeNames")
        node_list = _ci(reply, "Nodes")
        if self.node_cache_capable and got is not None:
            if not isinstance(got, list):  # Go fails to decode it into []string
                raise ExtenderError(f"failed {self.filter_verb} with extender at URL {self.url_prefix}: "
                                    "NodeNames is not an array")  # fmt: skip
            kept = got
            try:
                known = sent.issuperset(kept)
            except TypeError:  # a name that is not a string (a list, an object)
                known = False
            if not known:
                name = next(n for n in kept if not isinstance(n, str) or n not in sent)
                raise ExtenderError(
                    f'extender "{self.url_prefix}" claims a filtered node "{name}" which is not found in the input node list'
                )
        elif node_list is not None:
            kept = []
            for item in _ci(node_list, "items") or []:
                name = _ci(_ci(item, "metadata"), "name")
                if isinstance(name, str) and name in sent:
                    kept.append(name)
        else:
            kept = []  # both null: every node filtered
        unresolvable = {str(k): str(v) for k, v in (_ci(reply, "FailedAndUnresolvableNodes") or {}).items()}
        failed = {str(k): str(v) for k, v in (_ci(reply, "FailedNodes") or {}).items() if k not in unresolvable}
        return kept, failed, unresolvable

    async def extender_prioritize(self, pod: PodRecord, nodes: list[NodeRecord]) -> dict[str, int]:
        """Host -> score x weight x 10; any error means no score from the extender."""
        names = [n.name for n in nodes]
        scores = await self._prioritize(pod, names, lambda: nodes)
        return {} if scores is None else dict(zip(names, scores.tolist(), strict=True))

    async def _prioritize(self, pod: PodRecord, names: list[str], nodes: Callable[[], list[NodeRecord]]
                          ) -> np.ndarray | None:  # fmt: skip
        """The prioritize verb over the candidates `names`: each one's score x weight x 10 (0
        for a candidate the reply leaves out), None when there is no score from the extender."""
        if not self.prioritize_verb or self.weight <= 0:
            return None
        try:
            reply = await self._send(self.prioritize_verb, self._args(pod, names, nodes))
        except ExtenderError as exc:
            log.info("extender prioritize ignored", extra={"error": str(exc)})
            return None
        if not isinstance(reply, list):
            return None
        factor = self.weight * (fit.MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
        try:  # the extender's own reply: every candidate once, in the order asked, integer scores
            hosts = [hp["Host"] for hp in reply]
            scores = [hp["Score"] for hp in reply]
        except (TypeError, KeyError):
            hosts = None
        if hosts == names and set(map(type, scores)) <= {int}:
            return np.array(scores, dtype=np.int64) * factor
        out: dict[str, int] = {}
        candidates = set(names)
        for hp in reply:
            if type(hp) is dict and "Host" in hp and "Score" in hp:  # the extender's own spelling
                host, score = hp["Host"], hp["Score"]
            else:
                host, score = _ci(hp, "Host"), _ci(hp, "Score")
            if isinstance(host, str) and host in candidates and type(score) is int:  # JSON integers (not true/false)
                out[host] = out.get(host, 0) + score * factor
        return np.array([out.get(n, 0) for n in names], dtype=np.int64)

    async def extender_bind(self, pod: PodRecord, node: str) -> None:
        """The extender binds the pod; its `Error` fails the binding (the pod is retried)."""
        reply = await self._send(self.bind_verb, {"PodName": pod.name, "PodNamespace": pod.namespace,
                                                  "PodUID": pod.uid, "Node": node})  # fmt: skip
        error = _ci(reply, "Error")
        if error:
            raise ExtenderError(str(error))

    # ------------------------------------------------------------------ cycles

    async def _snapshot(self, pods: list[PodRecord] | None = None) -> _Snapshot:
        """The cluster as this pass schedules onto it (`pods`: the cluster's pods, when the caller
        listed them already)."""
        nodes = sorted(await self.cluster.list_nodes(), key=lambda n: n.name)
        self._cache.sync(await self.cluster.list_pods() if pods is None else pods)
        return _Snapshot(fit.FitTable(nodes, self._cache.requested, self._cache.nonzero), self._cache)

    async def schedule_pod(self, pod: PodRecord) -> ScheduleResult:
        return await self._cycle(pod, await self._snapshot())

    async def schedule_pending(self, namespace: str | None = None) -> list[ScheduleResult]:
        """Every pending pod of this scheduler, in queue order (priority desc, then creation): the
        result of each pod tried (with `skip_dominated`, the pods passed over have none)."""
        asks: dict[tuple[str, str], _Asks] = {}
        queue: list[tuple[_Asks, PodRecord]] = []
        pods = await self.cluster.list_pods()
        for p in pods:
            if namespace is not None and p.namespace != namespace:
                continue
            if not p.node_name and p.phase == "Pending" and p.deletion_ms is None and p.scheduler_name == self.scheduler_name:
                key = (p.uid, p.resource_version)
                a = asks[key] = self._asks.get(key) or _Asks.of(p)
                queue.append((a, p))
        self._asks = asks  # what a pending pod asks is derived once while it waits
        self._json = {k: v for k, v in self._json.items() if k in asks}
        queue.sort(key=lambda item: item[0].order)
        snap = await self._snapshot(pods)
        results = []
        failed: list[_Asks] = []
        verdicts: dict[tuple, tuple[int, _Asks | None]] = {}  # signature -> (failures checked, blocker)
        for mine, pod in queue:
            if self.skip_dominated:
                signature = mine.signature
                checked, blocker = verdicts.get(signature, (0, None))
                if blocker is None:
                    if checked < len(failed):
                        blocker = next((f for f in failed[checked:] if mine.dominates(f)), None)
                    verdicts[signature] = (len(failed), blocker)
                if blocker is not None:
                    continue  # not tried: a pod asking no more was unschedulable in this pass
            res = await self._cycle(pod, snap, mine.demand)
            if self.skip_dominated and res.node is None and not res.error:
                failed.append(mine)
            results.append(res)
        return results

    def _in_tree_filter(self, snap: _Snapshot, demand: fit.PodDemand) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """kube-scheduler's filter pass: the nodes from where the last cycle stopped, until enough
        are feasible (`num_feasible_nodes_to_find`). (rows of the feasible nodes, rows judged,
        their codes): `_in_tree_reasons` spells the codes out."""
        table = snap.table
        n = len(table.nodes)
        if not n:
            empty = np.zeros(0, dtype=np.intp)
            return empty, empty, empty
        want = max(fit.num_feasible_nodes_to_find(n, self.percentage), 1)
        order = (np.arange(n) + self._next_start) % n
        codes = table.codes(demand)[order]
        fits = np.flatnonzero(codes == 0)
        processed = int(fits[want - 1]) + 1 if len(fits) >= want else n
        self._next_start = (self._next_start + processed) % n
        return order[fits[:want]], order[:processed], codes[:processed]

    @staticmethod
    def _in_tree_reasons(table: fit.FitTable, demand: fit.PodDemand, judged: np.ndarray, codes: np.ndarray
                         ) -> dict[str, str]:  # fmt: skip
        """Node -> why the in-tree filter found it unfit, in the order judged."""
        reasons: dict[str, str] = {}
        texts: dict[int, str] = {}  # a code's reasons, spelt out once a cycle
        unfit = np.flatnonzero(codes != 0)
        for i, code in zip(judged[unfit].tolist(), codes[unfit].tolist(), strict=True):
            if code > 0:
                text = texts.get(code)
                if text is None:
                    text = texts[code] = table.reason(code, demand)
                reasons[table.nodes[i].name] = text
            else:
                reasons[table.nodes[i].name] = table.conditions[i]  # type: ignore[assignment]
        return reasons

    async def _cycle(self, pod: PodRecord, snap: _Snapshot, demand: fit.PodDemand | None = None) -> ScheduleResult:
        """One scheduling cycle; a pod bound is counted on its node at once (`demand`: the pod's,
        when the caller derived it already). The candidates are rows of the pass's table."""
        if demand is None:
            demand = fit.PodDemand.of(pod)
        table = snap.table
        rows, judged, codes = self._in_tree_filter(snap, demand)
        names: list[str] = table.names[rows].tolist()
        extender_said: dict[str, str] = {}  # FailedNodes and FailedAndUnresolvableNodes
        dropped: list[str] = []  # candidates the extender left out without a reason

        def nodes() -> list[NodeRecord]:
            return [table.nodes[i] for i in rows.tolist()]

        def reasons() -> dict[str, str]:
            out = self._in_tree_reasons(table, demand, judged, codes)
            out.update(extender_said)
            for name in dropped:
                out.setdefault(name, "filtered by extender")
            return out

        if names and self.filter_verb and self.is_interested(pod):
            try:
                kept, failed, unresolvable = await self._filter(pod, names, nodes)
            except ExtenderError as exc:
                if not self.ignorable:
                    return ScheduleResult(pod.namespace, pod.name, reasons=reasons(), error=str(exc))
                log.info("ignorable extender filter failed", extra={"error": str(exc)})
            else:
                extender_said = {**failed, **unresolvable}
                if kept != names:
                    keep = set(kept)
                    mask = [n in keep for n in names]  # the candidates' order stays the filter's
                    dropped = [n for n, k in zip(names, mask, strict=True) if not k]
                    rows, names = rows[np.array(mask, dtype=bool)], [n for n in names if n in keep]
        if not names:
            why = reasons()
            return ScheduleResult(pod.namespace, pod.name, reasons=why,
                                  message=fit.unschedulable_message(len(table.nodes), why))  # fmt: skip
        scores: Mapping[str, int] = {}
        if len(names) == 1:
            chosen = names[0]
        else:
            total = table.least_allocated(rows, demand)
            if self.is_interested(pod):
                extra = await self._prioritize(pod, names, nodes)
                if extra is not None:
                    total = total + extra
            best = np.flatnonzero(total == total.max()).tolist()
            chosen = names[best[0]] if len(best) == 1 else min(names[i] for i in best)  # ties: the first name
            final = total.tolist()
            scores = Deferred(lambda: dict(zip(names, final, strict=True)))
        try:
            if self.bind_verb and self.is_interested(pod):
                await self.extender_bind(pod, chosen)
            else:
                await self.cluster.bind_pod(pod.namespace, pod.name, chosen, pod.uid)
        except Exception as exc:  # noqa: BLE001 - any backend's refusal (pod gone, already bound) requeues the pod
            return ScheduleResult(pod.namespace, pod.name, reasons=Deferred(reasons), error=f"binding rejected: {exc}",
                                  scores=scores)  # fmt: skip
        snap.assume(pod, chosen, demand)
        return ScheduleResult(pod.namespace, pod.name, node=chosen, reasons=Deferred(reasons), scores=scores)


@dataclass(frozen=True)
class _Asks:
    """What a pending pod asks and where it stands in the queue (priority desc, then creation)."""

    key: str
    order: tuple[int, int, str]
    cls: str
    requests: tuple[tuple[str, int], ...]
    limits: tuple[tuple[str, int], ...]
    demand: fit.PodDemand  # what the in-tree plugins read of the pod

    @classmethod
    def of(cls, pod: PodRecord) -> _Asks:
        order = (-(pod.priority or 0), pod.created_ms, pod.key)
        return cls(pod.key, order, pod.priority_class.value, tuple(sorted(pod.requests().items())),
                   tuple(sorted(pod.limits().items())), fit.PodDemand.of(pod))

    @cached_property
    def signature(self) -> tuple:
        """Pods with the same signature ask the same: one's verdict is the other's."""
        return (self.cls, self.requests, self.limits)

    @cached_property
    def _asked(self) -> tuple[ResourceList, ResourceList]:
        """(requests, limits) as maps: an _Asks lives as long as its pod waits unchanged."""
        return dict(self.requests), dict(self.limits)

    def dominates(self, other: _Asks) -> bool:
        """Of the same class and asking at least as much as `other`, every request and limit."""
        if self.cls != other.cls:
            return False
        req, lim = self._asked
        return all(req.get(k, 0) >= v for k, v in other.requests) and all(lim.get(k, 0) >= v for k, v in other.limits)


class _Cache:
    """kube-scheduler's cache of what each node's pods request (the filter's sums, with the pod
    count, and LeastAllocated's non-zero cpu and memory), kept from pass to pass: a pass adds
    and takes off only the pods that changed since the last one. A pod bound in a pass counts
    on its node at once, as kube-scheduler assumes it, until the cluster shows it bound."""

    def __init__(self) -> None:
        self.requested: dict[str, ResourceList] = {}  # node -> summed requests of the pods counted
        self.nonzero: dict[str, list[int]] = {}  # node -> [cpu, memory], non-zero defaults
        # pod key -> (the version counted, or None when assumed; node; requests; non-zero cpu, memory)
        self._pods: dict[str, tuple[tuple | None, str, ResourceList, tuple[int, int]]] = {}

    def sync(self, pods: list[PodRecord]) -> None:
        """Count the cluster's pods as `pods` shows them. A version is a pod's uid, resourceVersion
        and node; a pod without a resourceVersion is counted again each time."""
        counted = self._pods
        seen = set()
        for p in pods:
            if not fit.counts_on_node(p):
                continue
            key = p.key
            seen.add(key)
            version = (p.uid, p.resource_version, p.node_name)
            old = counted.get(key)
            if old is not None:
                if old[0] == version and p.resource_version:
                    continue
                self._take(old)
            self._add(key, version, p.node_name, p.requests(), fit.non_zero_requests(p))
        for key in [k for k in counted if k not in seen]:
            self._take(counted.pop(key))

    def assume(self, pod: PodRecord, node: str, demand: fit.PodDemand) -> None:
        """`pod` was bound to `node` in this pass."""
        old = self._pods.get(pod.key)
        if old is not None:
            self._take(old)
        self._add(pod.key, None, node, pod.requests(), demand.non_zero)

    def _add(self, key: str, version: tuple | None, node: str, requests: ResourceList, nonzero: tuple[int, int]) -> None:
        self._pods[key] = (version, node, requests, nonzero)
        self._count(node, requests, nonzero, 1)

    def _take(self, entry: tuple) -> None:
        _, node, requests, nonzero = entry
        self._count(node, requests, nonzero, -1)

    def _count(self, node: str, requests: ResourceList, nonzero: tuple[int, int], sign: int) -> None:
        total = self.requested.get(node)
        if total is None:
            total = self.requested[node] = {}
            self.nonzero[node] = [0, 0]
        for k, v in requests.items():
            total[k] = total.get(k, 0) + sign * v
        total["pods"] = total.get("pods", 0) + sign
        nz = self.nonzero[node]
        nz[0] += sign * nonzero[0]
        nz[1] += sign * nonzero[1]


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """The cluster as one pass schedules onto it: the nodes in name order as the filter judges
    them, and the pods' requests per node."""

    table: fit.FitTable
    cache: _Cache

    def assume(self, pod: PodRecord, node: str, demand: fit.PodDemand) -> None:
        """`pod` was bound to `node`: it counts there for the rest of the pass, and after."""
        self.cache.assume(pod, node, demand)
        self.table.assume(node, pod.requests(), demand.non_zero)
