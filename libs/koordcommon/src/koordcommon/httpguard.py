"""The HTTP guard every service's server runs behind: body size, JSON depth and bearer tokens.

* A request body over `max_body_bytes` is answered 413 as soon as its Content-Length (or the
  bytes received so far) says so: it is never read whole.
* A JSON body nested deeper than `max_json_depth` is answered 400 before any handler parses it
  (recursive code downstream would otherwise fail with a RecursionError).
* Writes (any method but GET / HEAD / OPTIONS) need `Authorization: Bearer <token>`, checked by
  the service's `ApiAuth`: a static token (local use, compose) or a Kubernetes TokenReview (in a
  cluster). With `protect_reads` the /api/ reads need it too. The probes and /metrics never do.
  Paths called by Kubernetes components that cannot send a bearer token (the extender verbs, the
  admission webhook) are listed as `public` and are protected by TLS client authentication.
"""

from __future__ import annotations

import hmac
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

log = logging.getLogger(__name__)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})

# In-cluster service account files (the TokenReview is made with the service's own identity).
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class AuthError(Exception):
    """The request's credentials were missing or refused (401) or not allowed (403)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Caller:
    user: str
    groups: tuple[str, ...] = ()


def bearer(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return None


class StaticToken:
    """One shared token, read from a file (never from the command line or a log)."""

    def __init__(self, token_file: str) -> None:
        self.source = token_file
        self._token = Path(token_file).read_text().strip() if token_file else ""

    async def authenticate(self, token: str) -> Caller:
        if not self._token:
            raise AuthError(401, "no API token is configured on this service (api_token_file): writes are refused")
        if not hmac.compare_digest(token.encode(), self._token.encode()):
            raise AuthError(401, "invalid bearer token")
        return Caller("static-token")


class TokenReview:
    """Kubernetes authenticates the token (POST authentication.k8s.io/v1 TokenReview); the caller
    must then be one of `allowed_users` or in one of `allowed_groups` (empty: any authenticated).

    Answers are kept `cache_s` seconds (at most `cache_size` tokens) so a burst of calls costs
    one review.
    """

    def __init__(
        self,
        url: str,
        token_file: str,
        ca_file: str = "",
        allowed_users: Iterable[str] = (),
        allowed_groups: Iterable[str] = (),
        audiences: Iterable[str] = (),
        cache_s: float = 60.0,
        cache_size: int = 1024,
        timeout_s: float = 5.0,
    ) -> None:
        self.url = url.rstrip("/") + "/apis/authentication.k8s.io/v1/tokenreviews"
        self.token_file = token_file
        self.ca_file = ca_file
        self.allowed_users = frozenset(allowed_users)
        self.allowed_groups = frozenset(allowed_groups)
        self.audiences = list(audiences)
        self.cache_s = cache_s
        self.cache_size = cache_size
        self.timeout_s = timeout_s
        self._cache: dict[str, tuple[float, Caller | AuthError]] = {}
        self._client: Any = None

    def _http(self):
        import httpx

        if self._client is None:
            verify: ssl.SSLContext | bool = True
            if self.ca_file:
                verify = ssl.create_default_context(cafile=self.ca_file)
            self._client = httpx.AsyncClient(timeout=self.timeout_s, verify=verify)
        return self._client

    async def _review(self, token: str) -> Caller:
        spec: dict[str, Any] = {"token": token}
        if self.audiences:
            spec["audiences"] = self.audiences
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        # the service account token is read on every review: kubelet rotates it in place
        own = Path(self.token_file).read_text().strip()
        try:
            resp = await self._http().post(self.url, json=body, headers={"Authorization": f"Bearer {own}"})
        except Exception as exc:  # noqa: BLE001 - an unreachable API server refuses the write, it never allows it
            log.warning("TokenReview failed", extra={"url": self.url, "error": exc.__class__.__name__})
            raise AuthError(503, "cannot verify the token: the Kubernetes API is unreachable") from None
        if resp.status_code != 201 and resp.status_code != 200:
            log.warning("TokenReview refused", extra={"url": self.url, "status": resp.status_code})
            raise AuthError(503, f"cannot verify the token: TokenReview answered {resp.status_code}")
        status = (resp.json() or {}).get("status") or {}
        if not status.get("authenticated"):
            raise AuthError(401, "token not authenticated by Kubernetes" + (f": {status['error']}" if status.get("error") else ""))
        user = status.get("user") or {}
        caller = Caller(str(user.get("username", "")), tuple(str(g) for g in user.get("groups") or ()))
        if (self.allowed_users or self.allowed_groups) and not (
            caller.user in self.allowed_users or self.allowed_groups.intersection(caller.groups)
        ):
            raise AuthError(403, f"{caller.user} may not write here (allowed users / groups are configured)")
        return caller

    async def authenticate(self, token: str) -> Caller:
        now = time.monotonic()
        hit = self._cache.get(token)
        if hit is not None and hit[0] > now:
            if isinstance(hit[1], AuthError):
                raise hit[1]
            return hit[1]
        try:
            result: Caller | AuthError = await self._review(token)
        except AuthError as exc:
            if exc.status == 503:  # not an answer about the token: ask again next time
                raise
            result = exc
        if len(self._cache) >= self.cache_size:
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            if len(self._cache) >= self.cache_size:
                self._cache.clear()
        self._cache[token] = (now + self.cache_s, result)
        if isinstance(result, AuthError):
            raise result
        return result


class NoAuth:
    source = "none"

    async def authenticate(self, token: str) -> Caller:  # pragma: no cover - never called
        return Caller("anonymous")


ApiAuth = StaticToken | TokenReview | NoAuth


def json_depth_exceeds(body: bytes, limit: int) -> bool:
    """True when `body` may nest deeper than `limit` arrays / objects.

    Counts brackets outside and inside strings alike: the count is never below the true depth,
    and a legitimate body would need `limit` unclosed brackets inside its strings to be refused.
    Bodies with fewer opening brackets than the limit cannot exceed it and are not scanned.
    """
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    a = np.frombuffer(body, dtype=np.uint8)
    step = np.zeros(256, dtype=np.int32)
    step[ord("[")] = step[ord("{")] = 1
    step[ord("]")] = step[ord("}")] = -1
    return bool(np.cumsum(step[a]).max() > limit)


Asgi = Callable[[dict[str, Any], Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]


class Guard:
    """ASGI wrapper: 413 for big bodies, 400 for deep JSON, 401/403 for writes without a token."""

    def __init__(
        self,
        app: Asgi,
        auth: ApiAuth,
        max_body_bytes: int = 16 << 20,
        max_json_depth: int = 64,
        protect_reads: bool = False,
        public: set[str] | Iterable[str] = (),
    ) -> None:
        """`public`: paths open to writes; a set given here is shared, not copied (the service
        adds its public paths once its main has wired them)."""
        self.app = app
        self.auth = auth
        self.max_body_bytes = max_body_bytes
        self.max_json_depth = max_json_depth
        self.protect_reads = protect_reads
        self.public = public if isinstance(public, set) else set(public)

    def needs_token(self, method: str, path: str) -> bool:
        if isinstance(self.auth, NoAuth) or path in OPEN_PATHS or path in self.public:
            return False
        if method in SAFE_METHODS:
            return self.protect_reads and path.startswith("/api/")
        return True

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope.get("path", "")
        if self.needs_token(method, path):
            token = bearer(scope.get("headers") or ())
            if token is None:
                await _reply(send, 401, "a bearer token is required (Authorization: Bearer <token>)",
                             ((b"www-authenticate", b"Bearer"),))
                return
            try:
                caller = await self.auth.authenticate(token)
            except AuthError as exc:
                await _reply(send, exc.status, exc.message)
                return
            scope.setdefault("state", {})["caller"] = caller
        if method in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        length = _content_length(scope)
        if length is not None and length > self.max_body_bytes:
            await _reply(send, 413, f"request body of {length} bytes is over the limit of {self.max_body_bytes}")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await _reply(send, 413, f"request body is over the limit of {self.max_body_bytes} bytes")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if json_depth_exceeds(body, self.max_json_depth):
            await _reply(send, 400, f"JSON nested deeper than {self.max_json_depth} levels")
            return
        sent = False

        async def replay() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _content_length(scope) -> int | None:
    for name, value in scope.get("headers") or ():
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _reply(send, status: int, message: str, extra: tuple = ()) -> None:
    # {"detail": ...} as FastAPI answers errors; {"Error": ...} too, as the extender verbs do.
    body = orjson.dumps({"detail": message, "Error": message})
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def server_ssl_options(cert_file: str, key_file: str, client_ca_file: str = "") -> dict[str, Any]:
    """uvicorn's TLS options: serve HTTPS; with a client CA, require and verify client certificates."""
    if not (cert_file and key_file):
        return {}
    opts: dict[str, Any] = {"ssl_certfile": cert_file, "ssl_keyfile": key_file}
    if client_ca_file:
        opts["ssl_ca_certs"] = client_ca_file
        opts["ssl_cert_reqs"] = ssl.CERT_REQUIRED
    return opts


__all__ = [
    "AuthError",
    "Caller",
    "Guard",
    "NoAuth",
    "StaticToken",
    "TokenReview",
    "bearer",
    "json_depth_exceeds",
    "server_ssl_options",
]
