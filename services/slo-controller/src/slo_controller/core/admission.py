"""AdmissionReview v1 in, AdmissionReview v1 out (k8s-protocols.md section 2), as plain dicts.

The reply echoes the request uid; a mutation travels as a base64 JSON Patch with
`patchType: JSONPatch`; a refusal is `allowed: false` with a Status code and message.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .profile import ColocationProfile, PriorityClassInfo, mutate_pod
from .validation import validate_pod

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"


class AdmissionError(ValueError):
    """The body is not an AdmissionReview v1 request (answered with HTTP 400)."""


@dataclass(frozen=True)
class AdmissionRequest:
    uid: str
    operation: str
    namespace: str
    resource: str
    sub_resource: str
    obj: dict[str, Any] | None
    old_obj: dict[str, Any] | None
    dry_run: bool


def parse_review(body: Any) -> AdmissionRequest:
    if not isinstance(body, Mapping):
        raise AdmissionError("body must be a JSON AdmissionReview object")
    if body.get("apiVersion") != API_VERSION or body.get("kind") != KIND:
        raise AdmissionError(
            f"expected apiVersion {API_VERSION} kind {KIND}, got {body.get('apiVersion')!r} {body.get('kind')!r}"
        )
    req = body.get("request")
    if not isinstance(req, Mapping):
        raise AdmissionError("AdmissionReview has no request")
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid:
        raise AdmissionError("request.uid is missing")
    res = req.get("resource") if isinstance(req.get("resource"), Mapping) else {}
    obj = req.get("object")
    old = req.get("oldObject")
    meta = obj.get("metadata") if isinstance(obj, Mapping) and isinstance(obj.get("metadata"), Mapping) else {}
    # Pods created by controllers may carry no namespace in the object: the request's wins.
    namespace = req.get("namespace") or meta.get("namespace") or "default"
    return AdmissionRequest(
        uid=uid,
        operation=str(req.get("operation") or ""),
        namespace=str(namespace),
        resource=str(res.get("resource") or ""),
        sub_resource=str(req.get("subResource") or ""),
        obj=obj if isinstance(obj, dict) else None,
        old_obj=old if isinstance(old, dict) else None,
        dry_run=bool(req.get("dryRun")),
    )


def review_response(
    uid: str,
    allowed: bool = True,
    patch: list[dict[str, Any]] | None = None,
    code: int | None = None,
    message: str | None = None,
    warnings: list[str] | None = None,
) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode()
    if not allowed:
        response["status"] = {"code": code or 403, "message": message or "denied", "status": "Failure"}
    if warnings:
        response["warnings"] = [w[:120] for w in warnings]
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def _is_pod(req: AdmissionRequest) -> bool:
    return req.resource == "pods" and not req.sub_resource and req.obj is not None


@dataclass
class MutationContext:
    profiles: Callable[[], list[ColocationProfile]]
    namespace_labels: Callable[[str], Mapping[str, str] | None]
    priority_classes: Callable[[], Mapping[str, PriorityClassInfo]]
    prefix: str | None = None
    rand_intn: Callable[[int], int] | None = None
    on_mutated: Callable[[str, str, list[str]], None] | None = None  # (namespace, pod name, profiles)


def mutate_review(req: AdmissionRequest, ctx: MutationContext) -> dict[str, Any]:
    if req.operation != "CREATE" or not _is_pod(req):
        return review_response(req.uid)
    pod = dict(req.obj)
    result = mutate_pod(
        pod,
        ctx.namespace_labels(req.namespace) or {},
        ctx.profiles(),
        ctx.priority_classes(),
        ctx.prefix,
        ctx.rand_intn,
    )
    if result.error:
        return review_response(req.uid, False, code=403, message=result.error)
    if result.applied:
        # What the profiles produced must itself be admissible (the validating webhook would refuse it).
        errors = validate_pod(result.pod, None, "CREATE")
        if errors:
            return review_response(
                req.uid, False, code=403,
                message=f"profiles {', '.join(result.applied)} produce an invalid pod: " + "; ".join(errors),
            )
        name = (result.pod.get("metadata") or {}).get("name") or (result.pod.get("metadata") or {}).get(
            "generateName", ""
        )
        if ctx.on_mutated is not None:
            ctx.on_mutated(req.namespace, name, list(result.applied))
    return review_response(req.uid, patch=result.patch)


def validate_review(req: AdmissionRequest) -> dict[str, Any]:
    if req.operation not in ("CREATE", "UPDATE") or not _is_pod(req):
        return review_response(req.uid)
    errors = validate_pod(req.obj, req.old_obj, req.operation)
    if errors:
        return review_response(req.uid, False, code=403, message="; ".join(errors))
    return review_response(req.uid)
