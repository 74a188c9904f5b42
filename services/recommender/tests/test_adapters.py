import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from koordcommon.resources import Resources
from koordcommon.schemas import ContainerUsage, NodeMetricSample, Owner, PodUsage
from koordsim.cluster import SimCluster
from koordsim.spec import SimSpec
from recommender import cluster as clusterio
from recommender.api import router
from recommender.bus import apply_sample, subject_of, to_message
from recommender.cluster import WorkloadResolver
from recommender.core.engine import RecommenderState
from recommender.core.workload import WorkloadKey

MIB = 1024 * 1024
WEB = WorkloadKey("prod", "Deployment", "web")


async def fed(metric_samples, minutes=180) -> RecommenderState:
    st = RecommenderState()
    resolve = WorkloadResolver(None)
    for m in metric_samples(0, minutes):
        await apply_sample(st, m, resolve)
    return st


async def test_messages_become_workload_container_samples(metric_samples):
    st = await fed(metric_samples)
    assert st.workloads() == [WorkloadKey("dev", "Pod", "lone"), WEB]
    web = st.recommend(WEB)
    assert [c.container for c in web.containers] == ["app", "proxy"]
    app = web.containers[0]
    assert app.replicas == 2 and app.total_samples == 2 * 180
    assert app.current.cpu_milli == 1000 and app.current.memory_bytes == 1024 * MIB
    # usage cycles 300..660m (pod a) and half of it (pod b): p90 of the pooled samples
    assert 580 <= app.estimate.target.cpu_milli <= 760
    assert app.savings.cpu_milli == 2 * (1000 - app.estimate.target.cpu_milli)


async def test_redelivered_messages_are_not_counted_twice(metric_samples):
    st = await fed(metric_samples)
    before = st.recommend(WEB)
    resolve = WorkloadResolver(None)
    for m in metric_samples(100, 80):  # the tail again, as after a crash between checkpoint and ack
        assert await apply_sample(st, m, resolve) == 0
    assert st.recommend(WEB) == before


async def test_oom_in_a_sample_bumps_memory_once(metric_samples):
    st = await fed(metric_samples, minutes=60)
    before = st.recommend(WEB).containers[0].estimate.target.memory_bytes
    oom_ms = metric_samples(59, 1)[0].ts - 1000
    for i in range(3):  # every later message repeats the same last OOM time
        msg = metric_samples(60 + i, 1)[0]
        msg.pods[0].containers[0].last_oom_ms = oom_ms
        await apply_sample(st, msg, WorkloadResolver(None))
    after = st.recommend(WEB).containers[0].estimate.target.memory_bytes
    # request 1024Mi > peak: needed = max(1024 + 100, 1024 x 1.2) Mi, then margin
    assert before < 1.2 * 1024 * MIB < after < 1.2 * 1024 * MIB * 1.15 * 1.06


def test_message_shape(metric_samples):
    import asyncio

    st = asyncio.run(fed(metric_samples))
    msg = to_message(st.recommend(WEB))
    assert subject_of(WEB) == "koord.recommendation.prod.deployment-web"
    app = msg.containers[0]
    assert app.lower_bound.cpu_milli <= app.target.cpu_milli <= app.upper_bound.cpu_milli
    hour = next(p for p in app.profiles if p.window_s == 3600)
    assert hour.p50.cpu_milli <= hour.p90.cpu_milli <= hour.p99.cpu_milli <= hour.max.cpu_milli == 660
    assert len(app.diurnal_cpu_milli) == 24 and app.diurnal_cpu_milli[0] > 0
    assert app.method == "vpa"  # whose recommendation the target is
    assert msg.encode()  # valid on the wire


async def test_resolver_asks_the_cluster_then_falls_back_to_the_naming_rule():
    cluster = SimCluster(SimSpec(nodes=1, online_pods_per_node=2))
    await cluster.start()
    pod = (await cluster.list_pods())[0]
    rs = pod.controller
    resolve = WorkloadResolver(cluster)
    usage = PodUsage(uid=pod.uid, namespace=pod.namespace, name=pod.name, owner=Owner(kind=rs.kind, name=rs.name))
    kind, name = await cluster.resolve_workload(pod)
    assert await resolve(usage) == WorkloadKey(pod.namespace, kind, name) and kind == "Deployment"
    unknown = PodUsage(uid="u", namespace="x", name="p", owner=Owner(kind="ReplicaSet", name="api-68b9cf4d7"))
    assert await resolve(unknown) == WorkloadKey("x", "Deployment", "api")
    assert await WorkloadResolver(None)(unknown) == WorkloadKey("x", "Deployment", "api")


async def test_recommendation_custom_objects_in_the_sim_cluster(metric_samples):
    cluster = SimCluster(SimSpec(nodes=1))
    await cluster.start()
    st = await fed(metric_samples)
    assert await clusterio.apply_objects(cluster, st.changed()) == 2
    obj = await cluster.get_custom("Recommendation", "deployment-web", "prod")
    assert obj["apiVersion"] == "analysis.koordinator.sh/v1alpha1"
    assert obj["spec"]["target"]["workload"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}
    app = obj["status"]["recommendResources"]["containerStatuses"][0]
    target = st.recommend(WEB).containers[0].estimate.target
    assert app["containerName"] == "app" and app["resources"]["cpu"] == f"{target.cpu_milli}m"
    assert st.changed() == []  # nothing moved since


