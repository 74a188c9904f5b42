"""The last what-if report: stored through PUT, read back, kept across a restart, and every bad
upload answered with a 4xx naming what is wrong."""

from __future__ import annotations

import json
import struct
import zlib

import pytest
from fastapi.testclient import TestClient
from metrics_collector.main import build
from metrics_collector.settings import Settings
from metrics_collector.store import Store
from metrics_collector.whatif import markdown_table

URL = "/api/v1/whatif/last"


def png(width: int = 2, height: int = 2) -> bytes:
    """A real (tiny) PNG: signature, IHDR, one IDAT, IEND."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))  # fmt: skip


REPORT = {
    "scenario": {"title": "14 Alibaba 2018 machines, 8 days"},
    "assumptions": ["online pods are the traced machines' usage", "batch demand 0.3 of node CPU"],
    "runs": [{"config": {"name": "baseline"}, "summary": {"baseline": True}, "hourly": {}, "wall_s": 1, "loops": 0},
             {"config": {"name": "cpuReclaimThresholdPercent=60"}, "summary": {"baseline": False}, "hourly": {},
              "wall_s": 2, "loops": 0,
              "findings": [{"level": "warning", "settings": ["usage_thresholds.memory=95", "highThresholds.memory=80"],
                            "problem": "the scheduler fills nodes to 95 % memory.", "fix": "set it below 80."},
                           "not a finding"]}],
    "recommended": "cpuReclaimThresholdPercent=60",
    "why": "it reclaims the most CPU",
}  # fmt: skip
MARKDOWN = """# What-if replay: 14 machines

| config | reclaimed CPU % mean / p10 / p50 | over threshold node-min |
|---|---|---|
| baseline | - | 12 |
| cpuReclaimThresholdPercent=60 | 31.2 / 20.0 / 30.1 | 12 |

