"""The service as a process: SIGKILL it, start it again, the recommendation is the same."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from koordcommon import subjects
from koordcommon.testing.net import free_port
from koordsim.cluster import SimCluster
from koordsim.spec import SimSpec

pytestmark = pytest.mark.e2e


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
        return json.loads(r.read())


def wait_ready(port, proc, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the recommender exited"
        try:
            if get(port, "/readyz")["status"] == "ready":
                return
        except (urllib.error.URLError, OSError, ValueError):
            pass
        time.sleep(0.1)
    raise AssertionError("not ready in time")


async def test_sigkill_and_restart(metric_samples, bus, nats_url, bus_namespace, database_url, tmp_path):
    await SimCluster.publish_genesis(bus, SimSpec(nodes=1))
    await bus.ensure_streams(subjects.METRICS_STREAM)
    await bus.publish_many([(subjects.metrics(m.node), bus.stamp(m)) for m in metric_samples(0, 240)])
    port = free_port()
    env = dict(
        os.environ,
        NATS_URL=nats_url,
        DATABASE_URL=database_url,
        KOORD_RECOMMENDER_BUS_NAMESPACE=bus_namespace,
        KOORD_RECOMMENDER_HTTP_PORT=str(port),
        KOORD_RECOMMENDER_DATA_DIR=str(tmp_path / "data"),
        KOORD_RECOMMENDER_CHECKPOINT_INTERVAL_S="0.5",
        KOORD_RECOMMENDER_PUBLISH_INTERVAL_S="0.5",
    )
    log_path = tmp_path / "recommender.log"

    def start():
        with log_path.open("ab") as log:  # the child keeps its own descriptor
            return subprocess.Popen([sys.executable, "-m", "recommender"], env=env, stdout=log, stderr=log)

    proc = start()
    try:
        await asyncio.to_thread(wait_ready, port, proc)
        path = "/api/v1/recommendations/prod/Deployment/web"
        deadline = time.monotonic() + 20
        while True:
            try:
                body = await asyncio.to_thread(get, port, path)
                if body["containers"][0]["samples"] == 2 * 240:
                    break
            except urllib.error.HTTPError:
                pass
            assert time.monotonic() < deadline, "samples not consumed in time"
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.5)  # past one checkpoint interval
        before = await asyncio.to_thread(get, port, path)
        proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(proc.wait, 10)
        proc = start()
        await asyncio.to_thread(wait_ready, port, proc)
        after = await asyncio.to_thread(get, port, path)
        assert after == before
        assert after["containers"][0]["recommendation"]["target"]["cpu_milli"] > 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(proc.wait, 20)
            except subprocess.TimeoutExpired:
                proc.kill()
