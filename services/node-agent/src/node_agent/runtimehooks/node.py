"""The runtime hooks of the node this agent runs on: the node as the hooks see it at each call,
from what the agent and its QoS manager already keep (pods, node object, NodeSLO, topology,
the kubelet's CPU manager checkpoint, the besteffort dir's cpuset)."""

from __future__ import annotations

from koordcommon import cpus as kc
from koordcommon.model import KubeQoS

from .. import cpuorch
from ..qos.executor import Executor
from ..qos.nodeinfo import kubelet_pinned_cpus, parse_cpu_manager_state
from .hooks import HookView, RuntimeHooks
from .proxy import CRIProxy


def hooks_of(agent, manager) -> RuntimeHooks:
    """Hooks over a real agent (`RealAgent`) and its QoS manager."""
    layout, files = manager._real_layout, manager._real_files
    topology = cpuorch.topology_of(manager._topology)
    executor = Executor(files, agent.node)

    def view() -> HookView:
        history = agent.reporter.nodes.get(agent.node)
        pods = list(history.pods.values()) if history is not None else list(agent.pods)
        state = parse_cpu_manager_state(manager._cpu_manager.read())
        annotations = agent.node_record.annotations if agent.node_record is not None else {}
        cpus = kc.NodeCPUs(topology, cpuorch.bound_cpus(pods), kubelet_pinned_cpus(state, pods),
                           kc.reserved_cpus(annotations), kc.system_qos_cpus(annotations))  # fmt: skip
        return HookView(cpus, layout, state.policy if state is not None else "none", manager.slos.get(agent.node),
                        {p.uid: p for p in pods}, files.read(layout.qos_dir(KubeQoS.BEST_EFFORT), "cpuset.cpus"),
                        executor.write)  # fmt: skip

    return RuntimeHooks(view)


async def start_proxy(settings, agent, manager) -> CRIProxy:
    hooks = hooks_of(agent, manager) if manager is not None else None
    proxy = CRIProxy(settings.cri_proxy_socket, settings.cri_runtime_endpoint, hooks, settings.runtime_hook_timeout_s)
    await proxy.start()
    return proxy
