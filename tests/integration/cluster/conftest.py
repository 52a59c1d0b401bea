"""Tests of several broker nodes on one PostgreSQL ledger and one Temporal dev server
(tests/cluster.py), marked `cluster` (and `postgres`, `temporal`: they need both)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import Cluster

HERE = Path(__file__).parent
_databases = itertools.count()
ClusterFactory = Callable[..., Cluster]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.cluster)
            item.add_marker(pytest.mark.postgres)
            item.add_marker(pytest.mark.temporal)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the Temporal SDK is asyncio's


@pytest.fixture
def make_cluster(
    short_tmp: Path, pg_template: tuple[Any, str], temporal_server: Any
) -> Iterator[ClusterFactory]:
    """Start clusters of `size` nodes on a fresh database; all stopped at the end."""
    from ledger.postgres import devcluster

    pg, template = pg_template
    made: list[Cluster] = []

    def factory(size: int = 2, config: dict[str, Any] | None = None, **kw: Any) -> Cluster:
        dsn = devcluster.fresh_database(pg, f"c{next(_databases)}", template)
        work = short_tmp / f"c{len(made)}"
        cluster = Cluster(work, dsn, temporal_server.address, size, config, **kw)
        made.append(cluster)
        return cluster.start()

    yield factory
    for cluster in made:
        cluster.stop()
