"""Where the webhook's ClusterColocationProfiles, PriorityClasses and namespace labels come from:
a YAML file (Kubernetes objects, hot-reloaded) and the cluster port's custom objects."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from .core.profile import (
    BUILTIN_PRIORITY_CLASSES,
    ColocationProfile,
    PriorityClassInfo,
    ProfileError,
    parse_priority_class,
    parse_profiles,
)

log = logging.getLogger("slo_controller.profiles")

PROFILE_KIND = "ClusterColocationProfile"
LABEL_NAMESPACE_NAME = "kubernetes.io/metadata.name"  # set by the API server on every namespace


class ProfileStore:
    def __init__(self) -> None:
        self._file_profiles: list[ColocationProfile] = []
        self._cluster_profiles: list[ColocationProfile] = []
        self._merged: list[ColocationProfile] = []
        self._namespaces: dict[str, dict[str, str]] = {}
        self._cluster_namespaces: dict[str, dict[str, str]] = {}
        self._classes: dict[str, PriorityClassInfo] = dict(BUILTIN_PRIORITY_CLASSES)
        self.errors: list[str] = []

    # -- reads used by the webhook

    def profiles(self) -> list[ColocationProfile]:
        return self._merged

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        # The cluster's labels, with the profile file's on top (a file can stand in for a cluster
        # that the controller may not list).
        labels = {**self._cluster_namespaces.get(namespace, {}), **self._namespaces.get(namespace, {})}
        labels.setdefault(LABEL_NAMESPACE_NAME, namespace)
        return labels

    def priority_classes(self) -> Mapping[str, PriorityClassInfo]:
        return self._classes

    # -- loading

    def load_documents(self, docs: list[Any]) -> list[str]:
        """Objects of kind ClusterColocationProfile, PriorityClass, Namespace (or a List of
        them), or a mapping {profiles, priorityClasses, namespaces: {name: labels}}."""
        profiles: list[Any] = []
        classes = dict(BUILTIN_PRIORITY_CLASSES)
        namespaces: dict[str, dict[str, str]] = {}
        errors: list[str] = []

        def take(obj: Any) -> None:
            if not isinstance(obj, Mapping):
                errors.append(f"ignored a document that is not an object: {str(obj)[:60]!r}")
                return
            kind = obj.get("kind")
            if kind == "List":
                for item in obj.get("items") or []:
                    take(item)
            elif kind == PROFILE_KIND:
                profiles.append(obj)
            elif kind == "PriorityClass":
                try:
                    pc = parse_priority_class(obj)
                    classes[pc.name] = pc
                except ProfileError as e:
                    errors.append(str(e))
            elif kind == "Namespace":
                meta = obj.get("metadata") or {}
                if isinstance(meta.get("name"), str):
                    namespaces[meta["name"]] = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
            elif kind is None and any(k in obj for k in ("profiles", "priorityClasses", "namespaces")):
                profiles.extend(obj.get("profiles") or [])
                for pc in obj.get("priorityClasses") or []:
                    try:
                        info = parse_priority_class(pc)
                        classes[info.name] = info
                    except ProfileError as e:
                        errors.append(str(e))
                for name, labels in (obj.get("namespaces") or {}).items():
                    namespaces[str(name)] = {str(k): str(v) for k, v in (labels or {}).items()}
            else:
                errors.append(f"ignored a document of kind {kind!r}")

        for d in docs:
            take(d)
        parsed, bad = parse_profiles(profiles)
        errors.extend(bad)
        self._file_profiles = parsed
        self._classes = classes
        self._namespaces = namespaces
        self._merge()
        self.errors = errors
        for e in errors:
            log.error("profile file entry rejected", extra={"error": e})
        return errors

    def set_cluster_profiles(self, objs: list[Any]) -> list[str]:
        parsed, bad = parse_profiles(objs)
        self._cluster_profiles = parsed
        self._merge()
        for e in bad:
            log.error("cluster profile rejected", extra={"error": e})
        return bad

    def _merge(self) -> None:
        # A profile in the cluster replaces a file profile of the same name.
        by_name = {p.name: p for p in self._file_profiles}
        by_name.update({p.name: p for p in self._cluster_profiles})
        self._merged = [by_name[n] for n in sorted(by_name)]

    async def refresh_from_cluster(self, cluster: Any) -> None:
        try:
            objs = await cluster.list_custom(PROFILE_KIND)
        except Exception as exc:  # noqa: BLE001 - keep the profiles already known
            log.warning("listing ClusterColocationProfiles failed", extra={"error": repr(exc)})
            return
        self.set_cluster_profiles(objs)
        try:
            self._cluster_namespaces = await cluster.list_namespaces()
        except Exception as exc:  # noqa: BLE001 - keep the namespace labels already known
            log.warning("listing namespaces failed", extra={"error": repr(exc)})
