import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

# Tests import their builders as `extender_helpers` (pytest runs with --import-mode=importlib).
sys.path.insert(0, str(Path(__file__).parent))


GO_SOURCE = Path(__file__).parent / "gojson" / "main.go"


@pytest.fixture(scope="session")
def go_marshal(tmp_path_factory):
    """(type, our bytes) pairs -> Go's json.Marshal of the same values, one Go process per call."""
    go = shutil.which("go")
    if go is None:
        reason = "the Go toolchain is not installed (apt-get install golang-go): replies cannot be held to Go's encoding"
        if os.environ.get("KOORD_REQUIRE_SERVICES", "") not in ("", "0", "false", "no"):
            pytest.fail(f"{reason} (KOORD_REQUIRE_SERVICES=1)")
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("gojson")
    env = {**os.environ, "GO111MODULE": "off", "GOCACHE": str(out / "cache"), "GOPATH": str(out / "gopath")}
    subprocess.run([go, "build", "-o", str(out / "gojson"), str(GO_SOURCE)], check=True, env=env, capture_output=True)

    def marshal(cases: list[tuple[str, bytes]]) -> list[bytes]:
        lines = b"".join(orjson.dumps({"type": t, "body": b.decode()}) + b"\n" for t, b in cases)
        done = subprocess.run([str(out / "gojson")], input=lines, capture_output=True, check=True)
        return [orjson.loads(line).encode() for line in done.stdout.splitlines()]

    return marshal
