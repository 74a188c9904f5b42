"""Workload keys: which workload container a usage sample belongs to.

A pod is aggregated under its controller (namespace + owner kind/name) and container name.
A ReplicaSet stands for its Deployment; when the cluster port cannot resolve it, the
Deployment name is recovered from the "<deployment>-<pod-template-hash>" naming rule.

Keys are named tuples: hashed and compared in C on every sample, and held once per tracked
container, so both their speed and their size count.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# pod-template-hash is rand.SafeEncodeString of a 32-bit hash: consonants and digits without
# vowels or look-alikes, up to 10 characters.
_RS_HASH = re.compile(r"^(?P<deploy>.+)-[bcdfghjklmnpqrstvwxz2456789]{1,10}$")


class WorkloadKey(NamedTuple):
    namespace: str
    kind: str
    name: str

    @property
    def owner_token(self) -> str:
        """The `<owner>` part of koord.recommendation.<ns>.<owner>: kind and name."""
        return f"{self.kind.lower()}-{self.name}"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"


class ContainerKey(NamedTuple):
    workload: WorkloadKey
    container: str

    def __str__(self) -> str:
        return f"{self.workload}/{self.container}"

    @classmethod
    def parse(cls, text: str) -> ContainerKey:
        parts = text.split("/")
        if len(parts) != 4 or not all(parts):
            raise ValueError(f"{text!r} is not <namespace>/<kind>/<name>/<container>")
        return cls(WorkloadKey(parts[0], parts[1], parts[2]), parts[3])


def deployment_of_replicaset(rs_name: str) -> str | None:
    m = _RS_HASH.match(rs_name)
    return m.group("deploy") if m else None


def workload_of(namespace: str, owner_kind: str | None, owner_name: str | None, pod_name: str,
                resolved: tuple[str, str] | None = None) -> WorkloadKey:
    """`resolved` is what the cluster port answered for the pod (kind, name), when it knew."""
    if resolved is not None and resolved[0] and resolved[1]:
        return WorkloadKey(namespace, resolved[0], resolved[1])
    if not owner_kind or not owner_name:
        return WorkloadKey(namespace, "Pod", pod_name)
    if owner_kind == "ReplicaSet":
        deploy = deployment_of_replicaset(owner_name)
        if deploy:
            return WorkloadKey(namespace, "Deployment", deploy)
    return WorkloadKey(namespace, owner_kind, owner_name)
