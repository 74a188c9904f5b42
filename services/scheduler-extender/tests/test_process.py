"""The service as a process: real NATS, the simulated cluster over the bus, SIGTERM."""

import asyncio
import os
import signal
import sys
import time

import httpx
import pytest
from koordcommon import subjects
from koordcommon.resources import Resources
from koordcommon.schemas import NodeMetric
from koordcommon.testing.net import free_port
from koordsim.cluster import SimCluster
from koordsim.spec import SimSpec
from scheduler_extender.core import wire

pytestmark = pytest.mark.e2e
POD = {
    "metadata": {"name": "p", "namespace": "default"},
    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2", "memory": "2Gi"}}}]},
}


async def test_service_process_answers_from_the_bus_and_stops_on_sigterm(bus, nats_url, tmp_path):
    await SimCluster.publish_genesis(bus, SimSpec(nodes=4, seed=2, online_pods_per_node=2))
    replica = SimCluster(bus=bus)
    await replica.start()
    names = sorted(n.name for n in await replica.list_nodes())
    port = free_port()
    env = {
        **os.environ,
        "NATS_URL": nats_url,
        "KOORD_EXTENDER_HTTP_HOST": "127.0.0.1",
        "KOORD_EXTENDER_HTTP_PORT": str(port),
        "KOORD_EXTENDER_BUS_NAMESPACE": bus.namespace,
        "KOORD_EXTENDER_CLUSTER_BACKEND": "sim",
        "KOORD_EXTENDER_DATA_DIR": str(tmp_path),
    }
    log_path = tmp_path / "extender.log"
    log_file = log_path.open("wb")  # a file, not a pipe: a full pipe would block the process
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "scheduler_extender", env=env, stderr=log_file)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5.0) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if (await client.get("/readyz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert proc.returncode is None, log_path.read_text()[-2000:]
                assert time.monotonic() < deadline, "not ready in 60 s: " + log_path.read_text()[-2000:]
                await asyncio.sleep(0.2)
            assert (await client.get("/api/v1/summary")).json()["nodes"] == 4
            # node 0 reports 90 % cpu on the simulated clock: it must fail the filter
            hot = names[0]
            alloc = (await replica.get_node(hot)).allocatable_resources()
            await bus.publish(
                subjects.nodemetric(hot),
                bus.stamp(
                    NodeMetric(
                        node=hot,
                        ts=replica.now_ms(),
                        allocatable=alloc,
                        node_usage=Resources(alloc.cpu_milli * 9 // 10, 0),
                    )
                ),
            )
            body = wire.encode_extender_args(POD, None, names)
            deadline = time.monotonic() + 20
            while True:
                r = await client.post("/filter", content=body, headers={"Content-Type": "application/json"})
                res = wire.decode_filter_result(r.content)
                if res.failed_nodes:
                    break
                assert time.monotonic() < deadline, res
                await asyncio.sleep(0.1)
            assert res.failed_nodes == {hot: "node(s) cpu usage exceed threshold"}
            assert res.node_names == names[1:]
            metrics = (await client.get("/metrics")).text
            assert 'koord_extender_requests_total{outcome="ok",verb="filter"}' in metrics
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0, log_path.read_text()[-2000:]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        log_file.close()
        await replica.close()
