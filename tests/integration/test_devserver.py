"""The dev server of the tests and `scripts/cluster` (broker/runtime/temporal/devserver.py)."""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("temporalio")

from broker.runtime.temporal.devserver import DevServer


def test_a_start_whose_port_was_taken_meanwhile_is_tried_again_on_new_ports() -> None:
    # a port found free and then taken before the server binds it (what
    # failed a whole CI run's Temporal tests once) costs one more attempt, not the run.
    server = DevServer(Path(tempfile.mkdtemp(prefix="tmprl-", dir="/tmp")))
    taken = server.http_port
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        with server:
            assert server.http_port != taken
            assert b"address already in use" in server.log_path.read_bytes()
            port = server.port
            server.kill()
            server.start()  # a restart keeps the frontend's port: clients know it
            assert server.port == port
