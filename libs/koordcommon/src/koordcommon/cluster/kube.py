"""The kubernetes backend of the cluster port (official `kubernetes` client).

The client is blocking: every call runs in a worker thread (`asyncio.to_thread`) and watches
run in their own threads feeding an asyncio queue. Responses are read raw
(`_preload_content=False`) and decoded by `koordcommon.kube_codec`, which is faster than the
client's model classes and keeps every field.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3HTTPError

from .. import kube_codec
from ..crds import CustomResource, crd
from ..quantity import format_resource_list
from ..records import NodeRecord, PodRecord
from .port import ClusterEvent, EvictionOutcome, EvictionResult

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
# The generated client names no content type for POST/PUT bodies; the API expects JSON.
JSON_HEADERS = {"Content-Type": "application/json"}
_LIST_PAGE = 500


class KubeApiError(RuntimeError):
    """A failed API call: HTTP status (0 when the server was not reached), reason and the
    message of the Kubernetes Status body."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(f"kubernetes API error {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}
        self.headers = headers or {}

    @classmethod
    def from_api_exception(cls, e: ApiException) -> KubeApiError:
        body: dict[str, Any] = {}
        raw = e.body
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", "replace")
        if isinstance(raw, str) and raw:
            try:
                parsed = json.loads(raw)
                body = parsed if isinstance(parsed, dict) else {}
            except ValueError:
                body = {}
        message = _status_message(body) or (raw if isinstance(raw, str) and raw else str(e.reason or ""))
        headers = {str(k).lower(): str(v) for k, v in dict(e.headers or {}).items()}
        return cls(int(e.status or 0), str(body.get("reason") or e.reason or ""), message, body, headers)


def _status_message(status: dict[str, Any]) -> str:
    """A Status body's message followed by its causes (a PDB names itself in the cause)."""
    parts = []
    if isinstance(status.get("message"), str) and status["message"]:
        parts.append(status["message"])
    details = status.get("details") if isinstance(status.get("details"), dict) else {}
    for cause in details.get("causes") or []:
        if isinstance(cause, dict) and isinstance(cause.get("message"), str) and cause["message"]:
            parts.append(cause["message"])
    return " ".join(parts)


def _retry_after(err: KubeApiError) -> float | None:
    details = err.body.get("details") if isinstance(err.body.get("details"), dict) else {}
    value = details.get("retryAfterSeconds")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    header = err.headers.get("retry-after")
    if header:
        try:
            return float(header)
        except ValueError:
            return None
    return None


def _decode_all(decode: Callable[[dict[str, Any]], Any], items: list[dict[str, Any]], what: str) -> list[Any]:
    """Decoded list items; one undecodable object is logged and skipped, not fatal to the list."""
    out = []
    for item in items:
        try:
            out.append(decode(item))
        except ValueError as e:
            log.warning("skipping undecodable %s: %s", what, e)
    return out


def _raw_lister(fn: Callable[..., Any], **fixed: Any) -> Callable[..., Any]:
    # No docstring and no return annotation: kubernetes.watch.Watch then yields raw dicts
    # instead of deserialising every event into model classes.
    def call(**kwargs: Any) -> Any:
        return fn(**fixed, **kwargs)

    return call


