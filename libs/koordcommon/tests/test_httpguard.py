"""The HTTP guard over real servers: bearer tokens (static and Kubernetes TokenReview), 413 for
big bodies before they are read, 400 for deep JSON, HTTPS with and without client certificates."""

from __future__ import annotations

import socket
import ssl

import httpx
import pytest
from fastapi import FastAPI, Request
from koordcommon.certs import CA
from koordcommon.httpguard import Guard, NoAuth, StaticToken, TokenReview, json_depth_exceeds, server_ssl_options
from koordcommon.testing.http import ThreadServer
from starlette.responses import JSONResponse


def _app() -> FastAPI:
    app = FastAPI()
    seen: list[int] = []

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok"}

    @app.get("/api/v1/things")
    async def things():
        return {"items": []}

    @app.post("/api/v1/things")
    async def add(request: Request):
        body = await request.body()
        seen.append(len(body))
        caller = request.scope.get("state", {}).get("caller")
        return {"stored": len(body), "caller": caller.user if caller else None}

    @app.post("/verb")
    async def verb(request: Request):
        return {"n": len(await request.body())}

    app.state.seen = seen
    return app


@pytest.fixture
def token_file(tmp_path):
    p = tmp_path / "token"
    p.write_text("s3cr3t-token-value\n")
    return str(p)


@pytest.mark.parametrize(
    "method, path, token, status",
    [
        ("POST", "/api/v1/things", None, 401),
        ("POST", "/api/v1/things", "wrong", 401),
        ("POST", "/api/v1/things", "s3cr3t-token-value", 200),
        ("GET", "/api/v1/things", None, 200),  # reads stay open unless protect_reads
        ("GET", "/healthz", None, 200),
        ("POST", "/verb", None, 200),  # a public path: the caller authenticates with a client cert
    ],
)
def test_static_token_guards_writes(token_file, method, path, token, status):
    guarded = Guard(_app(), StaticToken(token_file), public={"/verb"})
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with ThreadServer(guarded) as s:
        r = httpx.request(method, s.url + path, headers=headers, json={"a": 1} if method == "POST" else None)
    assert r.status_code == status, r.text
    if status == 401:
        assert "token" in r.json()["detail"]


def test_protected_reads_and_a_service_without_a_token_refusing_writes(token_file):
    with ThreadServer(Guard(_app(), StaticToken(token_file), protect_reads=True)) as s:
        assert httpx.get(s.url + "/api/v1/things").status_code == 401
        assert httpx.get(s.url + "/api/v1/things", headers={"Authorization": "Bearer s3cr3t-token-value"}).status_code == 200
        assert httpx.get(s.url + "/healthz").status_code == 200
    with ThreadServer(Guard(_app(), StaticToken(""))) as s:
        r = httpx.post(s.url + "/api/v1/things", json={}, headers={"Authorization": "Bearer anything"})
    assert r.status_code == 401 and "api_token_file" in r.json()["detail"]


# ----------------------------------------------------------------------------- TokenReview


def _apiserver(reviews: list[dict], sa_token: str):
    """A local stand-in for the API server's TokenReview endpoint, answering Kubernetes' JSON."""
    users = {
        "alice-token": {"username": "alice", "uid": "1", "groups": ["koord:operators", "system:authenticated"]},
        "bob-token": {"username": "bob", "uid": "2", "groups": ["system:authenticated"]},
    }
    app = FastAPI()

    @app.post("/apis/authentication.k8s.io/v1/tokenreviews")
    async def review(request: Request):
        if request.headers.get("authorization") != f"Bearer {sa_token}":
            return JSONResponse({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                 "reason": "Unauthorized", "code": 401}, status_code=401)
        body = await request.json()
        reviews.append(body)
        user = users.get(body["spec"]["token"])
        status = {"authenticated": True, "user": user, "audiences": ["https://kubernetes.default.svc"]} if user \
            else {"authenticated": False, "error": "invalid bearer token"}
        return JSONResponse({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                             "metadata": {"creationTimestamp": None}, "spec": body["spec"], "status": status},
                            status_code=201)

    return app


@pytest.mark.parametrize(
    "token, status, caller",
    [
        ("alice-token", 200, "alice"),  # authenticated, in an allowed group
        ("bob-token", 403, None),  # authenticated, not allowed to write
        ("mallory-token", 401, None),  # Kubernetes does not know the token
    ],
)
def test_tokenreview_guards_writes(tmp_path, token, status, caller):
    (tmp_path / "sa").write_text("service-account-token")
    reviews: list[dict] = []
    with ThreadServer(_apiserver(reviews, "service-account-token")) as api:
        auth = TokenReview(api.url, str(tmp_path / "sa"), allowed_groups=["koord:operators"])
        with ThreadServer(Guard(_app(), auth)) as s:
            for _ in range(3):  # answers are cached: one review for three calls
                r = httpx.post(s.url + "/api/v1/things", json={"x": 1}, headers={"Authorization": f"Bearer {token}"})
                assert r.status_code == status, r.text
    assert len(reviews) == 1 and reviews[0]["kind"] == "TokenReview" and reviews[0]["spec"]["token"] == token
    if caller:
        assert r.json()["caller"] == caller


