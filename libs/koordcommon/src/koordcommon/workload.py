"""Which workload a pod belongs to: one rule for every service.

The extender looks usage profiles up by workload, the recommender aggregates samples by it and
the descheduler counts migrations per workload: all three must name a workload the same way,
or a profile written under one key is looked up under another.

The pod's controller (its ownerReference with `controller: true`, else its first owner) names
the workload, with two controllers seen through to the object a user manages:

* a ReplicaSet created by a Deployment is named `<deployment>-<pod-template-hash>`; the pod
  carries the hash as its `pod-template-hash` label, so the Deployment is recovered exactly.
  Without the label (a usage sample carries only the owner), the name's last part is taken
  as a hash when it could be one (`rand.SafeEncodeString`: no vowels, at most 10 characters).
* a Job created by a CronJob is named `<cronjob>-<scheduled time in minutes since the epoch>`;
  each run is a new Job, so the runs of one CronJob are one workload. Only a numeric suffix of
  at least 8 digits (every schedule after 1989) is taken as such.

A cluster port that knows better (it read the ReplicaSet's own owner) passes `resolved`.
A pod without an owner is its own workload (kind `Pod`).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from .records import PodRecord

LABEL_POD_TEMPLATE_HASH = "pod-template-hash"

# pod-template-hash is rand.SafeEncodeString of a 32-bit hash: consonants and digits without
# vowels or look-alikes, up to 10 characters.
_RS_HASH = re.compile(r"^(?P<parent>.+)-[bcdfghjklmnpqrstvwxz2456789]{1,10}$")
_CRONJOB_RUN = re.compile(r"^(?P<parent>.+)-[0-9]{8,}$")


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


def deployment_of_replicaset(rs_name: str, template_hash: str | None = None) -> str | None:
    """The Deployment behind a ReplicaSet name, or None when the name is not `<deploy>-<hash>`."""
    if template_hash:
        suffix = "-" + template_hash
        return rs_name[: -len(suffix)] if rs_name.endswith(suffix) and len(rs_name) > len(suffix) else None
    m = _RS_HASH.match(rs_name)
    return m.group("parent") if m else None


def cronjob_of_job(job_name: str) -> str | None:
    """The CronJob behind a Job name, or None when the name is not `<cronjob>-<minutes>`."""
    m = _CRONJOB_RUN.match(job_name)
    return m.group("parent") if m else None


def workload_of_owner(
    namespace: str,
    owner_kind: str | None,
    owner_name: str | None,
    pod_name: str,
    template_hash: str | None = None,
    resolved: tuple[str, str] | None = None,
) -> WorkloadKey:
    """The workload of a pod known by its controller's kind and name (a usage sample, a record)."""
    if resolved is not None and resolved[0] and resolved[1]:
        return WorkloadKey(namespace, resolved[0], resolved[1])
    if not owner_kind or not owner_name:
        return WorkloadKey(namespace, "Pod", pod_name)
    if owner_kind == "ReplicaSet":
        deploy = deployment_of_replicaset(owner_name, template_hash)
        if deploy:
            return WorkloadKey(namespace, "Deployment", deploy)
    elif owner_kind == "Job":
        cron = cronjob_of_job(owner_name)
        if cron:
            return WorkloadKey(namespace, "CronJob", cron)
    return WorkloadKey(namespace, owner_kind, owner_name)


def workload_of(pod: PodRecord, resolved: tuple[str, str] | None = None) -> WorkloadKey:
    """The workload of `pod`, from its ownerReferences first (see the module doc)."""
    owner = pod.controller
    return workload_of_owner(
        pod.namespace,
        owner.kind if owner else None,
        owner.name if owner else None,
        pod.name,
        pod.labels.get(LABEL_POD_TEMPLATE_HASH),
        resolved,
    )


__all__ = [
    "LABEL_POD_TEMPLATE_HASH",
    "WorkloadKey",
    "cronjob_of_job",
    "deployment_of_replicaset",
    "workload_of",
    "workload_of_owner",
]