**Recommended: cpuReclaimThresholdPercent=60**: it reclaims the most CPU.
"""


def files(**over) -> dict:
    out = {"report.json": json.dumps(REPORT).encode(), "report.md": MARKDOWN.encode(),
           "reclaimed-vs-risk.png": png(), "hourly-bands.png": png(3, 1)}  # fmt: skip
    out.update(over)
    return {k: v for k, v in out.items() if v is not None}


def multipart(parts: dict[str, bytes]) -> list:
    return [(name, (name, content)) for name, content in parts.items()]


@pytest.fixture
def make_client(tmp_path, database_url):
    clients = []

    def make(**settings):
        Store.open(database_url).close()  # migrations (the service runs them in main)
        settings = {"api_auth": "none", **settings}
        svc, store = build(Settings(database_url=database_url, data_dir=str(tmp_path), **settings))
        svc.mark_started()
        c = TestClient(svc.asgi())  # behind the HTTP guard, as the service serves it
        clients.append((c, store))
        return c

    yield make
    for c, store in clients:
        c.close()
        store.close()


def test_publish_read_and_keep_across_restart(make_client):
    c = make_client()
    assert c.get(URL).status_code == 404
    r = c.put(URL, files=multipart(files()))
    assert r.status_code == 204, r.text
    view = c.get(URL).json()
    assert view["recommended"] == "cpuReclaimThresholdPercent=60" and view["why"] == "it reclaims the most CPU"
    assert view["assumptions"] == REPORT["assumptions"]
    assert view["table"]["columns"] == ["config", "reclaimed CPU % mean / p10 / p50", "over threshold node-min"]
    assert view["table"]["rows"][1] == ["cpuReclaimThresholdPercent=60", "31.2 / 20.0 / 30.1", "12"]
    assert view["plots"] == {"reclaimed-vs-risk.png": URL + "/files/reclaimed-vs-risk.png",
                             "hourly-bands.png": URL + "/files/hourly-bands.png"}  # fmt: skip
    assert [cf["name"] for cf in view["configs"]] == ["baseline", "cpuReclaimThresholdPercent=60"]
    # check-config's findings per configuration (what is not one is left out; an older report has none)
    assert [cf["findings"] for cf in view["configs"]] == [[], [REPORT["runs"][1]["findings"][0]]]
    got = c.get(URL + "/files/hourly-bands.png")
    assert got.status_code == 200 and got.headers["content-type"] == "image/png" and got.content == png(3, 1)
    assert json.loads(c.get(URL + "/files/report.json").content) == REPORT

    # a new collector on the same database serves the same report
    again = make_client()
    assert again.get(URL).json()["table"] == view["table"]
    # a report without plots replaces the whole previous one
    assert again.put(URL, content=json.dumps(REPORT), headers={"Content-Type": "application/json"}).status_code == 204
    view2 = again.get(URL).json()
    assert view2["plots"] == {} and view2["table"] is None and view2["files"] == ["report.json"]
    assert again.get(URL + "/files/hourly-bands.png").status_code == 404


@pytest.mark.parametrize("parts, status, words", [
    (files(**{"report.json": b"{not json"}), 400, "report.json is not JSON"),
    (files(**{"report.json": b"[1, 2]"}), 400, "must be a JSON object"),
    (files(**{"report.json": json.dumps({**REPORT, "runs": "x"}).encode()}), 400, "'runs' must be a list"),
    (files(**{"report.json": json.dumps({**REPORT, "runs": [{"config": {}}]}).encode()}), 400, "runs[0]"),
    (files(**{"report.json": None}), 400, "report.json is missing"),
    (files(**{"hourly-bands.png": b"GIF89a...."}), 400, "hourly-bands.png is not a PNG"),
    (files(**{"report.md": b"\xff\xfe\x00bad"}), 400, "report.md is not UTF-8"),
    (files(**{"report.md": None, "../../etc/passwd": b"x"}), 400, "unknown part(s) ../../etc/passwd"),
    (files(**{"extra-1": b"x"}), 400, "Too many files"),
])  # fmt: skip
def test_bad_uploads_are_400_with_the_reason(make_client, parts, status, words):
    c = make_client()
    r = c.put(URL, files=multipart(parts))
    assert r.status_code == status and words in r.json()["detail"], r.text
    assert c.get(URL).status_code == 404  # nothing half-stored


def test_size_limit_content_type_and_token(make_client, tmp_path):
    (tmp_path / "token").write_text("s3cret\n")
    c = make_client(max_body_bytes=4096, api_auth="token", api_token_file=str(tmp_path / "token"))
    auth = {"Authorization": "Bearer s3cret"}
    assert c.put(URL, files=multipart(files())).status_code == 401
    assert c.put(URL, files=multipart(files()), headers={"Authorization": "Bearer nope"}).status_code == 401
    big = c.put(URL, files=multipart(files(**{"report.md": b"x" * 5000})), headers=auth)
    assert big.status_code == 413

    def chunked():  # no Content-Length: refused once the bytes read pass the limit
        yield b"{" + b" " * 3000
        yield b" " * 3000 + b"}"

    r = c.put(URL, content=chunked(), headers={**auth, "Content-Type": "application/json"})
    assert r.status_code == 413
    r = c.put(URL, content=b"hello", headers={**auth, "Content-Type": "text/plain"})
    assert r.status_code == 415 and "multipart/form-data" in r.json()["detail"]
    r = c.put(URL, content=b"--x\r\nbroken", headers={**auth, "Content-Type": "multipart/form-data; boundary=x"})
    assert r.status_code == 400
    small = files(**{"report.md": None, "reclaimed-vs-risk.png": None, "hourly-bands.png": None})
    assert c.put(URL, files=multipart(small), headers=auth).status_code == 204
    assert c.get(URL).status_code == 200  # reading needs no token
    assert c.get(URL + "/files/secrets.txt").status_code == 404


@pytest.mark.parametrize("text, expected", [
    ("no table here", None),
    ("| a | b |\n|---|---|\n| 1 | 2 |\n\nafter", {"columns": ["a", "b"], "rows": [["1", "2"]]}),
    ("title\n\n| a |\n|:--|\n", {"columns": ["a"], "rows": []}),
])  # fmt: skip
def test_markdown_table(text, expected):
    assert markdown_table(text) == expected
