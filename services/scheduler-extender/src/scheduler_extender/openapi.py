"""The extender's verbs in the service's OpenAPI description (/openapi.json, /docs).

The verbs are answered by the chassis' POST front, not by FastAPI routes, so FastAPI does not
describe them; this adds them, with the `k8s.io/kube-scheduler/extender/v1` bodies: the Go
field names (PascalCase) kube-scheduler sends, the Pod and Node as the parts of the Kubernetes
objects the extender reads (any other member is accepted and ignored), quantities as
Kubernetes writes them. The summary and explain routes, plain Starlette routes for speed, are
described here too. Generated requests are driven from this description in the tests.
"""

from __future__ import annotations

from typing import Any

QUANTITY = {"type": "string", "pattern": r"^[0-9]{1,7}(\.[0-9]{1,3})?(m|k|M|G|Ki|Mi|Gi|Ti)?$",
            "description": "a Kubernetes resource.Quantity: 500m, 2, 4Gi, 1.5"}  # fmt: skip
RESOURCE_LIST = {"type": "object", "additionalProperties": QUANTITY,
                 "description": "cpu, memory, koordinator.sh/batch-cpu, koordinator.sh/batch-memory, ..."}  # fmt: skip
OBJECT_META = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "namespace": {"type": "string"},
        "uid": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "creationTimestamp": {"type": "string", "format": "date-time"},
    },
}
SCHEMAS: dict[str, Any] = {
    "Pod": {
        "type": "object",
        "description": "core/v1 Pod: the members the extender reads",
        "properties": {
            "metadata": OBJECT_META,
            "spec": {
                "type": "object",
                "properties": {
                    "containers": {"type": "array", "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "resources": {"type": "object",
                                          "properties": {"requests": RESOURCE_LIST, "limits": RESOURCE_LIST}},
                        },
                    }},
                    "priority": {"type": "integer", "format": "int32"},
                    "priorityClassName": {"type": "string"},
                    "schedulerName": {"type": "string"},
                    "nodeName": {"type": "string"},
                    "overhead": RESOURCE_LIST,
                },
            },
            "status": {"type": "object", "properties": {"qosClass": {"enum": ["Guaranteed", "Burstable", "BestEffort"]}}},
        },
    },
    "Node": {
        "type": "object",
        "description": "core/v1 Node: metadata.name is required",
        "required": ["metadata"],
        "properties": {
            "metadata": {**OBJECT_META, "required": ["name"]},
            "status": {"type": "object", "properties": {"capacity": RESOURCE_LIST, "allocatable": RESOURCE_LIST}},
        },
    },
    "ExtenderArgs": {
        "type": "object",
        "description": "Nodes when nodeCacheCapable is false, NodeNames when true",
        "required": ["Pod"],
        "properties": {
            "Pod": {"$ref": "#/components/schemas/Pod"},
            "Nodes": {"type": ["object", "null"],
                      "properties": {"items": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}}}},
            "NodeNames": {"type": ["array", "null"], "items": {"type": "string"}},
        },
    },
    "ExtenderFilterResult": {
        "type": "object",
        "properties": {
            "Nodes": {"type": ["object", "null"]},
            "NodeNames": {"type": ["array", "null"], "items": {"type": "string"}},
            "FailedNodes": {"type": ["object", "null"], "additionalProperties": {"type": "string"}},
            "FailedAndUnresolvableNodes": {"type": ["object", "null"], "additionalProperties": {"type": "string"}},
            "Error": {"type": "string"},
        },
    },
    "HostPriorityList": {
        "type": "array",
        "items": {"type": "object", "properties": {"Host": {"type": "string"},
                                                   "Score": {"type": "integer", "minimum": 0, "maximum": 10}}},
    },
    "MetaVictims": {
        "type": "object",
        "properties": {
            "Pods": {"type": "array", "items": {"type": "object", "properties": {"UID": {"type": "string"}}}},
            "NumPDBViolations": {"type": "integer", "format": "int64"},
        },
    },
    "ExtenderPreemptionArgs": {
        "type": "object",
        "required": ["Pod"],
        "properties": {
            "Pod": {"$ref": "#/components/schemas/Pod"},
            "NodeNameToVictims": {"type": ["object", "null"], "additionalProperties": {
                "type": "object",
                "properties": {"Pods": {"type": "array", "items": {"$ref": "#/components/schemas/Pod"}},
                               "NumPDBViolations": {"type": "integer", "format": "int64"}},
            }},
            "NodeNameToMetaVictims": {"type": ["object", "null"],
                                      "additionalProperties": {"$ref": "#/components/schemas/MetaVictims"}},
        },
    },
    "ExtenderPreemptionResult": {
        "type": "object",
        "properties": {"NodeNameToMetaVictims": {"type": ["object", "null"],
                                                 "additionalProperties": {"$ref": "#/components/schemas/MetaVictims"}}},
    },
    "ExtenderBindingArgs": {
        "type": "object",
        "properties": {k: {"type": "string"} for k in ("PodName", "PodNamespace", "PodUID", "Node")},
    },
    "ExtenderBindingResult": {"type": "object", "properties": {"Error": {"type": "string"}}},
    "ExtenderError": {"type": "object", "properties": {"Error": {"type": "string"}}},
}  # fmt: skip


