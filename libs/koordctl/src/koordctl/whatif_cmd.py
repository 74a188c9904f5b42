"""`koordctl whatif` and `koordctl check-config`: replay history through a colocation config before
enabling it, and find settings that fight each other."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer

# The evaluation's settings, each changed on its own around the configuration (`--evaluate`): the
# reclaim threshold, the HP policy (Koordinator's two and the predicted peak), the load-aware
# threshold, and CPU suppress's threshold and policy.
DEFAULT_SWEEP = (
    "cpuReclaimThresholdPercent=50,60,70",
    "cpuCalculatePolicy=usage,maxUsageRequest,predict",
    "extender.usage_thresholds.cpu=65,75",
    "threshold.cpuSuppressThresholdPercent=60,65",
    "threshold.cpuSuppressPolicy=cpuset,cfsQuota",
)


def _require():
    try:
        import koordwhatif  # noqa: F401
    except ImportError:
        typer.echo("error: the what-if replay needs the koordwhatif package (pip install -e libs/koordwhatif)", err=True)
        raise typer.Exit(2) from None


def _config(config: Path | None, slo_config: Path | None, extender: Path | None, descheduler: Path | None):
    """One configuration from a combined file or from the three services' own files."""
    import yaml
    from koordwhatif.config import ConfigError, WhatIfConfig, load_config

    try:
        cfg = load_config(config) if config else WhatIfConfig()
        parts = {}
        if slo_config:
            doc = yaml.safe_load(slo_config.read_text())
            data = doc.get("data", doc) if isinstance(doc, dict) else None
            if not isinstance(data, dict):
                raise ConfigError(f"{slo_config}: a ConfigMap or its data map expected")
            parts["slo"] = {k: json.loads(v) if isinstance(v, str) else v for k, v in data.items()}
        if extender:
            parts["extender"] = yaml.safe_load(extender.read_text()) or {}
        if parts:
            import dataclasses

            cfg = dataclasses.replace(cfg, **parts)
        if descheduler:  # LowNodeLoadArgs, or a DeschedulerConfiguration with its round interval
            from koordwhatif.config import with_descheduler

            cfg = with_descheduler(cfg, yaml.safe_load(descheduler.read_text()) or {})
        return cfg.check()
    except (ConfigError, OSError, ValueError, yaml.YAMLError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def register(app: typer.Typer, cli) -> None:
    """Add the commands to `app`; `cli` is the module with koordctl's shared helpers (the running
    demo's URLs, the API token), handed in, not imported back."""

    @app.command("check-config")
    def check_config(
        config: Path | None = typer.Option(None, help="one YAML with slo-controller-config, scheduler-extender, descheduler"),
        slo_config: Path | None = typer.Option(None, help="the slo-controller-config ConfigMap (YAML)"),
        extender: Path | None = typer.Option(None, help="the scheduler-extender settings (YAML)"),
        descheduler: Path | None = typer.Option(None, help="the descheduler's LowNodeLoadArgs or DeschedulerConfiguration (YAML)"),
        output: str = typer.Option("table", "--output", "-o", help="table or json"),
    ):
        """Report settings of the slo-controller, the extender and the descheduler that fight each other.

        Exit code 1 when an error is found (a combination that makes pods land, get suppressed or
        evicted, and land again), 0 otherwise (warnings included).
        """
        _require()
        from koordwhatif.checkconfig import ERROR, check

        found = check(_config(config, slo_config, extender, descheduler))
        if output == "json":
            typer.echo(json.dumps([f.__dict__ for f in found], indent=2))
        elif not found:
            typer.echo("no conflicting settings found")
        else:
            for f in found:
                typer.echo(f"{f.level.upper()}: {' vs '.join(f.settings)}")
                typer.echo(f"  {f.problem}")
                typer.echo(f"  fix: {f.fix}")
        raise typer.Exit(1 if any(f.level == ERROR for f in found) else 0)

    @app.command("whatif")
    def whatif(
        trace: str = typer.Option("alibaba2018", help="online load: alibaba2018 (real machines), bitbrains (VMs packed "
                                  "onto nodes) or history (a CSV exported by the metrics-collector, --history)"),
        history: Path | None = typer.Option(None, help="with --trace history: the history directory "
                                            "(koordctl export-history, docs/history-format.md)"),
        nodes: int = typer.Option(0, min=0, help="nodes (0: the trace's own machines); more repeat them shifted in time"),
        days: float = typer.Option(8.0, min=1 / 24, help="simulated days to replay"),
        config: Path | None = typer.Option(None, help="the configuration to evaluate (default: the repository's example)"),
        slo_config: Path | None = typer.Option(None, help="...or the slo-controller-config ConfigMap alone"),
        extender: Path | None = typer.Option(None, help="...and the scheduler-extender settings"),
        descheduler: Path | None = typer.Option(None, help="...and the descheduler's LowNodeLoadArgs or DeschedulerConfiguration"),
        sweep: list[str] = typer.Option([], help="knob=v1,v2 (repeatable): every combination is replayed"),
        vary: list[str] = typer.Option([], help="knob=v1,v2 (repeatable): each value replayed on its own, the "
                                       "other settings as configured"),
        candidate: list[Path] = typer.Option([], help="another configuration file replayed as it is, beside the "
                                             "others (repeatable)"),
        evaluate: bool = typer.Option(False, help="vary each of " + "; ".join(DEFAULT_SWEEP)),
        batch_load: float = typer.Option(0.1, min=0, help="batch demand: mean requested batch CPU / node CPU"),
        online_memory_share: float = typer.Option(0.5, min=0, max=1, help="alibaba2018: share of the traced machine "
                                                  "memory that is the online pods' (the rest: page cache, 2018 batch)"),
        seed: int = typer.Option(0, help="seed of every modelled draw"),
        workers: int = typer.Option(0, min=0, help="parallel replays (0: one per core)"),
        out: Path = typer.Option(Path("whatif-report"), help="where report.json, report.md and the plots go"),
        fresh: bool = typer.Option(False, help="replay everything again (by default a replay already kept in "
                                   "OUT/.runs for the same scenario, configuration and span is reused)"),
        mode: str = typer.Option("fast", help="fast (the services' code in this process, no sleeps) or real (the "
                                 "services as processes over NATS, at --speed)"),
        speed: float = typer.Option(60.0, min=1, help="real mode: simulated seconds per wall second"),
        publish: str | None = typer.Option(None, help="metrics-collector URL the dashboard reads this report from "
                                           "('demo': the running demo's)"),
    ):
        """Replay cluster history through colocation configs and compare reclaimed capacity with online risk."""
        _require()
        from koordwhatif import scenario as scn
        from koordwhatif.config import ConfigError, parse_sweep, variations
        from koordwhatif.config import sweep as expand
        from koordwhatif.report import markdown_table, recommend, write
        from koordwhatif.runner import run_sweep
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        base = _config(config, slo_config, extender, descheduler)
        # where the report goes, known before the replays start: a demo that is not running is
        # said now, not after minutes of replaying
        url = (cli._service_url("metrics-collector", None) if publish == "demo" else publish) if publish else None
        try:
            if sweep and (vary or evaluate):
                raise ConfigError("--sweep (every combination) and --vary / --evaluate (one at a time) do not mix")
            if sweep:
                configs = expand(base, parse_sweep(list(sweep)))
            else:
                configs = variations(base, parse_sweep((list(DEFAULT_SWEEP) if evaluate else []) + list(vary)))
            from koordwhatif.config import load_config

            configs += [load_config(path) for path in candidate]
            if len({c.name for c in configs}) < len(configs):
                raise ConfigError("two configurations have one name: give each --candidate file its own `name`")
            if mode not in ("fast", "real"):
                raise ConfigError(f"--mode must be fast or real, not {mode!r}")
            spec, about = scn.spec_for(trace, history=history, nodes=nodes, seed=seed, batch_load=batch_load,
                                       online_memory_share=online_memory_share)
        except (ConfigError, scn.ScenarioError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        duration_s = int(days * 86400)
        typer.echo(f"scenario: {about['title']}; traces: {about['traces']}")
        typer.echo(f"replaying {len(configs)} configuration(s) and the no-colocation baseline over "
                   f"{days:g} day(s) of simulated time")
        started = time.monotonic()
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(*columns, transient=False, disable=not sys.stderr.isatty()) as progress:
            bars: dict[str, int] = {}

            told: dict[str, int] = {}  # without a terminal: a line each tenth of a replay

            def on_progress(name: str, done: int, total: int) -> None:
                if name not in bars:
                    bars[name] = progress.add_task(name[:48], total=total)
                progress.update(bars[name], completed=done)
                tenth = done * 10 // max(total, 1)
                if not sys.stderr.isatty() and tenth > told.get(name, -1):
                    told[name] = tenth
                    typer.echo(f"  {name}: {tenth * 10} % ({time.monotonic() - started:.0f} s)", err=True)

            runs = run_sweep(spec, configs, duration_s, workers=workers or None, on_progress=on_progress, mode=mode,
                             speed=speed, cache=None if fresh else out / ".runs",
                             on_cached=lambda name: typer.echo(f"  reused (kept from an earlier run): {name}", err=True))
        paths = write(runs, about, out)
        typer.echo("")
        typer.echo(markdown_table(runs))
        best, why = recommend(runs)
        if best is not None:
            typer.echo(f"\nrecommended: {best.name}: {why}")
        typer.echo(f"\n{len(runs)} replays in {time.monotonic() - started:.0f} s; report: "
                   + ", ".join(str(p) for p in paths.values()))
        if url:
            from .whatif_publish import PublishError
            from .whatif_publish import publish as send

            token_file = cli._credential_env()["KOORD_API_TOKEN_FILE"]
            try:
                token = Path(token_file).read_text().strip() if token_file else None
                send(url, out, token)
            except (PublishError, OSError) as exc:
                typer.echo(f"error: publishing to {url} failed: {exc}", err=True)
                raise typer.Exit(1) from None
            typer.echo(f"published to {url}: the dashboard's what-if panel shows it")
