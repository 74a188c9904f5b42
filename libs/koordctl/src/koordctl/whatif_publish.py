"""Send a what-if report folder to the metrics-collector, whose dashboard then shows it.

`koordctl whatif --publish URL` calls `publish(URL, out_dir, token)` after the replay wrote its
folder: report.json (required), report.md and the two plots (sent when present) go as one
multipart/form-data PUT to `<URL>/api/v1/whatif/last`, each part named by its file name; the
collector replaces its last report with them (see metrics_collector.whatif).
"""

from __future__ import annotations

from pathlib import Path

import httpx

PATH = "/api/v1/whatif/last"
FILES = (
    ("report.json", "application/json"),
    ("report.md", "text/markdown"),
    ("reclaimed-vs-risk.png", "image/png"),
    ("hourly-bands.png", "image/png"),
)
TIMEOUT_S = 30.0


class PublishError(RuntimeError):
    """The report could not be published; the message says why (and names the URL)."""


def publish(collector_url: str, out_dir: Path, token: str | None = None) -> None:
    """PUT the report files of `out_dir` to the collector at `collector_url`.

    `token` is sent as `Authorization: Bearer <token>` (the token the collector's api_token_file
    holds, or one its TokenReview accepts). Raises
    PublishError when report.json is missing or the collector does not accept the report
    (unreachable, 401, 413 over its size limit, 400 with its reason)."""
    out_dir = Path(out_dir)
    if not (out_dir / "report.json").is_file():
        raise PublishError(f"{out_dir / 'report.json'} does not exist: nothing to publish")
    parts = [(name, (name, (out_dir / name).read_bytes(), kind)) for name, kind in FILES if (out_dir / name).is_file()]
    url = collector_url.rstrip("/") + PATH
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        resp = httpx.put(url, files=parts, headers=headers, timeout=TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise PublishError(f"cannot reach {url}: {exc.__class__.__name__}: {exc}") from None
    if resp.status_code >= 400:
        try:
            detail = resp.json().get("detail", "")
        except (ValueError, AttributeError):
            detail = resp.text[:200]
        hint = " (pass the collector's API token)" if resp.status_code == 401 else ""
        raise PublishError(f"{url} answered {resp.status_code}: {detail}{hint}".rstrip(": "))