class KubeCluster:
    """ClusterPort over the Kubernetes API.

    `host` (with optional `token`) talks to that server directly; otherwise the in-cluster
    service account (`in_cluster=True`) or a kubeconfig (`kubeconfig`, `context`) is used.
    """

    def __init__(
        self,
        kubeconfig: str | None = None,
        context: str | None = None,
        in_cluster: bool = False,
        host: str | None = None,
        token: str | None = None,
        verify_ssl: bool = True,
        *,
        component: str = "koordinator",
        request_timeout_s: float = 30.0,
        watch_timeout_s: int = 300,
        watch_custom_kinds: tuple[str, ...] = (),
        workload_cache_size: int = 10_000,
    ) -> None:
        cfg = client.Configuration()
        if in_cluster:
            config.load_incluster_config(client_configuration=cfg)
        elif host is None or kubeconfig is not None:
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
        if host is not None:
            cfg.host = host.rstrip("/")
        if token is not None:
            cfg.api_key = {"authorization": token}
            cfg.api_key_prefix = {"authorization": "Bearer"}
        if not verify_ssl:
            cfg.verify_ssl = False
        self._cfg = cfg
        self._api = client.ApiClient(cfg)
        self._core = client.CoreV1Api(self._api)
        self._apps = client.AppsV1Api(self._api)
        self._custom = client.CustomObjectsApi(self._api)
        self._component = component
        self._timeout = request_timeout_s
        self._watch_timeout_s = int(watch_timeout_s)
        self._watch_custom = tuple(crd(k).kind for k in watch_custom_kinds)
        self._workloads: OrderedDict[tuple[str, str], tuple[str, str]] = OrderedDict()
        self._workload_cache_size = workload_cache_size
        self._watches: dict[threading.Event, set[watch.Watch]] = {}

    # plumbing ---------------------------------------------------------------------------
    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One blocking API call, its JSON body decoded (None for an empty body)."""
        try:
            resp = fn(*args, _preload_content=False, _request_timeout=self._timeout, **kwargs)
        except ApiException as e:
            raise KubeApiError.from_api_exception(e) from None
        except Urllib3HTTPError as e:
            raise KubeApiError(0, "ConnectionError", str(e)) from None
        try:
            data = resp.data
        finally:
            resp.release_conn()
        if not data:
            return None
        return json.loads(data)

    async def _acall(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self._call, fn, *args, **kwargs)

    def _list_all(self, fn: Callable[..., Any], **kwargs: Any) -> list[dict[str, Any]]:
        """All items of a list call, following `continue` tokens."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            extra = {"_continue": token} if token else {}
            body = self._call(fn, limit=_LIST_PAGE, **kwargs, **extra) or {}
            items.extend(i for i in body.get("items") or [] if isinstance(i, dict))
            token = (body.get("metadata") or {}).get("continue") or None
            if not token:
                return items

    # lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Checks the server answers (a one-item node list) so configuration errors show early."""
        await self._acall(self._core.list_node, limit=1)

    async def close(self) -> None:
        for stop, watchers in list(self._watches.items()):
            stop.set()
            for w in list(watchers):
                w.stop()
        await asyncio.to_thread(self._api.close)

    # reads --------------------------------------------------------------------------------
    async def list_nodes(self) -> list[NodeRecord]:
        items = await asyncio.to_thread(self._list_all, self._core.list_node)
        return _decode_all(kube_codec.node_from_k8s, items, "node")

    async def get_node(self, name: str) -> NodeRecord | None:
        try:
            return kube_codec.node_from_k8s(await self._acall(self._core.read_node, name))
        except KubeApiError as e:
            if e.status == 404:
                return None
            raise

    async def list_pods(self, node_name: str | None = None, namespace: str | None = None) -> list[PodRecord]:
        kwargs: dict[str, Any] = {}
        if node_name:
            kwargs["field_selector"] = f"spec.nodeName={node_name}"
        if namespace:
            items = await asyncio.to_thread(
                self._list_all, self._core.list_namespaced_pod, namespace=namespace, **kwargs
            )
        else:
            items = await asyncio.to_thread(self._list_all, self._core.list_pod_for_all_namespaces, **kwargs)
        return _decode_all(kube_codec.pod_from_k8s, items, "pod")

    async def get_pod(self, namespace: str, name: str) -> PodRecord | None:
        try:
            return kube_codec.pod_from_k8s(await self._acall(self._core.read_namespaced_pod, name, namespace))
        except KubeApiError as e:
            if e.status == 404:
                return None
            raise

    async def list_namespaces(self) -> dict[str, dict[str, str]]:
        items = await asyncio.to_thread(self._list_all, self._core.list_namespace)
        out: dict[str, dict[str, str]] = {}
        for obj in items:
            meta = obj.get("metadata") or {}
            if isinstance(meta.get("name"), str):
                out[meta["name"]] = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        return out

    async def resolve_workload(self, pod: PodRecord) -> tuple[str, str]:
        owner = pod.controller
        if owner is None:
            return "Pod", pod.name
        if owner.kind != "ReplicaSet":
            return owner.kind, owner.name
        key = (pod.namespace, owner.name)
        cached = self._workloads.get(key)
        if cached is not None:
            self._workloads.move_to_end(key)
            return cached
        try:
            rs = await self._acall(self._apps.read_namespaced_replica_set, owner.name, pod.namespace) or {}
        except KubeApiError as e:
            if e.status != 404:
                raise
            rs = {}
        refs = [
            r
            for r in ((rs.get("metadata") or {}).get("ownerReferences") or [])
            if isinstance(r, dict) and r.get("kind") == "Deployment" and r.get("name")
        ]
        refs.sort(key=lambda r: r.get("controller") is not True)  # the controller first
        result = ("Deployment", str(refs[0]["name"])) if refs else ("ReplicaSet", owner.name)
        self._workloads[key] = result
        while len(self._workloads) > self._workload_cache_size:
            self._workloads.popitem(last=False)
        return result

    # watch ----------------------------------------------------------------------------
    def watch(self) -> AsyncIterator[ClusterEvent]:
        return self._watch()

    async def _watch(self) -> AsyncIterator[ClusterEvent]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[ClusterEvent] = asyncio.Queue(maxsize=10_000)
        stop = threading.Event()
        watchers: set[watch.Watch] = set()
        self._watches[stop] = watchers
        sources: list[tuple[str, str, Callable[..., Any]]] = [
            ("Node", "", _raw_lister(self._core.list_node)),
            ("Pod", "", _raw_lister(self._core.list_pod_for_all_namespaces)),
        ]
        for kind in self._watch_custom:
            c = crd(kind)
            sources.append(
                (
                    "Custom",
                    kind,
                    _raw_lister(
                        self._custom.list_cluster_custom_object, group=c.group, version=c.version, plural=c.plural
                    ),
                )
            )
        threads = [
            threading.Thread(
                target=self._pump,
                args=(kind, ck, lister, loop, queue, stop, watchers),
                name=f"kube-watch-{ck or kind}",
                daemon=True,
            )
            for kind, ck, lister in sources
        ]
        for t in threads:
            t.start()
        try:
            while True:
                yield await queue.get()
        finally:
            stop.set()
            self._watches.pop(stop, None)
            for w in list(watchers):
                w.stop()

    def _pump(
        self,
        kind: str,
        custom_kind: str,
        lister: Callable[..., Any],
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue[ClusterEvent],
        stop: threading.Event,
        watchers: set[watch.Watch],
    ) -> None:
        """One watch thread: list once for a resourceVersion, then watch from it, resuming
        after each server timeout and re-listing when the version expired (410 Gone)."""
        rv: str | None = None
        backoff = 0.5
        while not stop.is_set():
            w = watch.Watch()
            try:
                if rv is None:
                    body = self._call(lister, limit=1) or {}
                    rv = str((body.get("metadata") or {}).get("resourceVersion") or "")
                watchers.add(w)
                if stop.is_set():
                    return
                # timeout_seconds also makes Watch raise on ERROR events instead of retrying.
                for ev in w.stream(
                    lister,
                    resource_version=rv,
                    timeout_seconds=self._watch_timeout_s,
                    allow_watch_bookmarks=True,
                    _request_timeout=(self._timeout, self._watch_timeout_s + 30),
                ):
                    if stop.is_set():
                        return
                    if not isinstance(ev, dict):
                        continue
                    obj = ev.get("raw_object")
                    if not isinstance(obj, dict):
                        continue
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    event = self._decode_event(kind, custom_kind, str(ev.get("type")), obj)
                    if event is not None and not self._deliver(loop, queue, event, stop):
                        return
                backoff = 0.5
            except ApiException as e:
                if e.status == 410:
                    rv = None
                    continue
                log.warning("watch %s failed: %s %s", custom_kind or kind, e.status, e.reason)
                stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
            except Exception as e:  # noqa: BLE001 - the thread must survive transient network errors
                if stop.is_set():
                    return
                if isinstance(e, KubeApiError) and e.status == 410:
                    rv = None
                    continue
                log.warning("watch %s failed: %s", custom_kind or kind, e)
                stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
            finally:
                watchers.discard(w)

    @staticmethod
    def _decode_event(kind: str, custom_kind: str, type_: str, obj: dict[str, Any]) -> ClusterEvent | None:
        if type_ not in ("ADDED", "MODIFIED", "DELETED"):
            return None  # BOOKMARK
        try:
            if kind == "Node":
                return ClusterEvent(type_, "Node", kube_codec.node_from_k8s(obj))  # type: ignore[arg-type]
            if kind == "Pod":
                return ClusterEvent(type_, "Pod", kube_codec.pod_from_k8s(obj))  # type: ignore[arg-type]
        except ValueError as e:
            log.warning("skipping undecodable %s in watch: %s", kind, e)
            return None
        return ClusterEvent(type_, "Custom", obj, custom_kind=custom_kind)  # type: ignore[arg-type]

    @staticmethod
    def _deliver(
        loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[ClusterEvent], event: ClusterEvent, stop: threading.Event
    ) -> bool:
        """Put from the watch thread, waiting while the queue is full (backpressure)."""
        try:
            fut = asyncio.run_coroutine_threadsafe(queue.put(event), loop)
        except RuntimeError:  # loop closed
            return False
        while True:
            try:
                fut.result(timeout=0.5)
                return True
            except concurrent.futures.TimeoutError:
                if stop.is_set():
                    fut.cancel()
                    return False
            except (concurrent.futures.CancelledError, RuntimeError):
                return False

    # writes ---------------------------------------------------------------------------
    async def patch_node_status(
        self, name: str, set_resources: dict[str, int], remove_resources: list[str] = ()
    ) -> NodeRecord:
        values: dict[str, str | None] = dict(format_resource_list(set_resources))
        for key in remove_resources:
            values.setdefault(key, None)  # merge patch: null deletes the key
        body = {"status": {"capacity": dict(values), "allocatable": dict(values)}}
        resp = await self._acall(self._core.patch_node_status, name, body, _content_type=MERGE_PATCH)
        return kube_codec.node_from_k8s(resp or {})

    async def evict_pod(
        self, namespace: str, name: str, reason: str = "", dry_run: bool = False, grace_period_s: int | None = None
    ) -> EvictionResult:
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if reason:
            meta["annotations"] = {"reason": reason, "requested-by": self._component}
        body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": meta}
        delete_options: dict[str, Any] = {}
        if grace_period_s is not None:
            delete_options["gracePeriodSeconds"] = int(grace_period_s)
        if dry_run:
            delete_options["dryRun"] = ["All"]
        if delete_options:
            body["deleteOptions"] = delete_options
        kwargs = {"dry_run": "All"} if dry_run else {}
        try:
            resp = await self._acall(
                self._core.create_namespaced_pod_eviction, name, namespace, body, **kwargs, _headers=JSON_HEADERS
            )
        except KubeApiError as e:
            if e.status == 429:
                return EvictionResult(EvictionOutcome.BLOCKED, e.message, _retry_after(e))
            if e.status == 404:
                return EvictionResult(EvictionOutcome.NOT_FOUND, e.message)
            if e.status in (403, 500):
                return EvictionResult(EvictionOutcome.FORBIDDEN, e.message)
            return EvictionResult(EvictionOutcome.ERROR, e.message or e.reason)
        message = _status_message(resp) if isinstance(resp, dict) else ""
        return EvictionResult(EvictionOutcome.EVICTED, message or ("dry run" if dry_run else "evicted"))

    async def create_pod(self, pod: PodRecord) -> PodRecord:
        body = kube_codec.pod_to_k8s(pod)
        body.pop("status", None)
        for key in ("resourceVersion", "uid", "creationTimestamp", "deletionTimestamp"):
            body["metadata"].pop(key, None)
        resp = await self._acall(self._core.create_namespaced_pod, pod.namespace, body, _headers=JSON_HEADERS)
        return kube_codec.pod_from_k8s(resp or {})

    async def bind_pod(self, namespace: str, name: str, node_name: str, uid: str = "",
                       annotations: dict[str, str] | None = None) -> None:
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        if annotations:
            meta["annotations"] = dict(annotations)
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        await self._acall(self._core.create_namespaced_pod_binding, name, namespace, body, _headers=JSON_HEADERS)

    async def delete_pod(self, namespace: str, name: str) -> None:
        try:
            await self._acall(self._core.delete_namespaced_pod, name, namespace)
        except KubeApiError as e:
            if e.status != 404:
                raise

    # custom objects -----------------------------------------------------------------------
    @staticmethod
    def _namespace(c: CustomResource, namespace: str | None) -> str | None:
        if not c.namespaced:
            return None
        return namespace or "default"

    async def list_custom(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        c = crd(kind)
        if c.namespaced and namespace:
            items = await asyncio.to_thread(
                self._list_all,
                self._custom.list_namespaced_custom_object,
                group=c.group,
                version=c.version,
                namespace=namespace,
                plural=c.plural,
            )
        else:
            # For a namespaced kind the cluster-wide path lists every namespace.
            items = await asyncio.to_thread(
                self._list_all,
                self._custom.list_cluster_custom_object,
                group=c.group,
                version=c.version,
                plural=c.plural,
            )
        return items

    async def get_custom(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        c = crd(kind)
        ns = self._namespace(c, namespace)
        try:
            if ns is None:
                return await self._acall(self._custom.get_cluster_custom_object, c.group, c.version, c.plural, name)
            return await self._acall(self._custom.get_namespaced_custom_object, c.group, c.version, ns, c.plural, name)
        except KubeApiError as e:
            if e.status == 404:
                return None
            raise

    async def apply_custom(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        c = crd(kind)
        body = dict(obj)
        meta = dict(body.get("metadata") or {})
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{kind}: metadata.name is required")
        ns = self._namespace(c, meta.get("namespace"))
        if ns is not None:
            meta["namespace"] = ns
        body["apiVersion"], body["kind"], body["metadata"] = c.api_version, c.kind, meta
        for _attempt in range(3):
            existing = await self.get_custom(kind, name, ns)
            try:
                if existing is None:
                    meta.pop("resourceVersion", None)
                    if ns is None:
                        return await self._acall(
                            self._custom.create_cluster_custom_object,
                            c.group,
                            c.version,
                            c.plural,
                            body,
                            _headers=JSON_HEADERS,
                        )
                    return await self._acall(
                        self._custom.create_namespaced_custom_object,
                        c.group,
                        c.version,
                        ns,
                        c.plural,
                        body,
                        _headers=JSON_HEADERS,
                    )
                meta["resourceVersion"] = (existing.get("metadata") or {}).get("resourceVersion", "")
                if ns is None:
                    return await self._acall(
                        self._custom.replace_cluster_custom_object,
                        c.group,
                        c.version,
                        c.plural,
                        name,
                        body,
                        _headers=JSON_HEADERS,
                    )
                return await self._acall(
                    self._custom.replace_namespaced_custom_object,
                    c.group,
                    c.version,
                    ns,
                    c.plural,
                    name,
                    body,
                    _headers=JSON_HEADERS,
                )
            except KubeApiError as e:
                if e.status != 409:  # created or changed meanwhile: read again and retry
                    raise
        raise KubeApiError(409, "Conflict", f"{kind} {name}: kept conflicting after 3 attempts")

    async def delete_custom(self, kind: str, name: str, namespace: str | None = None) -> None:
        c = crd(kind)
        ns = self._namespace(c, namespace)
        try:
            if ns is None:
                await self._acall(self._custom.delete_cluster_custom_object, c.group, c.version, c.plural, name)
            else:
                await self._acall(self._custom.delete_namespaced_custom_object, c.group, c.version, ns, c.plural, name)
        except KubeApiError as e:
            if e.status != 404:
                raise

    # events ---------------------------------------------------------------------------
    async def emit_event(self, involved: dict[str, str], reason: str, message: str, type_: str = "Normal") -> None:
        # Cluster-scoped objects (nodes) get their events in `default`, as kubelet does.
        namespace = involved.get("namespace") or "default"
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ref = {k: v for k, v in involved.items() if k in ("kind", "name", "namespace", "uid", "apiVersion") and v}
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{involved.get('name', 'object')}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": ref,
            "reason": reason,
            "message": message[:1024],  # events are notes for humans; keep them small
            "type": type_,
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "reportingInstance": self._component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        await self._acall(self._core.create_namespaced_event, namespace, body, _headers=JSON_HEADERS)
