"""The POST front: its paths answered from the raw body, everything else passed to the app."""

import httpx
import pytest
from koordcommon.asgi import PostRoutes
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse


def make_front() -> PostRoutes:
    app = Starlette()

    async def hello(request):
        return PlainTextResponse("from the app")

    app.add_route("/hello", hello, methods=["GET"])
    front = PostRoutes(app)
    front.add("/echo", lambda body: (200, b'{"got":%d}' % len(body)))
    front.add("/reject", lambda body: (400, b'{"Error":"no"}'))
    return front


@pytest.mark.parametrize(
    "method, path, content, status, body",
    [
        ("POST", "/echo", b"x" * 10, 200, b'{"got":10}'),
        ("POST", "/echo", b"", 200, b'{"got":0}'),
        ("POST", "/reject", b"{}", 400, b'{"Error":"no"}'),
        ("GET", "/echo", None, 405, b'{"Error":"method not allowed: use POST"}'),
        ("GET", "/hello", None, 200, b"from the app"),
        ("POST", "/missing", b"{}", 404, None),
    ],
)
async def test_routes(method, path, content, status, body):
    transport = httpx.ASGITransport(app=make_front())
    async with httpx.AsyncClient(transport=transport, base_url="http://front") as client:
        r = await client.request(method, path, content=content)
    assert r.status_code == status
    if body is not None:
        assert r.content == body
    if path in ("/echo", "/reject") and method == "POST":
        assert r.headers["content-type"] == "application/json"
        assert int(r.headers["content-length"]) == len(body)


async def test_body_in_chunks_is_joined_and_a_disconnect_answers_nothing():
    front = make_front()
    scope = {"type": "http", "method": "POST", "path": "/echo", "headers": []}
    sent = []

    async def send(message):
        sent.append(message)

    chunks = iter(
        [
            {"type": "http.request", "body": b"ab", "more_body": True},
            {"type": "http.request", "body": b"cde", "more_body": False},
        ]
    )
    await front(scope, lambda: _next(chunks), send)
    assert sent[0]["status"] == 200 and sent[1]["body"] == b'{"got":5}'
    sent.clear()
    gone = iter([{"type": "http.request", "body": b"ab", "more_body": True}, {"type": "http.disconnect"}])
    await front(scope, lambda: _next(gone), send)
    assert sent == []


async def _next(it):
    return next(it)
