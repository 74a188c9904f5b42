"""`koordctl up`: bring the whole system up on the embedded default and show it working."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from dataclasses import dataclass, field

from koordcommon import subjects
from koordcommon.bus import Bus
from koordcommon.model import PriorityClass, is_hp
from koordcommon.records import ContainerSpec, PodRecord
from koordcommon.resources import Resources, batch_cpu, batch_memory
from koordcommon.schemas import NodeMetric
from koordcommon.service import cancel_and_wait
from koordsim import traces
from koordsim.cluster import SimCluster, SimSpec
from koordsim.scheduler import ExtenderScheduler
from rich.console import Console
from rich.live import Live
from rich.table import Table

from .driver import SimDriver
from .launcher import DemoPlan, Launcher, tail
from .render import cores, gib

GIB = 1024**3
TABLE_EVERY_S = 15.0  # without a terminal, the live table is printed this often


@dataclass
class NodeView:
    name: str
    capacity: Resources
    prod_usage: Resources | None = None
    batch_allocatable: Resources | None = None
    batch_allocated: Resources = field(default_factory=Resources)


@dataclass
class CheckResult:
    name: str
    ok: bool
    detail: str


class Demo:
    def __init__(self, plan: DemoPlan, console: Console):
        self.plan = plan
        # Logs and CI have no terminal width: keep the table readable there.
        self.console = console if console.is_terminal else Console(width=max(console.width, 140))
        self.launcher = Launcher(plan)
        self.bus: Bus | None = None
        self.cluster: SimCluster | None = None
        self.metrics: dict[str, NodeMetric] = {}
        self.checks: list[CheckResult] = []

    def check(self, result: CheckResult) -> None:
        """Record a check and print it at once (a log shows each check when it is decided)."""
        self.checks.append(result)
        mark = "[green]PASS[/]" if result.ok else "[red]FAIL[/]"
        self.console.print(f"{mark} {result.name}: {result.detail}")

    # ------------------------------------------------------------------ views

    async def node_views(self) -> list[NodeView]:
        assert self.cluster is not None
        pods = await self.cluster.list_pods()
        batch_by_node: dict[str, Resources] = {}
        for p in pods:
            if p.node_name and p.is_active:
                batch_by_node[p.node_name] = batch_by_node.get(p.node_name, Resources()) + p.batch_requests()
        views = []
        for n in sorted(await self.cluster.list_nodes(), key=lambda n: n.name):
            m = self.metrics.get(n.name)
            prod = None
            if m is not None:
                prod = Resources()
                for pm in m.pods:
                    if is_hp(pm.priority_class or PriorityClass.PROD):
                        prod = prod + pm.usage
            views.append(
                NodeView(n.name, n.capacity_resources(), prod, n.batch_allocatable(), batch_by_node.get(n.name, Resources()))
            )
        return views

    def table(self, views: list[NodeView], urls: dict[str, str]) -> Table:
        t = Table(title="koord demo: per-node capacity, prod usage and batch allocatable", expand=False)
        for col in ("node", "cpu cap", "mem cap", "prod cpu", "prod mem", "batch cpu", "batch mem", "batch used cpu"):
            t.add_column(col, justify="right" if col != "node" else "left")
        for v in views:
            t.add_row(
                v.name,
                cores(v.capacity.cpu_milli),
                gib(v.capacity.memory_bytes),
                cores(v.prod_usage.cpu_milli) if v.prod_usage else "-",
                gib(v.prod_usage.memory_bytes) if v.prod_usage else "-",
                cores(v.batch_allocatable.cpu_milli) if v.batch_allocatable else "-",
                gib(v.batch_allocatable.memory_bytes) if v.batch_allocatable else "-",
                cores(v.batch_allocated.cpu_milli),
            )
        with_batch = sum(1 for v in views if v.batch_allocatable and v.batch_allocatable.cpu_milli > 0)
        t.caption = (
            f"{with_batch}/{len(views)} nodes offer batch capacity | "
            + " | ".join(f"{k} {u}" for k, u in urls.items())
        )
        return t

    # ------------------------------------------------------------------ background loops

    async def follow_metrics(self) -> None:
        assert self.bus is not None
        async for d in self.bus.tail(subjects.NODEMETRIC_STREAM, "koord.nodemetric.>", NodeMetric, deliver="last_per_subject"):
            self.metrics[d.msg.node] = d.msg

    # ------------------------------------------------------------------ the end-to-end check

    async def batch_pod_check(self, scheduler: ExtenderScheduler, deadline: float) -> CheckResult:
        """A batch pod submitted through the extender lands on a node with batch capacity."""
        assert self.cluster is not None
        request = {batch_cpu(): 2000, batch_memory(): 2 * GIB}
        while time.monotonic() < deadline:
            views = await self.node_views()
            if any(v.batch_allocatable and v.batch_allocatable.cpu_milli >= 2000 for v in views):
                break
            await asyncio.sleep(1.0)
        else:
            return CheckResult("batch pod placed", False, "no node offered batch capacity in time")
        pod = PodRecord(
            namespace="batch",
            name=f"demo-batch-check-{int(time.time())}",
            uid=f"demo-batch-{time.time_ns()}",
            labels={"koordinator.sh/qosClass": "BE"},
            priority=5000,
            priority_class_name="koord-batch",
            scheduler_name="koord-demo-check",  # placed by this check alone, not the driver's queue
            containers=[ContainerSpec("main", requests=dict(request), limits=dict(request))],
        )
        await self.cluster.create_pod(pod)
        result = await scheduler.schedule_pod(pod)
        if not result.node:
            return CheckResult("batch pod placed", False, f"unschedulable: {result.reasons}")
        node = await self.cluster.get_node(result.node)
        alloc = node.batch_allocatable() if node else None
        ok = alloc is not None and alloc.cpu_milli >= 2000 and alloc.memory_bytes >= 2 * GIB
        return CheckResult(
            "batch pod placed",
            ok,
            f"{pod.key} -> {result.node} (node batch allocatable {cores(alloc.cpu_milli) if alloc else '-'} cpu, "
            f"{gib(alloc.memory_bytes) if alloc else '-'} memory)",
        )

    async def collector_check(self, collector_url: str) -> CheckResult:
        """The collector persisted the agent's samples and serves them back as a time series."""
        import httpx

        async with httpx.AsyncClient(timeout=5.0) as client:
            try:
                nodes = (await client.get(f"{collector_url}/api/v1/nodes")).json().get("items", [])
                if not nodes:
                    return CheckResult("collector serves usage", False, "no node listed yet")
                name = nodes[0].get("node") or nodes[0].get("name")
                resp = await client.get(f"{collector_url}/api/v1/nodes/{name}/usage", params={"step": "10s"})
                points = resp.json().get("points") or resp.json().get("series") or []
            except (httpx.HTTPError, ValueError) as exc:
                return CheckResult("collector serves usage", False, f"{collector_url}: {exc}")
        return CheckResult(
            "collector serves usage", resp.status_code == 200 and len(points) > 0,
            f"{len(nodes)} nodes listed; {name}: {len(points)} points",
        )

    # ------------------------------------------------------------------ main flow

    async def run(self, duration_s: float | None, check: bool) -> bool:
        console = self.console
        launcher = self.launcher
        tasks: list[asyncio.Task] = []
        try:
            console.print(f"[bold]traces[/] {traces.trace_source().describe()}")
            nats_url = launcher.start_nats()
            console.print(f"[bold]NATS[/] {nats_url} (namespace {launcher.namespace}); data in {launcher.data_dir}")
            self.bus = Bus(nats_url, service="koordctl", namespace=launcher.namespace,
                           credentials=launcher.bus_credentials("koordctl"))
            await self.bus.connect()
            spec = SimSpec(
                nodes=self.plan.nodes,
                speed=self.plan.speed,
                batch_stream=True,
                batch_tasks_per_node_hour=self.plan.batch_tasks_per_node_hour,
                batch_trace_offset_s=11 * 3600,  # the trace's busiest hours: batch use shows at once
            )
            self.cluster = SimCluster(spec, bus=self.bus, genesis=True)
            await self.cluster.start()
            console.print(f"[bold]sim cluster[/] {self.plan.nodes} nodes driven by the real traces")

            started = time.monotonic()
            launcher.start_services()
            if console.is_terminal:
                with console.status("starting services...") as status:
                    ready = await launcher.wait_ready(
                        60, on_progress=lambda r: status.update(
                            "starting services: " + ", ".join(f"{k} {'ok' if v else '..'}" for k, v in r.items())
                        )
                    )
            else:  # a log or a pipe: one line per service as it becomes ready, when it does
                seen: set[str] = set()

                def progress(r: dict[str, bool]) -> None:
                    for name, ok in r.items():
                        if ok and name not in seen:
                            seen.add(name)
                            console.print(f"  ready: {name} ({len(seen)}/{len(r)}, {time.monotonic() - started:.1f} s)")

                console.print("starting services...")
                ready = await launcher.wait_ready(60, on_progress=progress)
            took = time.monotonic() - started
            all_ready = all(ready.values())
            self.check(
                CheckResult("services healthy", all_ready, f"{sum(ready.values())}/{len(ready)} ready in {took:.1f} s")
            )
            if not all_ready:
                for r in launcher.running:
                    if not ready[r.spec.name]:
                        console.print(f"[red]{r.spec.name} not ready[/]; last log lines:\n{tail(r.log_path)}")
                return False
            urls = {r.spec.name: r.url for r in launcher.running}
            console.print("[green]all services ready[/] in %.1f s" % took)
            for name, url in urls.items():
                console.print(f"  {name:20s} {url}")

            extender = urls["scheduler-extender"]
            driver = SimDriver(self.cluster, extender)
            scheduler = driver.scheduler
            stop = asyncio.Event()
            tasks.append(asyncio.create_task(self.follow_metrics()))
            tasks.append(asyncio.create_task(driver.run(stop, batch_stream=True)))

            check_task = asyncio.create_task(self.batch_pod_check(scheduler, time.monotonic() + 120))
            # Ctrl-C / SIGTERM end the summary; the checks are still reported and everything stopped.
            interrupted = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, interrupted.set)
            end = time.monotonic() + duration_s if duration_s else None
            dashboard = urls["metrics-collector"] + "/dashboard/"
            console.print(f"[bold]dashboard[/] {dashboard}")
            def checked(t: asyncio.Task) -> None:
                if t.cancelled():
                    return
                exc = t.exception()
                self.check(CheckResult("batch pod placed", False, f"the check failed: {exc!r}") if exc else t.result())

            check_task.add_done_callback(checked)
            if console.is_terminal:
                with Live(console=console, refresh_per_second=1, transient=False) as live:
                    while not interrupted.is_set() and (end is None or time.monotonic() < end):
                        live.update(self.table(await self.node_views(), {"dashboard": dashboard}))
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(interrupted.wait(), 2.0)
            else:  # a log or a pipe: the table as it stands every TABLE_EVERY_S, not one frame at the end
                last = 0.0
                while not interrupted.is_set() and (end is None or time.monotonic() < end):
                    if time.monotonic() - last >= TABLE_EVERY_S:
                        last = time.monotonic()
                        console.print(self.table(await self.node_views(), {"dashboard": dashboard}))
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(interrupted.wait(), 2.0)
            console.print()  # the checks start on a line of their own, after the table
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            if not check_task.done():
                check_task.cancel()
                self.check(CheckResult("batch pod placed", False, "not finished before the demo ended"))
            self.check(await self.collector_check(urls["metrics-collector"]))
            views = await self.node_views()
            offering = [v for v in views if v.batch_allocatable and v.batch_allocatable.cpu_milli > 0]
            self.check(CheckResult("batch allocatable published", bool(offering), f"{len(offering)}/{len(views)} nodes"))
            return all(c.ok for c in self.checks)
        finally:
            await cancel_and_wait(tasks)
            if self.cluster is not None:
                with contextlib.suppress(Exception):
                    await self.cluster.close()
            launcher.stop_services()
            if self.bus is not None:
                with contextlib.suppress(Exception):
                    if launcher.nats is None:
                        # A shared NATS keeps streams: remove this demo's namespace once its
                        # services have stopped (a private server goes away with its directory).
                        await self.bus.delete_namespace()
                    await self.bus.close()
            launcher.stop_nats()
            passed = sum(c.ok for c in self.checks)
            console.print(f"checks: {passed} of {len(self.checks)} passed"
                          + "".join(f"; FAIL {c.name}" for c in self.checks if not c.ok))  # fmt: skip
