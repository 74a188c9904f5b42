"""The test helpers' free ports: servers started together are never told the same port."""

import socket

from koordcommon.testing.net import free_port


def test_ports_handed_out_together_are_distinct_and_free():
    # a 3-server NATS cluster asks for 9 ports, the launcher one per service: the OS hands a
    # just-closed port out again, so without memory a few thousand draws always repeat some
    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)
    for port in ports[-3:]:  # and each can be bound
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
