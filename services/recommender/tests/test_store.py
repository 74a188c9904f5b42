from recommender.core.engine import RecommenderState, UsageSample
from recommender.core.workload import ContainerKey, WorkloadKey
from recommender.store import CheckpointStore

T0 = 1_700_006_400.0
WEB = ContainerKey(WorkloadKey("prod", "Deployment", "web"), "app")
DB = ContainerKey(WorkloadKey("prod", "StatefulSet", "db"), "postgres")


def fed_state() -> RecommenderState:
    st = RecommenderState()
    for i in range(600):
        st.add(UsageSample(WEB, "p1", T0 + 60 * i, 0.2 + (i % 7) * 0.05, 3e8 + i * 1e5, 0.5, 5e8))
        st.add(UsageSample(DB, "p2", T0 + 60 * i, 1.5, 2e9, 2.0, 4e9))
    return st


def test_checkpoints_roundtrip_upsert_and_delete(database_url):
    store = CheckpointStore(database_url)
    try:
        st = fed_state()
        assert store.save(st.take_dirty()) == 2
        assert store.save(st.take_dirty()) == 0  # nothing changed since
        loaded = store.load()
        assert loaded == st.snapshot()
        st.add(UsageSample(WEB, "p1", T0 + 60 * 600, 3.0, 3e8, 0.5, 5e8))
        assert store.save(st.take_dirty(), deleted=[DB]) == 1
        loaded = store.load()
        assert set(loaded) == {WEB} and loaded[WEB] == st.containers[WEB].save()
        back = RecommenderState()
        for k, data in loaded.items():
            back.restore(k, data)
        assert back.recommend(WEB.workload) == st.recommend(WEB.workload)
    finally:
        store.close()


def test_migrations_are_idempotent(database_url):
    CheckpointStore(database_url).close()
    store = CheckpointStore(database_url)  # second start: already at head
    assert store.ping()
    store.close()
