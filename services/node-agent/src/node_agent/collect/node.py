"""One real collection round: node from /proc, pods and containers from their cgroups."""

from __future__ import annotations

import logging
import math

from ..core.pods import PodInfo
from ..core.rates import CounterRates
from ..core.reporter import NodeRound
from .cgroups import CgroupFormatError, CgroupPathError, CgroupReader
from .procfs import ProcFormatError, ProcReader, memory_usage_bytes

log = logging.getLogger(__name__)

NAN = math.nan


class RealCollector:
    def __init__(self, proc: ProcReader, cgroups: CgroupReader | None, collect_interval_s: float = 1.0) -> None:
        self.proc = proc
        self.cgroups = cgroups
        # koordlet keeps previous counters for collect interval x 20
        self.rates = CounterRates(ttl_ns=int(collect_interval_s * 20 * 1e9))
        self._throttle_prev: dict[str, tuple[int, int]] = {}
        self.errors = 0

    def collect(self, pods: list[PodInfo], t_ns: int, host_apps: list[tuple[str, str]] = ()) -> NodeRound:
        """One round; `host_apps` are the NodeSLO host applications as (name, cgroup dir)."""
        node = self._node(t_ns)
        round_ = NodeRound(node=node)
        if self.cgroups is None:
            return round_
        alive: list = ["node"]
        for name, rel in host_apps:
            try:
                round_.host_apps[name] = self._usage(("host", name), rel, t_ns)[0]
                alive.append(("host", name))
            except (OSError, CgroupPathError, CgroupFormatError, ValueError):
                continue  # not there (yet): no usage this round
        throttled: dict[str, float] = {}
        psi: dict[str, dict] = {}
        for pod in pods:
            try:
                pod_rel = self.cgroups.layout.pod_dir(pod.uid, pod.kube_qos)
                pair = self._usage(("pod", pod.uid), pod_rel, t_ns)
            except (FileNotFoundError, NotADirectoryError):
                continue  # cgroup gone (pod just left) or not created yet
            except CgroupPathError:  # counted and logged once where it was refused
                self.errors += 1
                continue
            except (CgroupFormatError, ValueError, OSError) as exc:
                self.errors += 1
                log.warning("pod cgroup unreadable", extra={"pod": pod.uid, "error": str(exc)})
                continue
            pair, throttle = pair
            alive.append(("pod", pod.uid))
            round_.pods[pod.uid] = pair
            ratio = self._throttled_ratio(pod.uid, throttle)
            if ratio is not None:
                throttled[pod.uid] = ratio
            p = self.cgroups.psi(pod_rel)
            if p:
                psi[pod.uid] = p
            for name, rel in self._containers(pod, pod_rel):
                try:
                    round_.containers[(pod.uid, name)] = self._usage(("container", pod.uid, name), rel, t_ns)[0]
                    alive.append(("container", pod.uid, name))
                except (OSError, CgroupFormatError, ValueError):
                    continue
                kills = self.cgroups.oom_kills(rel)
                if kills is not None:
                    round_.oom_kills[(pod.uid, name)] = kills
        self.rates.retain(alive)
        self._throttle_prev = {k: v for k, v in self._throttle_prev.items() if k in round_.pods}
        ext = {}
        if throttled:
            ext["cpu_throttled_ratio"] = throttled
        if psi:
            ext["psi_avg10"] = psi
        round_.extensions = ext
        return round_

    def _node(self, t_ns: int) -> tuple[float, float]:
        cpu = mem = NAN
        try:
            ticks_per_s = self.rates.rate("node", self.proc.cpu_ticks(), t_ns)
            if ticks_per_s is not None:
                cpu = ticks_per_s / self.proc.ticks_per_s * 1000
        except (OSError, ProcFormatError) as exc:
            self.errors += 1
            log.warning("node cpu unreadable", extra={"error": str(exc)})
        try:
            mem = float(memory_usage_bytes(self.proc.meminfo()))
        except (OSError, ProcFormatError) as exc:
            self.errors += 1
            log.warning("node memory unreadable", extra={"error": str(exc)})
        return cpu, mem

    def _usage(self, key, rel: str, t_ns: int):
        """((cpu milli, memory bytes), throttling counters)."""
        counter, throttle = self.cgroups.cpu(rel)
        mem = float(self.cgroups.memory_bytes(rel))
        ns_per_s = self.rates.rate(key, counter, t_ns)
        return ((NAN if ns_per_s is None else ns_per_s / 1e6), mem), throttle

    def _containers(self, pod: PodInfo, pod_rel: str) -> list[tuple[str, str]]:
        layout = self.cgroups.layout
        if pod.container_ids:
            out = []
            for name, cid in pod.container_ids:
                try:
                    out.append((name, layout.container_dir(pod_rel, cid)))
                except CgroupPathError:
                    continue
            return out
        # no runtime ids known (sim records, old API objects): the cgroup dir names stand in
        return layout.container_dirs(pod_rel)

    def _throttled_ratio(self, uid: str, t) -> float | None:
        """nr_throttled / nr_periods between two reads (koordlet's pod_cpu_throttled)."""
        if t is None:
            return None
        prev = self._throttle_prev.get(uid)
        self._throttle_prev[uid] = (t.nr_periods, t.nr_throttled)
        if prev is None or t.nr_periods <= prev[0] or t.nr_throttled < prev[1]:
            return None
        return (t.nr_throttled - prev[1]) / (t.nr_periods - prev[0])
