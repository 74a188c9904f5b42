"""A CRI proxy (koord-runtime-proxy's role, inside the node agent): kubelet's container runtime
endpoint points at this unix socket, and every RuntimeService / ImageService call is forwarded to
the real runtime (containerd, CRI-O) on its socket.

Before forwarding, the hooks run on the calls that matter (stages as Koordinator names them):
RunPodSandbox (PreRunPodSandbox: pod-level cgroup values), CreateContainer (PreCreateContainer:
the container's cpuset, shares, quota, memory limit go into the request) and
UpdateContainerResources (PreUpdateContainerResources: kubelet's updates keep the hooks' values).
StartContainer and StopPodSandbox are forwarded as they are; the proxy remembers which sandbox
and container each id is (from the replies) so an update, which names only a container id,
finds its pod, and forgets them when the sandbox stops. Every other method, known or not, is
forwarded byte for byte, request and reply, with its metadata, deadline and status.

Failure policy Ignore (Koordinator's default): a hook that fails or does not answer within
`timeout_s` leaves the request unchanged and it is forwarded as kubelet sent it; the pod starts,
and the reconcilers bring its cgroups in line later. Each outcome is counted
(`koord_agent_runtime_hook_calls_total{stage,outcome}`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
from prometheus_client import Counter

from .cri import RUNTIME_SERVICE, pb
from .hooks import RuntimeHooks

log = logging.getLogger(__name__)

HOOK_CALLS = Counter("koord_agent_runtime_hook_calls_total", "Runtime hook calls by stage and outcome",
                     ["stage", "outcome"])  # fmt: skip
FORWARDED = Counter("koord_agent_cri_forwarded_total", "CRI calls forwarded to the runtime", ["method", "code"])

# CRI methods whose replies stream (everything else is one request, one reply)
STREAMING = frozenset({
    "/runtime.v1.RuntimeService/GetContainerEvents", "/runtime.v1.RuntimeService/StreamPodSandboxes",
    "/runtime.v1.RuntimeService/StreamContainers", "/runtime.v1.RuntimeService/StreamContainerStats",
    "/runtime.v1.RuntimeService/StreamPodSandboxStats", "/runtime.v1.RuntimeService/StreamPodSandboxMetrics",
    "/runtime.v1.ImageService/StreamImages",
})  # fmt: skip
_RESERVED_METADATA = ("user-agent", "content-type", "te", "grpc-", ":")


@dataclass
class _Sandbox:
    config: pb.PodSandboxConfig
    containers: set[str]


def _metadata(context: grpc.aio.ServicerContext) -> tuple[tuple[str, str | bytes], ...]:
    return tuple((k, v) for k, v in (context.invocation_metadata() or ())
                 if not any(k.startswith(p) for p in _RESERVED_METADATA))  # fmt: skip


class CRIProxy:
    """Serves `listen` (a unix socket path) and forwards to `backend` (the runtime's socket)."""

    def __init__(self, listen: str, backend: str, hooks: RuntimeHooks | None, timeout_s: float = 1.0) -> None:
        self.listen = listen
        self.backend = backend
        self.hooks = hooks
        self.timeout_s = timeout_s
        self.sandboxes: dict[str, _Sandbox] = {}
        self.containers: dict[str, tuple[str, str]] = {}  # container id -> (sandbox id, container name)
        self._server: grpc.aio.Server | None = None
        self._channel: grpc.aio.Channel | None = None

    async def start(self) -> None:
        Path(self.listen).parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            Path(self.listen).unlink()  # a socket left by an earlier run
        self._channel = grpc.aio.insecure_channel(f"unix://{self.backend}")
        self._server = grpc.aio.server()
        self._server.add_generic_rpc_handlers([_Handler(self)])
        self._server.add_insecure_port(f"unix://{self.listen}")
        await self._server.start()
        log.info("CRI proxy serving", extra={"listen": self.listen, "backend": self.backend})

    async def stop(self, grace_s: float = 1.0) -> None:
        if self._server is not None:
            await self._server.stop(grace_s)
        if self._channel is not None:
            await self._channel.close()

    # ------------------------------------------------------------------ hooks

    async def _hook(self, stage: str, fn: Callable[[], object]) -> object:
        """Run one hook within the timeout: what it returned (truthy: it changed something), or
        None when it failed or timed out (the request then goes unchanged)."""
        if self.hooks is None:
            return None
        try:
            changed = await asyncio.wait_for(asyncio.to_thread(fn), self.timeout_s)
        except TimeoutError:
            HOOK_CALLS.labels(stage, "timeout").inc()
            log.warning("runtime hook timed out; forwarded unchanged", extra={"stage": stage})
            return None
        except Exception as exc:  # noqa: BLE001 - failure policy Ignore: the pod must start anyway
            HOOK_CALLS.labels(stage, "failed").inc()
            log.warning("runtime hook failed; forwarded unchanged", extra={"stage": stage, "error": repr(exc)})
            return None
        HOOK_CALLS.labels(stage, "applied" if changed else "unchanged").inc()
        return changed

    async def _pre(self, method: str, body: bytes) -> bytes:
        """The request as forwarded: changed by the hooks, or the bytes kubelet sent."""
        name = method.rsplit("/", 1)[-1]
        try:
            if name == "RunPodSandbox":
                req = pb.RunPodSandboxRequest.FromString(body)
                await self._hook("PreRunPodSandbox", lambda: self.hooks.pre_run_pod_sandbox(req))
                return body  # pod-level values were written to the pod's cgroup dir, not sent
            if name == "CreateContainer":
                req = pb.CreateContainerRequest.FromString(body)
                if await self._hook("PreCreateContainer", lambda: self.hooks.pre_create_container(req)):
                    return req.SerializeToString()
                return body
            if name == "UpdateContainerResources":
                req = pb.UpdateContainerResourcesRequest.FromString(body)
                known = self.containers.get(req.container_id)
                sandbox = self.sandboxes.get(known[0]) if known else None
                if sandbox is None:
                    HOOK_CALLS.labels("PreUpdateContainerResources", "unknown_container").inc()
                    return body
                if await self._hook("PreUpdateContainerResources", lambda: self.hooks.pre_update_container_resources(
                        req, sandbox.config, known[1])):  # fmt: skip
                    return req.SerializeToString()
        except Exception as exc:  # noqa: BLE001 - a request we cannot read is still the runtime's to judge
            HOOK_CALLS.labels(name, "undecodable").inc()
            log.warning("CRI request not decoded; forwarded unchanged", extra={"method": method, "error": repr(exc)})
        return body

    def _post(self, method: str, request: bytes, reply: bytes) -> None:
        """Remember sandboxes and containers from the replies; forget a stopped sandbox."""
        name = method.rsplit("/", 1)[-1]
        try:
            if name == "RunPodSandbox":
                sid = pb.RunPodSandboxResponse.FromString(reply).pod_sandbox_id
                self.sandboxes[sid] = _Sandbox(pb.RunPodSandboxRequest.FromString(request).config, set())
            elif name == "CreateContainer":
                req = pb.CreateContainerRequest.FromString(request)
                cid = pb.CreateContainerResponse.FromString(reply).container_id
                self.containers[cid] = (req.pod_sandbox_id, req.config.metadata.name)
                sandbox = self.sandboxes.setdefault(req.pod_sandbox_id, _Sandbox(req.sandbox_config, set()))
                sandbox.containers.add(cid)
            elif name == "StopPodSandbox":
                sandbox = self.sandboxes.pop(pb.StopPodSandboxRequest.FromString(request).pod_sandbox_id, None)
                for cid in sandbox.containers if sandbox else ():
                    self.containers.pop(cid, None)
        except Exception as exc:  # noqa: BLE001 - bookkeeping only: an update then goes unhooked
            log.warning("CRI reply not decoded", extra={"method": method, "error": repr(exc)})

    # ------------------------------------------------------------------ forwarding

    def _timeout(self, context: grpc.aio.ServicerContext) -> float | None:
        remaining = context.time_remaining()
        return remaining if remaining is not None and remaining > 0 else None

    async def unary(self, method: str, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        forwarded = await self._pre(method, request) if method.startswith(RUNTIME_SERVICE) else request
        call = self._channel.unary_unary(method)
        try:
            reply = await call(forwarded, metadata=_metadata(context), timeout=self._timeout(context))
        except grpc.aio.AioRpcError as exc:
            FORWARDED.labels(method, exc.code().name).inc()
            await context.abort(exc.code(), exc.details() or "")
        FORWARDED.labels(method, "OK").inc()
        if method.startswith(RUNTIME_SERVICE):
            self._post(method, forwarded, reply)
        return reply

    async def stream(self, method: str, request: bytes, context: grpc.aio.ServicerContext):
        call = self._channel.unary_stream(method)(request, metadata=_metadata(context), timeout=self._timeout(context))
        try:
            async for item in call:
                yield item
        except grpc.aio.AioRpcError as exc:
            FORWARDED.labels(method, exc.code().name).inc()
            await context.abort(exc.code(), exc.details() or "")
        FORWARDED.labels(method, "OK").inc()


class _Handler(grpc.GenericRpcHandler):
    """Every method: raw bytes in, raw bytes out (no (de)serializer), unary or server-streaming."""

    def __init__(self, proxy: CRIProxy) -> None:
        self.proxy = proxy

    def service(self, details: grpc.HandlerCallDetails):
        method = details.method
        if method in STREAMING:
            async def stream(request, context):
                async for item in self.proxy.stream(method, request, context):
                    yield item

            return grpc.unary_stream_rpc_method_handler(stream)

        async def unary(request, context):
            return await self.proxy.unary(method, request, context)

        return grpc.unary_unary_rpc_method_handler(unary)
