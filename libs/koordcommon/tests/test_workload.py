import pytest
from koordcommon.records import OwnerRef, PodRecord
from koordcommon.workload import (
    WorkloadKey,
    cronjob_of_job,
    deployment_of_replicaset,
    workload_of,
    workload_of_owner,
)


def _pod(name: str, owners: list[OwnerRef], labels: dict[str, str] | None = None) -> PodRecord:
    return PodRecord(namespace="ns", name=name, uid="u-" + name, owners=owners, labels=labels or {})


@pytest.mark.parametrize(
    "pod, expected",
    [
        # Deployment -> ReplicaSet -> Pod: the hash label names the ReplicaSet's suffix exactly
        (
            _pod("web-7c5ddbdf54-x2x9k", [OwnerRef("ReplicaSet", "web-7c5ddbdf54")], {"pod-template-hash": "7c5ddbdf54"}),
            ("Deployment", "web"),
        ),
        # a hash label that is not the suffix: not a Deployment's ReplicaSet
        (
            _pod("rs-abc-1", [OwnerRef("ReplicaSet", "rs-abc")], {"pod-template-hash": "zzz"}),
            ("ReplicaSet", "rs-abc"),
        ),
        # no label: the name's last part is taken as a hash when it can be one
        (_pod("api-v2-68b9cf4d7-q", [OwnerRef("ReplicaSet", "api-v2-68b9cf4d7")]), ("Deployment", "api-v2")),
        (_pod("standalone-x", [OwnerRef("ReplicaSet", "standalone")]), ("ReplicaSet", "standalone")),
        (_pod("job-batch-abcde-x", [OwnerRef("ReplicaSet", "job-batch-abcde")]), ("ReplicaSet", "job-batch-abcde")),
        (_pod("db-0", [OwnerRef("StatefulSet", "db")]), ("StatefulSet", "db")),
        (_pod("fluentd-x7k2p", [OwnerRef("DaemonSet", "fluentd")]), ("DaemonSet", "fluentd")),
        # CronJob -> Job -> Pod: each run's Job is `<cronjob>-<minutes since the epoch>`
        (_pod("report-28912345-abcde", [OwnerRef("Job", "report-28912345")]), ("CronJob", "report")),
        (_pod("etl-7-xyz", [OwnerRef("Job", "etl-7")]), ("Job", "etl-7")),
        (_pod("spark-pi", [OwnerRef("Job", "spark-pi")]), ("Job", "spark-pi")),
        (_pod("lonely", []), ("Pod", "lonely")),
        # the controller reference wins over other owners
        (
            _pod("x", [OwnerRef("ConfigMap", "cm", controller=False), OwnerRef("StatefulSet", "kafka")]),
            ("StatefulSet", "kafka"),
        ),
    ],
)
def test_workload_of_pod(pod, expected):
    assert workload_of(pod) == WorkloadKey("ns", *expected)


def test_resolved_by_the_cluster_wins():
    pod = _pod("web-7c5ddbdf54-x", [OwnerRef("ReplicaSet", "web-7c5ddbdf54")])
    assert workload_of(pod, ("ReplicaSet", "web-7c5ddbdf54")) == WorkloadKey("ns", "ReplicaSet", "web-7c5ddbdf54")
    assert workload_of(pod, ("", "")) == WorkloadKey("ns", "Deployment", "web")


@pytest.mark.parametrize(
    "owner_kind, owner_name, pod_name, expected",
    [
        ("ReplicaSet", "nginx-7c5ddbdf54", "nginx-7c5ddbdf54-x2x9k", ("Deployment", "nginx")),
        ("Job", "backup-29000000", "backup-29000000-p", ("CronJob", "backup")),
        ("", "", "lonely", ("Pod", "lonely")),
        (None, None, "lonely", ("Pod", "lonely")),
    ],
)
def test_workload_of_owner(owner_kind, owner_name, pod_name, expected):
    assert workload_of_owner("ns", owner_kind, owner_name, pod_name) == WorkloadKey("ns", *expected)


@pytest.mark.parametrize(
    "rs, template_hash, deploy",
    [
        ("nginx-7c5ddbdf54", None, "nginx"),
        ("web-frontend-5d8f9b7c6d", None, "web-frontend"),
        ("coredns-5dd5756b68", None, "coredns"),
        ("plainname", None, None),
        ("job-batch-abcde", None, None),  # vowels are never in a pod-template-hash
        ("web-abc", "abc", "web"),  # the label is trusted whatever its letters
        ("-abc", "abc", None),
    ],
)
def test_deployment_of_replicaset(rs, template_hash, deploy):
    assert deployment_of_replicaset(rs, template_hash) == deploy


@pytest.mark.parametrize(
    "job, cron", [("hello-27837945", "hello"), ("hello-1234567", None), ("a-b-29000000", "a-b"), ("x", None)]
)
def test_cronjob_of_job(job, cron):
    assert cronjob_of_job(job) == cron


def test_key_text():
    key = WorkloadKey("prod", "Deployment", "web")
    assert str(key) == "prod/Deployment/web"
    assert key.owner_token == "deployment-web"
