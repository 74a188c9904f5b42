"""koordctl sends the API token to every service it reads from: against a collector whose reads
are protected (api_protect_reads, a static token), the commands that talk to it work with the
token (KOORD_API_TOKEN_FILE, or the running demo's state file naming it) and say 401 without."""

from __future__ import annotations

import json

import pytest
from koordctl.cli import app
from typer.testing import CliRunner

from .conftest import NODES, serving_collector

runner = CliRunner()
TOKEN = "s3cret-token-for-the-test"


@pytest.fixture(scope="module")
def protected_collector(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("protected")
    token_file = tmp / "api-token"
    token_file.write_text(TOKEN + "\n")
    with serving_collector(tmp, guarded=True, api_auth="token", api_token_file=str(token_file),
                           api_protect_reads=True) as url:  # fmt: skip
        yield url, token_file


COMMANDS = [
    ["nodes", "-o", "json"],
    ["pods", "-o", "json"],
    ["events", "-o", "json"],
    ["explain", "node", NODES[0], "--since", "2h", "-o", "json"],
    ["explain", "pod", "jobs/etl-node-1", "-o", "json"],
]


def args(command: list[str], url: str) -> list[str]:
    if command[0] == "explain" and command[1] == "pod":
        return [*command, "--extender", url, "--descheduler", url, "--collector", url]
    return [*command, "--collector", url]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_reads_send_the_token_and_fail_clearly_without_it(protected_collector, command, monkeypatch):
    url, token_file = protected_collector
    monkeypatch.setenv("KOORD_STATE_FILE", str(token_file.parent / "no-demo.json"))
    monkeypatch.delenv("KOORD_API_TOKEN_FILE", raising=False)
    refused = runner.invoke(app, args(command, url))
    if command[:2] == ["explain", "pod"]:  # every service is asked; each says it refused
        answers = json.loads(refused.stdout)["services"]
        assert all("401" in a["error"] for a in answers.values()), answers
    else:
        assert refused.exit_code == 2 and "401" in refused.output, refused.output
    monkeypatch.setenv("KOORD_API_TOKEN_FILE", str(token_file))
    ok = runner.invoke(app, args(command, url))
    assert ok.exit_code == 0, ok.output  # a refusal exits 2 (the output's timestamps may hold the digits 401)
    if command[:2] == ["explain", "pod"]:  # every service answered
        answers = json.loads(ok.stdout)["services"]
        assert not [a["error"] for a in answers.values() if "error" in a], answers


def test_export_history_reads_with_the_token_of_the_running_demo(protected_collector, monkeypatch, tmp_path):
    url, token_file = protected_collector
    state = tmp_path / "demo.json"
    state.write_text(json.dumps({"services": {"metrics-collector": url},
                                 "credentials": {"KOORD_API_TOKEN_FILE": str(token_file)}}))  # fmt: skip
    monkeypatch.setenv("KOORD_STATE_FILE", str(state))
    monkeypatch.delenv("KOORD_API_TOKEN_FILE", raising=False)
    r = runner.invoke(app, ["export-history", "--since", "2h", "--out", str(tmp_path / "h")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "h" / "nodes.csv").read_text().count("\n") == 1 + len(NODES)
