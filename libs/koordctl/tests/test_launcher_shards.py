"""The launcher splits the sim node agent across processes as the cluster grows."""

from __future__ import annotations

import pytest
from koordctl.launcher import SERVICES, DemoPlan, Launcher, ServiceDef, agent_processes, identity_of
from node_agent.core.reporter import in_shard
from node_agent.settings import AgentSettings


@pytest.mark.parametrize(
    ("nodes", "requested", "processes"),
    [(20, 0, 1), (1500, 0, 1), (1501, 0, 2), (5000, 0, 4), (20, 4, 4), (100_000, 0, 67)],
)
def test_agent_processes(nodes, requested, processes):
    assert agent_processes(nodes, requested) == processes


def test_each_agent_process_drives_its_shard_and_together_every_node(tmp_path):
    plan = DemoPlan(nodes=4000, data_dir=tmp_path)
    agents = [s for s in plan.processes() if s.module == "node_agent"]
    assert [a.name for a in agents] == ["node-agent-0", "node-agent-1", "node-agent-2"]
    assert {identity_of(a) for a in agents} == {"node-agent"}  # one bus identity, whatever the process
    assert len(plan.processes()) == len(SERVICES) + 2
    launcher = Launcher(plan)
    envs = [launcher.service_env(a, 8000, {}) for a in agents]
    shards = [AgentSettings(shard=env["KOORD_AGENT_SHARD"]).shard_of() for env in envs]
    assert shards == [(0, 3), (1, 3), (2, 3)]
    names = [f"sim-node-{i:04d}" for i in range(4000)]
    owners = [[i for i, n in shards if in_shard(name, i, n)] for name in names]
    assert all(len(o) == 1 for o in owners)  # every node driven, and by one process only
    sizes = [sum(o == [i] for o in owners) for i in range(3)]
    assert min(sizes) > 1200  # the hash spreads them


def test_a_small_cluster_keeps_one_agent_and_explicit_agents_are_kept(tmp_path):
    assert [s.name for s in DemoPlan(nodes=20).processes()] == [s.name for s in SERVICES]
    own = ServiceDef("node-agent-a", "node_agent", "KOORD_AGENT_", (("KOORD_AGENT_NODES", "n1,n2"),))
    plan = DemoPlan(nodes=9000, services=(own,))
    assert plan.processes() == (own,)
