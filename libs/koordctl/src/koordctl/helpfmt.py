"""Help that reads like the domain: `--collector URL`, `--nodes N`, and flags with no type label.

Typer labels every option with its Python type (`<str>`, `<int>`, and `<bool>` even on flags such
as `--check` or `--help`). `tidy(app)` gives each option a metavar from its name and type and
renders flags bare, for every command and sub-command of the app.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup
from typer.models import OptionInfo

# option names whose value is a service URL
_URL_NAMES = ("url", "collector", "recommender", "extender", "descheduler", "publish")


def _bare_flags(params: list[Any]) -> list[Any]:
    for p in params:
        if getattr(p, "is_flag", False) and p.metavar is None:
            p.metavar = ""  # rendered as no label
    return params


class Command(TyperCommand):
    def get_params(self, ctx):
        return _bare_flags(super().get_params(ctx))


class Group(TyperGroup):
    def get_params(self, ctx):
        return _bare_flags(super().get_params(ctx))


def metavar_for(name: str, annotation: Any) -> str | None:
    """A label for an option's value from its name and type; None for flags."""
    kind = annotation if isinstance(annotation, type) else None
    text = str(annotation)
    if kind is bool or text in ("bool", "bool | None"):
        return None
    if name == "output":
        return "table|json"
    if kind is Path or "Path" in text:  # a file, even when named after a service (`--extender FILE`)
        return "PATH"
    if any(part in name for part in _URL_NAMES):
        return "URL"
    if kind is int or text.startswith("int"):
        return "N"
    if kind is float or text.startswith("float"):
        return "SECONDS" if name in ("duration",) or name.endswith("_s") else "X"
    return name.upper().replace("_", "-")


def _label(callback: Any) -> None:
    import inspect

    for param in inspect.signature(callback).parameters.values():
        info = param.default
        if isinstance(info, OptionInfo) and info.metavar is None:
            label = metavar_for(param.name, param.annotation)
            if label is not None:
                info.metavar = label


def tidy(app: typer.Typer) -> None:
    """Metavars and bare flags on every command of `app` and of its sub-apps."""
    if not (isinstance(app.info.cls, type) and issubclass(app.info.cls, Group)):
        app.info.cls = Group
    for cmd in app.registered_commands:
        if not (isinstance(cmd.cls, type) and issubclass(cmd.cls, Command)):
            cmd.cls = Command
        if cmd.callback is not None:
            _label(cmd.callback)
    for group in app.registered_groups:
        if not (isinstance(group.cls, type) and issubclass(group.cls, Group)):
            group.cls = Group
        if group.typer_instance is not None:
            tidy(group.typer_instance)
