"""The ClusterColocationProfile admission webhook: POST /mutate-pod and /validate-pod.

Thin: decode the AdmissionReview, call the core, encode. A body that is not an
AdmissionReview v1 request gets HTTP 400 with a message; everything else gets HTTP 200 with
an AdmissionReview carrying the same uid.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

import uvicorn
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from prometheus_client import Counter

from .core.admission import AdmissionError, MutationContext, mutate_review, parse_review, validate_review
from .profiles import ProfileStore

log = logging.getLogger("slo_controller.webhook")

WEBHOOK_PATHS = ("/mutate-pod", "/validate-pod")

# The request body in the OpenAPI description: an admission.k8s.io/v1 AdmissionReview whose
# object is a Pod (the members the webhook reads; any other is kept as it is). The handlers read
# the raw body themselves, so a body that is not one is answered 400 with the reason.
_POD = {"type": "object", "properties": {
    "metadata": {"type": "object", "properties": {
        "name": {"type": "string"}, "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}}}},
    "spec": {"type": "object", "properties": {
        "priority": {"type": "integer", "format": "int32"}, "priorityClassName": {"type": "string"},
        "schedulerName": {"type": "string"},
        "containers": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"},
            "resources": {"type": "object", "properties": {
                "requests": {"type": "object", "additionalProperties": {"type": "string"}},
                "limits": {"type": "object", "additionalProperties": {"type": "string"}}}}}}}}}}}
ADMISSION_REVIEW = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["apiVersion", "kind", "request"],
    "properties": {
        "apiVersion": {"const": "admission.k8s.io/v1"}, "kind": {"const": "AdmissionReview"},
        "request": {"type": "object", "required": ["uid"], "properties": {
            "uid": {"type": "string", "minLength": 1},
            "operation": {"enum": ["CREATE", "UPDATE", "DELETE", "CONNECT"]},
            "namespace": {"type": "string"},
            "resource": {"type": "object", "properties": {"group": {"type": "string"}, "version": {"type": "string"},
                                                          "resource": {"type": "string"}}},
            "subResource": {"type": "string"}, "dryRun": {"type": "boolean"},
            "object": _POD, "oldObject": _POD}}}}}}}}  # fmt: skip
REVIEWS = Counter("koord_slo_admission_reviews_total", "Admission reviews answered", ["hook", "allowed", "patched"])


def create_router(
    store: ProfileStore,
    prefix: str | None = None,
    rand_intn: Callable[[int], int] | None = None,
    on_mutated: Callable[[str, str, list[str]], None] | None = None,
) -> APIRouter:
    router = APIRouter()
    ctx = MutationContext(
        profiles=store.profiles,
        namespace_labels=store.namespace_labels,
        priority_classes=store.priority_classes,
        prefix=prefix,
        rand_intn=rand_intn,
        on_mutated=on_mutated,
    )

    async def _review(request: Request, hook: str, answer: Callable[[Any], dict[str, Any]]):
        try:
            body = json.loads(await request.body())
            req = parse_review(body)
        except (ValueError, AdmissionError) as e:
            return JSONResponse({"error": f"not an AdmissionReview v1 request: {e}"}, status_code=400)
        out = answer(req)
        resp = out["response"]
        REVIEWS.labels(hook, str(resp["allowed"]).lower(), str("patch" in resp).lower()).inc()
        if not resp["allowed"]:
            log.info("pod denied", extra={"hook": hook, "namespace": req.namespace, "uid": req.uid,
                                          "reason": resp["status"]["message"]})
        return JSONResponse(out)

    @router.post(WEBHOOK_PATHS[0], tags=["admission webhook"], openapi_extra=ADMISSION_REVIEW,
                 summary="Mutate a pod by the ClusterColocationProfiles that select it (JSONPatch)")  # fmt: skip
    async def mutate_pod(request: Request):
        return await _review(request, "mutate", lambda req: mutate_review(req, ctx))

    @router.post(WEBHOOK_PATHS[1], tags=["admission webhook"], openapi_extra=ADMISSION_REVIEW,
                 summary="Refuse a pod whose priority class and QoS class do not go together")  # fmt: skip
    async def validate_pod(request: Request):
        return await _review(request, "validate", validate_review)

    return router


def create_app(store: ProfileStore, **kw: Any) -> FastAPI:
    app = FastAPI(title="slo-controller admission webhook")
    app.include_router(create_router(store, **kw))
    return app


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):  # the service owns the signals
        yield


async def serve_tls(app: FastAPI, host: str, port: int, certfile: str, keyfile: str, stopping: asyncio.Event) -> None:
    """Serve `app` over HTTPS until `stopping` is set (the API server only calls webhooks over TLS)."""
    config = uvicorn.Config(
        app, host=host, port=port, ssl_certfile=certfile, ssl_keyfile=keyfile,
        log_config=None, access_log=False, lifespan="off",
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve(), name="webhook-tls")
    stop = asyncio.create_task(stopping.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        if task.done() and not stopping.is_set():
            exc = None if task.cancelled() else task.exception()
            log.error("webhook HTTPS server stopped", extra={"port": port, "error": repr(exc) if exc else "exited"})
    finally:
        stop.cancel()
        server.should_exit = True
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, 10)
