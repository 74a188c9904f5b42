"""The CRI proxy over real gRPC on unix sockets: kubelet's side is a gRPC client, the runtime a
gRPC server in the test that records what reaches it."""

import asyncio
import json
import time
from pathlib import Path

import grpc
import pytest
from koordcommon import cpus as kc
from koordcommon.model import KubeQoS
from koordcommon.schemas import NodeSLOSpec
from node_agent.collect.cgroups import SYSTEMD, V2, CgroupLayout
from node_agent.qos.executor import Executor
from node_agent.qos.files import MemoryCgroupFiles
from node_agent.runtimehooks.cri import pb
from node_agent.runtimehooks.hooks import HookView, RuntimeHooks
from node_agent.runtimehooks.proxy import HOOK_CALLS, CRIProxy

SERVICE = "/runtime.v1.RuntimeService/"
TOPOLOGY = kc.Topology.generate(1, 1, 4, 2)  # 8 CPUs, core k = CPUs 2k, 2k+1
LAYOUT = CgroupLayout(Path("/sim"), V2, SYSTEMD)


class FakeRuntime:
    """A CRI runtime that records every request's bytes and answers each method in kind."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.received: list[tuple[str, bytes]] = []
        self.server = grpc.aio.server()
        runtime = self

        class Handler(grpc.GenericRpcHandler):
            def service(self, details):
                method = details.method

                async def unary(request: bytes, context):
                    runtime.received.append((method, request))
                    name = method.rsplit("/", 1)[-1]
                    if name == "RunPodSandbox":
                        return pb.RunPodSandboxResponse(pod_sandbox_id="sb-1").SerializeToString()
                    if name == "CreateContainer":
                        return pb.CreateContainerResponse(container_id=f"c-{len(runtime.received)}").SerializeToString()
                    if name == "Missing":
                        await context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")
                    return b"\x0a\x03odd" + request[::-1]  # any bytes: the proxy must not read them

                return grpc.unary_unary_rpc_method_handler(unary)

        self.server.add_generic_rpc_handlers([Handler()])
        self.server.add_insecure_port(f"unix://{path}")

    def last(self, name: str) -> bytes:
        return [body for method, body in self.received if method.endswith("/" + name)][-1]


def slo() -> NodeSLOSpec:
    spec = NodeSLOSpec()
    s = spec.resourceQOSStrategy
    for cls, gi in ((s.lsClass, 2), (s.beClass, -1)):
        cls.cpuQOS = cls.cpuQOS.model_copy(update={"enable": True, "groupIdentity": gi})
    return spec


def view(files: MemoryCgroupFiles, bound: dict[int, str]) -> HookView:
    cpus = kc.NodeCPUs(TOPOLOGY, bound)
    return HookView(cpus, LAYOUT, "none", slo(), {}, files.read(LAYOUT.qos_dir(KubeQoS.BEST_EFFORT), "cpuset.cpus"),
                    Executor(files, "n1").write)


def sandbox(uid, qos, cgroup_parent, annotations=None) -> pb.PodSandboxConfig:
    return pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=f"pod-{uid}", uid=uid, namespace="default"),
        labels={"koordinator.sh/qosClass": qos, "io.kubernetes.pod.name": f"pod-{uid}"},
        annotations=annotations or {}, linux=pb.LinuxPodSandboxConfig(cgroup_parent=cgroup_parent))


def create(uid, qos, parent, annotations=None, name="main") -> pb.CreateContainerRequest:
    return pb.CreateContainerRequest(
        pod_sandbox_id="sb-1", sandbox_config=sandbox(uid, qos, parent, annotations),
        config=pb.ContainerConfig(metadata=pb.ContainerMetadata(name=name), linux=pb.LinuxContainerConfig(
            resources=pb.LinuxContainerResources(cpu_shares=1024, cpuset_cpus="0-7", memory_limit_in_bytes=0))))


@pytest.fixture
async def stack(tmp_path):
    """The runtime, the proxy in front of it and kubelet's channel to the proxy."""
    files = MemoryCgroupFiles({"cpuset.cpus": "0-7"})
    files.write(LAYOUT.qos_dir(KubeQoS.BEST_EFFORT), "cpuset.cpus", "2-7")  # what suppress grants BE now
    bound = {2: "LSR", 3: "LSR"}  # an LSR pod holds core 1
    runtime = FakeRuntime(str(tmp_path / "containerd.sock"))
    await runtime.server.start()
    hooks = RuntimeHooks(lambda: view(files, bound))
    proxy = CRIProxy(str(tmp_path / "proxy" / "cri.sock"), runtime.path, hooks, timeout_s=0.5)
    await proxy.start()
    channel = grpc.aio.insecure_channel(f"unix://{proxy.listen}")
    yield runtime, proxy, channel, files
    await channel.close()
    await proxy.stop(0)
    await runtime.server.stop(0)


async def call(channel, name: str, request: bytes) -> bytes:
    return await channel.unary_unary(SERVICE + name)(request, timeout=5)


BATCH_SPEC = json.dumps({"containers": {"main": {
    "requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"},
    "limits": {"kubernetes.io/batch-cpu": "1k", "kubernetes.io/batch-memory": "2Gi"}}}})


