-- No value a person wrote or is known by stays in PostgreSQL's planner statistics.
-- ANALYZE, which autovacuum runs by itself, copies sample values of each column
-- into the catalog `pg_statistic`: the most common values and histogram bounds (a
-- small table's every value) and a tsvector's most common words. An erasure or an
-- expiry deletes rows and rewrites their tables (`VACUUM (FULL)`), which left the
-- words in the catalog (tests/conformance/test_erasure.py, test_retention.py).
-- * Every text, JSON and bytea column of the ledger's tables gets a statistics
--   target of 0, with which ANALYZE skips the column. Numbers and times keep
--   theirs; lookups by key go through unique indexes, which need none.
-- * `messages.words` keeps its statistics: without them a search for a common word
--   reads every message that has it (docs/performance.md, "PG statistics"). After
--   an erasure or expiry the ledger analyzes `messages` again and rewrites
--   `pg_statistic` (ledger/postgres/vacuum.py), so the words of what was deleted
--   leave the catalog with it.
-- * A later migration that adds such a column sets it to 0 as well;
--   tests/conformance/test_erasure.py checks every column of the schema.
-- * Statistics gathered before this migration are deleted where the migrating role
--   may write the catalog (a superuser); elsewhere a WARNING names them, for a
--   superuser to delete (docs/forgetting.md).
DO $$
DECLARE
    col record;
    kept integer := 0;
BEGIN
    FOR col IN
        SELECT c.oid AS rel, c.relname, a.attnum, a.attname
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        WHERE c.relnamespace = current_schema()::regnamespace
          AND c.relkind IN ('r', 'p')
          AND a.attnum > 0 AND NOT a.attisdropped
          AND a.atttypid IN ('text'::regtype, 'varchar'::regtype, 'bpchar'::regtype,
                             'json'::regtype, 'jsonb'::regtype, 'bytea'::regtype)
    LOOP
        EXECUTE format('ALTER TABLE %I ALTER COLUMN %I SET STATISTICS 0', col.relname, col.attname);
        IF has_table_privilege('pg_catalog.pg_statistic', 'DELETE') THEN
            DELETE FROM pg_catalog.pg_statistic WHERE starelid = col.rel AND staattnum = col.attnum;
        ELSIF EXISTS (
            SELECT 1 FROM pg_stats
            WHERE schemaname = current_schema() AND tablename = col.relname AND attname = col.attname
        ) THEN
            kept := kept + 1;
        END IF;
    END LOOP;
    IF kept > 0 THEN
        RAISE WARNING 'the ledger''s planner statistics of text columns gathered before now stay in pg_statistic: a superuser may delete them (docs/forgetting.md)';
    END IF;
END $$;