async def test_forgotten_workloads_are_withdrawn_from_the_bus_and_the_cluster(metric_samples, bus):
    """A bare pod silent for an hour is gone (nothing carries its history on); a Deployment's
    history waits for VPA's 8-day window. What is forgotten is withdrawn: an empty
    recommendation on the bus (the extender drops the profile) and its object deleted."""
    from koordcommon import schemas, subjects
    from recommender.bus import publish
    from recommender.runner import Recommender

    cluster = SimCluster(SimSpec(nodes=1))
    await cluster.start()
    await bus.ensure_streams(subjects.RECOMMENDATION_STREAM)
    st = await fed(metric_samples)
    results = st.changed()
    await publish(bus, results)
    await clusterio.apply_objects(cluster, results)
    runner = Recommender(st, None, bus=bus, cluster=cluster)
    lone = WorkloadKey("dev", "Pod", "lone")
    last = st.now

    table = [  # (data time, forgotten then, workloads left)
        (last + 3599, [], [lone, WEB]),
        (last + 3600, [lone], [WEB]),
        (last + 8 * 86400 - 1, [], [WEB]),
        (last + 8 * 86400, [WEB], []),
    ]
    for now, forgotten, left in table:
        st.expire(now)
        retracted = st.take_retracted()
        assert (retracted, st.workloads()) == (forgotten, left), now
        await runner.retract(retracted)
    assert await cluster.list_custom("Recommendation") == []
    seen = {}
    async for d in bus.tail(subjects.RECOMMENDATION_STREAM, "koord.recommendation.>", schemas.Recommendation,
                            deliver="last_per_subject"):
        seen[(d.msg.owner_kind, d.msg.owner_name)] = d.msg.containers
        if len(seen) == 2:
            break
    assert seen == {("Pod", "lone"): [], ("Deployment", "web"): []}


@pytest.fixture
def client(metric_samples):
    import asyncio

    app = FastAPI()
    app.include_router(router)
    app.state.recommender_state = asyncio.run(fed(metric_samples))
    return TestClient(app)


@pytest.mark.parametrize(
    "query, names, total",
    [
        ("", ["lone", "web"], 2),
        ("?namespace=prod", ["web"], 1),
        ("?kind=deployment", ["web"], 1),
        ("?name=lone", ["lone"], 1),
        ("?namespace=nope", [], 0),
        ("?limit=1", ["lone"], 2),
        ("?limit=1&offset=1", ["web"], 2),
    ],
)
def test_api_filters_and_pages(client, query, names, total):
    r = client.get(f"/api/v1/recommendations{query}")
    assert r.status_code == 200
    body = r.json()
    assert [i["name"] for i in body["items"]] == names and body["total"] == total


def test_api_workload_detail(client):
    body = client.get("/api/v1/recommendations/prod/Deployment/web").json()
    app = body["containers"][0]
    assert app["current_requests"]["cpu"] == "1"
    assert app["recommendation"]["target"]["cpu"].endswith("m")
    assert set(app["profile"]) == {"1h", "1d", "7d"} and app["profile"]["1h"]["cpu_milli"]["max"] == 660
    # minutes of history, far below a day: provisional, and its savings are not counted
    assert app["recommendation"]["confidence"] < 1 and app["provisional"] is True and body["provisional"] is True
    assert body["estimated_savings"] is None
    assert body["provisional_savings"]["cpu_milli"] >= app["estimated_savings"]["cpu_milli"] > 0
    assert app["method"]["used"] == app["method"]["configured"] == "vpa"
    assert app["method"]["explanation"]["target_memory_percentile"] == 0.9


@pytest.mark.parametrize("confidence, expected", [(0.0, True), (0.99, True), (1.0, False), (7.5, False)])
def test_provisional_below_a_day_of_history(confidence, expected):
    from recommender.api import provisional

    assert provisional(confidence) is expected


@pytest.mark.parametrize(
    "path, status",
    [
        ("/api/v1/recommendations/prod/Deployment/missing", 404),
        ("/api/v1/recommendations?limit=0", 422),
        ("/api/v1/recommendations?offset=-1", 422),
        ("/api/v1/recommendations?limit=abc", 422),
    ],
)
def test_api_bad_requests_are_4xx(client, path, status):
    r = client.get(path)
    assert r.status_code == status and r.json()["detail"]


def test_api_before_state_is_loaded():
    app = FastAPI()
    app.include_router(router)
    assert TestClient(app).get("/api/v1/recommendations").status_code == 503


def test_pod_level_usage_without_containers():
    import asyncio

    st = RecommenderState()
    msg = NodeMetricSample(
        node="n", ts=1_700_000_000_000, node_usage=Resources(1, 1),
        pods=[PodUsage(uid="u", namespace="ns", name="p", usage=Resources(100, 300 * MIB))],
    )
    asyncio.run(apply_sample(st, msg, WorkloadResolver(None)))
    assert [str(k) for k in st.containers] == ["ns/Pod/p/_pod"]
    assert ContainerUsage(name="c").last_oom_ms is None