@pytest.mark.parametrize("qos,parent,annotations,want", [
    # the scheduler's cpuset verbatim, and no cfs quota on exclusive CPUs
    ("LSR", "/kubepods/podu1", {kc.ANNOTATION_RESOURCE_STATUS: '{"cpuset":"2-3"}'},
     {"cpuset_cpus": "2-3", "cpu_quota": -1, "cpu_shares": 1024, "memory_limit_in_bytes": 0}),
    # LS: the share pool, which no longer holds the LSR pod's core
    ("LS", "/kubepods/burstable/podu2", None,
     {"cpuset_cpus": "0-1,4-7", "cpu_quota": 0, "cpu_shares": 1024, "memory_limit_in_bytes": 0}),
    # BE: the BE pool within what suppress grants, and shares / quota / memory from batch-*
    ("BE", "/kubepods/besteffort/podu3", {"node.koordinator.sh/extended-resource-spec": BATCH_SPEC},
     {"cpuset_cpus": "2-7", "cpu_quota": 100000, "cpu_period": 100000, "cpu_shares": 512,
      "memory_limit_in_bytes": 2 << 30}),
])
async def test_create_container_reaches_the_runtime_with_the_hooks_values(stack, qos, parent, annotations, want):
    runtime, _, channel, _ = stack
    reply = await call(channel, "CreateContainer", create(f"u-{qos}", qos, parent, annotations).SerializeToString())
    assert pb.CreateContainerResponse.FromString(reply).container_id.startswith("c-")
    got = pb.CreateContainerRequest.FromString(runtime.last("CreateContainer")).config.linux.resources
    assert {k: getattr(got, k) for k in want} == want


async def test_run_pod_sandbox_writes_pod_values_and_updates_keep_the_cpuset(stack):
    runtime, proxy, channel, files = stack
    annotations = {kc.ANNOTATION_RESOURCE_STATUS: '{"cpuset":"2-3"}'}
    req = pb.RunPodSandboxRequest(config=sandbox("u9", "LSR", "/kubepods/podu9", annotations))
    assert await call(channel, "RunPodSandbox", req.SerializeToString()) == pb.RunPodSandboxResponse(
        pod_sandbox_id="sb-1").SerializeToString()
    assert runtime.last("RunPodSandbox") == req.SerializeToString()  # the sandbox request itself is unchanged
    pod_dir = LAYOUT.pod_dir("u9", KubeQoS.GUARANTEED)
    assert files.read(pod_dir, "cpu.cfs_quota_us") == "-1"  # a bound pod runs without quota
    created = pb.CreateContainerResponse.FromString(await call(channel, "CreateContainer", create(
        "u9", "LSR", "/kubepods/podu9", annotations).SerializeToString())).container_id
    # kubelet's CPU manager resets the container's cpuset: the update keeps the scheduler's
    update = pb.UpdateContainerResourcesRequest(container_id=created, linux=pb.LinuxContainerResources(cpuset_cpus="0-7"))
    await call(channel, "UpdateContainerResources", update.SerializeToString())
    got = pb.UpdateContainerResourcesRequest.FromString(runtime.last("UpdateContainerResources"))
    assert got.linux.cpuset_cpus == "2-3" and got.linux.cpu_quota == -1
    # StartContainer goes through; once the sandbox stops, the proxy forgets its containers
    start = pb.StartContainerRequest(container_id=created).SerializeToString()
    await call(channel, "StartContainer", start)
    assert runtime.last("StartContainer") == start
    await call(channel, "StopPodSandbox", pb.StopPodSandboxRequest(pod_sandbox_id="sb-1").SerializeToString())
    assert created not in proxy.containers and "sb-1" not in proxy.sandboxes


async def test_a_hook_that_times_out_or_fails_forwards_the_request_unchanged(stack):
    runtime, proxy, channel, _ = stack

    def slow():
        time.sleep(1.5)  # longer than the proxy's 0.5 s
        raise AssertionError("never used")

    before = HOOK_CALLS.labels("PreCreateContainer", "timeout")._value.get()
    body = create("u5", "LSR", "/kubepods/podu5", {kc.ANNOTATION_RESOURCE_STATUS: '{"cpuset":"2-3"}'}).SerializeToString()
    proxy.hooks = RuntimeHooks(slow)
    started = time.monotonic()
    await call(channel, "CreateContainer", body)
    assert time.monotonic() - started < 1.2  # the pod is not held up by the hook
    assert runtime.last("CreateContainer") == body
    assert HOOK_CALLS.labels("PreCreateContainer", "timeout")._value.get() == before + 1

    def broken():
        raise RuntimeError("topology unreadable")

    proxy.hooks = RuntimeHooks(broken)
    failed = HOOK_CALLS.labels("PreCreateContainer", "failed")._value.get()
    await call(channel, "CreateContainer", body)
    assert runtime.last("CreateContainer") == body
    assert HOOK_CALLS.labels("PreCreateContainer", "failed")._value.get() == failed + 1


async def test_other_methods_pass_through_byte_for_byte(stack):
    runtime, _, channel, _ = stack
    for method, body in (("/runtime.v1.RuntimeService/Version", pb.VersionRequest(version="0.1.0").SerializeToString()),
                         ("/runtime.v1.ImageService/ListImages", b"\x0a\x00"),
                         ("/runtime.v1.RuntimeService/Frobnicate", bytes(range(256)))):  # fmt: skip
        reply = await channel.unary_unary(method)(body, timeout=5)
        assert runtime.received[-1] == (method, body)
        assert reply == b"\x0a\x03odd" + body[::-1]
    # the runtime's status comes back as it was
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await channel.unary_unary(SERVICE + "Missing")(b"x", timeout=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and err.value.details() == "no such thing"
    # a request the hooks cannot read is the runtime's to judge: forwarded as sent
    await channel.unary_unary(SERVICE + "CreateContainer")(b"\xff\xff\xff", timeout=5)
    assert runtime.last("CreateContainer") == b"\xff\xff\xff"
    await asyncio.sleep(0)