def test_tokenreview_refuses_writes_when_the_api_server_is_unreachable(tmp_path):
    (tmp_path / "sa").write_text("sa")
    down = ThreadServer(FastAPI())  # a port nothing listens on once it is closed
    auth = TokenReview(f"http://127.0.0.1:{down.port}", str(tmp_path / "sa"), timeout_s=1)
    with ThreadServer(Guard(_app(), auth)) as s:
        r = httpx.post(s.url + "/api/v1/things", json={}, headers={"Authorization": "Bearer alice-token"})
    assert r.status_code == 503 and "unreachable" in r.json()["detail"]


# ----------------------------------------------------------------------------- bodies


def _raw_request(port: int, head: bytes, body: bytes = b"") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head + body)
        sock.settimeout(5)
        return sock.recv(65536)


def test_a_body_over_the_limit_is_answered_413_before_it_is_read():
    app = _app()
    with ThreadServer(Guard(app, NoAuth(), max_body_bytes=1000)) as s:
        # Content-Length says 100 MB and not one byte of it is sent: the answer comes anyway.
        head = b"POST /api/v1/things HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n"
        reply = _raw_request(s.port, head)
        assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
        # Chunked, no length announced: cut off once the bytes received pass the limit.
        chunk = b"x" * 600
        head = b"POST /api/v1/things HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        reply = _raw_request(s.port, head, (b"%x\r\n" % len(chunk) + chunk + b"\r\n") * 2 + b"0\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
        r = httpx.post(s.url + "/api/v1/things", content=b'{"a": "' + b"y" * 1100 + b'"}')
        assert r.status_code == 413
        assert httpx.post(s.url + "/api/v1/things", json={"a": "y" * 100}).status_code == 200
    assert len(app.state.seen) == 1  # only the small body reached the handler


@pytest.mark.parametrize("depth, status", [(10, 200), (64, 200), (65, 400), (5000, 400)])
def test_json_nested_past_the_limit_is_answered_400(depth, status):
    body = ("[" * depth + "]" * depth).encode()
    with ThreadServer(Guard(_app(), NoAuth(), max_json_depth=64)) as s:
        r = httpx.post(s.url + "/api/v1/things", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status
    if status == 400:
        assert "nested deeper than 64" in r.json()["detail"]


@pytest.mark.parametrize(
    "body, limit, exceeds",
    [
        (b'{"a": [1, 2, {"b": []}]}', 4, False),
        (b'{"a": [1, 2, {"b": []}]}', 3, True),
        (b'{"s": "[[[[[[[[[[[["}', 20, False),  # fewer brackets than the limit: not scanned
        (b'{"s": "[[[[[[[[[[[["}', 5, True),  # brackets in strings count: never below the true depth
        (b'[' * 70 + b']' * 70, 64, True),
        (b'[{}]' * 100, 64, False),  # many brackets, shallow
    ],
)
def test_json_depth_table(body, limit, exceeds):
    assert json_depth_exceeds(body, limit) is exceeds


# ----------------------------------------------------------------------------- TLS


def test_https_with_client_certificates_required(tmp_path):
    ca = CA("test-ca")
    ca_file = ca.write(tmp_path / "ca.crt")
    server = ca.issue(tmp_path, "server", "extender", dns=("localhost",), ips=("127.0.0.1",))
    client = ca.issue(tmp_path, "client", "kube-scheduler", server=False, client=True)
    stranger_ca = CA("other-ca")
    stranger = stranger_ca.issue(tmp_path, "stranger", "someone", server=False, client=True)
    opts = server_ssl_options(str(server.cert), str(server.key), str(ca_file))
    with ThreadServer(Guard(_app(), NoAuth(), public={"/verb"}), ssl=opts) as s:
        ok = ssl.create_default_context(cafile=str(ca_file))
        ok.load_cert_chain(str(client.cert), str(client.key))
        assert httpx.post(s.url + "/verb", json={}, verify=ok).status_code == 200
        for cert in (None, stranger):
            ctx = ssl.create_default_context(cafile=str(ca_file))
            if cert is not None:
                ctx.load_cert_chain(str(cert.cert), str(cert.key))
            with pytest.raises(httpx.HTTPError):
                httpx.post(s.url + "/verb", json={}, verify=ctx)
        with pytest.raises(httpx.HTTPError):  # plain HTTP to the TLS port
            httpx.post(s.url.replace("https", "http") + "/verb", json={})
