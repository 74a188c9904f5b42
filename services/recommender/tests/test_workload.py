"""Container keys; which workload a pod belongs to is koordcommon.workload's (tested there)."""

import pytest
from koordcommon.workload import WorkloadKey
from recommender.core.workload import ContainerKey


def test_container_key_text_roundtrip():
    key = ContainerKey(WorkloadKey("prod", "Deployment", "web"), "app")
    assert str(key) == "prod/Deployment/web/app"
    assert ContainerKey.parse(str(key)) == key
    assert key.workload.owner_token == "deployment-web"
    with pytest.raises(ValueError):
        ContainerKey.parse("a/b/c")
