"""Recall's search on PostgreSQL before and after PG migration 0020 (no planner
statistics of text columns), and with none of `messages.words` either.

    .venv/bin/python -m bench.pg_statistics [--messages 200000] [--rounds 24]

One private cluster (ledger/postgres/devcluster.py, fsync off), three databases:
"0019", migrated through 0019; "0020", through the latest migration; "no words",
the latest with `messages.words` set to no statistics as well. Each is filled with
the same `--messages` messages (bench/recall.py's generator, as bench.pg_words
writes them) and analyzed; then recall's search (bench.pg_words' form of it) runs
for a common word, a rare word, a phrase and a prefix, the databases in rotating
order, and the median milliseconds are printed, with each plan's first line.
"""

from __future__ import annotations

import argparse

from bench import pg_words
from bench.recall import Generator
from ledger.postgres import devcluster, schema
from ledger.postgres.recall import tsquery
from ledger.recall.search import terms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=24)
    args = parser.parse_args()
    latest = schema.load_migrations()[-1].version
    cluster = devcluster.create(durable=False)
    try:
        before = pg_words.migrated(cluster, "stats_0019", 19)
        after = pg_words.migrated(cluster, "stats_0020", latest)
        no_words = "ALTER TABLE messages ALTER COLUMN words SET STATISTICS 0"
        bare = pg_words.migrated(cluster, "stats_bare", latest, no_words)
        sides = [
            pg_words.Side("0019", before, pg_words.STORED_SEARCH),
            pg_words.Side("0020", after, pg_words.STORED_SEARCH),
            pg_words.Side("no words", bare, pg_words.STORED_SEARCH),
        ]
        pg_words.fill(sides, args.messages)
        rare = Generator(seed=12, messages=0).words[-5]
        for side in sides:
            side.conn.execute("ANALYZE messages")
            for label, query, _ in pg_words.QUERIES:
                words = terms(query.format(rare=rare))
                found = side.conn.execute("EXPLAIN " + side.search, tsquery(words, "all") * 3)
                plan = found.fetchall()
                scan = next(r[0].strip() for r in plan if "Scan" in r[0] and "Subquery" not in r[0])
                print(f"plan {side.name:9} {label:12} {scan}")
        pg_words.search_rounds(sides, args.rounds, rare)
        pg_words.close(sides)
    finally:
        cluster.destroy()


if __name__ == "__main__":
    main()