def _verb(summary: str, request: str, reply: str) -> dict[str, Any]:
    def body(name: str) -> dict[str, Any]:
        return {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}

    return {"post": {
        "tags": ["kube-scheduler extender"],
        "summary": summary,
        "requestBody": {"required": True, **body(request)},
        "responses": {"200": {"description": "the verb's answer", **body(reply)},
                      "400": {"description": "not the extender JSON (the reason in Error)", **body("ExtenderError")},
                      "413": {"description": "body over max_body_bytes"}},
    }}  # fmt: skip


def verb_paths(url_prefix: str) -> dict[str, Any]:
    p = url_prefix.rstrip("/")
    return {
        f"{p}/filter": _verb("Filter the candidate nodes (no side effect)", "ExtenderArgs", "ExtenderFilterResult"),
        f"{p}/prioritize": _verb("Score the candidate nodes 0-10 (no side effect)", "ExtenderArgs", "HostPriorityList"),
        f"{p}/preempt": _verb("Keep the preemption candidates whose victims make room", "ExtenderPreemptionArgs",
                              "ExtenderPreemptionResult"),
        "/api/v1/summary": {"get": {"tags": ["scheduler-extender"], "summary": "Nodes, metrics and pods known",
                                    "responses": {"200": {"description": "counts of what the extender knows"}}}},
        "/api/v1/explain/pods/{namespace}/{name}": {"get": {
            "tags": ["scheduler-extender"],
            "summary": "Each candidate node's verdict per plugin with its numbers, and the score breakdown",
            "parameters": [
                {"name": "namespace", "in": "path", "required": True, "schema": {"type": "string"}},
                {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}},
                {"name": "nodes", "in": "query", "required": False,
                 "schema": {"type": "integer", "minimum": 1, "maximum": 5000, "default": 10}},
            ],
            "responses": {"200": {"description": "the explanation"}, "400": {"description": "bad nodes"},
                          "404": {"description": "a pod the extender was not asked about"}},
        }},
    }  # fmt: skip


def bind_path(url_prefix: str) -> dict[str, Any]:
    return {f"{url_prefix.rstrip('/')}/bind": _verb("Bind the pod to the node (bind_verb)", "ExtenderBindingArgs",
                                                    "ExtenderBindingResult")}  # fmt: skip


def document(app: Any, paths: dict[str, Any]) -> None:
    """Add `paths` (and the extender schemas) to a FastAPI app's OpenAPI description; a Starlette
    app (tests, benchmarks) has none and is left alone."""
    if not hasattr(app, "openapi"):
        return
    extra = getattr(app.state, "extender_openapi_paths", None)
    if extra is None:
        extra = app.state.extender_openapi_paths = {}
        default = app.openapi

        def openapi() -> dict[str, Any]:
            schema = default()  # FastAPI's, built once and kept
            schema.setdefault("paths", {}).update(extra)
            schema.setdefault("components", {}).setdefault("schemas", {}).update(SCHEMAS)
            return schema

        app.openapi = openapi
    extra.update(paths)
