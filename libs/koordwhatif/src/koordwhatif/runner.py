"""A sweep: the baseline and every configuration replayed over the same scenario, side by side.

Configurations are independent replays, so they run in parallel worker processes (one per
core by default); each reports its ticks to the parent, which draws the progress. With a cache
folder a sweep is resumable: each finished replay is kept there under a key of everything that
decides it (the scenario, the configuration, the span, the tick, the mode and this package's
version), and a sweep run again replays only what it does not find.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import queue as queue_mod
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from koordsim.spec import SimSpec

from .config import WhatIfConfig, baseline
from .engine import replay


@dataclass
class ConfigRun:
    config: dict[str, Any]  # WhatIfConfig.doc()
    summary: dict[str, Any]
    hourly: dict[str, Any]
    assumptions: list[str]
    wall_s: float
    loops: int  # pods (by their first name) evicted twice or more: a migration or eviction loop

    @property
    def name(self) -> str:
        return self.config["name"]


def _run_one(spec_doc: dict, cfg: WhatIfConfig, duration_s: int, tick_s: int, ticks_q, mode: str = "fast",
             speed: float | None = None) -> ConfigRun:
    spec = SimSpec.model_validate(spec_doc)
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if ticks_q is not None and (now - last[0] > 0.5 or done == total):
            last[0] = now
            ticks_q.put((cfg.name, done, total))

    if mode == "real":
        from .real import replay_real

        result = replay_real(spec, cfg, duration_s, tick_s, progress, **({"speed": speed} if speed else {}))
    else:
        result = replay(spec, cfg, duration_s, tick_s, progress)
    evicted_by_root: dict[str, int] = {}
    for life in result.ledger.pods.values():
        if life.outcome == "evicted":
            root = life.key.split("#")[0]
            evicted_by_root[root] = evicted_by_root.get(root, 0) + 1
    return ConfigRun(
        config=cfg.doc(),
        summary=result.summary(),
        hourly=result.ledger.hourly(),
        assumptions=result.assumptions,
        wall_s=result.wall_s,
        loops=sum(1 for n in evicted_by_root.values() if n >= 2),
    )


def run_sweep(
    spec: SimSpec,
    configs: Sequence[WhatIfConfig],
    duration_s: int,
    tick_s: int = 60,
    workers: int | None = None,
    on_progress: Callable[[str, int, int], None] | None = None,
    with_baseline: bool = True,
    mode: str = "fast",
    speed: float | None = None,
    cache: Path | None = None,
    on_cached: Callable[[str], None] | None = None,
) -> list[ConfigRun]:
    """The baseline (first) and each configuration, in that order. `mode` "real" runs each
    through the services as processes (one replay at a time: each is a whole system). With
    `cache`, replays kept there are reused (`on_cached(name)` is told) and new ones kept."""
    every = ([baseline()] if with_baseline else []) + list(configs)
    spec_doc = spec.resolved(wall_ms=spec.start_ms or 0).model_dump()
    keys = [_key(spec_doc, cfg, duration_s, tick_s, mode, speed) for cfg in every]
    found = {i: run for i, k in enumerate(keys) if (run := _load(cache, k)) is not None}
    for i in found:
        if on_cached is not None:
            on_cached(every[i].name)
    todo = [i for i in range(len(every)) if i not in found]
    fresh = _replay_all(spec_doc, [every[i] for i in todo], duration_s, tick_s, workers, on_progress, mode, speed,
                        keep=lambda j, run: _store(cache, keys[todo[j]], run))  # kept as each finishes
    runs = iter(fresh)
    return [found[i] if i in found else next(runs) for i in range(len(every))]


def _package_version() -> str:
    try:
        return version("koordwhatif")
    except PackageNotFoundError:
        return "unknown"


def _key(spec_doc: dict, cfg: WhatIfConfig, duration_s: int, tick_s: int, mode: str, speed: float | None) -> str:
    doc = {"spec": spec_doc, "config": cfg.doc(), "duration_s": duration_s, "tick_s": tick_s, "mode": mode,
           "speed": speed if mode == "real" else None, "version": _package_version()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _load(cache: Path | None, key: str) -> ConfigRun | None:
    if cache is None:
        return None
    try:
        return ConfigRun(**json.loads((cache / f"{key}.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None  # absent, or not a replay this version wrote: replayed again


def _store(cache: Path | None, key: str, run: ConfigRun) -> None:
    if cache is None:
        return
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f".{key}.tmp"
    from .report import finite

    tmp.write_text(json.dumps(finite(asdict(run))))
    tmp.replace(cache / f"{key}.json")  # whole or not at all


def _replay_all(spec_doc: dict, todo: list[WhatIfConfig], duration_s: int, tick_s: int, workers: int | None,
                on_progress, mode: str, speed: float | None,
                keep: Callable[[int, ConfigRun], None] = lambda _i, _run: None) -> list[ConfigRun]:
    if not todo:
        return []
    workers = 1 if mode == "real" else max(1, min(workers or os.cpu_count() or 1, len(todo)))
    if workers == 1:  # in this process: no pickling, tracebacks as they are
        out = []
        for i, cfg in enumerate(todo):
            cb = (lambda d, t, name=cfg.name: on_progress(name, d, t)) if on_progress else None
            out.append(_run_one(spec_doc, cfg, duration_s, tick_s, _Direct(cb) if cb else None, mode, speed))
            keep(i, out[-1])
        return out
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no event loop or threads inherited
    with ctx.Manager() as manager:
        ticks_q = manager.Queue()
        results: dict[int, ConfigRun] = {}
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futures = {pool.submit(_run_one, spec_doc, cfg, duration_s, tick_s, ticks_q): i for i, cfg in enumerate(todo)}
            pending = set(futures)
            while pending:
                _drain(ticks_q, on_progress)
                done = [f for f in pending if f.done()]
                for f in done:
                    results[futures[f]] = f.result()
                    keep(futures[f], results[futures[f]])
                    pending.discard(f)
                if pending:
                    time.sleep(0.2)
            for f in as_completed(futures):  # (all done by now: surfaces a worker's error)
                results[futures[f]] = f.result()
        _drain(ticks_q, on_progress)
    return [results[i] for i in range(len(todo))]


class _Direct:
    """A queue stand-in for the in-process path: progress goes straight to the callback."""

    def __init__(self, cb: Callable[[int, int], None]) -> None:
        self.cb = cb

    def put(self, item: tuple[str, int, int]) -> None:
        self.cb(item[1], item[2])


def _drain(q, on_progress) -> None:
    while True:
        try:
            name, done, total = q.get_nowait()
        except (queue_mod.Empty, EOFError, OSError):
            return
        if on_progress is not None:
            on_progress(name, done, total)
