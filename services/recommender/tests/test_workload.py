import pytest
from recommender.core.workload import ContainerKey, WorkloadKey, deployment_of_replicaset, workload_of


@pytest.mark.parametrize(
    "rs, deploy",
    [
        ("nginx-7c5ddbdf54", "nginx"),
        ("web-frontend-5d8f9b7c6d", "web-frontend"),
        ("coredns-5dd5756b68", "coredns"),
        ("api-v2-68b9cf4d7", "api-v2"),
        ("plainname", None),
        ("job-batch-abcde", None),  # vowels are never in a pod-template-hash
    ],
)
def test_deployment_from_replicaset_name(rs, deploy):
    assert deployment_of_replicaset(rs) == deploy


@pytest.mark.parametrize(
    "owner_kind, owner_name, pod, resolved, expected",
    [
        ("ReplicaSet", "nginx-7c5ddbdf54", "nginx-7c5ddbdf54-x2x9k", None, ("Deployment", "nginx")),
        ("ReplicaSet", "nginx-7c5ddbdf54", "p", ("ReplicaSet", "nginx-7c5ddbdf54"), ("ReplicaSet", "nginx-7c5ddbdf54")),
        ("ReplicaSet", "standalone", "standalone-abc", None, ("ReplicaSet", "standalone")),
        ("StatefulSet", "db", "db-0", None, ("StatefulSet", "db")),
        ("", "", "lonely", None, ("Pod", "lonely")),
        (None, None, "lonely", None, ("Pod", "lonely")),
    ],
)
def test_workload_of(owner_kind, owner_name, pod, resolved, expected):
    assert workload_of("ns", owner_kind, owner_name, pod, resolved) == WorkloadKey("ns", *expected)


def test_container_key_text_roundtrip():
    key = ContainerKey(WorkloadKey("prod", "Deployment", "web"), "app")
    assert str(key) == "prod/Deployment/web/app"
    assert ContainerKey.parse(str(key)) == key
    assert key.workload.owner_token == "deployment-web"
    with pytest.raises(ValueError):
        ContainerKey.parse("a/b/c")
