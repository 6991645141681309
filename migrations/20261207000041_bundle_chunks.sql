-- A closed month's bundle in chunks (issue 31, part 3: the close's memory flat in the fleet's size). The close
-- compresses the bundle into a temporary file and stores it here in chunks of 1 MiB in its own transaction; before,
-- the whole gzip stream was one `bytea` value in `periods.bundle_gz`, held in memory twice while it was bound (a
-- 100,000-GPU month's bundle is ~460 MB). Months closed before this migration keep their `bundle_gz`.
SET LOCAL ROLE gpuledger_owner;

CREATE TABLE period_bundle_chunks (
    org_id          uuid        NOT NULL,
    period          date        NOT NULL,
    seq             integer     NOT NULL CHECK (seq >= 0),
    bytes           bytea       NOT NULL CHECK (octet_length(bytes) BETWEEN 1 AND 1048576),
    -- No foreign key to periods: on a distributed database (an upgrade, docs/scaling.md) this table is local until
    -- distribute.sql runs again, and Citus refuses a key from a local table to a distributed one.
    PRIMARY KEY (org_id, period, seq)
);

SELECT gpuledger_isolate('period_bundle_chunks');
-- Written once by the close, never changed: readers take chunks 0 … bundle_chunks − 1 of the closed period (whose
-- row nobody may change), so a row added later is never read.
SELECT gpuledger_append_only('period_bundle_chunks');
GRANT SELECT, INSERT ON period_bundle_chunks TO gpuledger_app;

-- Columns, then named constraints: Citus refuses ADD COLUMN with an unnamed constraint on a distributed table.
ALTER TABLE periods
    ADD COLUMN bundle_chunks integer,
    ADD COLUMN bundle_bytes  bigint;
ALTER TABLE periods
    ADD CONSTRAINT periods_bundle_chunks_ok CHECK ((bundle_chunks IS NULL) = (bundle_bytes IS NULL) AND bundle_chunks > 0 AND bundle_bytes > 0);
-- A closed month has its bundle in the row or in chunks.
ALTER TABLE periods DROP CONSTRAINT periods_check;
ALTER TABLE periods
    ADD CONSTRAINT periods_closed_has_bundle
    CHECK ((state = 'closed') = (content_hash IS NOT NULL AND (bundle_gz IS NOT NULL OR bundle_chunks IS NOT NULL)));

RESET ROLE;
