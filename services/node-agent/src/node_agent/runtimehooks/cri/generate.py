"""Regenerates runtime_v1_pb2.py from runtime_v1.proto (needs grpcio-tools, a dev dependency)."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    from grpc_tools import protoc

    rc = protoc.main(["protoc", f"-I{HERE}", f"--python_out={HERE}", f"--pyi_out={HERE}", str(HERE / "runtime_v1.proto")])
    if rc != 0:
        raise SystemExit(f"protoc failed ({rc})")


if __name__ == "__main__":
    main()
