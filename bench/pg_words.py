"""PostgreSQL full text before and after PG migration 0004 (`ledger_tsv` in unicode61's
words): the cost of indexing a message, of a search, of the stored words, and of the
migration itself.

    .venv/bin/python -m bench.pg_words [--rounds 8] [--batch 2000] [--ledger 50000]

One private cluster (ledger/postgres/devcluster.py, fsync off), three databases:
"old", migrated through 0003 (the old function, an index on it); "expr", through
0004 but with 0004's first form, an index on the expression ledger_tsv(content)
and no stored column; "stored", through 0004 (the stored column `words`, the index
on it). Each round inserts `--batch` messages into each (100 to a transaction,
executemany, as the writer batches), in rotating order, so the VM's drifting speed
falls on all alike; ASCII English text (bench/recall.py's generator) and the same
text with a Latin accent in every third word. Per message: wall µs and the server
backend's CPU µs (from /proc; this machine only). Then each ledger is filled to
`--ledger` messages, its size is read (pg_total_relation_size of messages, its
TOAST and indexes), and searches are timed, interleaved: the old statement
(to_tsquery) against recall.py's (ledger_tsquery), the same words. Last, the old
ledger is migrated to 0004 and the migration timed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

from bench.recall import Generator
from ledger.postgres import devcluster, schema
from ledger.postgres.connection import PgConnection
from ledger.postgres.recall import QUERY, tsquery
from ledger.recall.search import terms

ACCENTS = str.maketrans("eaiouc", "éàïôüç")
# recall.py's search without the turns (the bench writes none), with the old
# query (to_tsquery) and with the new (ledger_tsquery, PG migration 0004)
SEARCH = (
    "SELECT c.id, ts_headline('simple', c.content, {q}, 'MaxWords=16'),"
    " ts_rank(c.v, {q}) AS score"
    " FROM (SELECT m.id, m.content, {v} AS v FROM messages m"
    " WHERE {v} @@ {q} ORDER BY m.id DESC LIMIT 2000) c"
    " ORDER BY score DESC, c.id DESC LIMIT 20"
)
OLD_SEARCH = SEARCH.format(q="to_tsquery('simple', ?)", v="ledger_tsv(m.content)")
EXPR_SEARCH = SEARCH.format(q=QUERY, v="ledger_tsv(m.content)")
STORED_SEARCH = SEARCH.format(q=QUERY, v="m.words")
# 0004's first form, from the stored one: the index on the expression, no column
AS_EXPRESSION = (
    "DROP INDEX messages_fts; ALTER TABLE messages DROP COLUMN words;"
    " CREATE INDEX messages_fts ON messages USING gin (ledger_tsv(content))"
)
# (label, recall query, the old tsquery text: what the old recall.py made of it)
QUERIES = [
    ("common word", "error", "error"),
    ("rare word", "{rare}", "{rare}"),
    ("phrase", '"the session"', "(the <-> session)"),
    ("prefix", "serv*", "serv:*"),
]


def migrated(
    cluster: devcluster.DevCluster, name: str, through: int, then: str = ""
) -> PgConnection:
    dsn = devcluster.fresh_database(cluster, name)
    conn = PgConnection(dsn, reader=False)
    schema.migrate(conn, through)
    if then:
        conn.executescript(then)
    # Messages without their turns: the index is what is measured, not the keys.
    conn.execute("SET session_replication_role = replica")
    return conn


def backend_cpu(conn: PgConnection) -> Callable[[], float]:
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    tick = os.sysconf("SC_CLK_TCK")

    def seconds() -> float:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    return seconds


class Side:
    def __init__(self, name: str, conn: PgConnection, search: str) -> None:
        self.name = name
        self.conn = conn
        self.search = search
        self.cpu = backend_cpu(conn)
        self.seq = 0

    def insert(self, texts: list[str]) -> tuple[float, float]:
        """Wall and backend CPU seconds for `texts`, 100 messages a transaction."""
        wall, cpu = time.perf_counter(), self.cpu()
        for first in range(0, len(texts), 100):
            rows = []
            for text in texts[first : first + 100]:
                self.seq += 1
                rows.append((f"t{self.seq // 2}", self.seq, text, self.seq))
            self.conn.execute("BEGIN")
            self.conn.executemany(
                "INSERT INTO messages (turn_id, seq, role, content, created_at)"
                " VALUES (?, ?, 'user', ?, ?)",
                rows,
            )
            self.conn.execute("COMMIT")
        return time.perf_counter() - wall, self.cpu() - cpu


def texts(gen: Generator, n: int, accented: bool) -> list[str]:
    out = [gen.text(gen.rng.randint(8, 60)) for _ in range(n)]
    if accented:
        out = [
            " ".join(w.translate(ACCENTS) if i % 3 == 0 else w for i, w in enumerate(t.split()))
            for t in out
        ]
    return out


def write_rounds(sides: list[Side], rounds: int, batch: int) -> None:
    gen = Generator(seed=11, messages=0)
    for accented in (False, True):
        per: dict[str, list[tuple[float, float]]] = {s.name: [] for s in sides}
        for r in range(rounds):
            batch_texts = texts(gen, batch, accented)
            for side in sides[r % len(sides) :] + sides[: r % len(sides)]:
                wall, cpu = side.insert(batch_texts)
                per[side.name].append((wall / batch * 1e6, cpu / batch * 1e6))
        kind = "accented" if accented else "ascii"
        for name, runs in per.items():
            wall = statistics.median(w for w, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            print(
                f"insert {kind:8} {name}: {wall:7.1f} µs wall  {cpu:7.1f} µs backend CPU a message"
            )


def fill(sides: list[Side], total: int) -> None:
    gen = Generator(seed=12, messages=0)
    while sides[0].seq < total:
        chunk = texts(gen, min(5000, total - sides[0].seq), accented=False)
        for side in sides:
            side.insert(chunk)


def sizes(sides: list[Side]) -> None:
    for side in sides:
        side.conn.execute("VACUUM ANALYZE messages")
        total, heap, count = side.conn.execute(
            "SELECT pg_total_relation_size('messages'), pg_table_size('messages'), count(*)"
            " FROM messages"
        ).fetchone()
        print(
            f"size {side.name:13} {total / count:6.1f} bytes a message in all"
            f" ({heap / count:6.1f} table and TOAST, {(total - heap) / count:6.1f} indexes),"
            f" {total / 2**20:6.1f} MiB for {count} messages"
        )


def search_rounds(sides: list[Side], rounds: int, rare: str) -> None:
    for label, query, old_q in QUERIES:
        query, old_q = query.format(rare=rare), old_q.format(rare=rare)
        times: dict[str, list[float]] = {s.name: [] for s in sides}
        hits: dict[str, int] = {}
        for r in range(rounds):
            for side in sides[r % len(sides) :] + sides[: r % len(sides)]:
                args = (
                    (old_q,) * 3 if side.search == OLD_SEARCH else tsquery(terms(query), "all") * 3
                )
                t = time.perf_counter()
                hits[side.name] = len(side.conn.execute(side.search, args).fetchall())
                times[side.name].append(time.perf_counter() - t)
        print(
            f"search {label:12} "
            + "  ".join(f"{n} {statistics.median(t) * 1e3:6.2f} ms" for n, t in times.items())
            + f"  (hits {' / '.join(str(h) for h in hits.values())})"
        )


def migration(side: Side) -> None:
    count = side.conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    wall, cpu = time.perf_counter(), side.cpu()
    schema.migrate(side.conn, through=4)
    wall, cpu = time.perf_counter() - wall, side.cpu() - cpu
    print(f"migration 0004 on {count} messages: {wall:.2f} s wall, {cpu:.2f} s backend CPU")


def close(sides: list[Side]) -> None:
    """Print the load average the figures were taken at; close the sides' connections."""
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for side in sides:
        side.conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--ledger", type=int, default=50_000)
    args = parser.parse_args()
    cluster = devcluster.create(durable=False)
    try:
        sides = [
            Side("old (0003)", migrated(cluster, "words_old", 3), OLD_SEARCH),
            Side("expr (0004)", migrated(cluster, "words_expr", 4, AS_EXPRESSION), EXPR_SEARCH),
            Side("stored (0004)", migrated(cluster, "words_stored", 4), STORED_SEARCH),
        ]
        write_rounds(sides, args.rounds, args.batch)
        fill(sides, args.ledger)
        sizes(sides)
        rare = Generator(seed=12, messages=0).words[-5]
        search_rounds(sides, args.rounds * 4, rare)
        migration(sides[0])
        close(sides)
    finally:
        cluster.destroy()


if __name__ == "__main__":
    main()
