"""The agent in real mode against this machine's own /proc and cgroup mount."""

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from node_agent.real_mode import RealAgent
from node_agent.settings import AgentSettings

pytestmark = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux /proc")

LOAD = "import time\nend = time.time() + {s}\nwhile time.time() < end: pass\n"


def _proc_ticks():
    f = Path("/proc/stat").read_text().splitlines()[0].split()
    return sum(int(f[i]) for i in (1, 2, 3, 6, 7))


def _ps_cpu_seconds(pid: int) -> float:
    """utime + stime of the process, what `ps` reads, at tick precision (ps prints whole seconds)."""
    assert subprocess.run(["ps", "-p", str(pid)], capture_output=True, check=False).returncode == 0  # ps sees it running
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_used_bytes() -> int:
    out = subprocess.run(["free", "-b"], capture_output=True, text=True, check=True).stdout.splitlines()[1].split()
    total, available = int(out[1]), int(out[6])
    return total - available


def test_node_cpu_and_memory_within_10_percent_under_load():
    agent = RealAgent(AgentSettings(mode="real", node_name="host"), publish=None)
    asyncio.run(agent.refresh())
    load = subprocess.Popen([sys.executable, "-c", LOAD.format(s=4)])
    try:
        time.sleep(0.3)  # the load is running
        agent.collect(int(time.time() * 1000))
        ticks0, t0 = _proc_ticks(), time.monotonic()
        ps0 = _ps_cpu_seconds(load.pid)
        time.sleep(2.0)
        r = agent.collect(int(time.time() * 1000))
        ticks1, t1 = _proc_ticks(), time.monotonic()
        ps1 = _ps_cpu_seconds(load.pid)
        used = _free_used_bytes()
    finally:
        load.kill()
        load.wait()
    agent_cpu, agent_mem = r.node
    proc_cpu = (ticks1 - ticks0) / agent.proc.ticks_per_s / (t1 - t0) * 1000
    load_cpu = (ps1 - ps0) / (t1 - t0) * 1000
    assert load_cpu > 300  # the load really ran (the machine is shared)
    assert abs(agent_cpu - proc_cpu) <= 0.1 * proc_cpu, (agent_cpu, proc_cpu)
    assert agent_cpu >= 0.9 * load_cpu, (agent_cpu, load_cpu)  # the node carries at least the load
    assert abs(agent_mem - used) <= 0.1 * used, (agent_mem, used)
    # the published sample carries the same numbers
    s = agent.reporter.nodes["host"].sample(agent.last_round_ms, 10)
    assert s.node_usage.cpu_milli == int(agent_cpu)
    assert agent.reporter.nodes["host"].capacity.cpu_milli == agent.proc.cpu_count() * 1000
