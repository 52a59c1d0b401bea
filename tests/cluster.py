"""Several broker nodes on one ledger and one Temporal dev server, for the tests and
benchmarks of docs/cluster.md ("Two and more nodes").

Each node is a real daemon (tests/harness.py) with its own socket, directory and
`node_id`, on the same PostgreSQL database and the same Temporal task queue, so a
session's turn may run on any of them.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.runtime.temporal.devserver import free_port

if TYPE_CHECKING:
    from tests.harness import DaemonProcess


def node_config(
    dsn: str, address: str, task_queue: str, node_id: str, config: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One node's config: the shared ledger and queue, its own identity."""
    base: dict[str, Any] = {
        "node_id": node_id,
        "ledger": {"kind": "postgres", "dsn": dsn},
        "runtime": {
            "kind": "temporal",
            "address": address,
            "task_queue": task_queue,
            "heartbeat_timeout_s": 2.0,
        },
    }
    for key, value in (config or {}).items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return base


def cpu_seconds(pid: int) -> float:
    """The CPU a process and its descendants used, the reaped ones included, in
    seconds (Linux /proc): for a PostgreSQL server, its postmaster's pid covers every
    backend, ended or not."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    own: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended meanwhile
        child = int(entry.name)
        children.setdefault(int(fields[1]), []).append(child)
        own[child] = sum(int(f) for f in fields[11:15]) / tick  # utime stime cutime cstime
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += own.get(p, 0.0)
        todo.extend(children.get(p, ()))
    return total


def scrape(address: str) -> dict[str, float]:
    """A Prometheus endpoint's samples, summed over their labels by name; empty when
    it does not answer (a node being restarted)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        name = name.split("{", 1)[0]
        sums[name] = sums.get(name, 0.0) + float(value)
    return sums


class Cluster:
    """N nodes; `nodes[i]` is a DaemonProcess, started by `start`. `per_node[i]` is
    config for node i alone (a task queue of its own pins a session's turns to the
    node its messages came in by)."""

    def __init__(
        self,
        workdir: Path,
        dsn: str,
        address: str,
        size: int,
        config: dict[str, Any] | None = None,
        task_queue: str | None = None,
        per_node: list[dict[str, Any]] | None = None,
        metrics: bool = False,
    ) -> None:
        self.dsn = dsn
        self.task_queue = task_queue or f"c-{uuid.uuid4().hex[:12]}"
        from tests.harness import DaemonProcess

        self.nodes: list[DaemonProcess] = []
        for n in range(size):
            work = workdir / f"n{n}"
            work.mkdir(parents=True, exist_ok=True)
            cfg = node_config(dsn, address, self.task_queue, f"n{n}", config)
            if metrics:  # each node's worker metrics, for `scrape`
                cfg["runtime"]["metrics_address"] = f"127.0.0.1:{free_port()}"
            for key, value in (per_node[n] if per_node else {}).items():
                cfg[key] = {**cfg[key], **value} if isinstance(value, dict) else value
            self.nodes.append(DaemonProcess(work, cfg))

    def start(self) -> Cluster:
        for node in self.nodes:
            node.start(timeout=60)
        return self

    def stop(self) -> None:
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                with contextlib.suppress(Exception):
                    node.terminate(10)
        for node in self.nodes:
            node.kill()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- TEST_CLUSTER=2: every daemon of the run a pair of nodes --------------------------

ENV = "TEST_CLUSTER"
_pg: Any = None  # (the session's private PostgreSQL cluster, its template database)
_address: str | None = None  # the session's Temporal dev server
_databases = itertools.count()


def wanted() -> bool:
    """`TEST_CLUSTER=2 pytest tests/integration/...`: each daemon the harness starts
    is two nodes on one fresh PostgreSQL database and one Temporal task queue; the
    test's adapters and operators talk to the first, turns run on either."""
    return os.environ.get(ENV, "") == "2"


def configure(pg: Any, address: str | None) -> None:
    global _pg, _address
    _pg, _address = pg, address


def pair_config() -> dict[str, Any] | None:
    """The ledger and runtime of a new pair (None when the switch is off)."""
    if _pg is None or _address is None:
        return None
    from ledger.postgres import devcluster

    cluster, template = _pg
    dsn = devcluster.fresh_database(cluster, f"p{os.getpid()}x{next(_databases)}", template)
    return {
        "node_id": "n0",
        "ledger": {"kind": "postgres", "dsn": dsn},
        "runtime": {
            "kind": "temporal",
            "address": _address,
            "task_queue": f"p-{uuid.uuid4().hex[:12]}",
            "heartbeat_timeout_s": 2.0,
        },
    }
