"""A real HTTP(S) server for tests: an ASGI app served by uvicorn in a thread on a free port."""

from __future__ import annotations

import threading
from typing import Any

from .net import free_port, wait_tcp_ready

__all__ = ["ThreadServer"]


class ThreadServer:
    """`with ThreadServer(app) as s: httpx.get(s.url + "/x")`; `ssl` takes uvicorn's TLS options
    (koordcommon.httpguard.server_ssl_options), and the URL is then https."""

    def __init__(self, app: Any, ssl: dict[str, Any] | None = None) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"{'https' if ssl else 'http'}://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off", **(ssl or {}))
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        wait_tcp_ready("127.0.0.1", self.port, 10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
