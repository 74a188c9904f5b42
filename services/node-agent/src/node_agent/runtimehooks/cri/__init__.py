"""The CRI v1 RuntimeService messages the runtime hooks read and change (runtime_v1.proto)."""

from . import runtime_v1_pb2 as pb

RUNTIME_SERVICE = "/runtime.v1.RuntimeService/"

__all__ = ["RUNTIME_SERVICE", "pb"]
