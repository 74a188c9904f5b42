"""Cluster backends by name, found through the `koord.cluster_backends` entry-point group.

Each entry point names a callable that takes the backend's keyword options and returns a
ClusterPort. koordcommon registers `kubernetes` (and `k8s`); the simulated cluster lives in
its own distribution, koordsim, which registers `sim`. A backend's module is imported only
when that backend is opened, so koordcommon never imports a backend it does not ship.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from .port import ClusterPort

GROUP = "koord.cluster_backends"
# The distribution that provides each backend this project knows of, for the message when
# one is asked for but not installed.
PROVIDERS = {"sim": "koordsim", "kubernetes": "koordcommon", "k8s": "koordcommon"}


class BackendNotFound(ValueError):
    """No installed distribution registers a backend of that name."""


def installed_backends() -> dict[str, EntryPoint]:
    """Backend name -> its entry point, for every installed distribution that registers one."""
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def backend_factory(name: str) -> Callable[..., ClusterPort]:
    found = installed_backends()
    ep = found.get(name)
    if ep is not None:
        return ep.load()
    provider = PROVIDERS.get(name)
    if provider is not None:
        raise BackendNotFound(
            f"cluster backend {name!r} is not installed: install the {provider!r} package "
            f"(pip install {provider}; `make dev` installs every package of the repository)"
        )
    known = ", ".join(sorted(found)) or "none"
    raise BackendNotFound(f"unknown cluster backend {name!r} (installed: {known})")


def open_cluster(backend: str, **options: Any) -> ClusterPort:
    """The backend registered under `backend`, built with `options` (its constructor's keywords)."""
    return backend_factory(backend)(**options)
