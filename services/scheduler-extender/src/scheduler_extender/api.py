"""HTTP adapter: the kube-scheduler extender verbs.

The verbs are answered by the chassis' ASGI front (`koordcommon.asgi.PostRoutes`), body bytes
in and bytes out, and the extender JSON is decoded by `core.wire`, not by pydantic models: a
filter call may carry thousands of nodes and the extender sits on the scheduling hot path.

Status codes: 200 for every answer kube-scheduler should use; 400 with `{"Error": "..."}` for
a body that is not the extender JSON (malformed JSON, missing Pod, bad quantities). An internal
failure is answered 200 in the verb's own way: filter sets `Error` (the scheduling attempt
fails, or is skipped when the extender is ignorable); prioritize returns no scores (kube-scheduler
ignores prioritize errors anyway); preempt returns the candidates unchanged (no objection).

filter and prioritize have no side effect. Placements are learnt from what is bound: POST
<urlPrefix>/bind (`bind_verb`, off by default) binds through the cluster port and counts the pod
on its node at once; without it kube-scheduler binds and the cluster watch reports the pod a
moment later. The bind verb makes this service a single point of failure for the pods it binds,
and is served only with TLS client authentication in the deploy examples: whoever can call it
can place pods.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import orjson
from koordcommon.asgi import PostRoutes
from starlette.requests import Request
from starlette.responses import Response

from . import openapi
from .core import wire
from .core.explain import Decisions, explain_pod
from .core.extender import VerbResult, bind_request, filter_request, preempt_request, prioritize_request
from .core.state import ClusterState
from .metrics import METRICS

log = logging.getLogger(__name__)

JSON = "application/json"


def _verb(
    verb: str,
    decode: Callable[[bytes], object],
    run: Callable[[ClusterState, object], VerbResult],
    on_error: Callable[[object | None, str], bytes],
    state: ClusterState,
    decisions: Decisions | None = None,
) -> Callable[[bytes], tuple[int, bytes]]:
    """The handler of one verb: request body in, (status, reply body) out; the pod and its
    candidates are remembered in `decisions` for explanations."""
    latency, candidates = METRICS.latency[verb], METRICS.candidates[verb]
    requests, filtered = METRICS.requests, METRICS.filtered
    ok, bad, failed = ((verb, outcome) for outcome in ("ok", "bad_request", "error"))

    def handle(body: bytes) -> tuple[int, bytes]:
        started = time.perf_counter()
        try:
            return judge(body)
        finally:
            latency.observe(time.perf_counter() - started)

    def judge(body: bytes) -> tuple[int, bytes]:
        args = None
        try:
            args = decode(body)
            result = run(state, args)
        except wire.WireError as exc:  # not the extender JSON, or e.g. a quantity that does not parse
            requests[bad] += 1
            return 400, wire.go_json({"Error": str(exc)})
        except Exception as exc:
            log.exception("extender %s failed", verb)
            requests[failed] += 1
            return 200, on_error(args, f"scheduler-extender {verb} failed: {exc}")
        if decisions is not None and result.pod is not None:
            decisions.record(verb, state.clock(), result.pod, result.rows, result.names,
                             result.reasons if verb == "filter" else None, result.passed)  # fmt: skip
        for reason, n in result.reasons.items():
            filtered[reason] += n
        requests[ok] += 1
        if result.candidates is not None:
            candidates.observe(result.candidates)
        return 200, result.body

    handle.__name__ = f"extender_{verb}"
    return handle


def _filter_error(args, message: str) -> bytes:
    return wire.encode_filter_result(error=message)


def _prioritize_error(args, message: str) -> bytes:
    return b"[]"


def _preempt_error(args, message: str) -> bytes:
    if isinstance(args, wire.ExtenderPreemptionArgs) and args.node_to_meta_victims is not None:
        return wire.encode_preemption_result(args.node_to_meta_victims)
    return wire.encode_preemption_result(None)


def install(front: PostRoutes, app, state: ClusterState, url_prefix: str = "") -> None:
    """POST <url_prefix>/filter, /prioritize and /preempt on the front; GET /api/v1/summary on the app."""
    prefix = url_prefix.rstrip("/")
    decisions = Decisions()
    front.add(f"{prefix}/filter",
              _verb("filter", wire.decode_extender_args, filter_request, _filter_error, state, decisions))  # fmt: skip
    front.add(
        f"{prefix}/prioritize",
        _verb("prioritize", wire.decode_extender_args, prioritize_request, _prioritize_error, state, decisions),
    )
    front.add(
        f"{prefix}/preempt", _verb("preempt", wire.decode_preemption_args, preempt_request, _preempt_error, state)
    )

    async def summary(request: Request) -> Response:
        return Response(orjson.dumps(state.summary()), media_type=JSON)

    app.add_route("/api/v1/summary", summary, methods=["GET"])

    async def explain(request: Request) -> Response:
        """Each candidate node's verdict per plugin with its numbers, and the score breakdown."""
        key = f"{request.path_params['namespace']}/{request.path_params['name']}"
        raw = request.query_params.get("nodes", "10")
        if not raw.isdigit() or not 1 <= int(raw) <= 5000:
            return Response(orjson.dumps({"detail": f"nodes: an integer in 1..5000, not {raw!r}"}), 400,
                            media_type=JSON)  # fmt: skip
        found = explain_pod(state, decisions, key, int(raw))
        if found is None:
            detail = f"pod {key} is unknown to the extender: not asked about since it started, and not bound"
            return Response(orjson.dumps({"detail": detail}), 404, media_type=JSON)
        return Response(orjson.dumps(found), media_type=JSON)

    app.add_route("/api/v1/explain/pods/{namespace}/{name}", explain, methods=["GET"])
    openapi.document(app, openapi.verb_paths(url_prefix))


async def handle_bind(state: ClusterState, cluster, raw: bytes) -> tuple[int, bytes]:
    """The bind verb: ExtenderBindingArgs bytes in, (HTTP status, ExtenderBindingResult bytes) out
    (the service's route, and an in-process kube-scheduler such as the what-if replay's)."""
    try:
        args = wire.decode_binding_args(raw)
    except wire.WireError as exc:
        METRICS.requests[("bind", "bad_request")] += 1
        return 400, wire.go_json({"Error": str(exc)})
    body = await bind_request(state, cluster, args)
    METRICS.requests[("bind", "ok" if body == b'{"Error":""}' else "error")] += 1
    return 200, body


def install_bind(app, state: ClusterState, cluster, url_prefix: str = "") -> str:
    """POST <url_prefix>/bind (ExtenderBindingArgs in, ExtenderBindingResult out); its path."""
    path = f"{url_prefix.rstrip('/')}/bind"

    async def bind(request: Request) -> Response:
        status, body = await handle_bind(state, cluster, await request.body())
        return Response(body, status_code=status, media_type=JSON)

    app.add_route(path, bind, methods=["POST"])
    openapi.document(app, openapi.bind_path(url_prefix))
    return path


def create_app(state: ClusterState, url_prefix: str = "") -> PostRoutes:
    """A bare app with only the extender routes (tests, benchmarks); the service uses `install`."""
    from starlette.applications import Starlette

    app = Starlette()
    front = PostRoutes(app)
    install(front, app, state, url_prefix)
    return front
