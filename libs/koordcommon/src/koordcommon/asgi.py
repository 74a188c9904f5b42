"""An ASGI front that answers a few POST paths itself and hands everything else to the app.

For endpoints on a latency-critical path (the scheduler extender's verbs): the request body
arrives as bytes and the handler's bytes go out, without a framework's request and response
objects, routing and middleware, which cost tens of microseconds per call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

# body -> (status, response body)
PostHandler = Callable[[bytes], tuple[int, bytes]]
Asgi = Callable[[dict[str, Any], Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]


class PostRoutes:
    def __init__(self, app: Asgi, content_type: bytes = b"application/json") -> None:
        self.app = app
        self.content_type = content_type
        self.routes: dict[str, PostHandler] = {}

    def add(self, path: str, handler: PostHandler) -> None:
        self.routes[path] = handler

    async def __call__(self, scope, receive, send) -> None:
        handler = self.routes.get(scope.get("path", "")) if scope["type"] == "http" else None
        if handler is None:
            await self.app(scope, receive, send)
            return
        if scope["method"] != "POST":
            await self._send(send, 405, b'{"Error":"method not allowed: use POST"}', ((b"allow", b"POST"),))
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        status, body = handler(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        await self._send(send, status, body)

    async def _send(self, send, status: int, body: bytes, extra: tuple = ()) -> None:
        headers = [(b"content-type", self.content_type), (b"content-length", b"%d" % len(body)), *extra]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
